// `predict --plan`: the cheapest ways to make a training step fit a budget, searched over the
// menu of techniques (techniques.h), the micro-batch split with gradient accumulation, the
// allocator's expandable segments, ZeRO/FSDP over the budget's GPUs, and LoRA (which changes what
// is trained, so it is offered after the others), each option predicted in full by the step
// simulator and the allocator model and ranked by the cost model (plan_cost.h).
//
// The search (docs/design/techniques.md, "The plan"): every lever's levels are predicted alone
// on the set-up; levers are then added cheapest-per-byte first (free ones by what they save)
// until the step fits, and what the fit does not need is dropped again. Each further option bans
// the costliest lever of those found so far. Predictions are memoised by their set-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "predict/predict.h"

namespace vramscope::predict {

struct PlanBudget {
  int gpus = 1;              // data-parallel GPUs of the budget (each has the request's GPU)
  uint64_t host_memory = 0;  // host memory offloads may use; 0: not limited
  std::string gpu_key;       // the GPU's catalog key, for its speeds ("" for a size)
};

struct PlanOption {
  std::vector<std::string> techniques;  // in words: "8-bit AdamW states", "checkpointing"
  std::vector<std::string> flags;  // the flags to set (added, or replacing the set-up's: --batch)
  uint64_t peak_reserved = 0;      // per GPU, the allocator's peak
  uint64_t host_bytes = 0;
  double added_seconds = 0;       // the cost model's, per optimizer step
  bool changes_training = false;  // LoRA: a different training, not the same one
};

struct PlanResult {
  uint64_t capacity = 0;  // what the allocator may reserve on each GPU
  uint64_t baseline_peak = 0;
  bool baseline_fits = false;
  double step_seconds = 0;  // the cost model's compute time of the step as asked
  std::vector<PlanOption> options;
  std::string nothing_fits;  // why, when no option fits
  int simulations = 0;
  std::string speed_source;
};

Result<PlanResult> Plan(const LoadedModel& model, const PredictRequest& request,
                        const PlanBudget& budget, const Control& control = {});

}  // namespace vramscope::predict
