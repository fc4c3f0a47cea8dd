#include "attribution/attribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

namespace vramscope::attribution {

namespace {

// A rule's id in this attribution's table (Attribution::rules), added at its first use. Rules are
// string literals, so their addresses identify them.
uint8_t RuleId(std::vector<const char*>& rules, const char* rule) {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (rules[i] == rule) return static_cast<uint8_t>(i);
  }
  rules.push_back(rule);
  return static_cast<uint8_t>(rules.size() - 1);
}

}  // namespace

const char* Attribution::RuleText(uint8_t rule_id) const {
  return rule_id < rules.size() ? rules[rule_id] : "";
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

// The rules' sentences, named so that the refinement passes can test which rule decided.
constexpr const char* kRuleSource =
    "the source recorded this category (PyTorch's memory profiler, the capture sidecar, "
    "vramscope.xla from the step's pytree types, or a JAX or TensorFlow profile's rules, "
    "tallied in the notes)";
constexpr const char* kRulePersistent =
    "no stack; alive for the whole trace and allocated before it began: model state (a "
    "weight, unless sizes show optimizer state)";
constexpr const char* kRulePersistentStacked =
    "alive for the whole trace and allocated before it began, by code that is not forward, "
    "backward or the optimizer step: model state (a weight)";
constexpr const char* kRuleAdamBySize =
    "no stack; alive for the whole trace and allocated before it began, and there are three "
    "such tensors for each gradient of this size: Adam's exp_avg and exp_avg_sq beside the "
    "weight";
constexpr const char* kRuleTrainedLeaf =
    "made on or copied to the device outside any module, then given a gradient and optimizer "
    "state of its size: a leaf tensor the optimizer trains (a weight)";
constexpr const char* kRuleNotAGradient =
    "created in backward and kept past it, but no weight has its size: not a parameter's "
    "gradient (an activation gradient kept by user code)";
constexpr const char* kRuleScriptTensor =
    "created before the first forward by code outside any module, and kept to the end: a tensor "
    "the script made (an input or a constant); no module created it";
constexpr const char* kRuleWorkspaceBySize =
    "no stack; kept for the whole trace and exactly the default cuBLAS workspace size "
    "(8,519,680 B)";

struct Context {
  const model::Allocation& a;
  const StackFacts& at_alloc;
  const StackFacts& at_free;
  Phase alloc_phase;
  Phase release_phase;
  int32_t alloc_step;
  int32_t release_step;
  bool released;
  bool before_trace;
  bool step_has_backward;  // the iteration it was allocated in reaches backward in the trace
};

class Decider {
 public:
  Decider(AllocationInfo& info, std::vector<const char*>& rules) : info_(info), rules_(rules) {}
  void Set(Category c, Confidence conf, const char* rule) {
    info_.category = c;
    info_.confidence = conf;
    info_.rule_id = RuleId(rules_, rule);
  }

 private:
  AllocationInfo& info_;
  std::vector<const char*>& rules_;
};

// Lifetime rules shared by the stack-driven and the timing-only paths. `phase` is where the
// allocation was made; `conf` the confidence of that phase evidence.
bool ByPhase(const Context& c, Phase phase, Confidence conf, bool from_stack, Decider& d) {
  const bool same_step = c.released && c.release_step == c.alloc_step;
  const bool later_step = c.released && c.release_step > c.alloc_step;
  switch (phase) {
    case Phase::kOptimizer:
      if (!c.released || later_step) {
        d.Set(Category::kOptimizerState, conf,
              from_stack ? "allocated by the optimizer step and kept across steps (its state)"
                         : "allocated during the optimizer step (by timing) and kept across "
                           "steps");
      } else {
        d.Set(Category::kTemporary, conf,
              from_stack ? "allocated and freed inside the optimizer step (step scratch)"
                         : "allocated and freed during the optimizer step (by timing)");
      }
      return true;
    case Phase::kBackward:
      if (c.released && c.at_free.zero_grad) {
        d.Set(Category::kGradient, Confidence::kHigh,
              "created in backward and freed by zero_grad (a parameter's .grad)");
      } else if (c.released && c.at_free.fsdp_reduce) {
        // FSDP2 reduce-scatters a unit's unsharded gradients (matmul outputs autograd stole as
        // the gathered parameters' .grad) in post_backward and frees them there: gradients,
        // however short (plain FSDP2) or long (under pipelining, accumulated to the last
        // backward) they live.
        d.Set(Category::kGradient, from_stack ? Confidence::kHigh : conf,
              "created in backward and freed by FSDP2's post_backward (a fully_shard unit's "
              "unsharded .grad, reduce-scattered there)");
      } else if (same_step && c.release_phase == Phase::kBackward) {
        d.Set(Category::kTemporary, conf,
              from_stack ? "created and freed within backward (gradients of activations, "
                           "scratch)"
                         : "created and freed within backward (by timing)");
      } else if (!c.released) {
        d.Set(Category::kGradient, conf,
              from_stack ? "created in backward and alive at the end of the trace (a "
                           "parameter's .grad)"
                         : "created during backward (by timing) and alive at the end of the "
                           "trace");
      } else {
        d.Set(Category::kGradient, conf,
              from_stack ? "created in backward and kept past it, until the step or the next "
                           "zero_grad (a parameter's .grad)"
                         : "created during backward (by timing) and kept past it");
      }
      return true;
    case Phase::kForward:
      if (same_step && c.release_phase == Phase::kBackward) {
        d.Set(Category::kActivation, from_stack && c.at_free.in_backward ? Confidence::kHigh : conf,
              from_stack ? "allocated in forward and released during backward (saved for "
                           "backward)"
                         : "allocated during forward and released during backward (by timing)");
      } else if (same_step && c.release_phase == Phase::kForward) {
        d.Set(Category::kTemporary, conf,
              from_stack ? "allocated in forward and freed before backward began"
                         : "allocated and freed during forward (by timing)");
      } else if (!c.released && !c.step_has_backward) {
        d.Set(Category::kActivation, Confidence::kLow,
              "allocated in forward and alive when the trace ended before any backward (saved "
              "for a backward the trace does not show, or a kept output)");
      } else {
        d.Set(Category::kTemporary, conf,
              "allocated in forward and kept until after backward (the loss, logits or "
              "outputs)");
      }
      return true;
    case Phase::kBeforeForward:
    case Phase::kSetup:
      if (!c.released && phase == Phase::kSetup && c.at_alloc.known) {
        // Weights are what modules create (their constructors, reset_parameters, Module.to/
        // cuda, state-dict loads: weight_creation above) or what the optimizer steps
        // (RefineBySizes). A tensor the script made outside any module is neither.
        d.Set(Category::kInput, Confidence::kMedium, kRuleScriptTensor);
      } else if (!c.released && phase == Phase::kSetup) {
        d.Set(Category::kWeight, Confidence::kLow,
              "no stack; allocated before the first forward and kept to the end (model state)");
      } else if (c.released && (later_step || c.release_phase == Phase::kBackward ||
                                c.release_phase == Phase::kOptimizer)) {
        d.Set(Category::kInput, Confidence::kLow,
              "allocated before forward and kept through it (the batch)");
      } else if (c.released) {
        d.Set(Category::kTemporary, Confidence::kLow,
              "allocated and freed between iterations, before forward");
      } else {
        return false;
      }
      return true;
    case Phase::kUnknown:
      return false;
  }
  return false;
}

void Decide(const Context& c, const model::TraceView& view, AllocationInfo& info,
            std::vector<const char*>& rules) {
  Decider d(info, rules);
  const model::Allocation& a = c.a;
  const StackFacts& s = c.at_alloc;
  if (a.alloc_event != model::kNoEvent) {
    if (const auto recorded = view.RecordedCategory(static_cast<uint32_t>(a.alloc_event))) {
      d.Set(*recorded, Confidence::kHigh, kRuleSource);
      return;
    }
  }
  if (s.workspace) {
    d.Set(Category::kWorkspace, Confidence::kHigh,
          "allocated by cuBLAS/cuBLASLt/cuDNN workspace code");
    return;
  }
  if (s.accumulate_grad) {
    d.Set(Category::kGradient, Confidence::kHigh,
          "allocated by AccumulateGrad (a parameter's .grad)");
    return;
  }
  // FSDP2's own buffers, named by the FSDPParamGroup method on the stack (as the tracer labels
  // them): before the phase rules, which would call a unit gathered in forward and freed in
  // backward an activation.
  if (s.fsdp_reduce) {
    d.Set(Category::kGradient, Confidence::kHigh,
          "allocated by FSDP2's post_backward (a fully_shard unit's gradients, unsharded for "
          "the reduce-scatter, and their shard)");
    return;
  }
  if (s.fsdp_unshard) {
    d.Set(Category::kWeight, Confidence::kHigh,
          "allocated by FSDP2's unshard (a fully_shard unit's parameters all-gathered: the "
          "copy-in buffer and the unsharded parameters)");
    return;
  }
  if (s.weight_creation && !s.in_backward && !s.in_optimizer && !s.in_forward) {
    d.Set(Category::kWeight, Confidence::kMedium,
          "allocated while creating or moving module parameters (Module.to/_apply, "
          "state-dict load, parameter init)");
    return;
  }
  // The stack's own phase: the code that allocated it. zero_grad code has none of its own
  // (set_to_none=False fills in place).
  Phase stack_phase = Phase::kUnknown;
  if (!s.zero_grad) {
    if (s.in_backward) {
      stack_phase = Phase::kBackward;
    } else if (s.in_optimizer) {
      stack_phase = Phase::kOptimizer;
    } else if (s.in_forward) {
      stack_phase = Phase::kForward;
    }
  }
  if (stack_phase != Phase::kUnknown &&
      ByPhase(c, stack_phase, Confidence::kMedium, /*from_stack=*/true, d)) {
    return;
  }
  if (s.host_copy) {
    d.Set(Category::kInput, Confidence::kMedium,
          "copied to the device outside any module (a batch moved with .to()/.cuda())");
    return;
  }
  // No stack evidence: timing.
  if (c.before_trace) {
    if (!c.released) {
      d.Set(Category::kWeight, Confidence::kLow,
            s.known ? kRulePersistentStacked : kRulePersistent);
    } else if (c.release_phase == Phase::kBackward) {
      d.Set(Category::kActivation, Confidence::kLow,
            "alive before the trace began and released during backward (saved for backward)");
    } else {
      d.Set(Category::kTemporary, Confidence::kLow,
            "alive before the trace began and released during it");
    }
    return;
  }
  if (ByPhase(c, c.alloc_phase, Confidence::kLow, /*from_stack=*/false, d)) return;
  if (!s.known) {
    d.Set(Category::kUnknown, Confidence::kLow,
          "no stack was recorded and the phases could not be detected");
  } else {
    d.Set(Category::kUnknown, Confidence::kLow, "no rule matched its stack or its timing");
  }
}

// Refinement by sizes: tensors alive across the whole trace without a stack are model state;
// when there are three of them for each gradient of one size and the trace shows an optimizer
// step, two of each three are Adam's moments.
void RefineBySizes(const model::TraceView& view, const Phases& phases,
                   std::vector<AllocationInfo>& infos, std::vector<std::string>& notes,
                   std::vector<const char*>& rules) {
  const model::Trace& trace = view.trace;
  const uint8_t persistent = RuleId(rules, kRulePersistent);
  bool optimizer_seen = false;
  for (const Iteration& it : phases.iterations) optimizer_seen |= it.has_optimizer;
  std::map<std::pair<int32_t, uint64_t>, uint64_t> gradients;  // (device, size) -> count
  std::map<std::pair<int32_t, uint64_t>, std::vector<size_t>> state;
  for (size_t i = 0; i < infos.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    const auto key = std::make_pair(a.device, a.requested_size);
    if (infos[i].category == Category::kGradient) ++gradients[key];
    if (infos[i].rule_id == persistent) {
      if (a.requested_size == 8519680) {
        infos[i].category = Category::kWorkspace;
        infos[i].rule_id = RuleId(rules, kRuleWorkspaceBySize);
      } else {
        state[key].push_back(i);
      }
    }
  }
  // A tensor moved to the device outside any module that then gets a gradient and optimizer
  // state of its size is trained: a leaf the optimizer updates, i.e. a weight.
  std::map<std::pair<int32_t, uint64_t>, uint64_t> optimizer_state;
  for (size_t i = 0; i < infos.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (infos[i].category == Category::kOptimizerState) {
      ++optimizer_state[{a.device, a.requested_size}];
    }
  }
  // As many leaves per size as the state allows (Adam keeps two tensors per leaf, momentum
  // one), the latest allocated first: the trained copy is usually made after the original.
  const uint8_t leaf = RuleId(rules, kRuleTrainedLeaf);
  std::map<std::pair<int32_t, uint64_t>, uint64_t> leaves_left;
  for (const auto& [key, states] : optimizer_state) {
    if (gradients.count(key) > 0) leaves_left[key] = std::max<uint64_t>(1, states / 2);
  }
  for (size_t k = infos.size(); k-- > 0;) {
    const model::Allocation& a = trace.allocations[k];
    const auto left = leaves_left.find({a.device, a.requested_size});
    if (left == leaves_left.end() || left->second == 0 || !a.alive_at_end ||
        infos[k].category != Category::kInput) {
      continue;
    }
    --left->second;
    infos[k].category = Category::kWeight;
    infos[k].rule_id = leaf;
  }
  // Gradients kept past backward but of a size no weight has are not parameters' gradients.
  std::map<std::pair<int32_t, uint64_t>, bool> weight_sizes;
  bool any_weight = false;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (infos[i].category != Category::kWeight) continue;
    weight_sizes[{trace.allocations[i].device, trace.allocations[i].requested_size}] = true;
    any_weight = true;
  }
  const uint8_t not_a_gradient = RuleId(rules, kRuleNotAGradient);
  uint64_t demoted = 0;
  for (size_t i = 0; i < infos.size() && any_weight; ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (infos[i].category != Category::kGradient || infos[i].confidence == Confidence::kHigh ||
        weight_sizes.count({a.device, a.requested_size}) > 0) {
      continue;
    }
    infos[i].category = Category::kTemporary;
    infos[i].rule_id = not_a_gradient;
    ++demoted;
  }
  if (demoted > 0) {
    notes.push_back(fmt::format(
        "{} tensors created in backward and kept past it have a size no weight has: counted as "
        "temporaries (activation gradients kept by user code), not parameters' gradients",
        demoted));
  }
  if (!optimizer_seen) return;
  uint64_t moved = 0, moved_bytes = 0;
  for (auto& [key, members] : state) {
    const auto g = gradients.find(key);
    if (g == gradients.end() || members.size() < 3 * g->second) continue;
    // Moments are created after the weights: the later addresses of a size are no evidence,
    // so take the last ones in the trace's order (the dump's address order).
    const size_t moments = 2 * g->second;
    for (size_t k = members.size() - moments; k < members.size(); ++k) {
      infos[members[k]].category = Category::kOptimizerState;
      infos[members[k]].rule_id = RuleId(rules, kRuleAdamBySize);
      ++moved;
      moved_bytes += view.BlockSize(members[k]);
    }
  }
  if (moved > 0) {
    notes.push_back(fmt::format(
        "{} tensors alive before the trace ({} B) were taken as Adam's moments because there "
        "are three of each gradient's size; which of each three is the weight cannot be told "
        "without stacks",
        moved, moved_bytes));
  }
}

}  // namespace

Attribution Attribute(const model::TraceView& view) {
  const model::Trace& trace = view.trace;
  StackFactsCache facts(trace);
  Attribution out;
  out.phases = DetectPhases(view, facts);
  const Phases& phases = out.phases;
  // Which iterations reach backward, by (device, step).
  std::map<std::pair<int32_t, int32_t>, bool> step_backward;
  for (const Iteration& it : phases.iterations) {
    step_backward[{it.device, it.step}] = it.has_backward;
  }
  out.allocations.reserve(trace.allocations.size());
  for (const model::Allocation& a : trace.allocations) {
    // Copies: Get() may grow the cache and move earlier entries.
    const StackFacts at_alloc = facts.Get(a.alloc_stack);
    const StackFacts at_free = facts.Get(a.free_stack);
    const int64_t release = a.ReleaseEvent();
    const int32_t alloc_step = phases.StepAt(a.alloc_event);
    const auto backward = step_backward.find({a.device, alloc_step});
    const Context c{a,
                    at_alloc,
                    at_free,
                    phases.At(a.alloc_event),
                    phases.At(release),
                    alloc_step,
                    phases.StepAt(release),
                    release != model::kNoEvent,
                    a.alloc_event == model::kNoEvent,
                    backward != step_backward.end() && backward->second};
    AllocationInfo info;
    Decide(c, view, info, out.rules);
    info.phase = c.alloc_phase;
    info.operation = at_alloc.operation;
    info.module_kind = at_alloc.module_kind;
    if (a.alloc_event != model::kNoEvent) {
      const auto event = static_cast<uint32_t>(a.alloc_event);
      if (auto op = trace.events.operation.find(event); op != trace.events.operation.end()) {
        info.operation = facts.names().Intern(trace.strings.Get(op->second));
      }
    }
    out.allocations.push_back(info);
  }
  RefineBySizes(view, phases, out.allocations, out.notes, out.rules);
  out.names = std::move(facts.names());
  out.notes.insert(out.notes.begin(), fmt::format("phases found from {}", phases.evidence));
  return out;
}

}  // namespace vramscope::attribution
