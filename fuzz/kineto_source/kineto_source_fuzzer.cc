// libFuzzer target for the profiler-trace (Kineto JSON) source.
//
// Converts the input; on failure checks that the error is one InvalidInput line naming the file,
// on success checks the event model's invariants (one contiguous, time-ordered run per device,
// valid stack ids, levels per device) and runs every analysis on the trace.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target kineto_source_fuzzer).
// Run:   kineto_source_fuzzer -max_len=4096 -dict=src/sources/kineto/kineto_source_fuzzer.dict
//                             fuzz/kineto_source/corpus
#include <cstddef>
#include <cstdint>
#include <string>

#include "sources/kineto/kineto_source.h"
#include "support/through_pipeline.h"

namespace {

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

const std::string kPath = "fuzz.json";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that any read past the end is caught by ASan.
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto trace = vramscope::kineto::TraceFromKinetoJson(input, kPath);
  if (!trace.ok()) {
    const std::string& message = trace.status().message();
    Check(trace.status().IsInputError());
    Check(message.rfind(kPath + ": ", 0) == 0);
    Check(message.find('\n') == std::string::npos);
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  Check(!t.devices.empty());
  Check(t.device_event_ranges.size() == t.devices.size());
  Check(t.start_levels.size() == t.devices.size());
  Check(ev.count() <= vramscope::model::kMaxEvents);
  size_t next = 0;
  for (size_t d = 0; d < t.devices.size(); ++d) {
    Check(d == 0 || t.devices[d - 1] < t.devices[d]);
    Check(t.start_levels[d].device == t.devices[d]);
    const auto [begin, end] = t.device_event_ranges[d];
    Check(begin == next && begin < end && end <= ev.count());
    next = end;
    for (size_t i = begin; i < end; ++i) {
      Check(ev.device[i] == t.devices[d]);
      Check(i == begin || ev.time_us[i - 1] <= ev.time_us[i]);
      Check(ev.stack[i] < t.stacks.size());
      Check(ev.size[i] > 0);
    }
  }
  Check(next == ev.count());
  for (size_t s = 1; s < t.stacks.size(); ++s) {
    Check(t.stacks.frame(static_cast<vramscope::model::StackId>(s)) < t.frames.size());
  }
  for (const auto& a : t.allocations) {
    Check(a.alloc_event == vramscope::model::kNoEvent ||
          ev.action[a.alloc_event] == vramscope::model::Action::kAlloc);
  }
  for (const auto& a : t.annotations) Check(a.fields.size() == 2);
  Check(t.facts.has_trace && t.facts.has_times && !t.facts.has_allocator_state);

  // The rest of the pipeline a user's input takes, and what holds for every input.
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
