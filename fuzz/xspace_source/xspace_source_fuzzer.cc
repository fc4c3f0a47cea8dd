// libFuzzer target for the XSpace source (a profiler's .xplane.pb, uncompressed protobuf).
//
// Converts the input; a failure must be one input-error line naming the file. A success must
// hold the source's promises (every alloc with a category, times on every event, devices
// contiguous and ascending, start levels not negative) and survive every analysis a report runs.
// libprotobuf parses; what is fuzzed here is everything the source trusts after parsing: stat and
// event name references, sizes, times, allocator names, marks and function calls.
//
// Seeds: corpus/keras_*.pb are cut from tests/data/xspace's real TensorFlow profile (its host
// plane with the first memory events, marks and calls; make_seeds.py), gpu_allocators.pb has
// events of TensorFlow's GPU allocator names.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target xspace_source_fuzzer).
// Run:   xspace_source_fuzzer -max_len=8192 NEW_CORPUS_DIR fuzz/xspace_source/corpus
#include <cstddef>
#include <cstdint>
#include <span>

#include "sources/xspace/xspace_source.h"
#include "support/through_pipeline.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto trace = vramscope::xspace::TraceFromXSpace(std::span<const uint8_t>(data, size), "fuzz");
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  for (size_t i = 0; i < ev.count(); ++i) {
    Check(ev.size[i] > 0 && ev.time_us[i] != vramscope::model::kNoTime);
    if (ev.action[i] == vramscope::model::Action::kAlloc) {
      Check(ev.category.contains(static_cast<uint32_t>(i)));
    }
    if (i > 0) Check(ev.device[i] >= ev.device[i - 1]);
  }
  Check(t.devices.size() == t.device_event_ranges.size());
  for (const auto& level : t.start_levels) Check(level.untracked_allocated >= 0);
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
