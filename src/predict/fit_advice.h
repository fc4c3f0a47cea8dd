// What `vramscope predict --fit` says when not even size 1 fits: by how much the step misses the
// capacity, the cheapest set-up where size 1 fits (the plan's first option, plan.h), and which of
// the set-up's levers are left to pull (never one the request already pulled: a mixed or half
// precision is not told to use mixed precision, checkpointing on is not told to turn
// checkpointing on, and so on).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "predict/plan.h"
#include "predict/predict.h"

namespace vramscope::predict {

// The options that could still lower the step's memory, in the order the message gives them:
// precision, checkpointing, LoRA, sharding, the other dimension (a shorter --seq, a smaller
// --image-size or --batch), and always a larger GPU last. Only levers the model can take: a
// ResNet or a layer list is not told to use checkpointing or LoRA.
std::vector<std::string> RemainingLevers(const ModelSpec& model, const PredictRequest& request,
                                         FitDimension dimension);

struct NoFitAdvice {
  std::string message;           // "not even batch 1 fits: batch 1 needs ..., try ..."
  uint64_t needed_reserved = 0;  // size 1's peak reserved with no capacity limit
  uint64_t capacity = 0;         // what the allocator may reserve
  uint64_t shortfall = 0;        // needed_reserved - capacity
  std::vector<std::string> levers;
  // The plan at size 1 (`--plan` on the --fit target): the set-ups where it fits, cheapest
  // first, or why none does. Empty when no plan ran.
  std::vector<PlanOption> options;
  std::string nothing_fits;
  std::string plan_command;  // "--plan rtx4090": what lists the options
};

// For a FitResult with largest == 0 (Fit fills needed_reserved then). `plan`: the plan of the
// set-up at size 1 for the same target (`plan_budget` as --plan takes it), when one ran. With
// options, the advice names the cheapest; with none, the levers it leaves out are those the plan
// searched (checkpointing, LoRA).
NoFitAdvice ExplainNoFit(const ModelSpec& model, const PredictRequest& request,
                         const FitResult& fit, const PlanResult* plan = nullptr,
                         const std::string& plan_budget = "");

}  // namespace vramscope::predict
