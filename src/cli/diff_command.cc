#include "cli/diff_command.h"

#include <fmt/format.h>

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/interrupt.h"
#include "cli/terminal_progress.h"
#include "common/units.h"
#include "report/diff_outputs.h"

namespace vramscope::cli {

namespace {

Status Run(const DiffFlags& o) {
  report::DiffRequest request;
  request.a = o.a;
  request.b = o.b;
  request.device = o.device;
  request.gates = o.fail_if;
  request.limits = o.limits;
  ASSIGN_OR_RETURN(request.project_root, pipeline::ResolveProjectRoot(o.project_root));
  TerminalProgress progress(!o.quiet);
  request.control = {&progress, &InterruptToken()};
  ASSIGN_OR_RETURN(const report::DiffResult result, report::RunDiff(request));
  progress.Finish();
  if (o.json) {
    fmt::print("{}\n", report::DiffJson(result).dump(2, ' ', false,
                                                     nlohmann::json::error_handler_t::replace));
  } else if (!o.quiet) {
    fmt::print("{}", report::DiffText(result, static_cast<size_t>(o.top)));
  }
  if (!result.Failed()) return Status::Ok();
  std::string crossed;
  size_t count = 0;
  for (const auto& g : result.gates) {
    if (!g.failed) continue;
    ++count;
    if (crossed.empty()) {
      crossed = fmt::format("\"{}\": B {} against the limit {} (A {})", g.gate.text,
                            FormatBytes(g.b), FormatBytes(g.limit), FormatBytes(g.a));
    }
  }
  return InvalidInput(fmt::format("{} of {} --fail-if checks crossed, first {}", count,
                                  result.gates.size(), crossed));
}

}  // namespace

void RegisterDiffCommand(CLI::App& app, DiffFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "diff",
      "Compare two reports: what changed at the peak by category, owner and allocation site, "
      "each step's peak, and memory that grows step over step (a leak, with the owners that "
      "grow: the bytes live as each step begins rise from the second step on, at least twice, "
      "so at least four steps recorded); --fail-if turns it into a check for CI (exit status 1 "
      "when a threshold is "
      "crossed). A and B are report databases or anything 'report' reads (snapshots, profiler "
      "traces, predictions written with predict -o, capture folders), in any mix.");
  cmd->add_option("a", o.a,
                  "the reference (before): a report database or any input 'report' "
                  "reads")
      ->required();
  cmd->add_option("b", o.b, "the report compared with it (after)")->required();
  cmd->add_option("--fail-if", o.fail_if,
                  "exit with status 1 when this holds for B, e.g. \"peak_allocated > +10%\" (B "
                  "against A's value plus 10%), \"peak_reserved > 40GiB\" (B against a size), "
                  "\"activation > +512MiB\" (against A's plus a size), \"growth_per_step > 0\"; "
                  "metrics: peak_allocated, peak_reserved, growth_per_step, or a category "
                  "(weight, gradient, optimizer_state, activation, input, workspace, temporary, "
                  "unknown: its bytes at the peak); operators >, >=, <, <=; repeat it: any one "
                  "crossed fails")
      ->take_all();
  cmd->add_option("--device", o.device, "compare only this CUDA device ordinal");
  cmd->add_option("--top", o.top, "owners, sites and steps to list per device (default: 10)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--json", o.json, "print the comparison as JSON on stdout instead of text");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder name the allocation sites, for inputs that "
                  "are not report databases (default: the current directory)");
  AddInputLimitFlags(*cmd, o.limits);
}

int RunDiffCommand(const DiffFlags& flags) {
  return RunAndReport(flags.a, [&] { return Run(flags); });
}

}  // namespace vramscope::cli
