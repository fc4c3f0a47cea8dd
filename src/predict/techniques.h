// The menu of memory-saving techniques a set-up may use (model_spec.h's TrainingSetup and
// OptimizerSetup): their names, and what each saves on the GPU and costs on the host in this
// set-up, found by predicting the set-up once more without it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "predict/predict.h"

namespace vramscope::predict {

struct ActiveTechnique {
  std::string name;                          // "chunked cross-entropy (8 chunks)"
  std::function<void(TrainingSetup&)> undo;  // the set-up without it
};
// The techniques `setup` uses, in the menu's order.
std::vector<ActiveTechnique> ActiveTechniques(const TrainingSetup& setup);

// A set-up's peak reserved with no capacity limit, and the host memory it holds: the stream and
// the allocator model, without a report. What the effects below and --plan (plan.h) compare.
// `oom`: out of memory even so (an expandable segment past its virtual range).
struct UnlimitedPeaks {
  uint64_t reserved = 0;
  uint64_t host = 0;
  uint64_t paged = 0;
  bool oom = false;
};
Result<UnlimitedPeaks> PeaksWithoutLimit(const LoadedModel& model, const PredictRequest& request);

struct TechniqueEffect {
  std::string name;
  // Peak reserved without the technique minus with it (no capacity limit on either): what it
  // saves on the GPU, negative when it costs.
  int64_t gpu_saved = 0;
  int64_t host_added = 0;  // host memory it adds (pinned buffers, offloaded states)
};

// The effect of each technique `request` uses: two predictions' peaks each (the stream and the
// allocator model, without a report). `control`'s token is checked between them.
Result<std::vector<TechniqueEffect>> TechniqueEffects(const LoadedModel& model,
                                                      const PredictRequest& request,
                                                      const Control& control = {});

// "saves 3.20 GiB on the GPU, adds 1.5 GiB of host memory".
std::string EffectText(const TechniqueEffect& effect);

}  // namespace vramscope::predict
