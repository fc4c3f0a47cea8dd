// Report databases for any inputs, for the verbs that read reports back (`view`, `diff`): a
// report database is used as it is; anything else `report` reads is loaded and analysed by the
// pipeline, as `report` would, into a temporary database removed with the InputReports.
#pragma once

#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "pipeline/input.h"

namespace vramscope::report {

struct InputReportsRequest {
  std::string project_root;  // absolute, for inputs that are not report databases
  pipeline::InputLimits limits;
  Control control;
  std::string purpose;  // what the temporary report is for ("the page"), for the progress line
  pipeline::WindowRequest window;  // --from/--to/--step-range of a recording
};

// Whether `path` starts with SQLite's header.
bool IsSqliteFile(const std::string& path);

class InputReports {
 public:
  InputReports() = default;
  InputReports(const InputReports&) = delete;
  InputReports& operator=(const InputReports&) = delete;
  ~InputReports();

  // The report database of `path`: itself, or one made in TMPDIR. Errors are the pipeline's
  // (one line naming the input) or that of a TMPDIR where nothing can be written.
  Status Add(const std::string& path, const InputReportsRequest& request);
  // In the order added.
  const std::vector<std::string>& databases() const { return databases_; }

 private:
  std::vector<std::string> databases_;
  std::vector<std::string> temporaries_;
};

}  // namespace vramscope::report
