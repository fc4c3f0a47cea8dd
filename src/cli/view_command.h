// `vramscope view [INPUT] [--compare OTHER] -o PAGE.html`: writes the self-contained HTML viewer
// of a report database, or of any input `report` reads (loaded and analysed by the pipeline into
// a temporary database first).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"
#include "pipeline/input.h"

namespace vramscope::cli {

struct ViewFlags {
  std::string input;    // report database or any input of `report`; empty: the built-in example
  std::string compare;  // a second one, shown side by side; empty: none
  std::string output;   // empty: derived from the input's name
  std::string title;    // empty: the input's name
  bool force = false;
  bool quiet = false;
  std::string project_root;
  pipeline::InputLimits limits;  // --max-inflate-ratio
  pipeline::WindowRequest window;  // --from, --to, --step-range
};

void RegisterViewCommand(CLI::App& app, ViewFlags& flags);
int RunViewCommand(const ViewFlags& flags);

}  // namespace vramscope::cli
