#include "cli/run_command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>

#include "cli/embedded_python.h"
#include "cli/exit_codes.h"
#include "cli/report_output.h"
#include "common/temp_dir.h"
#include "sources/run_output/capture_folder.h"

namespace vramscope::cli {

namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_child = 0;

// SIGTERM/SIGHUP sent to vramscope go on to the program, so that its bootstrap can still write
// what it captured; SIGINT from a terminal reaches the program directly (same process group), so
// vramscope itself ignores it while it waits, as system() does.
void ForwardSignal(int sig) {
  if (g_child > 0) kill(static_cast<pid_t>(g_child), sig);
}

// Lays out <dir>/sitecustomize.py (the package's inject/sitecustomize.py, at the top level so that
// Python's site finds it first on PYTHONPATH) and the whole package under <dir>/vramscope/, both
// compiled into the binary (cli/embedded_python.h), so that the binary alone can inject them.
Status WriteBootstrap(const fs::path& dir) {
  const auto sitecustomize = EmbeddedPythonFile("inject/sitecustomize.py");
  if (!sitecustomize) {
    return InternalError("the embedded Python package has no inject/sitecustomize.py");
  }
  RETURN_IF_ERROR(WriteEmbeddedPythonPackage(dir));
  return WriteWholeFile(dir / "sitecustomize.py", *sitecustomize);
}

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return fs::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

// Where the native capture library is: $VRAMSCOPE_INJECT_LIB, next to the binary (a build tree),
// or <prefix>/lib/vramscope (an installed or pip-installed vramscope).
std::optional<std::string> FindInjectLibrary() {
  if (const char* env = std::getenv("VRAMSCOPE_INJECT_LIB"); env && *env) {
    if (access(env, R_OK) == 0) return std::string(env);
    return std::nullopt;
  }
  const std::string exe_dir = ExecutableDir();
  if (exe_dir.empty()) return std::nullopt;
  for (const fs::path& candidate :
       {fs::path(exe_dir) / "libvramscope_inject.so",
        fs::path(exe_dir) / ".." / "lib" / "vramscope" / "libvramscope_inject.so"}) {
    if (access(candidate.c_str(), R_OK) == 0) return fs::weakly_canonical(candidate).string();
  }
  return std::nullopt;
}

// The libcupti.so for NVTX: $VRAMSCOPE_CUPTI_LIB, else the one the injection library was built
// against (when it is still there).
std::optional<std::string> FindCuptiLibrary() {
  if (const char* env = std::getenv("VRAMSCOPE_CUPTI_LIB"); env && *env) return std::string(env);
#ifdef VRAMSCOPE_CUPTI_LIBRARY
  if (access(VRAMSCOPE_CUPTI_LIBRARY, R_OK) == 0) return std::string(VRAMSCOPE_CUPTI_LIBRARY);
#endif
  return std::nullopt;
}

// Makes the captures' folder ready. `shown`: the folder as the user spelled it, for messages;
// `named`: -o gave it. An earlier run's captures in it are removed when the folder is the default
// one or with --force (and said so), else refused. Returns whether the folder was created.
Result<bool> PrepareOutputFolder(const fs::path& dir, const std::string& shown, bool named,
                                 bool force, bool quiet) {
  std::error_code ec;
  bool created = false;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      return InvalidInput(
          named ? fmt::format("-o {}: is a file; give a folder for the captures", shown)
                : fmt::format("{}: is a file, and run writes its captures into a folder of that "
                              "name by default; give another folder with -o",
                              shown));
    }
    const std::vector<fs::path> old = sources::CaptureFilesIn(dir);
    if (!old.empty()) {
      if (named && !force) {
        return InvalidInput(fmt::format(
            "-o {}: holds the captures of an earlier run ({}); pass --force to replace them or "
            "choose another folder",
            shown, old.front().filename().string()));
      }
      if (!quiet) {
        fmt::print(stderr, "vramscope: replacing the captures of an earlier run in {} ({} files)\n",
                   shown, old.size());
      }
      for (const fs::path& p : old) fs::remove(p, ec);
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) {
      return InvalidInput(fmt::format("{}: the folder cannot be made: {}", shown, ec.message()));
    }
    created = true;
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return InvalidInput(fmt::format("{}: cannot write into it: {}", shown, std::strerror(errno)));
  }
  return created;
}

struct ChildOutcome {
  int exit_code = 0;  // the program's status, or 128 + signal as shells report it
  std::string description;
};

// Starts the command with `env` added and waits for it. An error only when it could not start.
Result<ChildOutcome> RunChild(const std::vector<std::string>& command,
                              const std::vector<std::pair<std::string, std::string>>& env) {
  int report_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0) {
    return InternalError(fmt::format("cannot start the program: {}", std::strerror(errno)));
  }
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction forward {};
  forward.sa_handler = ForwardSignal;
  struct sigaction old_int {
  }, old_quit{}, old_term{}, old_hup{};
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  sigaction(SIGTERM, &forward, &old_term);
  sigaction(SIGHUP, &forward, &old_hup);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    close(report_pipe[0]);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    execvp(argv[0], argv.data());
    const int err = errno;
    (void)!write(report_pipe[1], &err, sizeof(err));
    _exit(127);
  }
  close(report_pipe[1]);
  if (pid < 0) {
    close(report_pipe[0]);
    return InternalError(fmt::format("cannot start the program: {}", std::strerror(errno)));
  }
  g_child = pid;
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = read(report_pipe[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  close(report_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGQUIT, &old_quit, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    return InvalidInput(fmt::format(
        "cannot run '{}': {}{}", command.front(), std::strerror(exec_errno),
        exec_errno == ENOENT && command.front().find('/') == std::string::npos ? " (is it on PATH?)"
                                                                               : ""));
  }
  ChildOutcome out;
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
    out.description = fmt::format("exited with status {}", out.exit_code);
  } else if (WIFSIGNALED(status)) {
    out.exit_code = 128 + WTERMSIG(status);
    out.description =
        fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return out;
}

}  // namespace

CLI::App* RegisterRunCommand(CLI::App& app, RunOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a training command unchanged and capture its GPU memory: PyTorch's allocator history "
      "with phases (forward, backward, optimizer) and the names of parameters, gradients and "
      "optimizer state, written at exit, after --steps N, or when it dies of a CUDA OOM; one "
      "capture per process (per rank under torchrun). Then reports on the captures (as "
      "'vramscope report FOLDER'). Example: vramscope run --steps 3 -- python train.py");
  cmd->add_option("-o,--output", o.output,
                  "folder for the captures (<rank>.pickle snapshot, <rank>.sidecar.json, "
                  "report.sqlite; default: vramscope-run, where an earlier run's captures are "
                  "replaced)");
  cmd->add_flag("--force", o.force,
                "replace the captures of an earlier run in the folder -o names, and the --html "
                "page if it exists");
  cmd->add_option("--steps", o.steps,
                  "write the capture after this many training steps (optimizer steps) and stop "
                  "the program; 0 (default): capture until the program exits")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000000}));
  cmd->add_flag("--keep-running", o.keep_running,
                "with --steps: stop recording after N steps but let the program run to its end");
  cmd->add_option("--stacks", o.stacks,
                  "stacks to record with each allocation: python (default) or all (Python and "
                  "C++ frames; slower)")
      ->check(CLI::IsMember({"python", "all"}));
  cmd->add_option("--max-entries", o.max_entries,
                  "keep at most this many allocator events (PyTorch's ring buffer; default "
                  "1000000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000000000}));
  cmd->add_flag("--phase-memory", o.phase_memory,
                "record PyTorch's max_memory_allocated/reserved for every phase (synchronizes "
                "and resets the peak statistics at each phase: for checks, not for speed)");
  cmd->add_flag("--native", o.native,
                "also capture driver-level allocations, NVTX ranges and native stacks through "
                "CUDA's injection mechanism (CUPTI): for JAX, TensorFlow, CuPy or any CUDA "
                "program");
  cmd->add_flag("--no-python", o.no_python,
                "do not inject the PyTorch bootstrap (with --native: native capture only)");
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

size_t SplitRunCommand(int argc, char** argv, const CLI::App& app, RunOptions& options) {
  if (argc < 2 || std::string_view(argv[1]) != "run") return static_cast<size_t>(argc);
  const CLI::App* cmd = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == "run") cmd = sub;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      options.command.assign(argv + i + 1, argv + argc);
      return static_cast<size_t>(i);
    }
    if (arg.empty() || arg[0] != '-') {  // the program: vramscope run python train.py
      options.command.assign(argv + i, argv + argc);
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

int RunRunCommand(RunOptions o) {
  if (o.command.empty()) {
    return ReportError(
        UsageError("no command to run; give it after '--', e.g. vramscope run -- python train.py"));
  }
  if (o.no_python && !o.native) {
    return ReportError(UsageError("--no-python captures nothing without --native"));
  }
  if (o.keep_running && o.steps == 0) {
    return ReportError(UsageError("--keep-running needs --steps N"));
  }
  std::error_code ec;
  const bool named = !o.output.empty();
  const std::string shown = named ? o.output : kDefaultRunFolder;
  const fs::path out_dir = fs::absolute(shown, ec);
  const Result<bool> created = PrepareOutputFolder(out_dir, shown, named, o.force, o.quiet);
  if (!created.ok()) return ReportError(created.status());

  std::vector<std::pair<std::string, std::string>> env = {
      {"VRAMSCOPE_CAPTURE_DIR", out_dir.string()},
      {"VRAMSCOPE_STEPS", std::to_string(o.steps)},
      {"VRAMSCOPE_AFTER_STEPS", o.keep_running ? "continue" : "stop"},
      {"VRAMSCOPE_STACKS", o.stacks},
      {"VRAMSCOPE_MAX_ENTRIES", std::to_string(o.max_entries)},
      {"VRAMSCOPE_PHASE_MEMORY", o.phase_memory ? "1" : "0"},
      {"VRAMSCOPE_QUIET", o.quiet ? "1" : "0"},
  };
  std::optional<TempDir> bootstrap;
  if (!o.no_python) {
    bootstrap.emplace("vramscope-run-");
    if (bootstrap->path().empty()) {
      return ReportError(InternalError(fmt::format(
          "cannot make a temporary folder for the bootstrap: {}", std::strerror(errno))));
    }
    if (Status s = WriteBootstrap(bootstrap->path()); !s.ok()) return ReportError(s);
    const char* old = std::getenv("PYTHONPATH");
    env.emplace_back("PYTHONPATH", old && *old ? bootstrap->path().string() + ":" + old
                                               : bootstrap->path().string());
  }
  if (o.native) {
    const std::optional<std::string> lib = FindInjectLibrary();
    if (!lib) {
      return ReportError(InvalidInput(
          "--native: the native capture library (libvramscope_inject.so) is not installed with "
          "this vramscope: it is built only where CUDA's CUPTI was found at build time (install "
          "the CUDA toolkit and rebuild), or set VRAMSCOPE_INJECT_LIB to its path"));
    }
    env.emplace_back("CUDA_INJECTION64_PATH", *lib);
    // NVTX ranges reach CUPTI's callbacks only when NVTX loads CUPTI as its injection library.
    // Without it allocations are still recorded, and the trace says NVTX was off.
    if (const std::optional<std::string> cupti = FindCuptiLibrary()) {
      env.emplace_back("NVTX_INJECTION64_PATH", *cupti);
    }
  }

  auto outcome = RunChild(o.command, env);
  if (!outcome.ok()) return ReportError(outcome.status());
  const int program_code = outcome->exit_code;
  if (!o.quiet && program_code != 0) {
    fmt::print(stderr, "vramscope: the program {}\n", outcome->description);
  }

  const std::vector<fs::path> captures = sources::CaptureFilesIn(out_dir);
  bool any_capture = false;
  size_t sidecars = 0;
  for (const fs::path& p : captures) {
    const std::string name = p.filename().string();
    any_capture |= name.ends_with(".pickle") || name.ends_with(".vstrace");
    sidecars += name.ends_with(".sidecar.json") ? 1 : 0;
  }
  if (!any_capture) {
    // Not an error of the program's: its status stands (README, "Exit status"), and the line
    // says what was not captured. A folder made for this run and left empty is removed.
    if (sidecars > 0) {
      // The bootstrap's CPU test mode (VRAMSCOPE_CAPTURE_CPU) writes sidecars only.
      fmt::print(stderr,
                 "vramscope: nothing was captured: the bootstrap wrote {} sidecar(s) to {} but no "
                 "snapshot, because no process initialized CUDA; no report\n",
                 sidecars, shown);
    } else {
      fmt::print(stderr,
                 "vramscope: nothing was captured: no process of '{}' used CUDA{}, so there is "
                 "no snapshot and no report; check that it trains on a GPU{}\n",
                 o.command.front(), o.no_python ? "" : " through PyTorch",
                 o.native ? "" : " (for JAX, TensorFlow or plain CUDA programs add --native)");
      if (*created) fs::remove(out_dir, ec);  // only when empty: remove() refuses otherwise
    }
    return program_code;
  }
  if (o.no_report) {
    if (!o.quiet) fmt::print("captures written to {}\n", out_dir.string());
    return program_code;
  }
  // The folder is reported as `vramscope report FOLDER` does; its report.sqlite is this run's.
  // Its report.sqlite is default-named: it replaces the one of an earlier run (already removed with
  // that run's captures); --html is the user's and keeps the --force rule.
  ReportOutputOptions report;
  report.force = o.force;
  report.json = o.json;
  report.quiet = o.quiet;
  report.html = o.html;
  const pipeline::Input folder{pipeline::InputKind::kCaptureFolder, out_dir.string()};
  const int report_code =
      RunAndReport(folder.path, [&] { return ReportOnInput(folder, o.project_root, {}, report); });
  return program_code != 0 ? program_code : report_code;
}

}  // namespace vramscope::cli
