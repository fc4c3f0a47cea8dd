// The per-rank table of a multi-process capture (`vramscope report FOLDER` on the output of
// `vramscope run` under torchrun; rows made by the pipeline, analysis/ranks.h): for the summary,
// JSON and the vramscope_ranks table of the report database.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/ranks.h"
#include "common/status.h"
#include "report/sqlite_writer.h"

namespace vramscope::report {

using analysis::RankRow;

// The table, then the ranks aligned by step and why the bounding rank bounds the job
// (`compared`: analysis::CompareRanks of the rows, made once by the pipeline).
std::string RenderRankTable(const std::vector<RankRow>& rows,
                            const analysis::RankComparison& compared);
// The rows, each with its steps, categories and owners at its peak.
nlohmann::json RankTableJson(const std::vector<RankRow>& rows);
// {"by_step": [...], "by_phase": [...], "bounding": {...}}.
nlohmann::json RankComparisonJson(const analysis::RankComparison& compared);
// vramscope_ranks, vramscope_rank_steps, vramscope_rank_categories and vramscope_rank_owners,
// written by WriteSqliteReport inside its transaction.
Status WriteRankTable(Db& db, const std::vector<RankRow>& rows);

}  // namespace vramscope::report
