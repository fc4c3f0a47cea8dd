#include "sources/load_source.h"

#include <fmt/format.h>

#include <chrono>

#include "common/gzip.h"
#include "sources/input_format.h"
#include "sources/kineto/kineto_source.h"
#include "sources/memory_timeline/memory_timeline_source.h"
#include "sources/native_trace/native_trace_source.h"

namespace vramscope::sources {

namespace {

// A JSON text is a raw memory timeline when it is a list of lists or numbers, and a profiler
// trace when it is an object (or the Chrome trace format's bare list of event objects).
bool IsMemoryTimeline(std::string_view json) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < json.size() &&
           (json[i] == ' ' || json[i] == '\n' || json[i] == '\r' || json[i] == '\t')) {
      ++i;
    }
  };
  skip_space();
  if (i >= json.size() || json[i] != '[') return false;
  ++i;
  skip_space();
  return i < json.size() && json[i] != '{';
}

Result<model::Trace> FromJson(std::string_view json, const MappedFile& file,
                              snapshot::LoadTimings* timings) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<model::Trace> trace = IsMemoryTimeline(json)
                                   ? memory_timeline::TraceFromMemoryTimeline(json, file.path())
                                   : kineto::TraceFromKinetoJson(json, file.path());
  if (timings != nullptr) {
    timings->parse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (trace.ok()) trace->source.file_bytes = file.bytes().size();
  return trace;
}

}  // namespace

Result<model::Trace> LoadTrace(const MappedFile& file, const SourceOptions& options,
                               snapshot::LoadTimings* timings) {
  const auto bytes = file.bytes();
  const InputFormat format = DetectInputFormat(bytes.first(std::min<size_t>(bytes.size(), 64)));
  switch (format) {
    case InputFormat::kJson: {
      const std::string_view json(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      return FromJson(json, file, timings);
    }
    case InputFormat::kNativeTrace: {
      const auto t0 = std::chrono::steady_clock::now();
      auto trace = native_trace::TraceFromNativeTrace(bytes, file.path());
      if (timings != nullptr) {
        timings->parse_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      return trace;
    }
    case InputFormat::kGzip: {
      ASSIGN_OR_RETURN(std::string text, Gunzip(bytes, file.path()));
      const auto inner = DetectInputFormat(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(text.data()), std::min<size_t>(text.size(), 64)));
      if (inner == InputFormat::kPickle) {
        // A gzipped snapshot (snapshot.pickle.gz): read the inflated bytes the same way.
        const auto inflated = MappedFile::FromBytes(
            file.path(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
        snapshot::LoadOptions load_options;
        load_options.progress = options.progress;
        auto trace = snapshot::LoadSnapshot(*inflated, load_options, timings);
        if (trace.ok()) trace->source.file_bytes = bytes.size();
        return trace;
      }
      if (inner != InputFormat::kJson) {
        return InvalidInput(fmt::format(
            "{}: a gzip file holding {}, not a memory snapshot, profiler trace or memory "
            "timeline; vramscope reads those plain or gzipped",
            file.path(), InputFormatName(inner)));
      }
      return FromJson(text, file, timings);
    }
    default: {
      snapshot::LoadOptions load_options;
      load_options.progress = options.progress;
      return snapshot::LoadSnapshot(file, load_options, timings);
    }
  }
}

}  // namespace vramscope::sources
