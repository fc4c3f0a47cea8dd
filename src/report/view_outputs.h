// `vramscope view`'s page (and the Python API's): the self-contained HTML viewer of report
// databases, or of any input `report` reads, loaded and analysed by the pipeline into a
// temporary database first.
#pragma once

#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "pipeline/input.h"

namespace vramscope::report {

struct ViewRequest {
  // One input, or two shown side by side: report databases or anything `report` reads.
  std::vector<std::string> inputs;
  std::string target;  // the page
  bool overwrite = false;
  std::string title;         // empty: the reports' own titles
  std::string project_root;  // absolute, for inputs that are not report databases
  pipeline::InputLimits limits;
  pipeline::WindowRequest window;  // of every input that is a recording
  Control control;
};

// Writes the page atomically (nothing is left behind on an error or a cancellation).
Status WriteView(const ViewRequest& request);

}  // namespace vramscope::report
