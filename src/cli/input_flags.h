// The flags every verb that reads an input registers the same way: the limits of the resource
// contract (docs/design/resource-contract.md) that a legitimate file may need raised.
#pragma once

#include <CLI/CLI.hpp>

#include "pipeline/input.h"

namespace vramscope::cli {

// --max-inflate-ratio.
void AddInputLimitFlags(CLI::App& cmd, pipeline::InputLimits& limits);

// --from, --to, --step-range: the part of the recording reported (pipeline/window.h).
void AddWindowFlags(CLI::App& cmd, pipeline::WindowRequest& window);

}  // namespace vramscope::cli
