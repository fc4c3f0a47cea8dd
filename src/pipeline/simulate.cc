#include "pipeline/simulate.h"

#include <fmt/format.h>

#include <cmath>

#include "allocator/allocator_settings.h"
#include "common/units.h"
#include "pipeline/load.h"

namespace vramscope::pipeline {

namespace {

// SimulateRequest::gpu: the GPU's memory less the model's figures outside the allocator.
Result<std::optional<GpuCapacity>> CapacityOfGpu(const SimulateRequest& r) {
  if (r.gpu.empty()) return std::optional<GpuCapacity>();
  if (!r.capacity.empty()) {
    return UsageError("--gpu and --capacity both give the capacity; give one of them");
  }
  auto gpu = device::FindGpu(r.gpu);
  if (!gpu.ok()) return gpu.status();
  GpuCapacity out;
  out.gpu = *gpu;
  device::OutsideSetup setup = device::SetupFor(*gpu);
  r.outside.ApplyTo(setup);
  out.outside = device::EstimateOutsideAllocator(setup);
  out.capacity = device::LeftToAllocator(gpu->total_memory, out.outside.Total());
  if (out.capacity == 0) {
    return UsageError(
        fmt::format("--gpu {}: what is expected outside the allocator ({}) leaves "
                    "it nothing; lower --cuda-context/--library-memory/--nccl-memory",
                    r.gpu, FormatBytes(static_cast<int64_t>(out.outside.Total()))));
  }
  return std::optional<GpuCapacity>(std::move(out));
}

// The what-if runs asked for; every setting is checked here, before the input is read.
Result<analysis::WhatIfRequest> BuildWhatIf(const SimulateRequest& r,
                                            const std::optional<GpuCapacity>& gpu) {
  analysis::WhatIfRequest request;
  request.device = r.device;
  request.top_sites = r.top;
  if (gpu) request.capacity = gpu->capacity;
  if (!r.capacity.empty()) {
    const int64_t bytes = ParseBytes(r.capacity);
    if (bytes <= 0) {
      return UsageError(fmt::format(
          "--capacity {}: expected a positive size such as 24GiB, 80GB or 17179869184 (bytes)",
          r.capacity));
    }
    request.capacity = static_cast<uint64_t>(bytes);
  }
  if (r.memory_fraction) {
    const double f = *r.memory_fraction;
    if (!(f > 0 && f <= 1) || !std::isfinite(f)) {
      return UsageError(
          fmt::format("--memory-fraction {}: must be more than 0 and at most 1, as for "
                      "torch.cuda.set_per_process_memory_fraction",
                      f));
    }
    if (r.capacity.empty() && !gpu) {
      return UsageError(
          "--memory-fraction needs --capacity or --gpu: the fraction is of the device's memory, "
          "which the recording does not say");
    }
    request.memory_fraction = f;
  }
  if (r.alloc_conf && !r.compare.empty()) {
    return UsageError("--alloc-conf and --compare both choose what-if settings; give one of them");
  }
  if (r.alloc_conf) {
    request.what_if.emplace_back(*r.alloc_conf);
  } else if (!r.compare.empty()) {
    for (const std::string& c : r.compare) request.what_if.emplace_back(c);
  } else if (!r.capacity.empty() || gpu || r.graph_pools != "recorded") {
    request.what_if.emplace_back(std::nullopt);  // the recorded settings on that device
  }
  if (r.graph_pools == "shared") {
    request.pools = allocator::PoolMapping::kShared;
  } else if (r.graph_pools == "none") {
    request.pools = allocator::PoolMapping::kNone;
  } else if (r.graph_pools != "recorded") {
    return UsageError(fmt::format(
        "--graph-pools {}: expected recorded, shared (every CUDA graph and MemPool in one pool) "
        "or none (no private pools)",
        r.graph_pools));
  }
  for (const auto& conf : request.what_if) {
    if (conf) RETURN_IF_ERROR(allocator::ParseAllocConf(*conf).status());
  }
  if (r.recorded_conf) RETURN_IF_ERROR(allocator::ParseAllocConf(*r.recorded_conf).status());
  return request;
}

}  // namespace

Status CheckSimulateRequest(const SimulateRequest& request) {
  ASSIGN_OR_RETURN(const std::optional<GpuCapacity> gpu, CapacityOfGpu(request));
  return BuildWhatIf(request, gpu).status();
}

Result<SimulateResult> Simulate(const SimulateRequest& r) {
  SimulateResult out;
  ASSIGN_OR_RETURN(out.gpu, CapacityOfGpu(r));
  ASSIGN_OR_RETURN(analysis::WhatIfRequest what_if, BuildWhatIf(r, out.gpu));
  ASSIGN_OR_RETURN(const std::string project_root, ResolveProjectRoot(r.project_root));
  LoadRequest load;
  load.input = r.input;
  load.control = r.control;
  load.project_root = project_root;
  load.limits = r.limits;
  load.window = r.window;
  load.recorded_conf = r.recorded_conf;
  load.require_replay = true;
  ASSIGN_OR_RETURN(Loaded loaded, Load(load));
  ASSIGN_OR_RETURN(out.analyzed,
                   Analyze(std::move(loaded), {project_root, std::move(what_if), r.control}));
  return out;
}

}  // namespace vramscope::pipeline
