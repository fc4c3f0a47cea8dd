#include "cli/simulate_command.h"

#include <fmt/format.h>

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/interrupt.h"
#include "cli/outside_allocator_flags.h"
#include "cli/terminal_progress.h"
#include "common/atomic_output.h"
#include "report/output_target.h"
#include "report/report_input.h"
#include "report/simulate_outputs.h"
#include "report/sqlite_report.h"

namespace vramscope::cli {

namespace {

Status Run(SimulateFlags o) {
  pipeline::SimulateRequest& request = o.request;
  request.input = pipeline::ClassifyInput(o.input);
  request.top = static_cast<size_t>(o.top);
  // Every setting first, then the output (so that "already exists" comes before any reading).
  RETURN_IF_ERROR(pipeline::CheckSimulateRequest(request));
  std::optional<AtomicOutput> output;
  if (!o.output.empty()) {
    RETURN_IF_ERROR(report::CheckOutputIsItsOwn(o.output, {o.input}));
    ASSIGN_OR_RETURN(AtomicOutput prepared, AtomicOutput::Prepare(o.output, o.force));
    output.emplace(std::move(prepared));
  }
  TerminalProgress progress(!o.quiet);
  request.control = {&progress, &InterruptToken()};
  ASSIGN_OR_RETURN(const pipeline::SimulateResult result, pipeline::Simulate(request));
  progress.WarnIfPartial(result.analyzed->trace());
  std::optional<report::SimulateDatabase> database;
  if (output) {
    progress.Stage(fmt::format("writing {}", output->target()));
    report::SqliteReportInfo info;
    RETURN_IF_ERROR(report::WriteSqliteReport(
        output->temp_path(), report::ReportInput::From(*result.analyzed), &info, request.control));
    RETURN_IF_ERROR(request.control.CheckCancelled("writing the report"));
    RETURN_IF_ERROR(output->Commit());
    database = report::SimulateDatabase{output->target(), info.rows};
  }
  progress.Finish();
  if (o.json) {
    fmt::print("{}\n", report::SimulateJson(result, request.device, database)
                           .dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (!o.quiet) {
    fmt::print("{}", report::SimulateText(result, request.device, database));
  }
  return Status::Ok();
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app, SimulateFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Replay a recorded alloc/free trace through vramscope's model of PyTorch's caching "
      "allocator: compare every decision with what the recorded allocator did (allocation "
      "addresses, segment allocations and releases, the reserved curve, the final state), and "
      "answer what-if questions: would it fit in --capacity, where would it run out, and what "
      "other allocator settings (--alloc-conf, --compare) do to reserved memory and "
      "fragmentation. With no INPUT, uses the built-in example.");
  cmd->add_option("input", o.input,
                  "any input 'report' reads that holds an alloc/free trace: a memory snapshot "
                  "recorded with torch.cuda.memory._record_memory_history, a profiler trace with "
                  "memory events, a memory timeline, a native trace, or a capture folder; omit "
                  "it to use the built-in example");
  cmd->add_option("--capacity", o.request.capacity,
                  "device memory PyTorch's allocator can get, e.g. 24GiB (a card's memory minus "
                  "the CUDA context, typically 0.3-0.5 GiB, and anything outside PyTorch); "
                  "cudaMalloc fails beyond it. Default: unlimited");
  cmd->add_option("--gpu", o.request.gpu,
                  "a GPU vramscope knows (as predict --gpu): the capacity is its memory less what "
                  "the non-PyTorch memory model expects outside the allocator (CUDA context, "
                  "libraries' kernels; docs/design/non-pytorch-memory.md)");
  AddOutsideAllocatorFlags(*cmd, o.request.outside, "none");
  cmd->add_option("--memory-fraction", o.request.memory_fraction,
                  "torch.cuda.set_per_process_memory_fraction: the allocator may reserve at most "
                  "this fraction of --capacity (also enables garbage_collection_threshold)");
  cmd->add_option("--alloc-conf", o.request.alloc_conf,
                  "a what-if run with these settings, in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "
                  "expandable_segments:True,max_split_size_mb:256 (the whole configuration: what "
                  "it leaves out takes torch's default)");
  cmd->add_option("--compare", o.request.compare,
                  "what-if runs side by side, one PYTORCH_CUDA_ALLOC_CONF each (\"\" for torch's "
                  "defaults), e.g. --compare \"\" \"expandable_segments:True\"")
      ->expected(1, 16);
  cmd->add_option("--graph-pools", o.request.graph_pools,
                  "what the what-if runs do with the recording's private pools (CUDA graphs, "
                  "torch.cuda.MemPool; found from the snapshot's segment_pool_id): recorded "
                  "(default), shared (all in one pool, as graphs captured with one pool=), none "
                  "(no graphs: their requests go to the default pools)");
  cmd->add_option("--recorded-conf", o.request.recorded_conf,
                  "the PYTORCH_CUDA_ALLOC_CONF the recorded run used, for snapshots from before "
                  "torch 2.3 and other inputs that do not record their allocator settings (when "
                  "given, it replaces what a newer snapshot records)");
  cmd->add_option("-o,--output", o.output,
                  "also write the report database, with the simulated curves, segment events "
                  "and final layout in vramscope_sim_* tables");
  cmd->add_flag("--force", o.force, "overwrite the output if it exists");
  cmd->add_flag("--json", o.json, "print the results as JSON on stdout instead of text");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_option("--project-root", o.request.project_root,
                  "stack frames under this folder name the allocation sites (default: the "
                  "current directory)");
  AddInputLimitFlags(*cmd, o.request.limits);
  AddWindowFlags(*cmd, o.request.window);
  cmd->add_option("--device", o.request.device, "simulate only this CUDA device ordinal");
  cmd->add_option("--top", o.top,
                  "allocation sites to list at an out-of-memory point (default: 10)")
      ->check(CLI::Range(0, 1000000));
}

int RunSimulateCommand(const SimulateFlags& flags) {
  return RunAndReport(flags.input, [&] { return Run(flags); });
}

}  // namespace vramscope::cli
