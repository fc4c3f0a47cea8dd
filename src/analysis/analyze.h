// The analysis stage in one call: attribution, timelines, sites, the summary (with the
// out-of-memory explanations) and Skyline's entries, computed once from a loaded trace and its
// interpretation. The pipeline (src/pipeline) calls it once per input; reporters render it.
#pragma once

#include <memory>

#include "analysis/breakdown.h"
#include "analysis/device_usage.h"
#include "analysis/oom.h"
#include "analysis/oom_message_explain.h"
#include "analysis/regions.h"
#include "analysis/segment_timeline.h"
#include "analysis/simulation.h"
#include "analysis/sites.h"
#include "analysis/skyline_entries.h"
#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "common/progress.h"
#include "common/status.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

// Complete when Analyze returns it, and read-only from then on: every site and owner is named
// once, inside Analyze, so that reporters only read. Not movable: the namers refer to the
// attribution and to each other.
struct Analysis {
  Analysis() = default;
  Analysis(const Analysis&) = delete;
  Analysis& operator=(const Analysis&) = delete;

  attribution::Attribution attribution;
  Timelines timelines;
  // Every stack's site and every allocation's owner, named (SiteNamer::NameAll,
  // OwnerNamer::NameAll) after the summary, the out-of-memory points and the what-if runs asked
  // for theirs, so that the ids are the order of first use.
  std::unique_ptr<const SiteNamer> sites;    // refers to the trace and the project root
  std::unique_ptr<const OwnerNamer> owners;  // refers to the view, `attribution` and `sites`
  Summary summary;
  SkylineEntries entries;
  // Bytes by category at the reduced points of each device's curve (parallel to timelines).
  std::vector<std::vector<CategoryPoint>> category_timelines;
  // The segments over time and which one held each allocation.
  SegmentTimeline segments;
  // Memory by compiled region and by annotation (analysis/regions.h).
  RegionBreakdowns regions;
  // nvidia-smi's figure decomposed, for a capture with NVML samples (analysis/device_usage.h).
  DeviceUsageDecomposition device_usage;
  // PyTorch's out-of-memory message of a captured run, explained (analysis/oom_message_explain.h).
  std::optional<OomMessageExplanation> oom_message;
};

// Points kept per device in the category timeline.
inline constexpr size_t kCategoryTimelinePoints = 20000;

// The trace and interpretation behind `view`, and `root`, must outlive the result. `simulations`:
// the allocator model's replay (Loaded::simulations), whose segments stand in for recorded ones
// where the source has none; may be null. `what_if`: runs of the allocator model under other
// settings, appended to *simulations (which must then be given). `control`: the stages are named
// on its progress; its token is checked between them.
Result<std::unique_ptr<const Analysis>> Analyze(const model::TraceView& view,
                                                const ProjectRoot& root,
                                                Simulations* simulations = nullptr,
                                                const WhatIfRequest* what_if = nullptr,
                                                const Control& control = {});

}  // namespace vramscope::analysis
