#include "allocator/curve_reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace vramscope::allocator {
namespace {

// The reduction as the report made it from the full curves before the replay reduced them:
// buckets of ceil(n / (max / 3)) events, each keeping its first lowest allocated, first highest
// allocated and first highest reserved event.
std::vector<size_t> ReduceFullCurve(const std::vector<CurvePoint>& all, size_t max_points) {
  const size_t n = all.size();
  std::vector<size_t> keep;
  if (n <= max_points) {
    for (size_t i = 0; i < n; ++i) keep.push_back(i);
    return keep;
  }
  const size_t bucket = (n + max_points / 3 - 1) / (max_points / 3);
  for (size_t start = 0; start < n; start += bucket) {
    size_t lo = start, hi = start, res = start;
    for (size_t i = start; i < std::min(n, start + bucket); ++i) {
      if (all[i].allocated < all[lo].allocated) lo = i;
      if (all[i].allocated > all[hi].allocated) hi = i;
      if (all[i].reserved > all[res].reserved) res = i;
    }
    keep.insert(keep.end(), {lo, hi, res});
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  return keep;
}

// A random walk with plateaus (ties) like an allocator's curves.
std::vector<CurvePoint> Walk(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<CurvePoint> out;
  uint64_t allocated = 1 << 20, reserved = 2 << 20;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng() % 8;
    if (r < 3) allocated += 512 * (rng() % 64);
    if (r >= 3 && r < 6) allocated -= std::min<uint64_t>(allocated, 512 * (rng() % 64));
    if (r == 7) reserved = std::max(reserved, allocated) + (2 << 20) * (rng() % 3);
    out.push_back({static_cast<int64_t>(1000 + i), allocated, reserved, allocated - allocated / 8});
  }
  return out;
}

TEST(CurveReducerTest, KeepsWhatTheReportKeptFromTheFullCurve) {
  for (const size_t max_points : {3u, 30u, 300u}) {
    for (const size_t n : {0u, 1u, 2u, 29u, 30u, 31u, 299u, 300u, 301u, 1000u, 12345u}) {
      const std::vector<CurvePoint> all = Walk(n, static_cast<uint32_t>(n * 7 + max_points));
      CurveReducer reducer(n, max_points);
      for (const CurvePoint& p : all) reducer.Add(p.event, p.allocated, p.reserved, p.requested);
      const std::vector<CurvePoint> kept = reducer.Finish();
      const std::vector<size_t> expected = ReduceFullCurve(all, max_points);
      ASSERT_EQ(kept.size(), expected.size()) << "n=" << n << " max=" << max_points;
      for (size_t k = 0; k < kept.size(); ++k) {
        const CurvePoint& want = all[expected[k]];
        EXPECT_EQ(kept[k].event, want.event);
        EXPECT_EQ(kept[k].allocated, want.allocated);
        EXPECT_EQ(kept[k].reserved, want.reserved);
        EXPECT_EQ(kept[k].requested, want.requested);
      }
      EXPECT_LE(kept.size(), std::min(n, max_points));
    }
  }
}

TEST(CurveReducerTest, ZeroKeepsEveryEvent) {
  const std::vector<CurvePoint> all = Walk(5000, 1);
  CurveReducer reducer(all.size(), 0);
  for (const CurvePoint& p : all) reducer.Add(p.event, p.allocated, p.reserved, p.requested);
  EXPECT_EQ(reducer.Finish().size(), all.size());
}

TEST(CurveReducerTest, BothPeaksSurvive) {
  const std::vector<CurvePoint> all = Walk(100000, 2);
  CurveReducer reducer(all.size(), 300);
  for (const CurvePoint& p : all) reducer.Add(p.event, p.allocated, p.reserved, p.requested);
  const std::vector<CurvePoint> kept = reducer.Finish();
  auto by_allocated = [](const CurvePoint& a, const CurvePoint& b) {
    return a.allocated < b.allocated;
  };
  auto by_reserved = [](const CurvePoint& a, const CurvePoint& b) {
    return a.reserved < b.reserved;
  };
  EXPECT_EQ(std::max_element(kept.begin(), kept.end(), by_allocated)->allocated,
            std::max_element(all.begin(), all.end(), by_allocated)->allocated);
  EXPECT_EQ(std::min_element(kept.begin(), kept.end(), by_allocated)->allocated,
            std::min_element(all.begin(), all.end(), by_allocated)->allocated);
  EXPECT_EQ(std::max_element(kept.begin(), kept.end(), by_reserved)->reserved,
            std::max_element(all.begin(), all.end(), by_reserved)->reserved);
  EXPECT_LE(kept.size(), 300u);
}

}  // namespace
}  // namespace vramscope::allocator
