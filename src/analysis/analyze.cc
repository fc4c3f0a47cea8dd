#include "analysis/analyze.h"

#include <fmt/format.h>

#include "common/units.h"

namespace vramscope::analysis {

std::unique_ptr<Analysis> Analyze(const model::TraceView& view, const ProjectRoot& root,
                                  const Simulations* replay, Progress* progress) {
  const model::Trace& trace = view.trace;
  auto a = std::make_unique<Analysis>();
  ProgressStage(progress, fmt::format("attributing {} allocations",
                                      FormatCount(static_cast<int64_t>(trace.allocations.size()))));
  a->attribution = attribution::Attribute(view);
  ProgressStage(progress, "analysing: curves, peaks, owners, regions, out-of-memory points");
  a->timelines = ComputeTimelines(view);
  a->sites = std::make_unique<SiteNamer>(trace, root);
  a->owners = std::make_unique<OwnerNamer>(view, a->attribution, *a->sites);
  a->summary = Summarize(view, a->timelines, a->attribution, *a->sites, *a->owners);
  a->segments = ComputeSegmentTimeline(view, replay);
  {
    attribution::StackFactsCache facts(trace);
    for (DeviceSummary& d : a->summary.devices) {
      for (const DeviceTimeline& t : a->timelines.devices) {
        if (t.device != d.device) continue;
        d.ooms = ExplainOoms(view, a->segments, t, a->attribution, *a->sites, *a->owners, facts);
      }
    }
  }
  a->regions = ComputeRegions(view, a->timelines, a->summary);
  a->device_usage = DecomposeDeviceUsage(view.interpretation.device_usage);
  if (view.interpretation.oom_message) {
    a->oom_message = ExplainOomMessage(*view.interpretation.oom_message, {});
  }
  a->entries = BuildSkylineEntries(view, a->summary, a->attribution, *a->sites);
  a->category_timelines =
      CategoryTimelines(view, a->timelines, a->attribution, kCategoryTimelinePoints);
  return a;
}

}  // namespace vramscope::analysis
