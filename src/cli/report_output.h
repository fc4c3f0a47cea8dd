// The flags of the outputs every verb that reports writes the same way (`report`, `run`,
// `predict`): the report database, the viewer page, and the summary on the terminal or as JSON.
// They mean the same in each verb; the writing and rendering are the report library's
// (report/report_outputs.h).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "cli/terminal_progress.h"
#include "common/status.h"
#include "pipeline/analyze.h"
#include "pipeline/input.h"
#include "report/report_outputs.h"

namespace vramscope::cli {

struct ReportOutputFlags {
  report::ReportFiles files;  // -o, --summary-only, --json, --html, --force
  bool quiet = false;
  bool timings = false;
  std::optional<int32_t> device;  // --device: the summary shows this device only
  int top = 10;
};

// -o, --force, --json, -q, --summary-only, --html, --device, --top, --timings, as every verb that
// reports registers them.
void AddReportOutputFlags(CLI::App& cmd, ReportOutputFlags& o, bool with_summary_only,
                          bool with_timings);

// Seconds spent loading and analysing (for --timings).
struct StageTimes {
  double load_s = 0, analyze_s = 0, start_to_analyzed_s = 0;
};

// Writes the outputs prepared, then prints the summary (or JSON). `progress`: the verb's progress
// line (writing and building the page are stages on it; it is erased before anything is printed).
Status EmitReport(const pipeline::Analyzed& analyzed, const ReportOutputFlags& flags,
                  report::PreparedOutputs& outputs, const StageTimes& times,
                  TerminalProgress& progress);

// What `report` does, and `run` after its capture: load `input` through the pipeline, analyse
// it, and emit the report. `project_root`: the --project-root flag ("" = the current directory);
// `limits`: --max-inflate-ratio; `window`: --from/--to/--step-range.
Status ReportOnInput(const pipeline::Input& input, const std::string& project_root,
                     const pipeline::InputLimits& limits, const ReportOutputFlags& flags,
                     const pipeline::WindowRequest& window = {});

}  // namespace vramscope::cli
