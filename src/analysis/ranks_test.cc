#include "analysis/ranks.h"

#include <gtest/gtest.h>

namespace vramscope::analysis {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A rank as FillRankFigures leaves it: peaks per step, bytes by category and owners at its peak.
RankRow Rank(const std::string& label, int64_t reserved, std::vector<int64_t> step_peaks,
             std::vector<std::pair<std::string, int64_t>> at_peak, std::vector<RankOwner> owners) {
  RankRow r;
  r.label = label;
  r.peak_reserved = reserved;
  for (size_t i = 0; i < step_peaks.size(); ++i) {
    r.step_peaks.push_back({static_cast<int32_t>(i + 1), step_peaks[i], "backward"});
    r.peak_allocated = std::max(r.peak_allocated, step_peaks[i]);
  }
  r.at_peak = std::move(at_peak);
  r.owners_at_peak = std::move(owners);
  return r;
}

// Four pipeline-like ranks: the first holds the embedding, the last the head and the loss's
// logits, and the last has one step more in its trace.
std::vector<RankRow> Ranks() {
  return {Rank("rank0", 900 * kMiB, {700 * kMiB, 720 * kMiB},
               {{"weight", 300 * kMiB}, {"activation", 400 * kMiB}, {"temporary", 20 * kMiB}},
               {{"weight", "embed.weight", 200 * kMiB}, {"weight", "layers.0.w", 100 * kMiB}}),
          Rank("rank1", 600 * kMiB, {500 * kMiB, 500 * kMiB},
               {{"weight", 100 * kMiB}, {"activation", 400 * kMiB}, {"temporary", 0}},
               {{"weight", "layers.1.w", 100 * kMiB}}),
          Rank("rank2", 620 * kMiB, {510 * kMiB, 505 * kMiB},
               {{"weight", 100 * kMiB}, {"activation", 410 * kMiB}, {"temporary", 0}},
               {{"weight", "layers.2.w", 100 * kMiB}}),
          Rank("rank3", 800 * kMiB, {650 * kMiB, 640 * kMiB, 660 * kMiB},
               {{"weight", 250 * kMiB}, {"activation", 100 * kMiB}, {"temporary", 310 * kMiB}},
               {{"temporary", "logits", 300 * kMiB}, {"weight", "head.weight", 150 * kMiB}})};
}

TEST(Ranks, BoundingRankIsTheHighestReservedPeak) { EXPECT_EQ(BoundingRank(Ranks()), 0u); }

TEST(Ranks, AlignedByStepGivesEachStepsSpreadAndWhereTheHighestFell) {
  const auto steps = AlignRanksByStep(Ranks());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].step, 1);
  EXPECT_EQ(steps[0].ranks, 4u);
  EXPECT_EQ(steps[0].lowest, 500 * kMiB);
  // Sorted 500, 510, 650, 700: the lower median.
  EXPECT_EQ(steps[0].median, 510 * kMiB);
  EXPECT_EQ(steps[0].highest, 700 * kMiB);
  EXPECT_EQ(steps[0].highest_label, "rank0");
  EXPECT_EQ(steps[0].highest_phase, "backward");
  // Step 3 is in rank3's trace only.
  EXPECT_EQ(steps[2].ranks, 1u);
  EXPECT_EQ(steps[2].highest_label, "rank3");
}

TEST(Ranks, AlignedByPhaseKeepsEachStepsPhasesApart) {
  std::vector<RankRow> rows = Ranks();
  rows[0].phase_peaks = {{1, "forward", 300 * kMiB}, {1, "backward", 700 * kMiB}};
  rows[1].phase_peaks = {{1, "forward", 350 * kMiB}, {1, "backward", 500 * kMiB}};
  rows[3].phase_peaks = {{1, "backward", 650 * kMiB}, {1, "optimizer", 400 * kMiB}};
  const auto phases = AlignRanksByPhase(rows);
  ASSERT_EQ(phases.size(), 3u);
  // In a step's order: forward, backward, optimizer.
  EXPECT_EQ(phases[0].phase, "forward");
  EXPECT_EQ(phases[0].ranks, 2u);
  EXPECT_EQ(phases[0].highest_label, "rank1");
  EXPECT_EQ(phases[1].phase, "backward");
  EXPECT_EQ(phases[1].ranks, 3u);
  EXPECT_EQ(phases[1].lowest, 500 * kMiB);
  EXPECT_EQ(phases[1].median, 650 * kMiB);
  EXPECT_EQ(phases[1].highest_label, "rank0");
  EXPECT_EQ(phases[2].phase, "optimizer");
  EXPECT_EQ(phases[2].ranks, 1u);
}

TEST(Ranks, ContrastNamesTheExcessAndWhatTheBoundingRankHoldsAlone) {
  const auto rows = Ranks();
  const RankContrast c = ContrastBoundingRank(rows, 0);
  EXPECT_EQ(c.label, "rank0");
  EXPECT_EQ(c.others, 3u);
  // The others' peaks 510, 505 and 660 MiB: median 510 MiB.
  EXPECT_EQ(c.others_median, 510 * kMiB);
  // weight 300 against the others' median of (100, 100, 250) = 100; activation 400 against 400;
  // temporary 20 against 0.
  ASSERT_EQ(c.category_excess.size(), 2u);
  EXPECT_EQ(c.category_excess[0], std::make_pair(std::string("weight"), 200 * kMiB));
  EXPECT_EQ(c.category_excess[1], std::make_pair(std::string("temporary"), 20 * kMiB));
  ASSERT_EQ(c.held_alone.size(), 2u);
  EXPECT_EQ(c.held_alone[0].owner, "embed.weight");
  EXPECT_EQ(c.held_alone[1].owner, "layers.0.w");
}

TEST(Ranks, OneRankAloneHasNothingToContrast) {
  const std::vector<RankRow> one = {Ranks()[0]};
  const RankContrast c = ContrastBoundingRank(one, 0);
  EXPECT_EQ(c.others, 0u);
  EXPECT_TRUE(c.category_excess.empty());
  EXPECT_TRUE(c.held_alone.empty());
}

}  // namespace
}  // namespace vramscope::analysis
