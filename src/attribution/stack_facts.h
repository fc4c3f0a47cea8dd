// What a stack says about the code that allocated (or freed) a tensor: which phase of a training
// step it ran in, whether it is the optimizer, gradient accumulation, a library workspace or
// weight creation, and which operation produced the tensor. Computed once per distinct stack
// (a million events share a few thousand stacks) and cached.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/trace.h"

namespace vramscope::attribution {

struct StackFacts {
  bool known = false;            // the stack has at least one frame
  bool in_forward = false;       // inside an nn.Module call (Module._call_impl / forward)
  bool in_backward = false;      // inside the autograd engine or Tensor.backward
  bool in_optimizer = false;     // inside torch.optim (or a fused optimizer kernel)
  bool accumulate_grad = false;  // AccumulateGrad: a parameter's .grad being created
  bool weight_creation = false;  // parameter creation, Module.to/cuda/_apply, state-dict load
  bool workspace = false;        // cuBLAS/cuBLASLt/cuDNN workspace
  bool zero_grad = false;        // Optimizer.zero_grad / Module.zero_grad
  bool host_copy = false;        // a copy to the device (Tensor.to / .cuda) outside any module
  model::StringId operation = model::kEmptyString;    // "aten::addmm", "linear", ...
  model::StringId module_kind = model::kEmptyString;  // "linear", "conv", ... from torch/nn/modules
};

class StackFactsCache {
 public:
  // `trace` is non-const only to intern operation names into its string table.
  explicit StackFactsCache(model::Trace& trace);
  const StackFacts& Get(model::StackId stack);

 private:
  StackFacts Compute(model::StackId stack);

  model::Trace& trace_;
  std::vector<StackFacts> cache_;
  std::vector<bool> done_;
};

}  // namespace vramscope::attribution
