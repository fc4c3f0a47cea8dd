#include "model/interned_column.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace vramscope::model {
namespace {

TEST(InternedColumn, ReadsBackWhatWasPushed) {
  InternedColumn<uint64_t> streams;
  const std::vector<uint64_t> values = {0, 0, 0x7f00aa, 0, 0x7f00bb, 0x7f00bb, 0x7f00aa};
  for (const uint64_t v : values) streams.push_back(v);
  ASSERT_EQ(streams.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(streams[i], values[i]) << i;
  EXPECT_EQ(streams.back(), 0x7f00aau);
  EXPECT_EQ(streams.distinct(), (std::vector<uint64_t>{0, 0x7f00aa, 0x7f00bb}));
  EXPECT_FALSE(streams.wide());
  EXPECT_TRUE(streams == values);
}

TEST(InternedColumn, PermuteReordersValues) {
  InternedColumn<int32_t> devices;
  for (const int32_t d : {1, 0, 1, 0, 2}) devices.push_back(d);
  devices.Permute({1, 3, 0, 2, 4});
  EXPECT_TRUE(devices == (std::vector<int32_t>{0, 0, 1, 1, 2}));
}

// A hostile file may name more distinct values than 2-byte indices reach: every value is kept
// in full from then on, and nothing is lost.
TEST(InternedColumn, MoreDistinctValuesThanIndicesReachAreKeptInFull) {
  InternedColumn<uint64_t> column;
  std::vector<uint64_t> expected;
  for (uint64_t i = 0; i < 100000; ++i) {  // 66,667 distinct values
    const uint64_t v = (i % 3 == 0) ? 7 : 1000 + i;
    column.push_back(v);
    expected.push_back(v);
  }
  EXPECT_TRUE(column.wide());
  EXPECT_TRUE(column == expected);
  std::vector<uint32_t> order(expected.size());
  for (uint32_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<uint32_t>(order.size() - 1 - i);
  column.Permute(order);
  EXPECT_EQ(column[0], expected.back());
  EXPECT_EQ(column[expected.size() - 1], expected.front());
}

}  // namespace
}  // namespace vramscope::model
