// Everything a reporter renders, computed once by the pipeline (src/pipeline). Reporters hold no
// analysis logic: they read these figures, all const, and the trace through its interpretation.
#pragma once

#include <string>
#include <vector>

#include "analysis/breakdown.h"
#include "analysis/device_usage.h"
#include "analysis/ranks.h"
#include "analysis/regions.h"
#include "analysis/segment_timeline.h"
#include "analysis/simulation.h"
#include "analysis/sites.h"
#include "analysis/skyline_entries.h"
#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "model/interpretation.h"
#include "model/trace.h"
#include "pipeline/analyze.h"

namespace vramscope::report {

struct ReportInput {
  // The input as loaded: the source's record (`trace`) and what interpretation added (`view`).
  const model::Trace& trace;
  model::TraceView view;
  const analysis::Timelines& timelines;
  const attribution::Attribution& attribution;
  const analysis::Summary& summary;
  const analysis::SkylineEntries& entries;
  const analysis::SiteNamer& sites;
  const analysis::ProjectRoot& project_root;
  // The allocator model's runs (vramscope_sim_* tables); null when none were made.
  const analysis::Simulations* simulations = nullptr;
  // Bytes by category over time (vramscope_category_timeline); null when not computed.
  const std::vector<std::vector<analysis::CategoryPoint>>* category_timelines = nullptr;
  // Owner labels of the allocations (vramscope_owners), every allocation named.
  const analysis::OwnerNamer* owners = nullptr;
  // The per-rank rows of a capture folder with several processes (vramscope_ranks); null or
  // empty otherwise.
  const std::vector<analysis::RankRow>* ranks = nullptr;
  // The segments over time (vramscope_segment_timeline, vramscope_allocations.segment_id); null:
  // not computed.
  const analysis::SegmentTimeline* segments = nullptr;
  // Memory by compiled region and by annotation (vramscope_regions, vramscope_region_ranges); null:
  // not computed.
  const analysis::RegionBreakdowns* regions = nullptr;
  // nvidia-smi's figure decomposed (a capture with NVML samples); null: not computed.
  const analysis::DeviceUsageDecomposition* device_usage = nullptr;
  // PyTorch's OOM message of a captured run, explained; null when there is none.
  const analysis::OomMessageExplanation* oom_message = nullptr;

  // The one way the CLI makes it: from the pipeline's result.
  static ReportInput From(const pipeline::Analyzed& analyzed);
};

inline ReportInput ReportInput::From(const pipeline::Analyzed& r) {
  const analysis::Analysis& a = *r.analysis;
  return ReportInput{r.trace(),       r.view(),
                     a.timelines,     a.attribution,
                     a.summary,       a.entries,
                     *a.sites,        r.root,
                     r.sims(),        &a.category_timelines,
                     a.owners.get(),  r.ranks().empty() ? nullptr : &r.ranks(),
                     &a.segments,     &a.regions,
                     &a.device_usage, a.oom_message ? &*a.oom_message : nullptr};
}

inline constexpr const char* kToolVersion = "0.1.0";

}  // namespace vramscope::report
