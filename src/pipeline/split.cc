#include "pipeline/split.h"

#include <fmt/format.h>

namespace vramscope::pipeline {

Result<SplitPlan> PlanSplit(const SplitRequest& request) {
  if (request.slices < 2 || request.slices > kMaxSlices) {
    return UsageError(fmt::format("--slices {}: give 2 to {} pieces", request.slices, kMaxSlices));
  }
  if (request.input.kind == InputKind::kCaptureFolder) {
    return UsageError(
        fmt::format("{}: split cuts one snapshot; give a rank's snapshot inside the folder",
                    request.input.Name()));
  }
  LoadRequest load;
  load.input = request.input;
  load.control = request.control;
  load.limits = request.limits;
  SplitPlan plan;
  ASSIGN_OR_RETURN(plan.loaded, Load(load));
  const model::Trace& t = plan.loaded.trace;
  if (!t.facts.has_allocator_state || !t.facts.has_trace) {
    return InvalidInput(fmt::format(
        "{}: split needs a memory snapshot with its alloc/free trace (each piece is a snapshot: "
        "the allocator's state at its end and the events before it); this input is a {}",
        request.input.Name(), t.source.format));
  }
  if (t.facts.partial) {
    return InvalidInput(fmt::format(
        "{}: the file is cut off (partial): its allocator state is not the end of its events, "
        "so the pieces could not be exact; 'vramscope report' reads it as it is",
        request.input.Name()));
  }
  const auto n = static_cast<size_t>(request.slices);
  plan.pieces.resize(n);
  for (size_t d = 0; d < t.devices.size(); ++d) {
    const auto [begin, end] = t.device_event_ranges[d];
    if (begin == end) continue;
    const size_t count = end - begin;
    for (size_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(request.control.CheckCancelled("splitting the snapshot"));
      const size_t from = begin + count * i / n, to = begin + count * (i + 1) / n;
      SplitPiece& piece = plan.pieces[i];
      piece.ranges.push_back({t.devices[d], {from, to}});
      ASSIGN_OR_RETURN(AllocatorState state, AllocatorStateAfter(plan.loaded, t.devices[d], to));
      AppendState(state, piece.state);
    }
  }
  return plan;
}

}  // namespace vramscope::pipeline
