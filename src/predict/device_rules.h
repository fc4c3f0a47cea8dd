// What the GPU and the PyTorch version decide about a training step's memory, besides the
// model: the capacity the caching allocator can use, and the workspaces CUDA libraries take
// (cuBLAS per thread, cuBLASLt, cuDNN). Sources: the shared spec (allocator-policy.md) and the
// H200 goldens (goldens/h200, torch 2.11), where each rule below is visible in the trace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "device/gpu_catalog.h"
#include "predict/tensor_stream.h"

namespace vramscope::predict {

using device::FindGpu;
using device::GpuSpec;
using device::KnownGpus;

struct DeviceRules {
  std::string torch_version = "2.11";
  int sm = 90;
  // cuBLAS workspace per (handle, stream): one for the main thread, one for the autograd
  // thread. 0 disables (CUBLAS_WORKSPACE_CONFIG=:0:0).
  uint64_t cublas_workspace = 32ull << 20;
  // cuBLASLt workspace kept per handle, taken by the first addmm with a bias epilogue on the
  // main thread (seen on the H200 with torch 2.11); 0: none.
  uint64_t cublaslt_workspace = 1ull << 20;
  // The CUDA context and library handles outside the allocator: taken off the GPU's memory
  // before the allocator can reserve any.
  uint64_t context_bytes = 0;
};

// The rules for a GPU (sm: GpuSpec::sm) and a PyTorch version ("2.11", "2.1", ...). On AMD GPUs
// (ROCm builds) the same two workspaces are hipBLAS's and hipBLASLt's.
Result<DeviceRules> RulesFor(int sm, std::string_view torch_version,
                             device::Vendor vendor = device::Vendor::kNvidia);

// Expands the kMatmul/kConv markers of `stream` into workspace allocations by `rules`: the
// cuBLAS workspace of a thread at its first matmul (kept for the rest of the run), the cuBLASLt
// workspace at the first addmm of the main thread, a cuDNN workspace around each convolution
// that names one. Markers are kept (they allocate nothing themselves).
void AddWorkspaces(TensorStream& stream, const DeviceRules& rules);

}  // namespace vramscope::predict
