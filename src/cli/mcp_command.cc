#include "cli/mcp_command.h"

#include "capture/python_module.h"
#include "cli/exit_codes.h"

namespace vramscope::cli {

void RegisterMcpCommand(CLI::App& app, McpFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "mcp",
      "Serve vramscope to coding agents: a Model Context Protocol server on stdin/stdout whose "
      "tools are report, explain, simulate, predict (with fit) and diff over local files, each "
      "returning the JSON of the command's --json (schemas/). Register it with your agent, e.g. "
      "'claude mcp add vramscope -- vramscope mcp'. Needs the mcp package from PyPI in the "
      "Python it runs (pip install mcp).");
  cmd->add_option("--python", o.python,
                  "the Python 3 (3.10 or later) with the mcp package installed (default: "
                  "python3 on PATH)");
}

int RunMcpCommand(const McpFlags& flags) {
  auto code = capture::RunEmbeddedModule(flags.python, "mcp_server", {});
  if (!code.ok()) return ReportError(code.status());
  return *code;
}

}  // namespace vramscope::cli
