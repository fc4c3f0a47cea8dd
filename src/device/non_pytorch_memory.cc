#include "device/non_pytorch_memory.h"

#include <fmt/format.h>

namespace vramscope::device {

namespace {

constexpr uint64_t kMiB = 1ull << 20;

struct ContextRule {
  uint64_t bytes;
  Evidence evidence;
  const char* source;
};

// The context of a process that made one tensor, under lazy loading (CUDA >= 11.7 with PyTorch
// >= 1.13). docs/design/non-pytorch-memory.md lists each source.
ContextRule LazyContext(Vendor vendor, int sm) {
  if (vendor == Vendor::kAmd) {
    return {512 * kMiB, Evidence::kAssumed,
            "no published HIP context size; assumed like a large NVIDIA part's"};
  }
  if (sm >= 100) {
    return {612 * kMiB, Evidence::kMeasured,
            "612 MiB on a B200, nvidia-smi after torch.cuda.mem_get_info() "
            "(github.com/unslothai/unsloth/pull/8669)"};
  }
  if (sm >= 90) {
    // goldens/h100/device_overheads.json (scripts/measure_device_overheads.py): NVML's figure
    // for a process that made one tensor, less torch's 2 MiB reserved. It agrees with the H200's
    // OOM message (goldens/h200/oom_gpt_fp32.json: 668 to 679 MiB outside the allocator after a
    // GPT step = this context + cuBLAS's 66 MiB).
    return {610 * kMiB, Evidence::kMeasured,
            "610 MiB on an H100 (driver 580.159.04, torch 2.11.0+cu130), NVML after the first "
            "tensor (goldens/h100/device_overheads.json)"};
  }
  if (sm == 89 || sm == 80) {
    return {426 * kMiB, Evidence::kMeasured,
            sm == 80 ? "426 MiB on an A100-80GB (PG509-210), driver 535, CUDA 12.2, nvidia-smi "
                       "(github.com/meta-pytorch/torchrec/pull/3580)"
                     : "426 MiB on an RTX 6000 Ada, torch 2.10+cu130, nvidia-smi "
                       "(github.com/unslothai/unsloth-zoo/pull/1053)"};
  }
  if (sm >= 86) {
    return {256 * kMiB, Evidence::kMeasured,
            "256 MiB on an RTX 3090, torch 2.7.1+cu128, nvidia-smi "
            "(github.com/invoke-ai/InvokeAI/issues/9413)"};
  }
  return {300 * kMiB, Evidence::kAssumed,
          "\"about 300 MB\" with lazy loading, a PyTorch maintainer "
          "(github.com/pytorch/pytorch/issues/107667); no figure for this architecture"};
}

}  // namespace

const char* EvidenceName(Evidence evidence) {
  switch (evidence) {
    case Evidence::kMeasured:
      return "measured";
    case Evidence::kDocumented:
      return "documented";
    case Evidence::kAssumed:
      return "assumed";
    case Evidence::kGiven:
      return "given";
  }
  return "assumed";
}

uint64_t OutsideMemory::Total() const {
  uint64_t total = 0;
  for (const OutsideFigure& f : figures) total += f.bytes;
  return total;
}

uint64_t OutsideMemory::Of(const std::string& item) const {
  for (const OutsideFigure& f : figures) {
    if (f.item == item) return f.bytes;
  }
  return 0;
}

OutsideSetup SetupFor(const GpuSpec& gpu) {
  OutsideSetup setup;
  setup.vendor = gpu.vendor;
  setup.sm = gpu.sm;
  setup.gpu_name = gpu.name;
  return setup;
}

OutsideMemory EstimateOutsideAllocator(const OutsideSetup& s) {
  OutsideMemory out;
  // The context: the driver's per-context state and the module images loaded into it.
  if (s.context_bytes) {
    out.figures.push_back(
        {"CUDA context", *s.context_bytes, Evidence::kGiven, "--cuda-context", "--cuda-context"});
  } else {
    const ContextRule rule = LazyContext(s.vendor, s.sm);
    OutsideFigure f{"CUDA context", rule.bytes, rule.evidence, rule.source, "--cuda-context"};
    if (!s.lazy_loading) {
      // All of PyTorch's kernels loaded at start. On sm_90 our H100 measured 1250 MiB eager
      // against 610 MiB lazy; elsewhere PR #86509's 273.7 MiB lazy against 635.8 MiB eager.
      const bool hopper = s.vendor == Vendor::kNvidia && s.sm >= 90 && s.sm < 100;
      f.bytes += (hopper ? 640 : 362) * kMiB;
      f.source += hopper ? "; + 640 MiB for eager module loading (CUDA_MODULE_LOADING=EAGER), "
                           "measured on the same H100"
                         : "; + 362 MiB for eager module loading (CUDA_MODULE_LOADING=EAGER), "
                           "measured in github.com/pytorch/pytorch/pull/86509";
    }
    out.figures.push_back(std::move(f));
  }
  // The libraries' own kernels, loaded into the context at their first call under lazy loading
  // (their workspaces come from PyTorch's allocator and are not counted here).
  if (s.library_bytes) {
    out.figures.push_back({"libraries' kernels", *s.library_bytes, Evidence::kGiven,
                           "--library-memory", "--library-memory"});
  } else {
    // Measured on our H100 (goldens/h100/device_overheads.json): cuBLAS's kernels take 66 MiB
    // at the first fp32 matmul (cuBLASLt's bf16 path then adds nothing), cuDNN's 10 MiB at the
    // first convolution. Other architectures have no measurement; their images differ in size.
    const bool hopper = s.vendor == Vendor::kNvidia && s.sm >= 90 && s.sm < 100;
    out.figures.push_back(
        {"libraries' kernels", 76 * kMiB, hopper ? Evidence::kMeasured : Evidence::kAssumed,
         hopper ? "cuBLAS 66 MiB + cuDNN 10 MiB, loaded on first use, measured on an H100 "
                  "(goldens/h100/device_overheads.json)"
                : "cuBLAS 66 MiB + cuDNN 10 MiB as measured on an H100; not measured on this "
                  "architecture",
         "--library-memory"});
  }
  if (s.nccl_bytes) {
    out.figures.push_back(
        {"NCCL", *s.nccl_bytes, Evidence::kGiven, "--nccl-memory", "--nccl-memory"});
  } else if (s.nccl_communicators > 0) {
    // Per connection (NCCL's p2p transport): the receiver's ALIGN_2MiB(LL 512 KiB + LL128
    // 4.6875 MiB + NCCL_BUFFSIZE + header) and the sender's 2 MiB; 10 + 2 MiB by default, seen as
    // the 10485760 and 2097152 B allocations of NVIDIA/nccl#1685.
    const uint64_t recv = RoundToDriverPages((512 << 10) + 4915200 + s.nccl_buffsize + 4096);
    const uint64_t connection = recv + kDriverPage;
    // A ring and a tree per collective channel.
    uint64_t per_comm = static_cast<uint64_t>(s.nccl_channels) * 2 * connection;
    std::string source = fmt::format(
        "{} channels x (ring + tree) x {} MiB per connection (NCCL_BUFFSIZE {} MiB; NCCL "
        "source, src/transport/p2p.cc)",
        s.nccl_channels, connection / kMiB, s.nccl_buffsize / kMiB);
    if (s.nccl_p2p_peers > 0) {
      per_comm += static_cast<uint64_t>(s.nccl_p2p_peers) *
                  static_cast<uint64_t>(s.nccl_p2p_channels_per_peer) * connection;
      source += fmt::format(" + {} send/recv peers x {} channels", s.nccl_p2p_peers,
                            s.nccl_p2p_channels_per_peer);
    }
    if (s.nccl_nvls) {
      per_comm += 256 * kMiB;
      source += " + 256 MiB NVLS buffers (NCCL >= 2.22, 8 GPUs; NCCL_NVLS_ENABLE=0 removes them)";
    }
    // Once per process: NCCL's own kernels and state. A communicator of world size 1 (no
    // connection, so no buffer) after one all_reduce grew the process by 564 MiB on our H100.
    constexpr uint64_t kNcclFixed = 564 * kMiB;
    out.figures.push_back(
        {"NCCL", kNcclFixed + per_comm * static_cast<uint64_t>(s.nccl_communicators),
         Evidence::kMeasured,
         fmt::format("564 MiB of NCCL's kernels and state, measured on an H100 (NCCL 2.28.9, "
                     "goldens/h100/device_overheads.json) + {} communicator(s) x ({})",
                     s.nccl_communicators, source),
         "--nccl-memory"});
  }
  return out;
}

}  // namespace vramscope::device
