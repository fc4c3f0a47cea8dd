// libFuzzer target for the raw memory timeline source.
//
// Converts the input; a failure must be one InvalidInput line naming the file. A success must
// hold the source's promises (one device, categories only on allocs, times in order, every
// release completed at once), agree with PyTorch's own per-category running sums at the end
// whenever every release found its tensor, and survive every analysis a report runs.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target memory_timeline_source_fuzzer).
// Run:   memory_timeline_source_fuzzer -max_len=4096 \
//           -dict=src/sources/memory_timeline/memory_timeline_source_fuzzer.dict \
//           NEW_CORPUS_DIR fuzz/memory_timeline_source/corpus
// (new inputs go to the first folder; the checked-in seeds stay as they are).
#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sources/memory_timeline/memory_timeline_source.h"
#include "support/through_pipeline.h"

namespace {

using vramscope::model::Action;
using vramscope::model::Category;

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

// PyTorch's category index for ours, with TEMPORARY and AUTOGRAD_DETAIL merged (index 3).
int PyTorchIndex(const vramscope::model::Trace& t, int32_t alloc_event) {
  const auto it = t.events.category.find(static_cast<uint32_t>(alloc_event));
  if (it == t.events.category.end()) return 7;
  switch (it->second) {
    case Category::kWeight:
      return 0;
    case Category::kOptimizerState:
      return 1;
    case Category::kInput:
      return 2;
    case Category::kTemporary:
      return 3;
    case Category::kActivation:
      return 4;
    case Category::kGradient:
      return 5;
    default:
      Check(false);
      return -1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that any read past the end is caught by ASan.
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto trace = vramscope::memory_timeline::TraceFromMemoryTimeline(input, "fuzz");
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  const size_t n = ev.count();
  Check(t.facts.has_trace == (n > 0));
  Check(!t.facts.has_allocator_state && !t.facts.sizes_are_block_sizes);
  Check(t.start_levels.size() == 1 && t.start_levels[0].device == 0);
  if (n > 0) {
    Check(t.devices.size() == 1 && t.devices[0] == 0);
    Check(t.device_event_ranges.size() == 1 && t.device_event_ranges[0].first == 0 &&
          t.device_event_ranges[0].second == n);
  } else {
    Check(t.devices.empty());
  }
  for (size_t i = 0; i < n; ++i) {
    Check(ev.device[i] == 0);
    Check(ev.addr[i] != 0 && ev.addr[i] % 512 == 0);
    Check(ev.size[i] > 0);
    Check(t.facts.has_times ? ev.time_us[i] != vramscope::model::kNoTime
                            : ev.time_us[i] == vramscope::model::kNoTime);
    if (i > 0) Check(ev.time_us[i] >= ev.time_us[i - 1]);
    if (ev.action[i] == Action::kFreeRequested) {
      Check(i + 1 < n && ev.action[i + 1] == Action::kFreeCompleted &&
            ev.addr[i + 1] == ev.addr[i] && ev.time_us[i + 1] == ev.time_us[i]);
    }
  }
  for (const auto& [index, category] : ev.category) {
    Check(index < n && ev.action[index] == Action::kAlloc);
  }

  // Against PyTorch's running sums: with every release matched, what is live at the end is
  // what the file's records add up to, category by category.
  if (t.facts.frees_without_alloc == 0) {
    const auto records = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
    Check(records.is_array());
    std::array<int64_t, 8> want{}, got{};
    for (const auto& r : records) want[r[3].get<size_t>()] += r[2].get<int64_t>();
    want[3] += want[6];
    want[6] = 0;
    for (const auto& a : t.allocations) {
      Check(a.alloc_event != vramscope::model::kNoEvent);
      Check(ev.action[a.alloc_event] == Action::kAlloc);
      if (a.ReleaseEvent() == vramscope::model::kNoEvent) {
        got[PyTorchIndex(t, a.alloc_event)] += static_cast<int64_t>(a.requested_size);
      }
    }
    Check(got == want);
  }

  // The rest of the pipeline a user's input takes, and what holds for every input.
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
