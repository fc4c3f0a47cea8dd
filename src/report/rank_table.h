// The per-rank table of a multi-process capture (`vramscope report FOLDER` on the output of
// `vramscope run` under torchrun): one row per rank with its peaks, for the summary, JSON and the
// vramscope_ranks table of the report database. The rank with the highest reserved peak bounds
// the job; its full report follows the table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace vramscope::report {

struct RankRow {
  std::string label;  // rank3, pid1234
  std::optional<int64_t> rank;
  std::optional<int64_t> local_rank;
  std::string host;
  int32_t device = 0;
  std::string device_name;
  std::string file;  // the capture read, relative to the folder
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int32_t peak_step = 0;
  std::string peak_phase;
  int64_t steps = 0;       // iterations the trace holds
  std::string end_reason;  // exit, steps, oom, exception, signal (empty: unknown)
  bool oom = false;        // an allocation failed
  bool reported = false;   // the rank whose full report follows
};

// The index of the rank that bounds the job: the highest reserved peak (ties: allocated, then the
// lowest rank).
size_t BoundingRank(const std::vector<RankRow>& rows);

std::string RenderRankTable(const std::vector<RankRow>& rows);
nlohmann::json RankTableJson(const std::vector<RankRow>& rows);
// Adds the vramscope_ranks table to a report database written by WriteSqliteReport.
Status WriteRankTable(const std::string& database, const std::vector<RankRow>& rows);

}  // namespace vramscope::report
