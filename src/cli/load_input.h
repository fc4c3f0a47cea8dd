// What every subcommand that reads an input does first: resolve --project-root, read the input
// (or the built-in example) with a progress line on a terminal.
#pragma once

#include <string>

#include "common/status.h"
#include "model/trace.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::cli {

// The absolute project root: `requested`, or the current directory when empty.
Result<std::string> ResolveProjectRoot(const std::string& requested);

// Reads `input` (empty: the built-in example). Progress goes to stderr unless `quiet`.
Result<model::Trace> LoadInput(const std::string& input, bool quiet,
                               snapshot::LoadTimings* timings = nullptr);

}  // namespace vramscope::cli
