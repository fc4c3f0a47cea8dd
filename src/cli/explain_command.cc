#include "cli/explain_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/outside_allocator_flags.h"
#include "report/explain_output.h"

namespace vramscope::cli {

namespace {

Status Explain(ExplainFlags o) {
  ASSIGN_OR_RETURN(o.request.input, pipeline::ReadExplainInput(o.input, isatty(STDIN_FILENO) == 1));
  // The allocator settings of the run that failed: the flag's, else this shell's.
  if (!o.request.alloc_conf) {
    for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
        o.request.alloc_conf = v;
        break;
      }
    }
  }
  o.request.control.cancel = &InterruptToken();
  ASSIGN_OR_RETURN(const pipeline::ExplainResult result, pipeline::Explain(o.request));
  if (o.json) {
    // Pasted text may hold invalid UTF-8: replaced, never an exception.
    fmt::print("{}\n", report::RenderExplainJson(result).dump(
                           2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    std::fputs(report::RenderExplainText(result).c_str(), stdout);
  }
  return Status::Ok();
}

}  // namespace

void RegisterExplainCommand(CLI::App& app, ExplainFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Explain an out-of-memory message: give PyTorch's message (any version, CUDA or HIP, "
      "cudaMallocAsync's or MPS's, or a 'CUDA error: out of memory'), or a file or standard "
      "input holding a traceback or a whole log. Prints the figures it read, what the GPU held "
      "(this process, other processes, memory outside PyTorch, reserved but unallocated, "
      "private pools), the cause with the arithmetic that shows it, and what to change. Exit "
      "status 1 when the text holds no such message.");
  cmd->add_option("input", o.input,
                  "the message (quoted), a file holding it, or - for standard input (the "
                  "default when input is piped)");
  cmd->add_flag("--json", o.json, "print JSON (exact byte ranges) instead of the text");
  cmd->add_option("--alloc-conf", o.request.alloc_conf,
                  "PYTORCH_CUDA_ALLOC_CONF of the run that failed, to know whether "
                  "expandable_segments was on (default: this shell's PYTORCH_ALLOC_CONF or "
                  "PYTORCH_CUDA_ALLOC_CONF)");
  cmd->add_option("--gpu", o.request.gpu,
                  "the GPU it ran on (default: the known GPUs of the message's capacity)");
  AddOutsideAllocatorFlags(*cmd, o.request.outside, "none, or --nccl-communicators' buffers");
  cmd->add_option("--nccl-communicators", o.request.nccl_communicators,
                  "NCCL communicators the process held (default: 0; each is modelled as 16 "
                  "channels x (ring + tree) x 12 MiB)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-messages", o.request.max_messages,
                  "distinct messages to explain at most (default: 100)")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  cmd->add_option("--model", o.request.predict.model,
                  "the model that ran out (as predict --model): fit the largest batch into what "
                  "the message leaves this process");
  cmd->add_option("--batch", o.request.predict.batch, "the batch that failed (with --model)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--seq", o.request.predict.seq, "sequence length (with --model)");
  cmd->add_option("--dtype", o.request.predict.dtype, "as predict --dtype (with --model)");
  cmd->add_option("--optimizer", o.request.predict.optimizer,
                  "as predict --optimizer (with --model)");
}

int RunExplainCommand(const ExplainFlags& flags) {
  return RunAndReport(flags.input == "-" ? "" : flags.input, [&] { return Explain(flags); });
}

}  // namespace vramscope::cli
