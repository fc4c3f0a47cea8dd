#include "sources/load_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include "sources/inflate_input.h"
#include "sources/inflate_stream.h"
#include "sources/input_format.h"
#include "sources/kineto/kineto_source.h"
#include "sources/memory_timeline/memory_timeline_source.h"
#include "sources/native_trace/native_trace_source.h"
#include "sources/pprof/pprof_source.h"
#include "sources/xla_analysis/xla_analysis_source.h"
#include "sources/xspace/xspace_source.h"

namespace vramscope::sources {

namespace {

// A JSON text is a raw memory timeline when it is a list of lists or numbers, an XLA memory
// analysis when it is an object whose first key is "vramscope_format", and a profiler trace when
// it is another object (or the Chrome trace format's bare list of event objects).
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

// Runs a source's `parse`, recording its seconds in `timings` (when given).
template <typename Parse>
Result<model::Trace> Timed(snapshot::LoadTimings* timings, Parse&& parse) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<model::Trace> trace = parse();
  if (timings != nullptr) {
    timings->parse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return trace;
}

// `mapped`: the file the text is (plain, mapped), whose pages a profiler trace's reader releases
// behind itself, so that a trace of gigabytes is never resident whole; null for text in memory.
Result<model::Trace> FromJson(std::string_view json, const MappedFile& file,
                              snapshot::LoadTimings* timings, const MappedFile* mapped) {
  json_sax::ParseOptions options;
  if (mapped != nullptr) options.progress = [mapped](uint64_t done) { mapped->ReleasePages(done); };
  Result<model::Trace> trace = Timed(timings, [&] {
    return IsMemoryTimeline(json)
               ? memory_timeline::TraceFromMemoryTimeline(json, file.path(), options)
           : xla_analysis::IsXlaMemoryAnalysis(json)
               ? xla_analysis::TraceFromXlaMemoryAnalysis(json, file.path())
               : kineto::TraceFromKinetoJson(json, file.path(), options);
  });
  if (trace.ok()) trace->source.file_bytes = file.bytes().size();
  return trace;
}

// A pprof profile's protobuf bytes (inflated when the file was gzipped).
Result<model::Trace> FromPprof(std::span<const uint8_t> protobuf, const MappedFile& file,
                               snapshot::LoadTimings* timings) {
  Result<model::Trace> trace =
      Timed(timings, [&] { return pprof::TraceFromPprof(protobuf, file.path()); });
  if (trace.ok()) trace->source.file_bytes = file.bytes().size();
  return trace;
}

// A profiler XSpace's protobuf bytes (inflated when the file was gzipped).
Result<model::Trace> FromXSpace(std::span<const uint8_t> protobuf, const MappedFile& file,
                                snapshot::LoadTimings* timings) {
  Result<model::Trace> trace =
      Timed(timings, [&] { return xspace::TraceFromXSpace(protobuf, file.path()); });
  if (trace.ok()) trace->source.file_bytes = file.bytes().size();
  return trace;
}

// A gzip holding a profiler trace, read while a second thread inflates it
// (sources/inflate_stream.h): no temporary copy, inflating and parsing overlapped. nullopt when
// the gzip holds anything else (a snapshot, a memory timeline, an XLA analysis, protobuf): the
// caller inflates it as before, from the start: what was inflated here (the queue's 2 MiB at
// most) is inflated twice.
std::optional<Result<model::Trace>> StreamedProfilerTrace(const MappedFile& file,
                                                          const SourceOptions& options,
                                                          snapshot::LoadTimings* timings) {
  InflatingSource source(file, options.limits);
  // Enough of the text to tell the JSON documents apart (their first key or item).
  const std::string_view head = source.Peek(4096);
  const auto head_bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(head.data()),
                                                   std::min<size_t>(head.size(), 64));
  if (DetectInputFormat(head_bytes) != InputFormat::kJson || IsMemoryTimeline(head) ||
      xla_analysis::IsXlaMemoryAnalysis(head)) {
    return std::nullopt;
  }
  Result<model::Trace> trace =
      Timed(timings, [&] { return kineto::TraceFromKinetoStream(source, file.path()); });
  source.Stop();
  // The inflating thread's reason comes first (the text ended early because of it), unless it
  // is only that the reader was done first.
  if (!source.status().ok() && source.status().code() != StatusCode::kInterrupted) {
    return Result<model::Trace>(source.status());
  }
  if (source.cut().truncated) return Result<model::Trace>(TruncatedGzip(file.path(), source.cut()));
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
      return FromJson(json, file, timings, &file);
    }
    case InputFormat::kNativeTrace:
      return Timed(timings, [&] { return native_trace::TraceFromNativeTrace(bytes, file.path()); });
    case InputFormat::kPprof:
      return FromPprof(bytes, file, timings);
    case InputFormat::kXSpace:
      return FromXSpace(bytes, file, timings);
    case InputFormat::kGzip: {
      // A gzipped profiler trace (.pt.trace.json.gz) is read as it is inflated, on two threads.
      if (std::optional<Result<model::Trace>> trace =
              StreamedProfilerTrace(file, options, timings)) {
        return std::move(*trace);
      }
      // Inflated as a stream (sources/inflate_input.h): content that is no format vramscope
      // reads is refused from its first bytes, and what is read is bounded by the input's size.
      InputFormat inner = InputFormat::kUnknown;
      GzipCut cut;
      ASSIGN_OR_RETURN(
          std::unique_ptr<MappedFile> inflated,
          InflateInput(
              file, options.limits,
              [&](std::span<const uint8_t> head) -> Status {
                inner = DetectInputFormat(head);
                if (inner == InputFormat::kPickle || inner == InputFormat::kJson ||
                    inner == InputFormat::kPprof || inner == InputFormat::kXSpace) {
                  return Status::Ok();
                }
                return Unsupported(fmt::format(
                    "{}: a gzip file holding {}, not a memory snapshot, profiler trace, memory "
                    "timeline, device memory profile or XSpace; vramscope reads those plain or "
                    "gzipped",
                    file.path(), InputFormatName(inner)));
              },
              &cut));
      const auto text = inflated->bytes();
      if (inner == InputFormat::kPickle) {
        // A gzipped snapshot (snapshot.pickle.gz): read the inflated bytes the same way; one
        // cut off mid-stream is read up to the cut, as a plain one is.
        snapshot::LoadOptions load_options;
        load_options.progress = options.progress;
        auto trace = snapshot::LoadSnapshot(*inflated, load_options, timings);
        if (!trace.ok() && cut.truncated) {
          return InvalidInput(
              fmt::format("{} (the gzip data is truncated after {} compressed bytes)",
                          trace.status().message(), cut.compressed_bytes));
        }
        if (trace.ok()) {
          trace->source.file_bytes = bytes.size();
          if (cut.truncated) {
            trace->facts.partial = true;
            trace->facts.notes.insert(
                trace->facts.notes.begin(),
                fmt::format("the gzip stream is cut off after {} of its bytes ({} inflated): the "
                            "pickle inside was read up to there",
                            cut.compressed_bytes, cut.inflated_bytes));
          }
        }
        return trace;
      }
      if (cut.truncated) return TruncatedGzip(file.path(), cut);
      // JAX writes its device memory profile gzipped, as pprof's format asks.
      if (inner == InputFormat::kPprof) return FromPprof(text, file, timings);
      if (inner == InputFormat::kXSpace) return FromXSpace(text, file, timings);
      const std::string_view json(reinterpret_cast<const char*>(text.data()), text.size());
      return FromJson(json, file, timings, inflated.get());
    }
    default: {
      snapshot::LoadOptions load_options;
      load_options.progress = options.progress;
      return snapshot::LoadSnapshot(file, load_options, timings);
    }
  }
}

}  // namespace vramscope::sources
