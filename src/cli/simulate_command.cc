#include "cli/simulate_command.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "analysis/simulation.h"
#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/output_target.h"
#include "common/atomic_output.h"
#include "common/units.h"
#include "device/non_pytorch_memory.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/explain_output.h"
#include "report/report_input.h"
#include "report/simulation_summary.h"
#include "report/sqlite_report.h"

namespace vramscope::cli {
namespace {

// --gpu: the GPU's memory less the model's figures outside the allocator.
struct GpuCapacity {
  device::GpuSpec gpu;
  device::OutsideMemory outside;
  uint64_t capacity = 0;
};

Result<std::optional<GpuCapacity>> CapacityOfGpu(const SimulateOptions& o) {
  if (o.gpu.empty()) return std::optional<GpuCapacity>();
  if (!o.capacity.empty()) {
    return UsageError("--gpu and --capacity both give the capacity; give one of them");
  }
  auto gpu = device::FindGpu(o.gpu);
  if (!gpu.ok()) return gpu.status();
  GpuCapacity out;
  out.gpu = *gpu;
  device::OutsideSetup setup = device::SetupFor(*gpu);
  ApplyOutsideAllocatorFlags(o.outside, setup);
  out.outside = device::EstimateOutsideAllocator(setup);
  if (out.outside.Total() >= gpu->total_memory) {
    return UsageError(
        fmt::format("--gpu {}: what is expected outside the allocator ({}) leaves "
                    "it nothing; lower --cuda-context/--library-memory/--nccl-memory",
                    o.gpu, FormatBytes(static_cast<int64_t>(out.outside.Total()))));
  }
  out.capacity = gpu->total_memory - out.outside.Total();
  return std::optional<GpuCapacity>(std::move(out));
}

// The what-if runs asked for; every setting is checked here, before the input is read.
Result<analysis::WhatIfRequest> BuildWhatIf(const SimulateOptions& o,
                                            const std::optional<GpuCapacity>& gpu) {
  analysis::WhatIfRequest request;
  request.device = o.device;
  request.top_sites = static_cast<size_t>(o.top);
  if (gpu) request.capacity = gpu->capacity;
  if (!o.capacity.empty()) {
    const int64_t bytes = ParseBytes(o.capacity);
    if (bytes <= 0) {
      return UsageError(fmt::format(
          "--capacity {}: expected a positive size such as 24GiB, 80GB or 17179869184 (bytes)",
          o.capacity));
    }
    request.capacity = static_cast<uint64_t>(bytes);
  }
  if (o.memory_fraction) {
    const double f = *o.memory_fraction;
    if (!(f > 0 && f <= 1) || !std::isfinite(f)) {
      return UsageError(
          fmt::format("--memory-fraction {}: must be more than 0 and at most 1, as for "
                      "torch.cuda.set_per_process_memory_fraction",
                      f));
    }
    if (o.capacity.empty() && !gpu) {
      return UsageError(
          "--memory-fraction needs --capacity or --gpu: the fraction is of the device's memory, "
          "which the recording does not say");
    }
    request.memory_fraction = f;
  }
  if (o.alloc_conf && !o.compare.empty()) {
    return UsageError("--alloc-conf and --compare both choose what-if settings; give one of them");
  }
  if (o.alloc_conf) {
    request.what_if.emplace_back(*o.alloc_conf);
  } else if (!o.compare.empty()) {
    for (const std::string& c : o.compare) request.what_if.emplace_back(c);
  } else if (!o.capacity.empty() || gpu || o.graph_pools != "recorded") {
    request.what_if.emplace_back(std::nullopt);  // the recorded settings on that device
  }
  if (o.graph_pools == "shared") {
    request.pools = allocator::PoolMapping::kShared;
  } else if (o.graph_pools == "none") {
    request.pools = allocator::PoolMapping::kNone;
  } else if (o.graph_pools != "recorded") {
    return UsageError(fmt::format(
        "--graph-pools {}: expected recorded, shared (every CUDA graph and MemPool in one pool) "
        "or none (no private pools)",
        o.graph_pools));
  }
  for (const auto& conf : request.what_if) {
    if (conf) RETURN_IF_ERROR(allocator::ParseAllocConf(*conf).status());
  }
  if (o.recorded_conf) RETURN_IF_ERROR(allocator::ParseAllocConf(*o.recorded_conf).status());
  return request;
}

Status Run(const SimulateOptions& o) {
  ASSIGN_OR_RETURN(const std::optional<GpuCapacity> gpu, CapacityOfGpu(o));
  ASSIGN_OR_RETURN(const analysis::WhatIfRequest what_if, BuildWhatIf(o, gpu));
  const pipeline::Input input = pipeline::ClassifyInput(o.input);
  ASSIGN_OR_RETURN(const std::string project_root, pipeline::ResolveProjectRoot(o.project_root));
  std::optional<AtomicOutput> output;
  if (!o.output.empty()) {
    RETURN_IF_ERROR(CheckOutputIsItsOwn(o.output, {o.input}));
    ASSIGN_OR_RETURN(AtomicOutput prepared, AtomicOutput::Prepare(o.output, o.force));
    output.emplace(std::move(prepared));
  }
  Progress progress(!o.quiet);
  pipeline::LoadOptions load;
  load.progress = &progress;
  load.project_root = project_root;
  load.limits = o.limits;
  load.recorded_conf = o.recorded_conf;
  load.require_replay = true;
  ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::Load(input, load));
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Analyzed> analyzed,
                   pipeline::Analyze(std::move(loaded), {project_root, what_if, &progress}));
  const report::ReportInput in = report::ReportInput::From(*analyzed);
  report::SqliteReportInfo info;
  if (output) {
    progress.Stage(fmt::format("writing {}", output->target()));
    RETURN_IF_ERROR(report::WriteSqliteReport(output->temp_path(), in, &info));
    RETURN_IF_ERROR(output->Commit());
  }
  progress.Finish();
  if (o.json) {
    nlohmann::json json = report::RenderSimulationJson(in, o.device);
    json["report"] = output ? nlohmann::json{{"path", output->target()}, {"rows", info.rows}}
                            : nlohmann::json(nullptr);
    if (gpu) {
      json["capacity_from_gpu"] = {{"gpu", gpu->gpu.key},
                                   {"total_memory", gpu->gpu.total_memory},
                                   {"outside_allocator", report::OutsideMemoryJson(gpu->outside)},
                                   {"capacity", gpu->capacity}};
    }
    fmt::print("{}\n", json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (!o.quiet) {
    if (gpu) {
      std::string parts;
      for (const device::OutsideFigure& f : gpu->outside.figures) {
        parts += fmt::format("{}{} {} ({})", parts.empty() ? "" : ", ", f.item,
                             FormatBytes(static_cast<int64_t>(f.bytes)),
                             device::EvidenceName(f.evidence));
      }
      fmt::print("capacity: {} ({}) less {} outside the allocator ({}) = {}\n\n", gpu->gpu.name,
                 FormatBytes(static_cast<int64_t>(gpu->gpu.total_memory)),
                 FormatBytes(static_cast<int64_t>(gpu->outside.Total())), parts,
                 FormatBytes(static_cast<int64_t>(gpu->capacity)));
    }
    fmt::print("{}", report::RenderSimulationText(in, o.device));
    if (output) {
      fmt::print("\nreport written to {} (with the simulation in the vramscope_sim_* tables)\n",
                 output->target());
    }
  }
  return Status::Ok();
}

}  // namespace

void RegisterSimulateCommand(CLI::App& app, SimulateOptions& o) {
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
  cmd->add_option("--capacity", o.capacity,
                  "device memory PyTorch's allocator can get, e.g. 24GiB (a card's memory minus "
                  "the CUDA context, typically 0.3-0.5 GiB, and anything outside PyTorch); "
                  "cudaMalloc fails beyond it. Default: unlimited");
  cmd->add_option("--gpu", o.gpu,
                  "a GPU vramscope knows (as predict --gpu): the capacity is its memory less what "
                  "the non-PyTorch memory model expects outside the allocator (CUDA context, "
                  "libraries' kernels; docs/design/non-pytorch-memory.md)");
  AddOutsideAllocatorFlags(*cmd, o.outside, "none");
  cmd->add_option("--memory-fraction", o.memory_fraction,
                  "torch.cuda.set_per_process_memory_fraction: the allocator may reserve at most "
                  "this fraction of --capacity (also enables garbage_collection_threshold)");
  cmd->add_option("--alloc-conf", o.alloc_conf,
                  "a what-if run with these settings, in PYTORCH_CUDA_ALLOC_CONF syntax, e.g. "
                  "expandable_segments:True,max_split_size_mb:256 (the whole configuration: what "
                  "it leaves out takes torch's default)");
  cmd->add_option("--compare", o.compare,
                  "what-if runs side by side, one PYTORCH_CUDA_ALLOC_CONF each (\"\" for torch's "
                  "defaults), e.g. --compare \"\" \"expandable_segments:True\"")
      ->expected(1, 16);
  cmd->add_option("--graph-pools", o.graph_pools,
                  "what the what-if runs do with the recording's private pools (CUDA graphs, "
                  "torch.cuda.MemPool; found from the snapshot's segment_pool_id): recorded "
                  "(default), shared (all in one pool, as graphs captured with one pool=), none "
                  "(no graphs: their requests go to the default pools)");
  cmd->add_option("--recorded-conf", o.recorded_conf,
                  "the PYTORCH_CUDA_ALLOC_CONF the recorded run used, for snapshots from before "
                  "torch 2.3 and other inputs that do not record their allocator settings (when "
                  "given, it replaces what a newer snapshot records)");
  cmd->add_option("-o,--output", o.output,
                  "also write the report database, with the simulated curves, segment events "
                  "and final layout in vramscope_sim_* tables");
  cmd->add_flag("--force", o.force, "overwrite the output if it exists");
  cmd->add_flag("--json", o.json, "print the results as JSON on stdout instead of text");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder name the allocation sites (default: the "
                  "current directory)");
  AddInputLimitFlags(*cmd, o.limits);
  cmd->add_option("--device", o.device, "simulate only this CUDA device ordinal");
  cmd->add_option("--top", o.top,
                  "allocation sites to list at an out-of-memory point (default: 10)")
      ->check(CLI::Range(0, 1000000));
}

int RunSimulateCommand(const SimulateOptions& options) {
  return RunAndReport(options.input, [&] { return Run(options); });
}

}  // namespace vramscope::cli
