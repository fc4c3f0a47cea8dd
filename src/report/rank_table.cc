#include "report/rank_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "report/sqlite_writer.h"

namespace vramscope::report {

std::string RenderRankTable(const std::vector<RankRow>& rows) {
  std::string out = fmt::format("{} processes captured; per rank:\n", rows.size());
  out += fmt::format("  {:<10} {:<18} {:>16} {:>16}  {:<22} {}\n", "rank", "host:device",
                     "peak allocated", "peak reserved", "peak in", "ended");
  int64_t max_reserved = 0, min_reserved = INT64_MAX;
  for (const RankRow& r : rows) {
    max_reserved = std::max(max_reserved, r.peak_reserved);
    min_reserved = std::min(min_reserved, r.peak_reserved);
    const std::string where =
        fmt::format("{}{}cuda:{}", r.host, r.host.empty() ? "" : ":", r.device);
    const std::string peak_in =
        r.peak_step > 0 ? fmt::format("step {} {}", r.peak_step, r.peak_phase) : r.peak_phase;
    std::string ended = r.oom ? "OUT OF MEMORY" : r.end_reason;
    if (r.reported) ended += ended.empty() ? "(reported below)" : "  (reported below)";
    out += fmt::format("  {:<10} {:<18} {:>16} {:>16}  {:<22} {}\n", r.label, where,
                       FormatBytes(r.peak_allocated), FormatBytes(r.peak_reserved), peak_in, ended);
  }
  if (rows.size() > 1 && max_reserved > 0) {
    out += fmt::format("  spread of the reserved peaks: {} ({:.1f}% of the highest)\n",
                       FormatBytes(max_reserved - min_reserved),
                       100.0 * static_cast<double>(max_reserved - min_reserved) /
                           static_cast<double>(max_reserved));
  }
  return out;
}

nlohmann::json RankTableJson(const std::vector<RankRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankRow& r : rows) {
    out.push_back({{"label", r.label},
                   {"rank", r.rank ? nlohmann::json(*r.rank) : nlohmann::json(nullptr)},
                   {"local_rank", r.local_rank ? nlohmann::json(*r.local_rank) : nlohmann::json()},
                   {"host", r.host},
                   {"device", r.device},
                   {"device_name", r.device_name},
                   {"file", r.file},
                   {"peak_allocated_bytes", r.peak_allocated},
                   {"peak_reserved_bytes", r.peak_reserved},
                   {"peak_step", r.peak_step},
                   {"peak_phase", r.peak_phase},
                   {"steps", r.steps},
                   {"end_reason", r.end_reason},
                   {"oom", r.oom},
                   {"reported", r.reported}});
  }
  return out;
}

Status WriteRankTable(Db& db, const std::vector<RankRow>& rows) {
  RETURN_IF_ERROR(db.Exec(
      "CREATE TABLE vramscope_ranks (label TEXT NOT NULL PRIMARY KEY, rank INTEGER, "
      "local_rank INTEGER, host TEXT, device INTEGER NOT NULL, device_name TEXT, file TEXT NOT "
      "NULL, peak_allocated_bytes INTEGER NOT NULL, peak_reserved_bytes INTEGER NOT NULL, "
      "peak_step INTEGER NOT NULL, peak_phase TEXT, steps INTEGER NOT NULL, end_reason TEXT, "
      "oom INTEGER NOT NULL, reported INTEGER NOT NULL);"));
  Insert insert(db, "INSERT INTO vramscope_ranks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (const RankRow& r : rows) {
    RETURN_IF_ERROR(insert.Row(r.label, Insert::MaybeInt{r.rank.value_or(0), r.rank.has_value()},
                               Insert::MaybeInt{r.local_rank.value_or(0), r.local_rank.has_value()},
                               r.host, static_cast<int64_t>(r.device), r.device_name, r.file,
                               r.peak_allocated, r.peak_reserved, static_cast<int64_t>(r.peak_step),
                               r.peak_phase, r.steps, r.end_reason, static_cast<int64_t>(r.oom),
                               static_cast<int64_t>(r.reported)));
  }
  return Status::Ok();
}

}  // namespace vramscope::report
