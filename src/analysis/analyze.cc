#include "analysis/analyze.h"

namespace vramscope::analysis {

Analysis Analyze(model::Trace& trace, const ProjectRoot& root) {
  Analysis a;
  a.attribution = attribution::Attribute(trace);
  a.timelines = ComputeTimelines(trace);
  a.sites = std::make_unique<SiteNamer>(trace, root);
  a.owners = std::make_unique<OwnerNamer>(trace, *a.sites);
  a.summary = Summarize(trace, a.timelines, a.attribution, *a.sites, *a.owners);
  {
    attribution::StackFactsCache facts(trace);
    for (DeviceSummary& d : a.summary.devices) {
      for (const DeviceTimeline& t : a.timelines.devices) {
        if (t.device != d.device) continue;
        d.ooms = ExplainOoms(trace, t, a.attribution, *a.sites, *a.owners, facts);
      }
    }
  }
  a.entries = BuildSkylineEntries(trace, a.summary, a.attribution, *a.sites);
  a.category_timelines =
      CategoryTimelines(trace, a.timelines, a.attribution, kCategoryTimelinePoints);
  return a;
}

}  // namespace vramscope::analysis
