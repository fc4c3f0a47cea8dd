// Attribution: every allocation gets one category (model::Category), the rule that decided it,
// how sure that rule is, the phase it was allocated in and the operation that produced it where
// one can be named. It reads the trace through its interpretation (model::TraceView) and never
// edits either.
//
// Evidence, strongest first:
//   1. what the source itself recorded (PyTorch's memory-profiler categories, a capture sidecar);
//   2. C++ frames: cuBLAS/cuDNN workspace code, AccumulateGrad, the autograd engine, fused
//      optimizer kernels;
//   3. Python frames: nn.Module calls, torch/optim, Tensor.backward, parameter creation and
//      state-dict loading, copies to the device outside any module;
//   4. lifetimes against the detected phases (phases.h): allocated in forward and released in
//      backward = activation; created in backward and kept past it = gradient; created by the
//      step and kept = optimizer state; alive across the whole trace = model state;
//   5. sizes: tensors alive before the trace in the numbers Adam keeps per trainable parameter,
//      the cuBLAS workspace size.
// Each rule's sentence is in RuleText(rule_id), so a user can ask "why is this an activation?".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attribution/phases.h"
#include "attribution/stack_facts.h"
#include "model/category.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::attribution {

using model::Category;
using model::CategoryName;
using model::kCategoryCount;

enum class Confidence : uint8_t { kLow, kMedium, kHigh };
const char* ConfidenceName(Confidence confidence);

struct AllocationInfo {
  Category category = Category::kUnknown;
  Confidence confidence = Confidence::kLow;
  uint8_t rule_id =
      0;  // Attribution::RuleText(rule_id): a sentence a user reads, why this category
  Phase phase = Phase::kUnknown;  // the phase of its alloc event (kUnknown: before the trace)
  // Ids into Attribution::names.
  model::StringId operation = model::kEmptyString;    // "aten::addmm", "linear", ...
  model::StringId module_kind = model::kEmptyString;  // "linear", "conv", ... (nn.Module file)
};
static_assert(sizeof(AllocationInfo) == 12, "one per tensor allocation: keep it small");

struct Attribution {
  std::vector<AllocationInfo> allocations;  // parallel to Trace::allocations
  Phases phases;
  // What the attribution could and could not tell, one line each (evidence used, caveats).
  std::vector<std::string> notes;
  // The operation and module names AllocationInfo refers to.
  model::StringTable names;
  std::string_view Name(model::StringId id) const { return names.Get(id); }
  // The rules' sentences by id (AllocationInfo::rule_id), in order of first use; [0] is "".
  std::vector<const char*> rules = {""};
  const char* RuleText(uint8_t rule_id) const;
};

Attribution Attribute(const model::TraceView& view);

}  // namespace vramscope::attribution
