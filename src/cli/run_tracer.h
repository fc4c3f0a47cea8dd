// Runs the Python tracer shipped inside the binary (python/vramscope/tracer/, embedded at build
// time) on the user's model, for `vramscope predict --model my.py:build` and `--model
// hf:config.json`: the package is written to a temporary folder, `PYTHON -m vramscope.tracer` runs
// with it on PYTHONPATH, and the stream it writes is what the predictor reads.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace vramscope::cli {

// True for what only the tracer can read: "file.py:function", "file.py", "hf:config.json".
bool NeedsTracer(const std::string& model);

// Runs `python -m vramscope.tracer ARGS... -o OUTPUT`. Fails with the tracer's own last error
// line (what, where, what to do) or with how to get Python and PyTorch when they are missing.
Status RunTracer(const std::string& python, const std::vector<std::string>& args,
                 const std::string& output);

}  // namespace vramscope::cli
