// The ranks of a multi-process capture (`vramscope run` under torchrun, `vramscope report
// FOLDER`): one row per process with the figures its own report gives, and which one bounds the
// job (its full report is the one shown). The pipeline fills the rows; reporters render them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/summary.h"

namespace vramscope::analysis {

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

// The figures of a rank's row from its summary: the device with the highest reserved peak.
void FillRankFigures(const Summary& summary, RankRow& row);

// The index of the rank that bounds the job: the highest reserved peak (ties: allocated, then the
// lowest rank).
size_t BoundingRank(const std::vector<RankRow>& rows);

}  // namespace vramscope::analysis
