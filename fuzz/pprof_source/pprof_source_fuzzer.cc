// libFuzzer target for the pprof source (JAX's device memory profile, uncompressed protobuf).
//
// Converts the input; a failure must be one input-error line naming the file. A success must
// hold the source's promises (allocs, each with a category; frees only of the step's two
// allocations, vramscope_step samples, after an alloc of the same address and size; devices
// contiguous and ascending) and survive every analysis a report runs. libprotobuf parses;
// what is fuzzed here is everything the source trusts after parsing: string, function and
// location references, values per sample, labels.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target pprof_source_fuzzer).
// Run:   pprof_source_fuzzer -max_len=8192 NEW_CORPUS_DIR fuzz/pprof_source/corpus
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>

#include "sources/pprof/pprof_source.h"
#include "support/through_pipeline.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto trace = vramscope::pprof::TraceFromPprof(std::span<const uint8_t>(data, size), "fuzz");
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  using vramscope::model::Action;
  std::unordered_map<uint64_t, uint64_t> live;  // address -> size
  for (size_t i = 0; i < ev.count(); ++i) {
    Check(ev.size[i] > 0);
    if (ev.action[i] == Action::kAlloc) {
      Check(ev.category.contains(static_cast<uint32_t>(i)));
      Check(live.emplace(ev.addr[i], ev.size[i]).second);
    } else {
      Check(ev.action[i] == Action::kFreeRequested || ev.action[i] == Action::kFreeCompleted);
      const auto it = live.find(ev.addr[i]);
      Check(it != live.end() && it->second == ev.size[i]);
      if (ev.action[i] == Action::kFreeCompleted) live.erase(it);
    }
    if (i > 0) Check(ev.device[i] >= ev.device[i - 1]);
  }
  Check(t.devices.size() == t.device_event_ranges.size());
  Check(t.facts.frees_without_alloc == 0);
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
