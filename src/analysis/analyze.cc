#include "analysis/analyze.h"

#include <fmt/format.h>

#include "common/units.h"

namespace vramscope::analysis {

Result<std::unique_ptr<const Analysis>> Analyze(const model::TraceView& view,
                                                const ProjectRoot& root, Simulations* simulations,
                                                const WhatIfRequest* what_if,
                                                const Control& control) {
  const model::Trace& trace = view.trace;
  auto a = std::make_unique<Analysis>();
  control.Stage(fmt::format("attributing {} allocations",
                            FormatCount(static_cast<int64_t>(trace.allocations.size()))));
  RETURN_IF_ERROR(control.CheckCancelled("the analysis"));
  a->attribution = attribution::Attribute(view);
  control.Stage("analysing: curves, peaks, owners, regions, out-of-memory points");
  RETURN_IF_ERROR(control.CheckCancelled("the analysis"));
  a->timelines = ComputeTimelines(view);
  // Named while the analysis runs, then frozen into the result (read-only from here on).
  auto sites = std::make_unique<SiteNamer>(trace, root);
  auto owners = std::make_unique<OwnerNamer>(view, a->attribution, *sites);
  a->summary = Summarize(view, a->timelines, a->attribution, *sites, *owners);
  a->segments = ComputeSegmentTimeline(view, simulations);
  {
    attribution::StackFactsCache facts(trace);
    for (DeviceSummary& d : a->summary.devices) {
      for (const DeviceTimeline& t : a->timelines.devices) {
        if (t.device != d.device) continue;
        d.ooms = ExplainOoms(view, a->segments, t, a->attribution, *sites, *owners, facts);
      }
    }
  }
  RETURN_IF_ERROR(control.CheckCancelled("the analysis"));
  a->regions = ComputeRegions(view, a->timelines, a->summary);
  a->device_usage = DecomposeDeviceUsage(view.interpretation.device_usage);
  if (view.interpretation.oom_message) {
    a->oom_message = ExplainOomMessage(*view.interpretation.oom_message, {});
  }
  a->entries = BuildSkylineEntries(view, a->summary, a->attribution, *sites);
  a->category_timelines =
      CategoryTimelines(view, a->timelines, a->attribution, kCategoryTimelinePoints);
  if (what_if != nullptr) {
    if (simulations == nullptr) return InternalError("what-if runs asked for without a replay");
    control.Stage(fmt::format("running the allocator model under {} what-if setting(s)",
                              what_if->what_if.size()));
    RETURN_IF_ERROR(control.CheckCancelled("the analysis"));
    RETURN_IF_ERROR(AddWhatIfRuns(view, *sites, *what_if, *simulations));
  }
  RETURN_IF_ERROR(control.CheckCancelled("the analysis"));
  sites->NameAll();
  owners->NameAll();
  a->sites = std::move(sites);
  a->owners = std::move(owners);
  return std::unique_ptr<const Analysis>(std::move(a));
}

}  // namespace vramscope::analysis
