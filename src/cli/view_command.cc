#include "cli/view_command.h"

#include <fmt/format.h>

#include <filesystem>

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/interrupt.h"
#include "cli/terminal_progress.h"
#include "common/units.h"
#include "report/output_target.h"
#include "report/view_outputs.h"

namespace vramscope::cli {

namespace {

Status Run(const ViewFlags& flags) {
  const pipeline::Input first = pipeline::ClassifyInput(flags.input);
  const bool named = !flags.output.empty();
  const std::string target = named ? flags.output : pipeline::DefaultOutputName(first, "html");
  // Refuse an existing output before any work; a default-named page replaces only an earlier
  // vramscope page.
  RETURN_IF_ERROR(report::CheckOutputIsItsOwn(target, {flags.input, flags.compare}));
  bool replaces_earlier = false;
  {
    ASSIGN_OR_RETURN(
        report::PreparedOutput check,
        report::PrepareOutput(target, named, report::OutputKind::kViewerPage, flags.force));
    replaces_earlier = check.replaces_earlier;
  }
  report::ViewRequest request;
  ASSIGN_OR_RETURN(request.project_root, pipeline::ResolveProjectRoot(flags.project_root));
  request.inputs = {flags.input};
  if (!flags.compare.empty()) request.inputs.push_back(flags.compare);
  request.target = target;
  request.overwrite = flags.force || replaces_earlier;
  request.title = flags.title;
  request.limits = flags.limits;
  request.window = flags.window;
  TerminalProgress progress(!flags.quiet);
  request.control = {&progress, &InterruptToken()};
  RETURN_IF_ERROR(report::WriteView(request));
  if (!flags.quiet) {
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(std::filesystem::file_size(target, ec));
    fmt::print("viewer written to {} ({}){}; open it in a browser\n", target,
               FormatBytes(ec ? 0 : bytes), report::ReplacedNote(replaces_earlier));
  }
  return Status::Ok();
}

}  // namespace

void RegisterViewCommand(CLI::App& app, ViewFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "view",
      "Write an interactive, self-contained HTML viewer (no network needed) of a report: memory "
      "over time by category or owner with zoom and hover, the allocator's segments at any "
      "moment, the breakdown and icicle graph at the peak, two reports side by side with "
      "--compare, and the ranks of a capture folder side by side. With no INPUT, shows the "
      "built-in example.");
  cmd->add_option("input", o.input,
                  "a report database from 'vramscope report', or any input 'report' reads "
                  "(snapshot pickle, profiler trace, memory timeline, native trace, gzipped or "
                  "not, or a capture folder); omit it for the built-in example");
  cmd->add_option("--compare", o.compare,
                  "a second report or input to show beside the first (before/after, measured "
                  "vs predicted)");
  cmd->add_option("-o,--output", o.output,
                  "page to write (default: the input's name with .html, in the current "
                  "directory; report.html inside a capture folder; vramscope-example.html for the "
                  "built-in example; a default-named page replaces the one an earlier run "
                  "wrote, never another file)");
  cmd->add_option("--title", o.title, "the page's title (default: the inputs' names)");
  cmd->add_flag("--force", o.force, "overwrite the page -o names if it exists");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code (for inputs that are not "
                  "report databases; default: the current directory)");
  AddInputLimitFlags(*cmd, o.limits);
  AddWindowFlags(*cmd, o.window);
}

int RunViewCommand(const ViewFlags& flags) {
  return RunAndReport(flags.input, [&] { return Run(flags); });
}

}  // namespace vramscope::cli
