// What the per-rank estimate's tests share: a preset loaded, and the bf16 AdamW set-up their
// hand counts use.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "predict/model_description.h"
#include "predict/model_spec.h"

namespace vramscope::predict::testing {

inline ModelSpec Preset(const char* name) {
  auto m = LoadModelSpec(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

inline TrainingSetup Bf16Adam(uint64_t batch, uint64_t seq) {
  TrainingSetup s;
  s.batch = batch;
  s.seq = seq;
  s.precision.param = DType::kBF16;
  s.optimizer.kind = OptimizerKind::kAdamW;
  return s;
}

}  // namespace vramscope::predict::testing
