#include "capture/capture_run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "capture/child_process.h"
#include "capture/embedded_python.h"
#include "capture/inject_libraries.h"
#include "common/temp_dir.h"
#include "sources/run_output/capture_folder.h"

namespace vramscope::capture {

namespace {

namespace fs = std::filesystem;

// Lays out <dir>/sitecustomize.py (the package's inject/sitecustomize.py, at the top level so that
// Python's site finds it first on PYTHONPATH) and the whole package under <dir>/vramscope/, both
// compiled into the binary (capture/embedded_python.h), so that the binary alone can inject them.
Status WriteBootstrap(const fs::path& dir) {
  const auto sitecustomize = EmbeddedPythonFile("inject/sitecustomize.py");
  if (!sitecustomize) {
    return InternalError("the embedded Python package has no inject/sitecustomize.py");
  }
  RETURN_IF_ERROR(WriteEmbeddedPythonPackage(dir));
  return WriteWholeFile(dir / "sitecustomize.py", *sitecustomize);
}

// Makes the captures' folder ready. `shown`: the folder as the user spelled it, for messages;
// `named`: the request gave it. An earlier run's captures in it are removed when the folder is
// the default one or with `force` (and said so), else refused. Returns whether the folder was
// created.
Result<bool> PrepareOutputFolder(const fs::path& dir, const std::string& shown, bool named,
                                 bool force, const Control& control) {
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
      control.Note(
          fmt::format("vramscope: replacing the captures of an earlier run in {} ({} files)", shown,
                      old.size()));
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

Status CheckRequest(const RunRequest& r) {
  if (r.command.empty()) {
    return UsageError(
        "no command to run; give it after '--', e.g. vramscope run -- python train.py");
  }
  if (r.no_python && !r.native) return UsageError("--no-python captures nothing without --native");
  if (r.keep_running && r.steps == 0) return UsageError("--keep-running needs --steps N");
  if (!r.stacks.empty() && r.stacks != "none" && r.stacks != "python" && r.stacks != "all") {
    return UsageError(fmt::format("--stacks {}: use none, python or all", r.stacks));
  }
  if (r.on_oom && r.steps != 0) {
    return UsageError(
        "--on-oom records until the program runs out of GPU memory or exits; drop --steps");
  }
  if (r.on_oom && r.no_python) {
    return UsageError(
        "--on-oom keeps PyTorch's allocator history; it needs the PyTorch "
        "bootstrap, so drop --no-python");
  }
  if (r.on_oom && r.native) {
    return UsageError(
        "--on-oom with --native: the native trace is written as the program runs, whether or "
        "not memory runs out; run --native without --on-oom");
  }
  return Status::Ok();
}

}  // namespace

Result<RunOutcome> RunAndCapture(const RunRequest& r) {
  RETURN_IF_ERROR(CheckRequest(r));
  std::error_code ec;
  const bool named = !r.output.empty();
  RunOutcome out;
  out.shown = named ? r.output : kDefaultRunFolder;
  out.folder = fs::absolute(out.shown, ec);
  ASSIGN_OR_RETURN(const bool created,
                   PrepareOutputFolder(out.folder, out.shown, named, r.force, r.control));

  std::vector<std::pair<std::string, std::string>> env = {
      {"VRAMSCOPE_CAPTURE_DIR", out.folder.string()},
      {"VRAMSCOPE_STEPS", std::to_string(r.steps)},
      {"VRAMSCOPE_AFTER_STEPS", r.keep_running ? "continue" : "stop"},
      {"VRAMSCOPE_STACKS", !r.stacks.empty() ? r.stacks
                           : r.on_oom        ? "none"
                                             : "python"},
      {"VRAMSCOPE_MAX_ENTRIES", std::to_string(r.max_entries > 0 ? r.max_entries
                                               : r.on_oom        ? kOnOomMaxEntries
                                                                 : int64_t{1000000})},
      {"VRAMSCOPE_ON_OOM", r.on_oom ? "1" : "0"},
      {"VRAMSCOPE_PHASE_MEMORY", r.phase_memory ? "1" : "0"},
      {"VRAMSCOPE_QUIET", r.quiet ? "1" : "0"},
  };
  std::optional<TempDir> bootstrap;
  if (!r.no_python) {
    bootstrap.emplace("vramscope-run-");
    if (bootstrap->path().empty()) {
      return InternalError(fmt::format("cannot make a temporary folder for the bootstrap: {}",
                                       std::strerror(errno)));
    }
    RETURN_IF_ERROR(WriteBootstrap(bootstrap->path()));
    const char* old = std::getenv("PYTHONPATH");
    env.emplace_back("PYTHONPATH", old && *old ? bootstrap->path().string() + ":" + old
                                               : bootstrap->path().string());
  }
  if (r.native) {
    const std::optional<std::string> lib = FindInjectLibrary();
    if (!lib) {
      return InvalidInput(
          "--native: the native capture library (libvramscope_inject.so) is not installed with "
          "this vramscope: it is built only where CUDA's CUPTI was found at build time (install "
          "the CUDA toolkit and rebuild), or set VRAMSCOPE_INJECT_LIB to its path");
    }
    env.emplace_back("CUDA_INJECTION64_PATH", *lib);
    // NVTX ranges reach CUPTI's callbacks only when NVTX loads CUPTI as its injection library.
    // Without it allocations are still recorded, and the trace says NVTX was off.
    if (const std::optional<std::string> cupti = FindCuptiLibrary()) {
      env.emplace_back("NVTX_INJECTION64_PATH", *cupti);
    }
  }

  ASSIGN_OR_RETURN(const ChildOutcome child, RunChild(r.command, env));
  out.program_exit = child.exit_code;
  out.program_description = child.description;
  for (const fs::path& p : sources::CaptureFilesIn(out.folder)) {
    const std::string name = p.filename().string();
    out.captured |= name.ends_with(".pickle") || name.ends_with(".vstrace") ||
                    name.ends_with(".jax.prof") || name.ends_with(".xplane.pb");
    out.sidecars += name.ends_with(".sidecar.json") ? 1 : 0;
  }
  // A folder made for this run and left empty goes (remove() refuses a folder that is not).
  if (!out.captured && out.sidecars == 0 && created) fs::remove(out.folder, ec);
  return out;
}

}  // namespace vramscope::capture
