// Recognises what kind of file the user handed us from its first bytes, so that a wrong input
// gets a useful sentence ("this is a JSON file") instead of a pickle parse error at byte 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace vramscope::sources {

enum class InputFormat {
  kEmpty,
  kPickle,
  kJson,
  kGzip,
  kZstd,
  kZipArchive,   // torch.save() archives, .zip
  kSqlite,       // e.g. a report we wrote
  kNativeTrace,  // vramscope run --native's .vstrace (native_capture/vstrace_format.h)
  kPprof,        // a pprof profile (protobuf), e.g. JAX's device memory profile, inflated
  kXSpace,       // a profiler XSpace (protobuf, .xplane.pb): TensorFlow's profiler writes it
  kUnknown,
};

InputFormat DetectInputFormat(std::span<const uint8_t> head);
const char* InputFormatName(InputFormat format);

}  // namespace vramscope::sources
