// libFuzzer target for what a user hands `vramscope report`: any file, recognised by content
// (sources/load_source.h), plain or gzipped, through every source, then the whole pipeline.
//
// Beyond the sources' own targets it covers the choice of source and the streaming inflation of
// gzip inputs (sources/inflate_input.h) with the resource contract's limits: the seeds hold a
// decompression bomb of each kind (zeros, a pickle header before zeros, concatenated members) and
// a shared-reference snapshot, each refused with one line naming the file.
//
// Half the inputs (by their length's parity) are also cut to a window (pipeline/window.h) before
// the rest of the pipeline: a window of a snapshot is itself a consistent snapshot (its state
// invariants hold whenever the file's did), and any other input is refused in one line; the
// window written back as a snapshot pickle (report/snapshot_pickle.h) reads back.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target input_file_fuzzer).
// Run:   input_file_fuzzer -max_len=8192 fuzz/input_file/corpus
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/mapped_file.h"
#include "pipeline/window.h"
#include "report/snapshot_pickle.h"
#include "sources/load_source.h"
#include "support/through_pipeline.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

const std::string kPath = "fuzz.input";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto file = vramscope::MappedFile::FromBytes(
      kPath, std::span(reinterpret_cast<const uint8_t*>(input.data()), input.size()));
  vramscope::sources::SourceOptions options;
  // The contract's ratio, with a small allowance so that a bomb is refused at 100x an input of
  // at most max_len bytes rather than at the 64 MiB every real gzip input may reach.
  options.limits.inflate_allowance_bytes = uint64_t{1} << 20;
  auto trace = vramscope::sources::LoadTrace(*file, options);
  if (!trace.ok()) {
    const std::string& message = trace.status().message();
    Check(trace.status().IsInputError());
    Check(message.rfind(kPath + ": ", 0) == 0);
    Check(message.find('\n') == std::string::npos);
    return 0;
  }
  Check(trace->events.count() <= vramscope::model::kMaxEvents);
  if (size % 2 == 1 && trace->events.count() > 0) {
    const size_t n = trace->events.count();
    const bool sound = vramscope::model::CheckStateInvariants(*trace).empty();
    vramscope::pipeline::Loaded loaded;
    loaded.input = {vramscope::pipeline::InputKind::kFile, kPath};
    loaded.trace = std::move(*trace);
    const uint8_t last = data[size - 1];
    vramscope::pipeline::WindowRequest window;
    window.from = std::to_string(1 + last % n);
    if (last & 0x80) window.to = std::to_string(1 + (last % n) + (data[0] % (n + 1)));
    if ((last & 0x60) == 0x60) window = {"", "", std::to_string(1 + last % 3) + ":"};
    const vramscope::Status applied = vramscope::pipeline::ApplyWindow(window, loaded);
    if (!applied.ok()) {
      Check(applied.IsInputError() || applied.code() == vramscope::StatusCode::kUsage);
      Check(applied.message().find('\n') == std::string::npos);
      return 0;
    }
    Check(!sound || vramscope::model::CheckStateInvariants(loaded.trace).empty());
    // The window written back as a snapshot (`vramscope split`) reads back whole.
    vramscope::report::SnapshotPart part{
        &loaded.trace, {}, loaded.trace.segments, loaded.trace.blocks};
    for (size_t d = 0; d < loaded.trace.devices.size(); ++d) {
      part.ranges.push_back({loaded.trace.devices[d], loaded.trace.device_event_ranges[d]});
    }
    const std::string written = vramscope::report::SnapshotPickle(part);
    const auto again = vramscope::MappedFile::FromBytes(
        kPath, std::span(reinterpret_cast<const uint8_t*>(written.data()), written.size()));
    auto reread = vramscope::sources::LoadTrace(*again, options);
    Check(reread.ok() || reread.status().IsInputError());
    if (reread.ok()) Check(reread->events.count() == loaded.trace.events.count());
    vramscope::testing::ThroughPipeline(std::move(loaded.trace));
    return 0;
  }
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
