// The outputs every verb that reports writes the same way (`report`, `run`, `predict`): the report
// database, the viewer page, and the summary on the terminal or as JSON. The flags behind them
// mean the same in each verb; each verb's own options struct holds one ReportOutputOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "common/atomic_output.h"
#include "common/progress.h"
#include "common/status.h"
#include "pipeline/analyze.h"
#include "pipeline/input.h"

namespace vramscope::cli {

struct ReportOutputOptions {
  // -o; empty: DefaultOutputName of the input, unless !database_by_default or the summary is all
  // that was asked for (--json, --summary-only): then no database.
  std::string output;
  bool summary_only = false;        // --summary-only: no database unless -o names one
  bool database_by_default = true;  // predict writes a database only when -o names one
  std::string html;                 // --html: also the viewer page
  bool force = false;
  bool json = false;
  bool quiet = false;
  bool timings = false;
  std::optional<int32_t> device;  // --device: the summary shows this device only
  int top = 10;
};

// -o, --force, --json, -q, --summary-only, --html, --device, --top, --timings, as every verb that
// reports registers them. `what` names the input in -o's help.
void AddReportOutputFlags(CLI::App& cmd, ReportOutputOptions& o, bool with_summary_only,
                          bool with_timings);

// The outputs, checked before any heavy work so that "already exists" comes at once. The
// database: the one -o names (an existing file replaced only with --force); without -o, the
// input's default name, unless only a summary was asked for (--json, --summary-only) or the verb
// writes none by default; a default-named database replaces an earlier vramscope report there and
// nothing else (cli/output_target.h). --html is always named by the user.
struct PreparedOutputs {
  std::optional<AtomicOutput> database;
  bool database_replaces_earlier = false;  // default-named, over vramscope's own earlier report
  std::optional<AtomicOutput> viewer_database;  // --html without a database: a temporary one
};
Result<PreparedOutputs> PrepareReportOutputs(const pipeline::Input& input,
                                             const ReportOutputOptions& options);

// Seconds spent loading and analysing (for --timings).
struct StageTimes {
  double load_s = 0, analyze_s = 0, start_to_analyzed_s = 0;
};

// Writes the database and the viewer, then prints the summary (or JSON). `progress`: the verb's
// progress line (writing and building the page are stages on it; it is erased before anything
// is printed); may be null.
Status EmitReport(const pipeline::Analyzed& analyzed, const ReportOutputOptions& options,
                  PreparedOutputs& outputs, const StageTimes& times, Progress* progress = nullptr);

// What `report` does, and `run` after its capture: load `input` through the pipeline, analyse
// it, and emit the report. `project_root`: the --project-root flag ("" = the current directory);
// `limits`: --max-inflate-ratio.
Status ReportOnInput(const pipeline::Input& input, const std::string& project_root,
                     const pipeline::InputLimits& limits, const ReportOutputOptions& options);

// --device N must name a device the input holds memory on.
Status CheckDevice(const pipeline::Analyzed& analyzed, std::optional<int32_t> device);

}  // namespace vramscope::cli
