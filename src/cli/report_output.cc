#include "cli/report_output.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/output_target.h"
#include "common/peak_memory.h"
#include "common/units.h"
#include "pipeline/load.h"
#include "report/html_viewer.h"
#include "report/json_summary.h"
#include "report/rank_table.h"
#include "report/report_input.h"
#include "report/sqlite_report.h"
#include "report/terminal_summary.h"

namespace vramscope::cli {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void AddReportOutputFlags(CLI::App& cmd, ReportOutputOptions& o, bool with_summary_only,
                          bool with_timings) {
  cmd.add_flag("--force", o.force,
               "overwrite the outputs -o and --html name if they exist (a default-named report "
               "replaces an earlier vramscope report without it, and nothing else)");
  cmd.add_flag("--json", o.json,
               "print the summary as JSON on stdout instead of text; writes no database unless "
               "-o names one");
  cmd.add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  if (with_summary_only) {
    cmd.add_flag("--summary-only", o.summary_only,
                 "print the summary; write no database unless -o names one");
  }
  cmd.add_option("--html", o.html,
                 "also write the interactive HTML viewer to this file (as 'vramscope view')");
  cmd.add_option("--device", o.device, "show only this CUDA device ordinal in the summary");
  cmd.add_option("--top", o.top,
                 "allocation sites, owners and named regions to list per device (default: 10)")
      ->check(CLI::Range(0, 1000000));
  if (with_timings) cmd.add_flag("--timings", o.timings, "print how long each stage took");
}

Result<PreparedOutputs> PrepareReportOutputs(const pipeline::Input& input,
                                             const ReportOutputOptions& options) {
  PreparedOutputs out;
  const bool named = !options.output.empty();
  const bool summary_asked = options.summary_only || options.json;
  if (named || (options.database_by_default && !summary_asked)) {
    const std::string target =
        named ? options.output : pipeline::DefaultOutputName(input, "sqlite");
    RETURN_IF_ERROR(CheckOutputIsItsOwn(target, {input.path}, {options.html}));
    ASSIGN_OR_RETURN(
        PreparedOutput prepared,
        PrepareOutput(target, named, report::OutputKind::kReportDatabase, options.force));
    out.database.emplace(std::move(prepared.file));
    out.database_replaces_earlier = prepared.replaces_earlier;
  }
  // The viewer reads a report database; without one it gets a temporary one.
  if (!options.html.empty()) {
    RETURN_IF_ERROR(CheckOutputIsItsOwn(options.html, {input.path}));
    { ASSIGN_OR_RETURN(AtomicOutput check, AtomicOutput::Prepare(options.html, options.force)); }
    if (!out.database) {
      ASSIGN_OR_RETURN(AtomicOutput temp,
                       AtomicOutput::Prepare(options.html + ".sqlite", /*overwrite=*/true));
      out.viewer_database.emplace(std::move(temp));
    }
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

Status EmitReport(const pipeline::Analyzed& analyzed, const ReportOutputOptions& options,
                  PreparedOutputs& outputs, const StageTimes& times, Progress* progress) {
  const report::ReportInput input = report::ReportInput::From(analyzed);
  const auto t_write = Clock::now();
  report::SqliteReportInfo info;
  if (outputs.database) {
    ProgressStage(progress, fmt::format("writing {}", outputs.database->target()));
    RETURN_IF_ERROR(report::WriteSqliteReport(outputs.database->temp_path(), input, &info));
    RETURN_IF_ERROR(outputs.database->Commit());
  }
  if (!options.html.empty()) {
    if (outputs.viewer_database) {
      ProgressStage(progress, "writing the report for the viewer page");
      RETURN_IF_ERROR(report::WriteSqliteReport(outputs.viewer_database->temp_path(), input));
    }
    ProgressStage(progress, fmt::format("building the viewer page {}", options.html));
    RETURN_IF_ERROR(report::WriteViewerPage(
        {outputs.database ? outputs.database->target() : outputs.viewer_database->temp_path()},
        options.html, options.force, ""));
  }
  ProgressFinish(progress);
  const double write_s = Seconds(t_write, Clock::now());
  const double total_s = times.start_to_analyzed_s + write_s;
  const std::vector<analysis::RankRow>& ranks = analyzed.loaded.ranks;
  const model::Trace& trace = analyzed.trace();

  if (options.json) {
    nlohmann::json json = report::RenderJsonSummary(input, options.top);
    json["report"] = outputs.database
                         ? nlohmann::json{{"path", outputs.database->target()},
                                          {"skyline_tables", info.skyline_tables},
                                          {"vramscope_tables", info.vramscope_tables},
                                          {"rows", info.rows},
                                          {"replaced_earlier", outputs.database_replaces_earlier}}
                         : nlohmann::json(nullptr);
    if (!ranks.empty()) {
      json["ranks"] = report::RankTableJson(ranks);
      json["ranks_compared"] = report::RankComparisonJson(ranks);
    }
    if (options.timings) {
      const pipeline::Loaded& l = analyzed.loaded;
      json["timings_s"] = {
          {"read", times.load_s - l.timings.parse_s - l.timings.build_model_s - l.replay_s},
          {"parse", l.timings.parse_s},
          {"build_model", l.timings.build_model_s},
          {"replay", l.replay_s},
          {"analyze", times.analyze_s},
          {"write_report", write_s},
          {"total", total_s},
          {"peak_rss_bytes", PeakResidentBytes()}};
    }
    fmt::print("{}\n", json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return Status::Ok();
  }
  if (options.quiet) return Status::Ok();
  report::TerminalOptions terminal;
  terminal.top_sites = options.top;
  terminal.device = options.device;
  if (!ranks.empty()) fmt::print("{}\n", report::RenderRankTable(ranks));
  fmt::print("{}", report::RenderTerminalSummary(input, terminal));
  // A prediction's replay agrees with itself by construction: nothing to tell the user.
  if (const analysis::Simulations* sims = analyzed.simulations();
      sims != nullptr && !trace.facts.predicted) {
    for (const auto& dev : sims->devices) {
      if (!dev.compared) continue;
      const auto& c = dev.runs.front().result.comparison;
      fmt::print(
          "\nallocator model, cuda:{}: the replay puts {} of {} allocations at their recorded "
          "address and makes {} of {} recorded segment allocations ('vramscope simulate' for "
          "details and what-if runs)\n",
          dev.device, FormatCount(static_cast<int64_t>(c.allocs_at_recorded_address)),
          FormatCount(static_cast<int64_t>(c.allocs)),
          FormatCount(static_cast<int64_t>(c.segment_allocs_matched)),
          FormatCount(static_cast<int64_t>(c.recorded_segment_allocs)));
    }
  }
  if (outputs.database) {
    fmt::print("\nreport written to {} ({} Skyline tables + {} vramscope_ tables, {} rows){}\n",
               outputs.database->target(), info.skyline_tables, info.vramscope_tables, info.rows,
               ReplacedNote(outputs.database_replaces_earlier));
  }
  if (!options.html.empty()) fmt::print("viewer written to {}\n", options.html);
  if (options.timings) {
    fmt::print(
        "timings: load {:.3f} s (parse {:.3f} s, model {:.3f} s, replay {:.3f} s), analyze "
        "{:.3f} s, write {:.3f} s, total {:.3f} s; peak memory {}\n",
        times.load_s, analyzed.loaded.timings.parse_s, analyzed.loaded.timings.build_model_s,
        analyzed.loaded.replay_s, times.analyze_s, write_s, total_s,
        FormatBytes(static_cast<int64_t>(PeakResidentBytes())));
  }
  return Status::Ok();
}

Status ReportOnInput(const pipeline::Input& input, const std::string& project_root_flag,
                     const pipeline::InputLimits& limits, const ReportOutputOptions& options) {
  const auto t_start = Clock::now();
  ASSIGN_OR_RETURN(const std::string project_root, pipeline::ResolveProjectRoot(project_root_flag));
  ASSIGN_OR_RETURN(PreparedOutputs outputs, PrepareReportOutputs(input, options));
  Progress progress(!options.quiet);
  pipeline::LoadOptions load;
  load.progress = &progress;
  load.project_root = project_root;
  load.limits = limits;
  ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(input, load));
  const auto t_loaded = Clock::now();
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Analyzed> analyzed,
                   pipeline::Analyze(std::move(loaded), {project_root, std::nullopt, &progress}));
  const auto t_analyzed = Clock::now();
  RETURN_IF_ERROR(CheckDevice(*analyzed, options.device));
  return EmitReport(
      *analyzed, options, outputs,
      {Seconds(t_start, t_loaded), Seconds(t_loaded, t_analyzed), Seconds(t_start, t_analyzed)},
      &progress);
}

}  // namespace vramscope::cli
