// `vramscope run [OPTIONS] -- COMMAND...`: runs the user's command unchanged with capture injected
// (the Python bootstrap through PYTHONPATH; with --native the CUPTI library through the CUDA
// driver's injection variable), then reports on what it captured (docs/design/capture.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace vramscope::cli {

// The captures' folder when -o names none. An earlier run's captures there are replaced (they are
// vramscope's own, recognised by their names); in a folder -o names, only with --force.
inline constexpr const char* kDefaultRunFolder = "vramscope-run";

struct RunOptions {
  std::vector<std::string> command;  // the program and its arguments
  std::string output;                // -o; empty: kDefaultRunFolder
  bool force = false;
  int64_t steps = 0;  // 0: until the program exits
  bool keep_running = false;
  std::string stacks = "python";
  int64_t max_entries = 1000000;
  bool phase_memory = false;
  bool native = false;
  bool no_python = false;
  bool no_report = false;
  bool json = false;
  bool quiet = false;
  std::string html;
  std::string project_root;
};

CLI::App* RegisterRunCommand(CLI::App& app, RunOptions& options);
// For `vramscope run`: moves the program's command line (everything after "--", or from the first
// argument that is neither one of run's options nor its value) into options.command and returns
// how many of argv's arguments are vramscope's own to parse; argc for any other command.
size_t SplitRunCommand(int argc, char** argv, const CLI::App& app, RunOptions& options);
int RunRunCommand(RunOptions options);

}  // namespace vramscope::cli
