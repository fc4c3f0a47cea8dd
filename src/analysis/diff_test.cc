#include "analysis/diff.h"

#include <gtest/gtest.h>

#include "analysis/diff_gate.h"

namespace vramscope::analysis {
namespace {

DiffDevice WithStarts(const std::vector<int64_t>& starts, const std::string& owner = "leak") {
  DiffDevice d;
  for (size_t i = 0; i < starts.size(); ++i) {
    DiffStep s;
    s.step = static_cast<int32_t>(i + 1);
    s.live_at_start = starts[i];
    s.owners_at_start["weights"] = 1000;
    if (starts[i] > 1000) s.owners_at_start[owner] = starts[i] - 1000;
    d.steps.push_back(s);
  }
  return d;
}

TEST(FindGrowth, SkipsTheWarmUpStepAndNeedsTwoRises) {
  // The first step's start precedes the optimizer's state: a jump there is no leak.
  EXPECT_FALSE(FindGrowth(WithStarts({1000, 5000, 5000, 5000})));
  // Three steps give one rise after the warm-up: not enough.
  EXPECT_FALSE(FindGrowth(WithStarts({1000, 5000, 6000})));
  // A fall anywhere: no growth.
  EXPECT_FALSE(FindGrowth(WithStarts({1000, 5000, 6000, 5500, 7000})));
  const auto g = FindGrowth(WithStarts({1000, 5000, 6000, 7000, 8000}));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->per_step, 1000);
  EXPECT_EQ(g->first_step, 2);
  EXPECT_EQ(g->last_step, 5);
  ASSERT_EQ(g->owners.size(), 1u);  // the weights stay put
  EXPECT_EQ(g->owners[0].first, "leak");
  EXPECT_EQ(g->owners[0].second, 1000);
}

TEST(CompareReports, PairsOneDeviceEachAndListsEveryChange) {
  DiffSide a{"a", false, {}}, b{"b", true, {}};
  DiffDevice da, db;
  da.device = 0;
  db.device = 3;
  da.peak_allocated = 100;
  db.peak_allocated = 160;
  da.owners[{"weight", "w"}] = 10;
  db.owners[{"weight", "w"}] = 10;
  db.owners[{"activation", "new"}] = 50;
  da.sites["gone"] = 7;
  a.devices = {da};
  b.devices = {db};
  const auto diff = CompareReports(a, b, std::nullopt);
  ASSERT_TRUE(diff.ok());
  ASSERT_EQ(diff->devices.size(), 1u);
  const DeviceDiff& d = diff->devices[0];
  EXPECT_EQ(d.device_a, 0);
  EXPECT_EQ(d.device_b, 3);
  EXPECT_EQ(d.peak_allocated.Delta(), 60);
  ASSERT_EQ(d.owners.size(), 1u);  // the unchanged weight is not listed
  EXPECT_EQ(d.owners[0].what, "activation: new");
  EXPECT_FALSE(d.owners[0].a);
  ASSERT_EQ(d.sites.size(), 1u);
  EXPECT_EQ(d.sites[0].Delta(), -7);
  EXPECT_EQ(d.categories.size(), 8u);
  EXPECT_FALSE(CompareReports(a, b, 1).ok());  // --device 1: neither has it
}

TEST(ParseGate, ReadsEveryLimitForm) {
  auto g = ParseGate(" peak_allocated>=+10% ");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->metric, "peak_allocated");
  EXPECT_EQ(g->op, Gate::Op::kGreaterEqual);
  EXPECT_EQ(g->limit, Gate::Limit::kPercentOfA);
  EXPECT_DOUBLE_EQ(g->value, 10);
  g = ParseGate("activation < -512MiB");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->limit, Gate::Limit::kBytesOverA);
  EXPECT_DOUBLE_EQ(g->value, -512.0 * 1024 * 1024);
  g = ParseGate("peak_reserved <= 40GiB");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->limit, Gate::Limit::kBytes);
  EXPECT_EQ(g->op, Gate::Op::kLessEqual);
}

TEST(ParseGate, RefusesWhatIsNotAGateWithAUsageError) {
  for (const char* bad :
       {"", "peak_allocated", "peak > 1GiB", "peak_allocated > ", "peak_allocated > 10%",
        "peak_allocated > +nan%", "peak_allocated > +inf%", "peak_allocated > +1e9%",
        "peak_allocated > 1e400GiB", "peak_allocated > 99999999999TiB", "peak_allocated >> 1",
        "<= 5", "weight > +%", "weight > +-5%"}) {
    const auto g = ParseGate(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), StatusCode::kUsage) << bad;
    EXPECT_EQ(g.status().message().find('\n'), std::string::npos);
  }
}

TEST(EvaluateGates, ComparesBWithTheLimitOnEveryDevicePair) {
  DiffSide a{"a", false, {}}, b{"b", false, {}};
  DiffDevice da, db;
  da.peak_allocated = 1000;
  db.peak_allocated = 1100;
  a.devices = {da};
  b.devices = {db};
  const auto diff = CompareReports(a, b, std::nullopt);
  ASSERT_TRUE(diff.ok());
  const auto outcome = [&](const char* text) {
    const auto g = ParseGate(text);
    EXPECT_TRUE(g.ok()) << text;
    return EvaluateGates({*g}, *diff).at(0);
  };
  EXPECT_FALSE(outcome("peak_allocated > +10%").failed);  // 1100 is not above 1100
  EXPECT_TRUE(outcome("peak_allocated >= +10%").failed);
  EXPECT_TRUE(outcome("peak_allocated > +99").failed);
  EXPECT_FALSE(outcome("peak_allocated > +100").failed);
  EXPECT_TRUE(outcome("peak_allocated > 1KiB").failed);  // 1100 > 1024
  EXPECT_EQ(outcome("peak_allocated > +10%").limit, 1100);
  EXPECT_FALSE(outcome("growth_per_step > 0").failed);
}

}  // namespace
}  // namespace vramscope::analysis
