#include "report/rank_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "report/report_schema.h"
#include "report/sqlite_writer.h"

namespace vramscope::report {

namespace {

// The steps aligned across the ranks, then why the bounding rank bounds the job.
std::string RenderComparison(const analysis::RankComparison& compared) {
  std::string out;
  const std::vector<analysis::RankStepSpread>& steps = compared.by_step;
  if (!steps.empty()) {
    out += "  aligned by step and phase (each rank's peak in it):\n";
    out += fmt::format("    {:<6} {:>6} {:>16} {:>16} {:>16}  {}\n", "step", "ranks", "lowest",
                       "median", "highest", "highest on");
    const std::vector<analysis::RankStepSpread>& phases = compared.by_phase;
    for (const analysis::RankStepSpread& s : steps) {
      out += fmt::format("    {:<6} {:>6} {:>16} {:>16} {:>16}  {} ({})\n", s.step, s.ranks,
                         FormatBytes(s.lowest), FormatBytes(s.median), FormatBytes(s.highest),
                         s.highest_label, s.highest_phase);
      for (const analysis::RankStepSpread& ph : phases) {
        if (ph.step != s.step) continue;
        out += fmt::format("      {:<14} {:>6} {:>16} {:>16} {:>16}  {}\n", ph.phase, ph.ranks,
                           FormatBytes(ph.lowest), FormatBytes(ph.median), FormatBytes(ph.highest),
                           ph.highest_label);
      }
    }
  }
  const analysis::RankContrast& c = compared.contrast;
  if (c.others == 0) return out;
  const int64_t above = c.peak_allocated - c.others_median;
  if (above <= 0 && c.held_alone.empty()) {
    out += fmt::format(
        "  {} bounds the job by its reserved peak; at the peak of allocated memory it holds no "
        "more than the other ranks' median ({})\n",
        c.label, FormatBytes(c.others_median));
    return out;
  }
  out += fmt::format(
      "  why {} bounds the job: its peak allocated is {} {} the median of the {} "
      "other rank(s) ({})\n",
      c.label, FormatBytes(above < 0 ? -above : above), above < 0 ? "below" : "above", c.others,
      FormatBytes(c.others_median));
  if (!c.category_excess.empty()) {
    std::string parts;
    for (const auto& [category, bytes] : c.category_excess) {
      parts += fmt::format("{}{} +{}", parts.empty() ? "" : ", ", category, FormatBytes(bytes));
    }
    out += fmt::format("    at its peak, more than their median at theirs: {}\n", parts);
  }
  if (!c.held_alone.empty()) {
    out +=
        fmt::format("    live at its peak and among no other rank's {} largest owners at theirs:\n",
                    analysis::kRankOwnersKept);
    size_t shown = 0;
    for (const analysis::RankOwner& o : c.held_alone) {
      if (shown++ == 8) {
        out += fmt::format("      ... and {} more (--json: ranks_compared)\n",
                           c.held_alone.size() - 8);
        break;
      }
      out += fmt::format("      {:>14}  {:<16} {}\n", FormatBytes(o.bytes), o.category, o.owner);
    }
  }
  return out;
}

nlohmann::json OwnerJson(const analysis::RankOwner& o) {
  return {{"category", o.category}, {"owner", o.owner}, {"bytes", o.bytes}};
}

}  // namespace

std::string RenderRankTable(const std::vector<RankRow>& rows,
                            const analysis::RankComparison& compared) {
  // `predict --all-ranks` rows were traced, not captured (analysis/ranks.h: their file says so).
  const bool traced = std::all_of(rows.begin(), rows.end(), [](const RankRow& r) {
    return r.file == analysis::kTracedRankFile;
  });
  std::string out = fmt::format(
      "{} {}; per rank:\n", rows.size(),
      traced ? "ranks traced, each alone on a fake process group" : "processes captured");
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
  if (rows.size() > 1) out += RenderComparison(compared);
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
    nlohmann::json steps = nlohmann::json::array();
    for (const analysis::RankStep& st : r.step_peaks) {
      steps.push_back({{"step", st.step},
                       {"peak_allocated_bytes", st.peak_allocated},
                       {"peak_phase", st.peak_phase}});
    }
    out.back()["steps_peaks"] = std::move(steps);
    nlohmann::json categories = nlohmann::json::object();
    for (const auto& [category, bytes] : r.at_peak) categories[category] = bytes;
    out.back()["at_peak_by_category"] = std::move(categories);
    nlohmann::json owners = nlohmann::json::array();
    for (const analysis::RankOwner& o : r.owners_at_peak) owners.push_back(OwnerJson(o));
    out.back()["owners_at_peak"] = std::move(owners);
  }
  return out;
}

nlohmann::json RankComparisonJson(const analysis::RankComparison& compared) {
  auto spreads = [](const std::vector<analysis::RankStepSpread>& list, bool phases) {
    nlohmann::json out = nlohmann::json::array();
    for (const analysis::RankStepSpread& s : list) {
      out.push_back({{"step", s.step},
                     {"ranks", s.ranks},
                     {"lowest_bytes", s.lowest},
                     {"median_bytes", s.median},
                     {"highest_bytes", s.highest},
                     {"highest_label", s.highest_label}});
      out.back()[phases ? "phase" : "highest_phase"] = phases ? s.phase : s.highest_phase;
    }
    return out;
  };
  nlohmann::json by_step = spreads(compared.by_step, false);
  nlohmann::json by_phase = spreads(compared.by_phase, true);
  const analysis::RankContrast& c = compared.contrast;
  nlohmann::json excess = nlohmann::json::object();
  for (const auto& [category, bytes] : c.category_excess) excess[category] = bytes;
  nlohmann::json alone = nlohmann::json::array();
  for (const analysis::RankOwner& o : c.held_alone) alone.push_back(OwnerJson(o));
  return {{"by_step", std::move(by_step)},
          {"by_phase", std::move(by_phase)},
          {"bounding",
           {{"label", c.label},
            {"peak_allocated_bytes", c.peak_allocated},
            {"others", c.others},
            {"others_median_peak_allocated_bytes", c.others_median},
            {"category_excess_bytes", std::move(excess)},
            {"held_alone", std::move(alone)},
            {"owners_compared_per_rank", analysis::kRankOwnersKept}}}};
}

Status WriteRankTable(Db& db, const std::vector<RankRow>& rows) {
  // vramscope_ranks and the four tables beside it: the schema's "ranks" group.
  RETURN_IF_ERROR(db.Exec(schema::CreateTablesSql("ranks").c_str()));
  Insert insert(db, schema::InsertSql("vramscope_ranks"));
  for (const RankRow& r : rows) {
    RETURN_IF_ERROR(insert.Row(r.label, Insert::MaybeInt{r.rank.value_or(0), r.rank.has_value()},
                               Insert::MaybeInt{r.local_rank.value_or(0), r.local_rank.has_value()},
                               r.host, static_cast<int64_t>(r.device), r.device_name, r.file,
                               r.peak_allocated, r.peak_reserved, static_cast<int64_t>(r.peak_step),
                               r.peak_phase, r.steps, r.end_reason, static_cast<int64_t>(r.oom),
                               static_cast<int64_t>(r.reported)));
  }
  Insert step(db, schema::InsertSql("vramscope_rank_steps"));
  Insert phase(db, schema::InsertSql("vramscope_rank_phases"));
  Insert category(db, schema::InsertSql("vramscope_rank_categories"));
  Insert owner(db, schema::InsertSql("vramscope_rank_owners"));
  for (const RankRow& r : rows) {
    for (const analysis::RankStep& s : r.step_peaks) {
      RETURN_IF_ERROR(
          step.Row(r.label, static_cast<int64_t>(s.step), s.peak_allocated, s.peak_phase));
    }
    for (const analysis::RankPhase& ph : r.phase_peaks) {
      RETURN_IF_ERROR(
          phase.Row(r.label, static_cast<int64_t>(ph.step), ph.phase, ph.peak_allocated));
    }
    for (const auto& [name, bytes] : r.at_peak) RETURN_IF_ERROR(category.Row(r.label, name, bytes));
    for (size_t i = 0; i < r.owners_at_peak.size(); ++i) {
      const analysis::RankOwner& o = r.owners_at_peak[i];
      RETURN_IF_ERROR(owner.Row(r.label, static_cast<int64_t>(i), o.category, o.owner, o.bytes));
    }
  }
  return Status::Ok();
}

}  // namespace vramscope::report
