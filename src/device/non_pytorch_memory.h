// The memory a training process holds on its GPU outside PyTorch's caching allocator: what makes
// nvidia-smi show more than torch.cuda.memory_reserved(). Used by `explain` (is this process's
// non-PyTorch memory more than a context and libraries?), `predict` (what the allocator may
// reserve) and `report` (decomposing what NVML measured during a captured run).
//
// Every figure says where it comes from: a measurement on a named GPU, a documented rule (vendor
// documentation, library source), an assumption, or a flag the user gave; the sources and their
// numbers are in docs/design/non-pytorch-memory.md. What is NOT here, because PyTorch takes it
// from its own allocator and a snapshot already shows it: the cuBLAS, cuBLASLt and cuDNN
// workspaces (src/predict/device_rules.h models those).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device/gpu_catalog.h"

namespace vramscope::device {

enum class Evidence : uint8_t { kMeasured, kDocumented, kAssumed, kGiven };
const char* EvidenceName(Evidence evidence);  // "measured", "documented", "assumed", "given"

struct OutsideFigure {
  std::string item;  // "CUDA context", "libraries' kernels", "NCCL", "page rounding"
  uint64_t bytes = 0;
  Evidence evidence = Evidence::kAssumed;
  std::string source;  // the measurement, rule or assumption behind it
  std::string flag;    // the flag that overrides it
};

struct OutsideSetup {
  Vendor vendor = Vendor::kNvidia;
  int sm = 90;  // GpuSpec::sm
  std::string gpu_name;
  // CUDA_MODULE_LOADING=LAZY: PyTorch sets it itself since 1.13 unless the user set another value.
  bool lazy_loading = true;
  // NCCL: communicators this process holds (0: none), and what one costs.
  int nccl_communicators = 0;
  int nccl_channels = 16;               // collective channels per communicator
  uint64_t nccl_buffsize = 4ull << 20;  // NCCL_BUFFSIZE
  bool nccl_nvls = false;               // NVLink SHARP buffers (H100/H200/B200 behind NVSwitch)
  int nccl_p2p_peers = 0;               // peers of send/recv or all-to-all
  int nccl_p2p_channels_per_peer = 2;
  // Overrides, in bytes, of the model's figures (--cuda-context, --library-memory,
  // --nccl-memory).
  std::optional<uint64_t> context_bytes, library_bytes, nccl_bytes;
};

struct OutsideMemory {
  std::vector<OutsideFigure> figures;
  uint64_t Total() const;
  // The figure of an item, 0 when the model has none.
  uint64_t Of(const std::string& item) const;
};

// The CUDA (or HIP) context, the libraries' lazily loaded kernels and, when the set-up names
// communicators, NCCL's buffers: what this process holds beside memory_reserved().
OutsideMemory EstimateOutsideAllocator(const OutsideSetup& setup);

// The set-up of a known GPU (its vendor and architecture), the rest at its defaults.
OutsideSetup SetupFor(const GpuSpec& gpu);

// The user's overrides of the model's figures, in MiB (--cuda-context, --library-memory,
// --nccl-memory; the same keywords in Python).
struct OutsideOverrides {
  std::optional<uint64_t> cuda_context_mib;
  std::optional<uint64_t> library_memory_mib;
  std::optional<uint64_t> nccl_memory_mib;

  void ApplyTo(OutsideSetup& setup) const {
    if (cuda_context_mib) setup.context_bytes = *cuda_context_mib << 20;
    if (library_memory_mib) setup.library_bytes = *library_memory_mib << 20;
    if (nccl_memory_mib) setup.nccl_bytes = *nccl_memory_mib << 20;
  }
};

// The memory left to PyTorch's allocator on a GPU of `total` bytes when `outside` bytes are held
// outside it (the CUDA context, libraries, NCCL): the one rule every verb uses (`predict`'s
// capacity, a layout's per-rank budget, `simulate --gpu`). 0 when nothing is left.
inline uint64_t LeftToAllocator(uint64_t total, uint64_t outside) {
  return total > outside ? total - outside : 0;
}

// The granularity of the driver's allocations (cudaMalloc, cuMemCreate): 2 MiB pages. A request
// outside the caching allocator costs its size rounded up to this.
inline constexpr uint64_t kDriverPage = 2ull << 20;
inline uint64_t RoundToDriverPages(uint64_t bytes) {
  return (bytes + kDriverPage - 1) / kDriverPage * kDriverPage;
}

}  // namespace vramscope::device
