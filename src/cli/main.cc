// vramscope: see where the GPU memory of a training step goes. `main` only dispatches to the
// subcommands (one file each); flags mean the same in every subcommand (docs/guide/README.md).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/diff_command.h"
#include "cli/exit_codes.h"
#include "cli/explain_command.h"
#include "cli/interrupt.h"
#include "cli/mcp_command.h"
#include "cli/predict_command.h"
#include "cli/report_command.h"
#include "cli/run_command.h"
#include "cli/simulate_command.h"
#include "cli/split_command.h"
#include "cli/view_command.h"
#include "report/report_input.h"

int main(int argc, char** argv) {
  using namespace vramscope;
  cli::InstallInterruptHandler();
  CLI::App app{
      "vramscope: where the GPU memory of deep-learning training goes.\n"
      "Reads what PyTorch records of GPU memory (memory snapshots, profiler traces, memory "
      "timelines) or what 'vramscope run' captures, and writes a memory report "
      "(Skyline/DeepView.Profile SQLite schema + vramscope tables) with a summary; replays the "
      "recorded requests through a model of PyTorch's caching allocator to answer what-if "
      "questions; writes an interactive HTML viewer; predicts the same report for a model and "
      "training set-up without a GPU; captures a training run with no change to its code "
      "(vramscope run -- python train.py); explains an out-of-memory message "
      "(vramscope explain); cuts big snapshots into pieces (vramscope split); compares two "
      "reports, with thresholds for CI (vramscope diff); serves "
      "all of it to coding "
      "agents (vramscope mcp).",
      "vramscope"};
  app.set_version_flag("--version", std::string("vramscope ") + report::kToolVersion);
  app.require_subcommand(0, 1);
  cli::ReportFlags report_options;
  cli::RegisterReportCommand(app, report_options);
  cli::SimulateFlags simulate_options;
  cli::RegisterSimulateCommand(app, simulate_options);
  cli::ViewFlags view_options;
  cli::RegisterViewCommand(app, view_options);
  cli::PredictFlags predict_options;
  cli::RegisterPredictCommand(app, predict_options);
  cli::ExplainFlags explain_options;
  cli::RegisterExplainCommand(app, explain_options);
  cli::RunFlags run_options;
  cli::RegisterRunCommand(app, run_options);
  cli::DiffFlags diff_options;
  cli::RegisterDiffCommand(app, diff_options);
  cli::SplitFlags split_options;
  cli::RegisterSplitCommand(app, split_options);
  cli::McpFlags mcp_options;
  cli::RegisterMcpCommand(app, mcp_options);
  // The program `vramscope run` starts keeps its own arguments: CLI11 parses only ours.
  const int own_argc = static_cast<int>(cli::SplitRunCommand(argc, argv, app, run_options));
  try {
    app.parse(own_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "vramscope --help";
    for (const CLI::App* sub : app.get_subcommands())
      where = "vramscope " + sub->get_name() + " --help";
    fmt::print(stderr, "vramscope: error: {} (see '{}')\n", e.what(), where);
    return cli::kExitUsage;
  }
  if (app.got_subcommand("report")) return cli::RunReportCommand(report_options);
  if (app.got_subcommand("simulate")) return cli::RunSimulateCommand(simulate_options);
  if (app.got_subcommand("view")) return cli::RunViewCommand(view_options);
  if (app.got_subcommand("predict")) return cli::RunPredictCommand(predict_options);
  if (app.got_subcommand("run")) return cli::RunRunCommand(run_options);
  if (app.got_subcommand("explain")) return cli::RunExplainCommand(explain_options);
  if (app.got_subcommand("diff")) return cli::RunDiffCommand(diff_options);
  if (app.got_subcommand("split")) return cli::RunSplitCommand(split_options);
  if (app.got_subcommand("mcp")) return cli::RunMcpCommand(mcp_options);
  fmt::print(stderr, "{}", app.help());
  fmt::print(stderr,
             "\nvramscope: error: no command given; try 'vramscope report' to see the "
             "built-in example\n");
  return cli::kExitUsage;
}
