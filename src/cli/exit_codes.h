// Exit codes every subcommand uses (docs/guide/README.md, "Exit statuses"): scripts rely on them.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace vramscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 1;       // bad input, or a failed check the user can fix
inline constexpr int kExitUsage = 2;          // bad flags or arguments
inline constexpr int kExitInternal = 3;       // a bug in vramscope
inline constexpr int kExitInterrupted = 130;  // SIGINT or SIGTERM (128 + SIGINT, as shells say)

// The one mapping of a request's outcome (common/status.h) onto exit statuses.
int ExitCodeFor(const Status& status);
// Prints "vramscope: error: <message>" (plus a bug-report hint for internal errors) and returns
// the exit code.
int ReportError(const Status& status);

// Runs a subcommand's body and turns its outcome into the exit code: an error Status is printed;
// running out of memory is blamed on the input (`input`, "" for the built-in example), any other
// exception is a bug.
int RunAndReport(const std::string& input, const std::function<Status()>& body);

}  // namespace vramscope::cli
