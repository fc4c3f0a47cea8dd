#include "cli/report_output.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/interrupt.h"
#include "common/peak_memory.h"
#include "pipeline/load.h"
#include "pipeline/window.h"

namespace vramscope::cli {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

void AddReportOutputFlags(CLI::App& cmd, ReportOutputFlags& o, bool with_summary_only,
                          bool with_timings) {
  cmd.add_flag("--force", o.files.force,
               "overwrite the outputs -o and --html name if they exist (a default-named report "
               "replaces an earlier vramscope report without it, and nothing else)");
  cmd.add_flag("--json", o.files.json,
               "print the summary as JSON on stdout instead of text; writes no database unless "
               "-o names one");
  cmd.add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  if (with_summary_only) {
    cmd.add_flag("--summary-only", o.files.summary_only,
                 "print the summary; write no database unless -o names one");
  }
  cmd.add_option("--html", o.files.html,
                 "also write the interactive HTML viewer to this file (as 'vramscope view')");
  cmd.add_option("--device", o.device, "show only this CUDA device ordinal in the summary");
  cmd.add_option("--top", o.top,
                 "allocation sites, owners and named regions to list per device (default: 10)")
      ->check(CLI::Range(0, 1000000));
  if (with_timings) cmd.add_flag("--timings", o.timings, "print how long each stage took");
}

Status EmitReport(const pipeline::Analyzed& analyzed, const ReportOutputFlags& flags,
                  report::PreparedOutputs& outputs, const StageTimes& times,
                  TerminalProgress& progress) {
  report::TerminalOptions terminal;
  terminal.top_sites = flags.top;
  terminal.device = flags.device;
  const bool text = !flags.files.json && !flags.quiet;
  if (text) {
    // The summary needs nothing of the database: the user reads it while the database is written.
    fmt::print("{}", report::SummaryText(analyzed, terminal));
    std::fflush(stdout);
  }
  const auto t_write = Clock::now();
  ASSIGN_OR_RETURN(const report::WrittenOutputs written,
                   report::WriteReportOutputs(analyzed, outputs, {&progress, &InterruptToken()}));
  std::optional<report::ReportTimings> timings;
  if (flags.timings) {
    const double write_s = Seconds(t_write, Clock::now());
    timings = report::ReportTimings{times.load_s, times.analyze_s, write_s,
                                    times.start_to_analyzed_s + write_s, PeakResidentBytes()};
  }
  if (flags.files.json) {
    fmt::print("{}\n", report::ReportJson(analyzed, flags.top, written, timings)
                           .dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return Status::Ok();
  }
  if (text) fmt::print("{}", report::WrittenText(analyzed, written, timings));
  return Status::Ok();
}

Status ReportOnInput(const pipeline::Input& input, const std::string& project_root_flag,
                     const pipeline::InputLimits& limits, const ReportOutputFlags& flags,
                     const pipeline::WindowRequest& window) {
  const auto t_start = Clock::now();
  RETURN_IF_ERROR(pipeline::CheckWindow(window));
  ASSIGN_OR_RETURN(const std::string project_root, pipeline::ResolveProjectRoot(project_root_flag));
  ASSIGN_OR_RETURN(report::PreparedOutputs outputs,
                   report::PrepareReportOutputs(input, flags.files));
  TerminalProgress progress(!flags.quiet);
  const Control control{&progress, &InterruptToken()};
  pipeline::LoadRequest load;
  load.input = input;
  load.control = control;
  load.project_root = project_root;
  load.limits = limits;
  load.window = window;
  ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(load));
  progress.WarnIfPartial(loaded.trace);
  const auto t_loaded = Clock::now();
  ASSIGN_OR_RETURN(const std::unique_ptr<const pipeline::Analyzed> analyzed,
                   pipeline::Analyze(std::move(loaded), {project_root, std::nullopt, control}));
  const auto t_analyzed = Clock::now();
  RETURN_IF_ERROR(report::CheckDevice(*analyzed, flags.device));
  return EmitReport(
      *analyzed, flags, outputs,
      {Seconds(t_start, t_loaded), Seconds(t_loaded, t_analyzed), Seconds(t_start, t_analyzed)},
      progress);
}

}  // namespace vramscope::cli
