// The cost model of `predict --plan`, worked by hand from its documented figures.
#include "predict/plan_cost.h"

#include <gtest/gtest.h>

namespace vramscope::predict {
namespace {

// A 7B-parameter model, 4096 tokens a step, in bf16, on an H100 SXM.
StepWork SevenB() {
  StepWork w;
  w.parameters = 7e9;
  w.trainable = 7e9;
  w.block_parameters = 6.5e9;
  w.tokens = 4096;
  w.parameter_bytes = 14e9;
  return w;
}

TEST(PlanCost, KnownAndUnknownGpus) {
  EXPECT_DOUBLE_EQ(SpeedOf("h100-80gb").matmul_flops, 989e12);
  EXPECT_DOUBLE_EQ(SpeedOf("a100-80gb").host_bytes, 32e9);
  EXPECT_DOUBLE_EQ(SpeedOf("t4").memory_bytes, 0.32e12);
  // A size, not a GPU: an H100's figures, said so.
  const GpuSpeed unknown = SpeedOf("");
  EXPECT_DOUBLE_EQ(unknown.matmul_flops, 989e12);
  EXPECT_NE(unknown.source.find("no GPU named"), std::string::npos);
}

TEST(PlanCost, ComputeIsSixFlopsPerParameterAndTokenAtTheMfu) {
  const GpuSpeed h100 = SpeedOf("h100-80gb");
  EXPECT_DOUBLE_EQ(ComputeSeconds(SevenB(), h100), 6 * 7e9 * 4096 / (989e12 * 0.4));
}

TEST(PlanCost, CheckpointingRecomputesTheBlocksForward) {
  const GpuSpeed h100 = SpeedOf("h100-80gb");
  const double full = RecomputeSeconds(SevenB(), h100, 1.0);
  EXPECT_DOUBLE_EQ(full, 2 * 6.5e9 * 4096 / (989e12 * 0.4));
  EXPECT_DOUBLE_EQ(RecomputeSeconds(SevenB(), h100, 0.5), full / 2);
}

TEST(PlanCost, TransfersHiddenByComputeCostNothing) {
  const GpuSpeed h100 = SpeedOf("h100-80gb");
  const double compute = ComputeSeconds(SevenB(), h100);                  // 0.43 s
  EXPECT_DOUBLE_EQ(OverlappedTransferSeconds(1e9, SevenB(), h100), 0.0);  // 2 GB at 64 GB/s
  EXPECT_DOUBLE_EQ(OverlappedTransferSeconds(64e9, SevenB(), h100), 2.0 - compute);
}

TEST(PlanCost, HostOptimizerMovesEachGradientAndWeightAndRunsCpuAdam) {
  const GpuSpeed a100 = SpeedOf("a100-80gb");
  // 7e9 bf16 gradients over and weights back at 32 GB/s, then 7e9 parameters at 1e9/s.
  EXPECT_DOUBLE_EQ(HostOptimizerSeconds(SevenB(), a100), 2 * 14e9 / 32e9 + 7.0);
  StepWork sharded = SevenB();
  sharded.gpus = 8;  // each rank's optimizer steps its eighth
  EXPECT_DOUBLE_EQ(HostOptimizerSeconds(sharded, a100), (2 * 14e9 / 32e9 + 7.0) / 8);
}

TEST(PlanCost, MicroBatchesAndShardedWeights) {
  const GpuSpeed h100 = SpeedOf("h100-80gb");
  // From 1 to 4 micro-batches: 3 more reads of the weights, three times each.
  EXPECT_DOUBLE_EQ(MicroBatchSeconds(SevenB(), h100, 4), 3 * 3 * 14e9 / 3.35e12);
  EXPECT_DOUBLE_EQ(MicroBatchSeconds(SevenB(), h100, 1), 0.0);
  StepWork eight = SevenB();
  EXPECT_DOUBLE_EQ(ShardedWeightsSeconds(eight, h100), 0.0);  // one GPU: nothing to gather
  eight.gpus = 8;
  EXPECT_DOUBLE_EQ(ShardedWeightsSeconds(eight, h100), 14e9 * 7 / 8 / 450e9);
}

TEST(PlanCost, QloraDequantisesTheBlocksAtEachUse) {
  const GpuSpeed h100 = SpeedOf("h100-80gb");
  // Forward and backward: 6.5e9 block parameters, 2.5 bytes each, twice, at 3.35 TB/s (9.7 ms).
  EXPECT_DOUBLE_EQ(DequantizeSeconds(SevenB(), h100, 2), 2 * 2.5 * 6.5e9 / 3.35e12);
  StepWork two = SevenB();
  two.micro_batches = 2;
  EXPECT_DOUBLE_EQ(DequantizeSeconds(two, h100, 3), 2 * 3 * 2.5 * 6.5e9 / 3.35e12);
}

}  // namespace
}  // namespace vramscope::predict
