// The user's overrides of the memory held outside the allocator (the CUDA context, libraries,
// NCCL), in MiB, as the requests of `predict`, `simulate --gpu` and `explain` take them
// (device/non_pytorch_memory.h holds the model they override).
#pragma once

#include "device/non_pytorch_memory.h"

namespace vramscope::pipeline {

using OutsideOverrides = device::OutsideOverrides;

}  // namespace vramscope::pipeline
