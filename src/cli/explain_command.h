// `vramscope explain [MESSAGE | FILE | -]`: what an out-of-memory message means (pipeline/
// explain.h): flags -> pipeline::ExplainRequest -> the text or the JSON. With --model, fits the
// batch into the memory the message leaves (predict --fit).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipeline/explain.h"

namespace vramscope::cli {

struct ExplainFlags {
  std::string input;  // text, a file, or "-" / empty for standard input
  bool json = false;
  pipeline::ExplainRequest request;  // --alloc-conf, --gpu, --model and its set-up, ...
};

void RegisterExplainCommand(CLI::App& app, ExplainFlags& flags);
int RunExplainCommand(const ExplainFlags& flags);

}  // namespace vramscope::cli
