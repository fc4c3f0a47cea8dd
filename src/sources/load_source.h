// Picks the source for an input file from its content (not its name) and runs it: memory
// snapshot pickles, PyTorch profiler traces (Kineto JSON) and raw memory timelines, each plain
// or gzipped. Anything else gets one line saying what the file is and what would work.
#pragma once

#include <cstdint>
#include <functional>

#include "common/mapped_file.h"
#include "common/status.h"
#include "model/trace.h"
#include "sources/input_limits.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::sources {

struct SourceOptions {
  // (bytes done, total) while parsing; returning false stops the parse (Interrupted).
  std::function<bool(uint64_t, uint64_t)> progress;
  InputLimits limits;
};

Result<model::Trace> LoadTrace(const MappedFile& file, const SourceOptions& options = {},
                               snapshot::LoadTimings* timings = nullptr);

}  // namespace vramscope::sources
