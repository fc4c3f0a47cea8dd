// Simulate: an input's recorded alloc/free trace replayed through the allocator model and
// compared with what the recorded allocator did, then what-if runs under the capacity and the
// allocator settings asked for. The request is the user's (`vramscope simulate`'s flags, the
// Python API's keywords); every setting is checked before the input is read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "device/gpu_catalog.h"
#include "device/non_pytorch_memory.h"
#include "pipeline/analyze.h"
#include "pipeline/input.h"
#include "pipeline/outside_overrides.h"

namespace vramscope::pipeline {

struct SimulateRequest {
  Input input;
  std::string project_root;  // "" = the current directory
  InputLimits limits;
  WindowRequest window;  // --from, --to, --step-range
  std::optional<int32_t> device;  // only this device
  size_t top = 10;                // live-at-OOM sites kept per what-if run
  std::string capacity;           // "24GiB", "80GB", bytes; "" = unlimited
  // A GPU vramscope knows: the capacity is its memory less what the non-PyTorch memory model
  // expects outside the allocator, with these overrides.
  std::string gpu;
  OutsideOverrides outside;
  std::optional<double> memory_fraction;     // of the capacity, as set_per_process_memory_fraction
  std::optional<std::string> alloc_conf;     // one what-if run with these settings
  std::vector<std::string> compare;          // what-if runs side by side ("" = torch's defaults)
  std::optional<std::string> recorded_conf;  // what the recorded run used (before torch 2.3)
  std::string graph_pools = "recorded";      // recorded, shared, none
  Control control;
};

// The capacity a GPU leaves the allocator (SimulateRequest::gpu).
struct GpuCapacity {
  device::GpuSpec gpu;
  device::OutsideMemory outside;
  uint64_t capacity = 0;
};

struct SimulateResult {
  std::unique_ptr<const Analyzed> analyzed;  // its simulations hold the replay and what-ifs
  std::optional<GpuCapacity> gpu;
};

// Checks the request's settings (a usage error names the setting), before any reading.
Status CheckSimulateRequest(const SimulateRequest& request);

Result<SimulateResult> Simulate(const SimulateRequest& request);

}  // namespace vramscope::pipeline
