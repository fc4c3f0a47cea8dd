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

std::string RenderRankTable(const std::vector<RankRow>& rows);
nlohmann::json RankTableJson(const std::vector<RankRow>& rows);
// The vramscope_ranks table, written by WriteSqliteReport inside its transaction.
Status WriteRankTable(Db& db, const std::vector<RankRow>& rows);

}  // namespace vramscope::report
