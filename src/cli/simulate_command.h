// `vramscope simulate [INPUT]`: replays the recorded alloc/free trace of any input through the
// allocator model, compares it with what really happened, and answers what-if questions
// (--capacity, --alloc-conf, --compare): flags -> pipeline::SimulateRequest -> text or JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipeline/simulate.h"

namespace vramscope::cli {

struct SimulateFlags {
  std::string input;  // empty: the built-in example
  pipeline::SimulateRequest request;
  std::string output;  // empty: no database
  bool force = false;
  bool json = false;
  bool quiet = false;
  int top = 10;
};

void RegisterSimulateCommand(CLI::App& app, SimulateFlags& flags);
int RunSimulateCommand(const SimulateFlags& flags);

}  // namespace vramscope::cli
