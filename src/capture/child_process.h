// Starting the user's program and waiting for it, as `vramscope run` does: the program gets the
// capture's environment added to ours, SIGINT and SIGQUIT reach it directly from the terminal
// (vramscope ignores them while it waits, as system() does), and SIGTERM and SIGHUP sent to
// vramscope are passed on to it, so that its bootstrap can still write what it captured. The
// handlers are vramscope's only while the program runs; the caller's are restored after.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace vramscope::capture {

struct ChildOutcome {
  int exit_code = 0;        // the program's status, or 128 + signal as shells report it
  std::string description;  // "exited with status 1", "was killed by signal 9 (Killed)"
};

// Starts `command` with `env` added and waits for it. An error only when it could not start
// (InvalidInput naming the program, with a PATH hint when it was not found).
Result<ChildOutcome> RunChild(const std::vector<std::string>& command,
                              const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace vramscope::capture
