// `predict --plan` on the cases the issue names: every option it offers fits its budget under
// the allocator model (predicted again here), the cheapest comes first, and it says when nothing
// can fit.
#include "predict/plan.h"

#include <gtest/gtest.h>

#include "predict/model_description.h"

namespace vramscope::predict {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

PredictRequest Request(const std::string& model, uint64_t seq, uint64_t gpu_bytes) {
  PredictRequest r;
  r.model = model;
  r.setup.seq = seq;
  r.setup.precision.param = DType::kBF16;
  r.capacity = gpu_bytes;
  return r;
}

bool HasTechnique(const PlanOption& o, std::string_view name) {
  for (const std::string& t : o.techniques) {
    if (t.find(name) != std::string::npos) return true;
  }
  return false;
}

// Every option's peak reserved, from its prediction under the budget's capacity (the plan
// offers none that runs out of memory there), is within what the allocator may use.
void ExpectWithinBudget(const PlanResult& plan) {
  for (const PlanOption& o : plan.options) {
    EXPECT_GT(o.peak_reserved, 0u);
    EXPECT_LE(o.peak_reserved, plan.capacity);
  }
}

TEST(Plan, SevenBOnTwentyFourGibOffersEightBitStatesAndLora) {
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  const PredictRequest r = Request("llama2-7b", 2048, 24 * kGiB);
  auto plan = Plan(*model, r, PlanBudget{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_FALSE(plan->baseline_fits);
  ASSERT_GE(plan->options.size(), 2u);
  ExpectWithinBudget(*plan);
  bool eight_bit = false, lora = false;
  for (const PlanOption& o : plan->options) {
    eight_bit |= HasTechnique(o, "8-bit AdamW");
    lora |= HasTechnique(o, "LoRA") && o.changes_training;
  }
  EXPECT_TRUE(eight_bit);
  EXPECT_TRUE(lora);
  // Cheapest first among those that keep the training as it is; LoRA after them.
  for (size_t i = 1; i < plan->options.size(); ++i) {
    const PlanOption &a = plan->options[i - 1], &b = plan->options[i];
    if (a.changes_training == b.changes_training) {
      EXPECT_LE(a.added_seconds, b.added_seconds);
    }
    EXPECT_FALSE(a.changes_training && !b.changes_training);
  }
}

TEST(Plan, SeventyBOnOneGpuSaysWhyNothingFits) {
  auto model = LoadModel("llama2-70b");
  ASSERT_TRUE(model.ok());
  auto plan = Plan(*model, Request("llama2-70b", 2048, 24 * kGiB), PlanBudget{});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(plan->options.empty());
  EXPECT_NE(plan->nothing_fits.find("the weights alone"), std::string::npos);
}

TEST(Plan, SeventyBOnEightGpusProposesZeroThree) {
  auto model = LoadModel("llama2-70b");
  ASSERT_TRUE(model.ok());
  const PredictRequest r = Request("llama2-70b", 4096, 80 * kGiB);
  PlanBudget budget;
  budget.gpus = 8;
  budget.gpu_key = "h100-80gb";
  auto plan = Plan(*model, r, budget);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_FALSE(plan->options.empty());
  EXPECT_TRUE(HasTechnique(plan->options.front(), "ZeRO-3"));
  EXPECT_FALSE(plan->options.front().changes_training);
  ExpectWithinBudget(*plan);
}

TEST(Plan, ASetUpThatFitsNeedsNothing) {
  auto model = LoadModel("gpt2");
  ASSERT_TRUE(model.ok());
  auto plan = Plan(*model, Request("gpt2", 512, 80 * kGiB), PlanBudget{});
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->baseline_fits);
  EXPECT_TRUE(plan->options.empty());
}

TEST(Plan, HostMemoryBoundsOffloading) {
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  PlanBudget budget;
  budget.host_memory = 16 * kGiB;
  auto plan = Plan(*model, Request("llama2-7b", 2048, 24 * kGiB), budget);
  ASSERT_TRUE(plan.ok());
  for (const PlanOption& o : plan->options) EXPECT_LE(o.host_bytes, 16 * kGiB);
}

TEST(Plan, OnlyTransformerFamilies) {
  auto model = LoadModel("resnet50");
  ASSERT_TRUE(model.ok());
  PredictRequest r;
  r.model = "resnet50";
  r.capacity = 8 * kGiB;
  auto plan = Plan(*model, r, PlanBudget{});
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("--fit"), std::string::npos);
}

}  // namespace
}  // namespace vramscope::predict
