// `vramscope mcp`: the verbs as tools of a Model Context Protocol server on stdio, for coding
// agents: the embedded python/vramscope/mcp_server.py run with a Python that has the `mcp`
// package (optional, from PyPI).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace vramscope::cli {

struct McpFlags {
  std::string python = "python3";
};

void RegisterMcpCommand(CLI::App& app, McpFlags& flags);
int RunMcpCommand(const McpFlags& flags);

}  // namespace vramscope::cli
