// `vramscope report [INPUT] -o REPORT.sqlite`: reads any input (a snapshot, profiler trace, memory
// timeline or native trace, a capture folder, the built-in example), writes the report database
// and prints the summary (or JSON with --json).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/report_output.h"
#include "pipeline/input.h"

namespace vramscope::cli {

struct ReportOptions {
  std::string input;             // empty: the built-in example
  std::string project_root;      // empty: the current directory
  pipeline::InputLimits limits;  // --max-inflate-ratio
  ReportOutputOptions out;
};

void RegisterReportCommand(CLI::App& app, ReportOptions& options);
int RunReportCommand(const ReportOptions& options);

}  // namespace vramscope::cli
