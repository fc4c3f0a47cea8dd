#include "cli/run_command.h"

#include <fmt/format.h>

#include <filesystem>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/report_output.h"
#include "cli/terminal_progress.h"

namespace vramscope::cli {

CLI::App* RegisterRunCommand(CLI::App& app, RunFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a training command unchanged and capture its GPU memory: PyTorch's allocator history "
      "with phases (forward, backward, optimizer) and the names of parameters, gradients and "
      "optimizer state, written at exit, after --steps N, or when it dies of a CUDA OOM (with "
      "--on-oom: only then); one capture per process (per rank under torchrun). A JAX program "
      "gets its device memory profile at the end (<rank>.jax.prof), a TensorFlow one its "
      "profiler's memory events (<rank>.xplane.pb) with Keras's variables named. Then reports on "
      "the captures (as 'vramscope report FOLDER'). Example: vramscope run --steps 3 -- python "
      "train.py");
  cmd->add_option("-o,--output", o.capture.output,
                  "folder for the captures (<rank>.pickle snapshot, <rank>.sidecar.json, "
                  "report.sqlite; default: vramscope-run, where an earlier run's captures are "
                  "replaced)");
  cmd->add_flag("--force", o.capture.force,
                "replace the captures of an earlier run in the folder -o names, and the --html "
                "page if it exists");
  cmd->add_option("--steps", o.capture.steps,
                  "write the capture after this many training steps (PyTorch's optimizer steps, "
                  "Keras's training batches; JAX's profile is taken at the end regardless) and "
                  "stop the program; 0 (default): capture until the program exits")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000000}));
  cmd->add_flag("--keep-running", o.capture.keep_running,
                "with --steps: stop recording after N steps but let the program run to its end");
  cmd->add_option("--stacks", o.capture.stacks,
                  "stacks to record with each allocation: python (default), all (Python and "
                  "C++ frames; slower) or none (parameters, gradients and optimizer state are "
                  "still named, activations found by phase; the default with --on-oom)")
      ->check(CLI::IsMember({"none", "python", "all"}));
  cmd->add_option("--max-entries", o.capture.max_entries,
                  "keep at most this many allocator events (PyTorch's ring buffer; default "
                  "1000000, 200000 with --on-oom)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000000}));
  cmd->add_flag("--on-oom", o.capture.on_oom,
                "a flight recorder: record until the program exits (no --steps), without stacks "
                "unless --stacks is given, and write the capture only if it runs out of GPU "
                "memory (an out-of-memory error, caught or not; for JAX: XLA's "
                "RESOURCE_EXHAUSTED the program dies of; TensorFlow is not recorded); at any "
                "other exit nothing is written");
  cmd->add_flag("--phase-memory", o.capture.phase_memory,
                "record PyTorch's max_memory_allocated/reserved for every phase (synchronizes "
                "and resets the peak statistics at each phase: for checks, not for speed)");
  cmd->add_flag("--native", o.capture.native,
                "also capture driver-level allocations, NVTX ranges and native stacks through "
                "CUDA's injection mechanism (CUPTI): for JAX, TensorFlow, CuPy or any CUDA "
                "program");
  cmd->add_flag("--no-python", o.capture.no_python,
                "do not inject the Python bootstrap (PyTorch, JAX, TensorFlow; with --native: "
                "native capture only)");
  cmd->add_flag("--no-report", o.no_report, "write the captures only; no report afterwards");
  cmd->add_flag("--json", o.json,
                "print the report's summary as JSON on stdout (and write no report.sqlite)");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing of vramscope's but errors");
  cmd->add_option("--html", o.html, "also write the interactive HTML viewer to this file");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code (default: the current "
                  "directory)");
  cmd->footer(
      "The command goes after '--' (or after the options). Exit status: the program's own when "
      "it failed; else 0, also when it used no CUDA and nothing was captured (a line on stderr "
      "says so), or 1 when the report failed; 2 for bad flags, before the program starts.");
  return cmd;
}

size_t SplitRunCommand(int argc, char** argv, const CLI::App& app, RunFlags& options) {
  if (argc < 2 || std::string_view(argv[1]) != "run") return static_cast<size_t>(argc);
  const CLI::App* cmd = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == "run") cmd = sub;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      options.capture.command.assign(argv + i + 1, argv + argc);
      return static_cast<size_t>(i);
    }
    if (arg.empty() || arg[0] != '-') {  // the program: vramscope run python train.py
      options.capture.command.assign(argv + i, argv + argc);
      return static_cast<size_t>(i);
    }
    // An option of ours: skip its value when it takes one ("-o DIR", not "--steps=3").
    if (arg.find('=') != std::string_view::npos || cmd == nullptr) continue;
    const std::string name(arg);
    const CLI::Option* opt = cmd->get_option_no_throw(name);
    if (opt != nullptr && opt->get_expected_min() > 0 && i + 1 < argc) ++i;
  }
  return static_cast<size_t>(argc);
}

int RunRunCommand(RunFlags o) {
  o.capture.quiet = o.quiet;
  TerminalProgress notes(/*enabled=*/false, /*notes=*/!o.quiet);
  o.capture.control.progress = &notes;
  const Result<capture::RunOutcome> ran = capture::RunAndCapture(o.capture);
  if (!ran.ok()) return ReportError(ran.status());
  const capture::RunOutcome& run = *ran;
  if (!o.quiet && run.program_exit != 0) {
    fmt::print(stderr, "vramscope: the program {}\n", run.program_description);
  }
  if (!run.captured) {
    // Not an error of the program's: its status stands (docs/guide/README.md, "Exit statuses"), and
    // the line says what was not captured.
    if (o.capture.on_oom && run.sidecars == 0) {
      if (!o.quiet) {
        fmt::print(stderr,
                   "vramscope: no out-of-memory error in '{}': nothing was written (--on-oom "
                   "writes only when the program runs out of GPU memory)\n",
                   o.capture.command.front());
      }
    } else if (run.sidecars > 0) {
      // The bootstrap's CPU test mode (VRAMSCOPE_CAPTURE_CPU) writes sidecars only.
      fmt::print(stderr,
                 "vramscope: nothing was captured: the bootstrap wrote {} sidecar(s) to {} but no "
                 "snapshot, because no process initialized CUDA; no report\n",
                 run.sidecars, run.shown);
    } else {
      fmt::print(stderr,
                 "vramscope: nothing was captured: no process of '{}' used CUDA{}, so there is "
                 "no snapshot and no report; check that it trains on a GPU{}\n",
                 o.capture.command.front(),
                 o.capture.no_python ? "" : " through PyTorch, JAX or TensorFlow",
                 o.capture.native ? "" : " (for other CUDA programs add --native)");
    }
    return run.program_exit;
  }
  if (o.no_report) {
    if (!o.quiet) fmt::print("captures written to {}\n", run.folder.string());
    return run.program_exit;
  }
  // The folder is reported as `vramscope report FOLDER` does; its report.sqlite is this run's.
  // Its report.sqlite is default-named: it replaces the one of an earlier run (already removed with
  // that run's captures); --html is the user's and keeps the --force rule.
  ReportOutputFlags report;
  report.files.force = o.capture.force;
  report.files.json = o.json;
  report.files.html = o.html;
  report.quiet = o.quiet;
  const pipeline::Input folder{pipeline::InputKind::kCaptureFolder, run.folder.string()};
  const int report_code =
      RunAndReport(folder.path, [&] { return ReportOnInput(folder, o.project_root, {}, report); });
  return run.program_exit != 0 ? run.program_exit : report_code;
}

}  // namespace vramscope::cli
