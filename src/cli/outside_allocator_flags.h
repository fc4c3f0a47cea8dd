// The flags that override the non-PyTorch memory model's figures (src/device/
// non_pytorch_memory.h), registered the same way by every verb that uses the model: predict,
// simulate --gpu and explain. They bind to the requests' pipeline::OutsideOverrides.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "pipeline/outside_overrides.h"

namespace vramscope::cli {

// --cuda-context, --library-memory and --nccl-memory (MiB). `nccl_default` says what the verb
// assumes without --nccl-memory.
void AddOutsideAllocatorFlags(CLI::App& cmd, pipeline::OutsideOverrides& flags,
                              const std::string& nccl_default);

}  // namespace vramscope::cli
