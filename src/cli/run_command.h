// `vramscope run [OPTIONS] -- COMMAND...`: runs the user's command unchanged with capture injected
// (src/capture), then reports on what it captured through the pipeline, as `vramscope report
// FOLDER` does (docs/design/capture.md).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "capture/capture_run.h"

namespace vramscope::cli {

struct RunFlags {
  capture::RunRequest capture;  // the command, -o, --force, --steps, --stacks, --native, ...
  bool no_report = false;
  bool json = false;
  bool quiet = false;
  std::string html;
  std::string project_root;
};

CLI::App* RegisterRunCommand(CLI::App& app, RunFlags& flags);
// For `vramscope run`: moves the program's command line (everything after "--", or from the first
// argument that is neither one of run's options nor its value) into flags.capture.command and
// returns how many of argv's arguments are vramscope's own to parse; argc for any other command.
size_t SplitRunCommand(int argc, char** argv, const CLI::App& app, RunFlags& flags);
int RunRunCommand(RunFlags flags);

}  // namespace vramscope::cli
