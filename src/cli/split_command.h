// `vramscope split SNAPSHOT --slices N`: a snapshot in N pieces, each a PyTorch memory snapshot
// of its part of the trace with the allocator's state at its end (pipeline/split.h), written as
// NAME.partIofN.pickle: PyTorch's memory_viz opens each, and each replays alone.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipeline/input.h"

namespace vramscope::cli {

struct SplitFlags {
  std::string input;   // empty: the built-in example
  int slices = 0;      // --slices
  std::string folder;  // -o: where the pieces go (default: the current directory)
  bool force = false;
  bool quiet = false;
  bool json = false;  // the pieces as JSON (schemas/split.schema.json)
  pipeline::InputLimits limits;
};

void RegisterSplitCommand(CLI::App& app, SplitFlags& flags);
int RunSplitCommand(const SplitFlags& flags);

}  // namespace vramscope::cli
