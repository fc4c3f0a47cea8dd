#include "sources/snapshot/skipped_actions.h"

#include <fmt/format.h>

#include <array>

namespace vramscope::snapshot {

void DescribeSkippedActions(model::Trace& trace) {
  model::TraceFacts& f = trace.facts;
  std::array<uint64_t, 8> count{};
  for (const model::Action a : trace.events.action) {
    const auto index = static_cast<size_t>(a);
    if (index < count.size()) ++count[index];
  }
  auto n = [&](model::Action a) { return count[static_cast<size_t>(a)]; };
  const uint64_t frees = n(model::Action::kFreeRequested) + n(model::Action::kFreeCompleted);
  if (n(model::Action::kAlloc) == 0 && frees > 0) {
    f.skipped_actions.emplace_back("alloc");
    f.notes.push_back(fmt::format(
        "the trace holds {} frees and no alloc entry: it was recorded with "
        "_record_memory_history(skip_actions=[\"alloc\"]), so lifetimes begin before the trace "
        "and allocation sites are unknown",
        frees));
  }
  if (n(model::Action::kAlloc) > 0 && n(model::Action::kFreeCompleted) > 0 &&
      n(model::Action::kFreeRequested) == 0) {
    f.skipped_actions.emplace_back("free_requested");
    f.notes.push_back(
        "the trace holds free_completed entries and no free_requested one: it was recorded with "
        "_record_memory_history(skip_actions=[\"free_requested\"]); each block counts as "
        "allocated until its free completes");
  }
  if (n(model::Action::kAlloc) > 0 && n(model::Action::kFreeRequested) > 0 &&
      n(model::Action::kFreeCompleted) == 0) {
    f.skipped_actions.emplace_back("free_completed");
    f.notes.push_back(
        "the trace holds free_requested entries and no free_completed one: it was recorded with "
        "_record_memory_history(skip_actions=[\"free_completed\"]); each block is taken as "
        "free when its free is requested (a free waiting on another stream's work is not seen)");
  }
  if (n(model::Action::kSegmentFree) > 0 && n(model::Action::kSegmentAlloc) == 0 &&
      n(model::Action::kAlloc) > 0) {
    f.skipped_actions.emplace_back("segment_alloc");
    f.notes.push_back(fmt::format(
        "the trace frees {} segment(s) and makes none: it was likely recorded with "
        "_record_memory_history(skip_actions=[\"segment_alloc\"]) (else every segment predates "
        "the trace); reserved memory before the trace is then overstated",
        n(model::Action::kSegmentFree)));
  }
}

}  // namespace vramscope::snapshot
