// Runs the Python tracer shipped inside the binary (python/vramscope/tracer/, embedded at build
// time) on the user's model, for `vramscope predict --model my.py:build` and `--model
// hf:config.json`: the package is written to a temporary folder, `PYTHON -m vramscope.tracer` runs
// with it on PYTHONPATH, and the stream it writes is what the predictor reads.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/temp_dir.h"

namespace vramscope::capture {

// True for what only the tracer can read: "file.py:function", "file.py", "hf:config.json".
bool NeedsTracer(const std::string& model);

// Runs `python -m vramscope.tracer ARGS... -o OUTPUT`. Fails with the tracer's own last error
// line (what, where, what to do) or with how to get Python and PyTorch when they are missing.
Status RunTracer(const std::string& python, const std::vector<std::string>& args,
                 const std::string& output);

// A tracer process started by StartTracer, so that several run at once (predict --all-ranks),
// from one thread: Done() asks without waiting, Wait() waits and gives RunTracer's result. One
// destroyed before its process ended kills it (the others' runs are abandoned on an error).
class TracerRun {
 public:
  ~TracerRun();
  TracerRun(const TracerRun&) = delete;
  TracerRun& operator=(const TracerRun&) = delete;
  bool Done();
  Status Wait();

 private:
  friend Result<std::unique_ptr<TracerRun>> StartTracer(const std::string&,
                                                        const std::vector<std::string>&,
                                                        const std::string&);
  TracerRun() = default;
  std::string python_;
  std::unique_ptr<TempDir> dir_;  // the embedded package and the tracer's stderr
  std::string errors_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool exited_ = false;
};

Result<std::unique_ptr<TracerRun>> StartTracer(const std::string& python,
                                               const std::vector<std::string>& args,
                                               const std::string& output);

}  // namespace vramscope::capture
