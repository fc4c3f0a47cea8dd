// `vramscope view [INPUT] [--compare OTHER] -o PAGE.html`: writes the self-contained HTML viewer
// of a report database, or of any input `report` reads (reported first into a temporary
// database). Also the helper behind `vramscope report --html`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/status.h"

namespace vramscope::cli {

struct ViewOptions {
  std::string input;    // report database or any input of `report`; empty: the built-in example
  std::string compare;  // a second one, shown side by side; empty: none
  std::string output;   // empty: derived from the input's name
  std::string title;    // empty: the input's name
  bool force = false;
  bool quiet = false;
  std::string project_root;
};

void RegisterViewCommand(CLI::App& app, ViewOptions& options);
int RunViewCommand(const ViewOptions& options);

// Writes the viewer of the report databases `databases` (1 or 2) to `target`, atomically.
Status WriteViewerPage(const std::vector<std::string>& databases, const std::string& target,
                       bool overwrite, const std::string& title);

}  // namespace vramscope::cli
