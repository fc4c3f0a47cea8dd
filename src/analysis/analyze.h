// The analysis stage in one call: attribution, timelines, sites, the summary and Skyline's
// entries, computed once from a loaded trace. Every reporter and subcommand starts from this.
#pragma once

#include <memory>

#include "analysis/sites.h"
#include "analysis/skyline_entries.h"
#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "model/trace.h"

namespace vramscope::analysis {

struct Analysis {
  attribution::Attribution attribution;
  Timelines timelines;
  std::unique_ptr<SiteNamer> sites;  // refers to the trace and the project root
  Summary summary;
  SkylineEntries entries;
};

// `trace` and `root` must outlive the result.
Analysis Analyze(model::Trace& trace, const ProjectRoot& root);

}  // namespace vramscope::analysis
