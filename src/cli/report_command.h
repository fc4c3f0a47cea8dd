// `vramscope report [INPUT] -o REPORT.sqlite`: reads a memory snapshot, writes the report
// database and prints the summary (or JSON with --json).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "model/trace.h"
#include "report/rank_table.h"

namespace vramscope::cli {

struct ReportOptions {
  std::string input;   // empty: the built-in example
  std::string output;  // empty: derived from the input's name
  bool force = false;
  bool json = false;
  bool quiet = false;
  bool no_sqlite = false;
  bool timings = false;
  std::string project_root;  // empty: the current directory
  std::string html;          // empty: no HTML viewer
  std::optional<int32_t> device;
  int top = 10;
};

void RegisterReportCommand(CLI::App& app, ReportOptions& options);
int RunReportCommand(const ReportOptions& options);

// The report's work without the exit-code handling: what `view` runs for inputs that are not
// report databases.
Status WriteReport(const ReportOptions& options);

// The same for a trace made elsewhere (`vramscope predict`, a capture folder): analysis, the
// database (unless no_sqlite), the viewer, and the summary or JSON. `options.input` only names the
// default output. `ranks`: the per-rank table of a multi-process capture, shown before the
// report of the rank it belongs to and stored as vramscope_ranks.
Status ReportTrace(std::optional<model::Trace> trace, const ReportOptions& options,
                   const std::vector<report::RankRow>* ranks = nullptr);

}  // namespace vramscope::cli
