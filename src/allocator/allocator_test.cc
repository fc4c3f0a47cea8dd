#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
namespace vramscope::allocator {
namespace {
TEST(Smoke, Builds) { EXPECT_EQ(RoundSize(1, {}), 512u); }
}  // namespace
}  // namespace vramscope::allocator
