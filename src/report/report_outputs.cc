#include "report/report_outputs.h"

#include <fmt/format.h>

#include "common/units.h"
#include "report/html_viewer.h"
#include "report/json_summary.h"
#include "report/output_target.h"
#include "report/rank_table.h"
#include "report/report_input.h"

namespace vramscope::report {

Result<PreparedOutputs> PrepareReportOutputs(const pipeline::Input& input,
                                             const ReportFiles& files) {
  PreparedOutputs out;
  out.html = files.html;
  out.force = files.force;
  const bool named = !files.output.empty();
  const bool summary_asked = files.summary_only || files.json;
  if (named || (files.database_by_default && !summary_asked)) {
    const std::string target = named ? files.output : pipeline::DefaultOutputName(input, "sqlite");
    RETURN_IF_ERROR(CheckOutputIsItsOwn(target, {input.path}, {files.html}));
    ASSIGN_OR_RETURN(PreparedOutput prepared,
                     PrepareOutput(target, named, OutputKind::kReportDatabase, files.force));
    out.database.emplace(std::move(prepared.file));
    out.database_replaces_earlier = prepared.replaces_earlier;
  }
  // The viewer reads a report database; without one it gets a temporary one.
  if (!files.html.empty()) {
    RETURN_IF_ERROR(CheckOutputIsItsOwn(files.html, {input.path}));
    { ASSIGN_OR_RETURN(AtomicOutput check, AtomicOutput::Prepare(files.html, files.force)); }
    if (!out.database) {
      ASSIGN_OR_RETURN(AtomicOutput temp,
                       AtomicOutput::Prepare(files.html + ".sqlite", /*overwrite=*/true));
      out.viewer_database.emplace(std::move(temp));
    }
  }
  return out;
}

Result<WrittenOutputs> WriteReportOutputs(const pipeline::Analyzed& analyzed,
                                          PreparedOutputs& outputs, const Control& control) {
  const ReportInput input = ReportInput::From(analyzed);
  WrittenOutputs written;
  if (outputs.database) {
    control.Stage(fmt::format("writing {}", outputs.database->target()));
    RETURN_IF_ERROR(
        WriteSqliteReport(outputs.database->temp_path(), input, &written.database_info, control));
    RETURN_IF_ERROR(control.CheckCancelled("writing the report"));
    RETURN_IF_ERROR(outputs.database->Commit());
    written.database = outputs.database->target();
    written.database_replaces_earlier = outputs.database_replaces_earlier;
  }
  if (!outputs.html.empty()) {
    if (outputs.viewer_database) {
      control.Stage("writing the report for the viewer page");
      RETURN_IF_ERROR(
          WriteSqliteReport(outputs.viewer_database->temp_path(), input, nullptr, control));
    }
    control.Stage(fmt::format("building the viewer page {}", outputs.html));
    RETURN_IF_ERROR(WriteViewerPage(
        {outputs.database ? outputs.database->target() : outputs.viewer_database->temp_path()},
        outputs.html, outputs.force, "", control));
    written.html = outputs.html;
  }
  control.Finish();
  return written;
}

nlohmann::json ReportJson(const pipeline::Analyzed& analyzed, int top,
                          const WrittenOutputs& written,
                          const std::optional<ReportTimings>& timings) {
  nlohmann::json json = RenderJsonSummary(ReportInput::From(analyzed), top);
  json["schema_version"] = kReportJsonVersion;
  json["report"] =
      written.database
          ? nlohmann::json{{"path", *written.database},
                           {"skyline_tables", written.database_info.skyline_tables},
                           {"vramscope_tables", written.database_info.vramscope_tables},
                           {"rows", written.database_info.rows},
                           {"replaced_earlier", written.database_replaces_earlier}}
          : nlohmann::json(nullptr);
  if (!analyzed.ranks().empty()) {
    json["ranks"] = RankTableJson(analyzed.ranks());
    json["ranks_compared"] = RankComparisonJson(*analyzed.ranks_compared);
  }
  if (timings) {
    const pipeline::Loaded& l = analyzed.loaded;
    json["timings_s"] = {
        {"read", timings->load_s - l.timings.parse_s - l.timings.build_model_s - l.replay_s},
        {"parse", l.timings.parse_s},
        {"build_model", l.timings.build_model_s},
        {"replay", l.replay_s},
        {"analyze", timings->analyze_s},
        {"write_report", timings->write_s},
        {"total", timings->total_s},
        {"peak_rss_bytes", timings->peak_rss_bytes}};
  }
  return json;
}

std::string SummaryText(const pipeline::Analyzed& analyzed, const TerminalOptions& terminal) {
  std::string out;
  if (!analyzed.ranks().empty()) {
    out += RenderRankTable(analyzed.ranks(), *analyzed.ranks_compared) + "\n";
  }
  out += RenderTerminalSummary(ReportInput::From(analyzed), terminal);
  // A prediction's replay agrees with itself by construction: nothing to tell the user.
  if (const analysis::Simulations* sims = analyzed.sims();
      sims != nullptr && !analyzed.trace().facts.predicted) {
    for (const auto& dev : sims->devices) {
      if (!dev.compared) continue;
      const auto& c = dev.runs.front().result.comparison;
      out += fmt::format(
          "\nallocator model, cuda:{}: the replay puts {} of {} allocations at their recorded "
          "address and makes {} of {} recorded segment allocations ('vramscope simulate' for "
          "details and what-if runs)\n",
          dev.device, FormatCount(static_cast<int64_t>(c.allocs_at_recorded_address)),
          FormatCount(static_cast<int64_t>(c.allocs)),
          FormatCount(static_cast<int64_t>(c.segment_allocs_matched)),
          FormatCount(static_cast<int64_t>(c.recorded_segment_allocs)));
    }
  }
  return out;
}

std::string WrittenText(const pipeline::Analyzed& analyzed, const WrittenOutputs& written,
                        const std::optional<ReportTimings>& timings) {
  std::string out;
  if (written.database) {
    out += fmt::format(
        "\nreport written to {} ({} Skyline tables + {} vramscope_ tables, {} rows){}\n",
        *written.database, written.database_info.skyline_tables,
        written.database_info.vramscope_tables, written.database_info.rows,
        ReplacedNote(written.database_replaces_earlier));
  }
  if (written.html) out += fmt::format("viewer written to {}\n", *written.html);
  if (timings) {
    const pipeline::Loaded& l = analyzed.loaded;
    out += fmt::format(
        "timings: load {:.3f} s (parse {:.3f} s, model {:.3f} s, replay {:.3f} s), analyze "
        "{:.3f} s, write {:.3f} s, total {:.3f} s; peak memory {}\n",
        timings->load_s, l.timings.parse_s, l.timings.build_model_s, l.replay_s, timings->analyze_s,
        timings->write_s, timings->total_s,
        FormatBytes(static_cast<int64_t>(timings->peak_rss_bytes)));
  }
  return out;
}

Status CheckDevice(const pipeline::Analyzed& analyzed, std::optional<int32_t> device) {
  if (!device) return Status::Ok();
  std::vector<std::string> known;
  for (const auto& d : analyzed.analysis->summary.devices) {
    if (d.device == *device) return Status::Ok();
    known.push_back(std::to_string(d.device));
  }
  return UsageError(fmt::format(
      "--device {}: {} holds memory on device(s) {}", *device, analyzed.loaded.input.Name(),
      known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
}

}  // namespace vramscope::report
