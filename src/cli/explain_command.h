// `vramscope explain [MESSAGE | FILE | -]`: what an out-of-memory message means. Reads PyTorch's
// message (any generation, CUDA or HIP, cudaMallocAsync's, MPS's, or a driver or library error)
// from the argument, a file or standard input (a bare message or a whole traceback or log), and
// prints the figures it read, what the GPU held, the cause with its arithmetic and what to change
// (src/analysis/oom_message_explain.h). With --model, fits the batch into the memory the message
// leaves (predict --fit).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/predict_command.h"

namespace vramscope::cli {

struct ExplainOptions {
  std::string input;  // text, a file, or "-" / empty for standard input
  bool json = false;
  std::optional<std::string> alloc_conf;
  std::string gpu;
  OutsideAllocatorFlags outside;
  int nccl_communicators = 0;
  size_t max_messages = 100;
  // --model and the predictor's set-up flags it takes.
  PredictOptions predict;
};

void RegisterExplainCommand(CLI::App& app, ExplainOptions& options);
int RunExplainCommand(const ExplainOptions& options);

}  // namespace vramscope::cli
