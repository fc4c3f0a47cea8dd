#include "attribution/attribution.h"

#include <vector>

namespace vramscope::attribution {

namespace {

// Rule sentences by id. Rules are string literals in Decide, so their addresses identify them.
std::vector<const char*>& RuleTable() {
  static std::vector<const char*> table = {""};
  return table;
}

uint8_t RuleId(const char* rule) {
  std::vector<const char*>& table = RuleTable();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] == rule) return static_cast<uint8_t>(i);
  }
  table.push_back(rule);
  return static_cast<uint8_t>(table.size() - 1);
}

}  // namespace

const char* CategoryName(Category category) {
  switch (category) {
    case Category::kWeight:
      return "weight";
    case Category::kGradient:
      return "gradient";
    case Category::kOptimizerState:
      return "optimizer_state";
    case Category::kActivation:
      return "activation";
    case Category::kInput:
      return "input";
    case Category::kWorkspace:
      return "workspace";
    case Category::kTemporary:
      return "temporary";
    case Category::kUnknown:
      return "unknown";
  }
  return "?";
}

const char* RuleText(uint8_t rule_id) {
  const std::vector<const char*>& table = RuleTable();
  return rule_id < table.size() ? table[rule_id] : "";
}

const char* ConfidenceName(Confidence confidence) {
  switch (confidence) {
    case Confidence::kLow:
      return "low";
    case Confidence::kMedium:
      return "medium";
    case Confidence::kHigh:
      return "high";
  }
  return "?";
}

namespace {

AllocationInfo Decide(const model::Allocation& a, const StackFacts& at_alloc,
                      const StackFacts& at_free) {
  AllocationInfo info;
  auto set = [&](Category c, Confidence conf, const char* rule) {
    info.category = c;
    info.confidence = conf;
    info.rule_id = RuleId(rule);
  };
  const bool freed = !a.alive_at_end;
  if (at_alloc.workspace) {
    set(Category::kWorkspace, Confidence::kHigh, "allocated by cuBLAS/cuDNN workspace code");
  } else if (at_alloc.accumulate_grad) {
    set(Category::kGradient, Confidence::kHigh,
        "allocated by AccumulateGrad (a parameter's .grad)");
  } else if (at_alloc.weight_creation && !at_alloc.in_backward && !at_alloc.in_optimizer) {
    set(Category::kWeight, Confidence::kMedium,
        "allocated while creating or moving module parameters (Module.to/_apply, "
        "state-dict load, parameter init)");
  } else if (at_alloc.in_optimizer) {
    if (!freed) {
      set(Category::kOptimizerState, Confidence::kMedium,
          "allocated in torch.optim and still alive at the end");
    } else {
      set(Category::kTemporary, Confidence::kMedium, "allocated and freed inside torch.optim");
    }
  } else if (at_alloc.in_backward) {
    if (at_free.zero_grad || (!freed && a.requested_size > 0 && !at_alloc.in_forward)) {
      set(Category::kGradient, Confidence::kLow,
          "created in backward and kept until zero_grad / the end of the trace");
    } else {
      set(Category::kTemporary, Confidence::kMedium,
          "created and freed during backward (gradients of activations, scratch)");
    }
  } else if (at_alloc.in_forward) {
    if (freed && at_free.in_backward) {
      set(Category::kActivation, Confidence::kHigh,
          "allocated in forward and released by backward (saved for backward)");
    } else if (freed && at_free.known && !at_free.in_backward) {
      set(Category::kTemporary, Confidence::kMedium,
          "allocated in forward and freed before backward");
    } else if (!freed) {
      set(Category::kActivation, Confidence::kLow,
          "allocated in forward and still alive at the end of the trace");
    } else {
      set(Category::kActivation, Confidence::kLow,
          "allocated in forward; the free was recorded without a stack");
    }
  } else if (at_alloc.host_copy) {
    set(Category::kInput, Confidence::kLow,
        "copied to the device outside any module (a batch moved with .to()/.cuda())");
  } else if (!at_alloc.known) {
    set(Category::kUnknown, Confidence::kLow, "no stack was recorded for this allocation");
  } else {
    set(Category::kUnknown, Confidence::kLow, "no rule matched its stack");
  }
  info.operation = at_alloc.operation;
  info.module_kind = at_alloc.module_kind;
  return info;
}

}  // namespace

Attribution Attribute(model::Trace& trace) {
  StackFactsCache facts(trace);
  Attribution out;
  out.allocations.reserve(trace.allocations.size());
  for (const model::Allocation& a : trace.allocations) {
    // Copy: Get() may grow the cache and move earlier entries.
    const StackFacts at_alloc = facts.Get(a.alloc_stack);
    const StackFacts at_free = facts.Get(a.free_stack);
    out.allocations.push_back(Decide(a, at_alloc, at_free));
  }
  return out;
}

}  // namespace vramscope::attribution
