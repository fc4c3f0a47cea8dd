// Everything a reporter renders, computed once by the pipeline. Reporters hold no analysis logic.
#pragma once

#include <string>

#include "analysis/breakdown.h"
#include "analysis/simulation.h"
#include "analysis/sites.h"
#include "analysis/skyline_entries.h"
#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "model/trace.h"

namespace vramscope::report {

struct ReportInput {
  const model::Trace& trace;
  const analysis::Timelines& timelines;
  const attribution::Attribution& attribution;
  const analysis::Summary& summary;
  const analysis::SkylineEntries& entries;
  analysis::SiteNamer& sites;
  const analysis::ProjectRoot& project_root;
  // The allocator model's runs (vramscope_sim_* tables); null when none were made.
  const analysis::Simulations* simulations = nullptr;
  // Bytes by category over time (vramscope_category_timeline); null when not computed.
  const std::vector<std::vector<analysis::CategoryPoint>>* category_timelines = nullptr;
  // Owner labels of the allocations (vramscope_owners); null: computed by the writer.
  analysis::OwnerNamer* owners = nullptr;
};

inline constexpr const char* kToolVersion = "0.1.0";

}  // namespace vramscope::report
