// The groups of vramscope_ tables, each written by its own file. The schema of every table is in
// sqlite_report.cc (one place); these fill them. Internal to the report library.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "report/report_input.h"
#include "report/sqlite_writer.h"

namespace vramscope::report {

// Points kept per device in vramscope_timeline and vramscope_sim_timeline (the exact curve is in
// vramscope_allocations).
inline constexpr size_t kTimelinePoints = 30000;

// vramscope_allocations, one row per allocation, and the tables its ids point into:
// vramscope_rules, _sites, _owners. The report writes the allocation rows on two threads, each
// into a database of its own (sqlite_report.cc), so the ids are numbered first, once.
struct AllocationIds {
  std::vector<int32_t> rule_of, site_of;  // per allocation: its rule's and its site's id
  std::vector<uint8_t> rules;             // by id: the attribution's rule
  std::vector<uint32_t> sites;            // by id: the site frame (analysis::SiteNamer)
};
// Rules and sites numbered in the order of their first allocation.
AllocationIds NumberRulesAndSites(const ReportInput& in);
// vramscope_rules, _sites and _owners.
Status WriteRuleSiteAndOwnerTables(Db& db, const ReportInput& in, const AllocationIds& ids,
                                   uint64_t* rows);
// The vramscope_allocations rows of allocations [begin, end).
Status WriteAllocationRows(Db& db, const ReportInput& in, const AllocationIds& ids, size_t begin,
                           size_t end, uint64_t* rows);

// vramscope_phases, _iterations, _owners_at_peak, _category_timeline.
Status WriteAttributionTables(Db& db, const ReportInput& in, uint64_t* rows);

// vramscope_oom and vramscope_owners_at_oom: every out-of-memory of the trace, explained.
Status WriteOomTables(Db& db, const ReportInput& in, uint64_t* rows);

// vramscope_prediction (the caller creates it, for predicted traces only): what the prediction
// assumed and found, one key/value row per fact.
Status WritePredictionTable(Db& db, const ReportInput& in, uint64_t* rows);

// vramscope_sim_runs, _sim_timeline, _sim_segment_events, _sim_final_blocks, _sim_notes.
Status WriteSimulationTables(Db& db, const ReportInput& in, uint64_t* rows);

}  // namespace vramscope::report
