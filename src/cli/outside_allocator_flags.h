// The flags that override the non-PyTorch memory model's figures (src/device/
// non_pytorch_memory.h), registered the same way by every verb that uses the model: predict,
// simulate --gpu and explain.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "device/non_pytorch_memory.h"

namespace vramscope::cli {

struct OutsideAllocatorFlags {
  std::optional<uint64_t> cuda_context_mib;    // --cuda-context
  std::optional<uint64_t> library_memory_mib;  // --library-memory
  std::optional<uint64_t> nccl_memory_mib;     // --nccl-memory
};

// --cuda-context, --library-memory and --nccl-memory (MiB). `nccl_default` says what the verb
// assumes without --nccl-memory.
void AddOutsideAllocatorFlags(CLI::App& cmd, OutsideAllocatorFlags& flags,
                              const std::string& nccl_default);

// The flags given, as overrides of `setup`'s figures.
void ApplyOutsideAllocatorFlags(const OutsideAllocatorFlags& flags, device::OutsideSetup& setup);

}  // namespace vramscope::cli
