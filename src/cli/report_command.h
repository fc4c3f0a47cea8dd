// `vramscope report [INPUT] -o REPORT.sqlite`: reads any input (a snapshot, profiler trace, memory
// timeline or native trace, a capture folder, the built-in example), writes the report database
// and prints the summary (or JSON with --json).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/report_output.h"
#include "pipeline/input.h"

namespace vramscope::cli {

struct ReportFlags {
  std::string input;             // empty: the built-in example
  std::string project_root;      // empty: the current directory
  pipeline::InputLimits limits;  // --max-inflate-ratio
  pipeline::WindowRequest window;  // --from, --to, --step-range
  ReportOutputFlags out;
};

void RegisterReportCommand(CLI::App& app, ReportFlags& flags);
int RunReportCommand(const ReportFlags& flags);

}  // namespace vramscope::cli
