// Runs a module of the Python package the binary embeds (python/vramscope/) in the foreground:
// the package written to a temporary folder on PYTHONPATH, VRAMSCOPE_BIN pointing at this very
// program (so the module's API calls run the same vramscope), and the standard streams shared,
// for `vramscope mcp` (a server speaking on stdin/stdout).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace vramscope::capture {

// `python -m vramscope.<module> ARGS...`; its exit status, or an error when it cannot start (no
// such Python: a usage error naming --python).
Result<int> RunEmbeddedModule(const std::string& python, const std::string& module,
                              const std::vector<std::string>& args);

}  // namespace vramscope::capture
