// `vramscope simulate [INPUT]`: replays the recorded alloc/free trace of any input through the
// allocator model, compares it with what really happened, and answers what-if questions
// (--capacity, --alloc-conf, --compare).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/outside_allocator_flags.h"
#include "pipeline/input.h"

namespace vramscope::cli {

struct SimulateOptions {
  std::string input;   // empty: the built-in example
  std::string output;  // empty: no database
  bool force = false;
  bool json = false;
  bool quiet = false;
  std::string project_root;
  pipeline::InputLimits limits;  // --max-inflate-ratio
  std::optional<int32_t> device;
  int top = 10;
  std::string capacity;  // "24GiB"
  // --gpu: the capacity is the GPU's memory less what the non-PyTorch memory model expects
  // outside the allocator (overridable, in MiB, as predict's flags).
  std::string gpu;
  OutsideAllocatorFlags outside;
  std::optional<double> memory_fraction;
  std::optional<std::string> alloc_conf;
  std::optional<std::string> recorded_conf;
  std::vector<std::string> compare;
  std::string graph_pools = "recorded";  // recorded, shared, none
};

void RegisterSimulateCommand(CLI::App& app, SimulateOptions& options);
int RunSimulateCommand(const SimulateOptions& options);

}  // namespace vramscope::cli
