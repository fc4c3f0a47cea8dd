// The GPUs vramscope knows by name (`--gpu h100-80gb`): their memory as PyTorch sees it and their
// architecture, each figure with where it comes from. Shared by `predict` (the capacity of the
// predicted run), `explain` (which GPU an OOM message's total capacity points to) and the
// non-PyTorch memory model (src/device/non_pytorch_memory.h), whose figures depend on the
// architecture.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vramscope::device {

enum class Vendor : uint8_t { kNvidia, kAmd };
const char* VendorName(Vendor vendor);  // "nvidia", "amd"

struct GpuSpec {
  std::string key;            // "h100-80gb"
  std::string name;           // "NVIDIA H100 80GB HBM3"
  uint64_t total_memory = 0;  // torch.cuda.get_device_properties().total_memory
  // NVIDIA: compute capability x10 (90 for sm_90). AMD: the gfx target's number (942 for gfx942,
  // 90a is written 910 for MI200's gfx90a).
  int sm = 0;
  std::string memory_source;  // where total_memory comes from
  Vendor vendor = Vendor::kNvidia;
};

// The GPUs `--gpu` knows, in table order.
const std::vector<GpuSpec>& KnownGpus();
// A GPU by key ("h100-80gb", case-insensitive, '_' or '-'), or an error listing the keys.
Result<GpuSpec> FindGpu(std::string_view key);
// The known GPU a device name refers to (NVML's or torch's: "NVIDIA H100 80GB HBM3", case
// ignored, the catalog's name contained in it), or null.
const GpuSpec* FindGpuByName(std::string_view name);
// The known GPUs whose total memory lies in [lo, hi] (an OOM message's rounded "total capacity").
std::vector<GpuSpec> GpusWithCapacity(uint64_t lo, uint64_t hi);

}  // namespace vramscope::device
