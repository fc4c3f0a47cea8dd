// `vramscope predict --fit` when not even size 1 fits: Fit measures what size 1 would need, and
// the advice names only the levers the request has not pulled, with the shortfall in bytes.
#include "predict/fit_advice.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace vramscope::predict {
namespace {

bool Has(const std::vector<std::string>& levers, const std::string& lever) {
  return std::find(levers.begin(), levers.end(), lever) != levers.end();
}

PredictRequest Request(const std::string& dtype_mode) {
  PredictRequest r;
  if (dtype_mode == "bf16-amp") r.setup.precision.autocast = DType::kBF16;
  if (dtype_mode == "bf16") r.setup.precision.param = DType::kBF16;
  r.setup.optimizer.kind = OptimizerKind::kAdamW;
  return r;
}

ModelSpec Preset(const std::string& name) {
  Result<LoadedModel> m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m->spec;
}

TEST(FitAdvice, MixedPrecisionAndCheckpointingAlreadyOnAreNotAdvised) {
  // The reported case: llama3-8b --dtype bf16-amp --checkpointing --fit h100-80gb.
  PredictRequest r = Request("bf16-amp");
  r.setup.checkpointing = true;
  const auto levers = RemainingLevers(Preset("llama3-8b"), r, FitDimension::kBatch);
  EXPECT_EQ(levers, (std::vector<std::string>{"--lora R", "--zero/--fsdp with --world-size N",
                                              "a shorter --seq", "a larger GPU"}));
}

TEST(FitAdvice, Fp32WithoutCheckpointingHasEveryLever) {
  const auto levers = RemainingLevers(Preset("gpt2"), Request("fp32"), FitDimension::kBatch);
  EXPECT_EQ(levers, (std::vector<std::string>{"--dtype bf16-amp", "--checkpointing", "--lora R",
                                              "--zero/--fsdp with --world-size N",
                                              "a shorter --seq", "a larger GPU"}));
}

TEST(FitAdvice, HalfPrecisionLoraAndShardingAreNotRepeated) {
  PredictRequest r = Request("bf16");
  r.setup.lora_rank = 16;
  r.setup.zero = ZeroMode::kZero3;
  r.setup.world_size = 8;
  r.setup.batch = 4;
  const auto levers = RemainingLevers(Preset("llama2-7b"), r, FitDimension::kSeq);
  EXPECT_FALSE(Has(levers, "--dtype bf16-amp"));
  EXPECT_FALSE(Has(levers, "--lora R"));
  EXPECT_EQ(levers, (std::vector<std::string>{"--checkpointing", "a --world-size above 8",
                                              "a smaller --batch", "a larger GPU"}));
  // ZeRO-1/2 still have stage 3 to go; FSDP has only more GPUs.
  r.setup.zero = ZeroMode::kZero1;
  EXPECT_TRUE(Has(RemainingLevers(Preset("llama2-7b"), r, FitDimension::kSeq), "--zero 3"));
  r.setup.zero = ZeroMode::kFsdp;
  EXPECT_FALSE(Has(RemainingLevers(Preset("llama2-7b"), r, FitDimension::kSeq), "--zero 3"));
  // Batch 1 with --fit-dim seq: no smaller batch to advise.
  r.setup.batch = 1;
  EXPECT_FALSE(
      Has(RemainingLevers(Preset("llama2-7b"), r, FitDimension::kSeq), "a smaller --batch"));
}

TEST(FitAdvice, MasterWeightsAreALever) {
  PredictRequest r = Request("bf16");
  r.setup.optimizer.master_weights = true;
  EXPECT_TRUE(Has(RemainingLevers(Preset("gpt2"), r, FitDimension::kBatch), "no --master-weights"));
}

TEST(FitAdvice, NoCheckpointingOrLoraForModelsWithoutThem) {
  const auto levers = RemainingLevers(Preset("resnet50"), Request("fp32"), FitDimension::kBatch);
  EXPECT_EQ(levers,
            (std::vector<std::string>{"--dtype bf16-amp", "--zero/--fsdp with --world-size N",
                                      "a smaller --image-size", "a larger GPU"}));
}

TEST(FitAdvice, MessageSaysByHowMuch) {
  FitResult fit;
  fit.dimension = FitDimension::kBatch;
  fit.capacity = 84'419'526'656;         // an H100 80GB less the 500 MiB context: 78.62 GiB
  fit.needed_reserved = 99'119'792'128;  // 92.31 GiB
  PredictRequest r = Request("bf16-amp");
  r.setup.checkpointing = true;
  const NoFitAdvice a = ExplainNoFit(Preset("llama3-8b"), r, fit);
  EXPECT_EQ(a.shortfall, 99'119'792'128u - 84'419'526'656u);
  EXPECT_EQ(a.message,
            "not even batch 1 fits: batch 1 needs 92.31 GiB peak reserved, 13.69 GiB more than "
            "the 78.62 GiB the allocator can have; try --lora R, --zero/--fsdp with "
            "--world-size N, a shorter --seq or a larger GPU");
}

TEST(FitAdvice, ThePlansCheapestOptionFirst) {
  FitResult fit;
  fit.dimension = FitDimension::kBatch;
  fit.capacity = 84'419'526'656;
  fit.needed_reserved = 99'119'792'128;
  PredictRequest r = Request("bf16-amp");
  PlanResult plan;
  PlanOption best;
  best.techniques = {"chunked cross-entropy", "8-bit AdamW"};
  best.flags = {"--loss-chunks", "8", "--optimizer", "adamw8bit"};
  best.peak_reserved = 83'770'736'640;
  plan.options = {best, best};
  const NoFitAdvice a = ExplainNoFit(Preset("llama3-8b"), r, fit, &plan, "h100-80gb");
  EXPECT_EQ(a.options.size(), 2u);
  EXPECT_EQ(a.plan_command, "--plan h100-80gb");
  EXPECT_EQ(a.message,
            "not even batch 1 fits: batch 1 needs 92.31 GiB peak reserved, 13.69 GiB more than "
            "the 78.62 GiB the allocator can have; the cheapest set-up where batch 1 fits is "
            "--loss-chunks 8 --optimizer adamw8bit (chunked cross-entropy + 8-bit AdamW: peak "
            "reserved 78.02 GiB); add it and --fit again, or see the 1 others with --plan "
            "h100-80gb");
}

TEST(FitAdvice, NothingOnThePlanLeavesTheLeversItDidNotSearch) {
  FitResult fit;
  fit.dimension = FitDimension::kBatch;
  fit.capacity = uint64_t{1} << 30;
  fit.needed_reserved = uint64_t{2} << 30;
  PlanResult plan;
  plan.nothing_fits = "the weights alone take 1.50 GiB per GPU";
  const NoFitAdvice a = ExplainNoFit(Preset("llama3-8b"), Request("fp32"), fit, &plan, "1GiB");
  // Checkpointing and LoRA were searched; precision, sharding and the rest were not.
  EXPECT_EQ(a.message,
            "not even batch 1 fits: batch 1 needs 2.00 GiB peak reserved, 1.00 GiB more than "
            "the 1.00 GiB the allocator can have; no memory-saving technique makes it fit "
            "(--plan 1GiB: the weights alone take 1.50 GiB per GPU); try --dtype bf16-amp, "
            "--zero/--fsdp with --world-size N, a shorter --seq or a larger GPU");
}

TEST(FitAdvice, FitMeasuresWhatSizeOneNeeds) {
  // GPT-2 small with AdamW in fp32 holds 16 bytes per parameter (about 1.9 GiB) before any
  // activation: it cannot fit in 1 GiB.
  Result<LoadedModel> model = LoadModel("gpt2");
  ASSERT_TRUE(model.ok());
  PredictRequest r = Request("fp32");
  r.setup.seq = 128;
  r.capacity = (1ull << 30) + r.context_bytes;
  Result<FitResult> fit = Fit(*model, r, FitDimension::kBatch, 1024);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_EQ(fit->largest, 0u);
  EXPECT_EQ(fit->capacity, 1ull << 30);
  // What size 1 needs is its prediction with no capacity at all.
  PredictRequest unlimited = r;
  unlimited.capacity = 0;
  unlimited.setup.batch = 1;
  Result<BuiltTrace> built = Predict(*model, unlimited);
  ASSERT_TRUE(built.ok());
  EXPECT_FALSE(built->oom_at.has_value());
  EXPECT_EQ(fit->needed_reserved, built->peak_reserved);
  EXPECT_EQ(fit->needed_allocated, built->peak_allocated);
  EXPECT_GT(fit->needed_reserved, fit->capacity);
  const NoFitAdvice a = ExplainNoFit(*model->spec, r, *fit);
  EXPECT_EQ(a.needed_reserved, fit->needed_reserved);
  EXPECT_EQ(a.shortfall, fit->needed_reserved - fit->capacity);
}

}  // namespace
}  // namespace vramscope::predict
