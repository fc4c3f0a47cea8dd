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
  // torch.autocast's cast of an op's argument (at::autocast::cached_cast: the loss's fp32 copy
  // of bf16 logits, a weight's bf16 copy): a _to_copy on the device, not a batch copied to it.
  bool autocast_cast = false;
  // FSDP2 (torch.distributed.fsdp.fully_shard): a unit's parameters being all-gathered
  // (FSDPParamGroup.unshard / wait_for_unshard: the copy-in buffer and the unsharded
  // parameters), and its gradients reduce-scattered (FSDPParamGroup.post_backward).
  bool fsdp_unshard = false;
  bool fsdp_reduce = false;
  model::StringId operation = model::kEmptyString;    // "aten::addmm", "linear", ...
  model::StringId module_kind = model::kEmptyString;  // "linear", "conv", ... from torch/nn/modules
};

class StackFactsCache {
 public:
  explicit StackFactsCache(const model::Trace& trace);
  const StackFacts& Get(model::StackId stack);
  // The names StackFacts::operation and module_kind refer to. The trace's own string table stays
  // as the source read it: names derived from frames are interned here.
  std::string_view Name(model::StringId id) const { return names_.Get(id); }
  model::StringTable& names() { return names_; }

 private:
  StackFacts Compute(model::StackId stack);

  const model::Trace& trace_;
  model::StringTable names_;
  std::vector<StackFacts> cache_;
  std::vector<bool> done_;
};

}  // namespace vramscope::attribution
