// nvidia-smi's figure decomposed: for a run `vramscope run` captured with NVML samples, the
// device's used memory at its highest sample split into what PyTorch reserved (torch's own
// counter), what the non-PyTorch memory model expects outside the allocator (CUDA context,
// libraries' kernels, NCCL: src/device/non_pytorch_memory.h), the rest of this process's own
// NVML figure that neither explains, other processes (NVML's list) and what no listed process
// holds (the driver's reservation, processes NVML does not show). The parts add up to the
// device's used bytes exactly; the two rests are what the model does not explain, shown rather
// than hidden.
//
// A pure function of the interpretation's samples and the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device/non_pytorch_memory.h"
#include "model/interpretation.h"

namespace vramscope::analysis {

struct DeviceUsagePart {
  std::string what;
  int64_t bytes = 0;
  std::string how;  // "measured (NVML)", "measured (torch)", "model: ...", "the rest"
};

struct DeviceUsageDecomposition {
  bool recorded = false;  // the input had NVML samples (or a reason there are none)
  bool available = false;
  std::string why_not;  // when not available
  size_t samples = 0;
  // The sample decomposed: the one with the highest device_used.
  int32_t step = 0;
  std::string phase, at;
  int64_t time_us = 0;
  uint64_t device_total = 0, device_used = 0;
  std::vector<DeviceUsagePart> parts;  // sums to device_used
  // This process's NVML figure less PyTorch's reservation and the model's expectation: what
  // the model does not explain (negative: the model expects more than there was). Unset when
  // NVML did not list this process (a container).
  std::optional<int64_t> unexplained;
  std::string gpu;                 // the GPU the model's figures are for
  device::OutsideMemory expected;  // the model's figures
};

// `setup`: the non-PyTorch set-up to expect (its vendor and sm are replaced by those of the GPU
// named in the samples when vramscope knows it).
DeviceUsageDecomposition DecomposeDeviceUsage(const std::optional<model::DeviceUsage>& usage,
                                              device::OutsideSetup setup = {});

}  // namespace vramscope::analysis
