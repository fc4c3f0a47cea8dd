// Starting the user's program and waiting for it, as `vramscope run` does: the program gets the
// capture's environment added to ours, SIGINT and SIGQUIT reach it directly from the terminal
// (vramscope ignores them while it waits, as system() does), and SIGTERM and SIGHUP sent to
// vramscope are passed on to it, so that its bootstrap can still write what it captured. The
// handlers are vramscope's only while the program runs; the caller's are restored after.
//
// RunBounded runs a short helper (a Python one-liner) whose output is the answer: its stdout and
// stderr captured up to a size, its time bounded, stdin empty, so that it can never hang the
// caller nor flood its memory.
#pragma once

#include <chrono>
#include <cstddef>
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

struct BoundedOutcome {
  int exit_code = 0;       // as ChildOutcome's; 128 + 9 when it was killed for its time
  bool timed_out = false;  // killed (SIGKILL) after `timeout`
  std::string out;  // the first `max_output` bytes of its stdout; the rest is read and dropped
  std::string err;  // the same of its stderr
};

// Runs `command` (PATH searched) with our environment, stdin from /dev/null, and waits at most
// `timeout`. An error only when it could not start (InvalidInput naming the program).
Result<BoundedOutcome> RunBounded(const std::vector<std::string>& command,
                                  std::chrono::milliseconds timeout, size_t max_output);

}  // namespace vramscope::capture
