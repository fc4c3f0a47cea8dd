#include "cli/report_command.h"

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "pipeline/input.h"

namespace vramscope::cli {

void RegisterReportCommand(CLI::App& app, ReportFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Read a recording of GPU memory (a PyTorch memory snapshot, a profiler trace with memory "
      "events, a memory-timeline export, a native trace, or a folder 'vramscope run' wrote) and "
      "write the memory report: a SQLite database in the Skyline/DeepView.Profile schema plus "
      "vramscope_* tables, and a summary on the terminal. With no INPUT, reports on the "
      "built-in example.");
  cmd->add_option("input", o.input,
                  "a memory snapshot pickle, a profiler trace (Kineto JSON), a raw memory "
                  "timeline or a .vstrace native trace (each plain or gzipped), or a capture "
                  "folder; omit it to use the built-in example (a snapshot recorded on an NVIDIA "
                  "H200: a 2-layer MLP trained with Adam for 3 steps)");
  cmd->add_option("-o,--output", o.out.files.output,
                  "report database to write (default: the input's name with .sqlite, in the "
                  "current directory; report.sqlite inside a capture folder; "
                  "vramscope-example.sqlite for the built-in example; a default-named report "
                  "replaces the one an earlier run wrote, never another file; none with --json "
                  "or --summary-only)");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code: they name allocation "
                  "sites and fill Skyline's stack_frames, relative to it (default: the current "
                  "directory)");
  AddInputLimitFlags(*cmd, o.limits);
  AddWindowFlags(*cmd, o.window);
  AddReportOutputFlags(*cmd, o.out, /*with_summary_only=*/true, /*with_timings=*/true);
}

int RunReportCommand(const ReportFlags& options) {
  return RunAndReport(options.input, [&] {
    return ReportOnInput(pipeline::ClassifyInput(options.input), options.project_root,
                         options.limits, options.out, options.window);
  });
}

}  // namespace vramscope::cli
