// `vramscope diff A B`: two reports compared, with gates for CI (--fail-if): flags ->
// report::DiffRequest -> text or JSON, and exit status 1 when a gate is crossed.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/input.h"

namespace vramscope::cli {

struct DiffFlags {
  std::string a, b;
  std::vector<std::string> fail_if;
  std::optional<int32_t> device;
  std::string project_root;
  pipeline::InputLimits limits;
  bool json = false;
  bool quiet = false;
  int top = 10;
};

void RegisterDiffCommand(CLI::App& app, DiffFlags& flags);
int RunDiffCommand(const DiffFlags& flags);

}  // namespace vramscope::cli
