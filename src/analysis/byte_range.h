// Sizes known only to an interval: what a message's two-decimal figures allow
// (model::PrintedBytes), and arithmetic on them. `explain` draws every conclusion on such
// intervals: a conclusion is decisive when it holds for every size the figures allow, possible when
// for some.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "model/oom_message.h"

namespace vramscope::analysis {

// Bytes known to lie in [lo, hi].
struct ByteRange {
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t Mid() const { return lo + (hi - lo) / 2; }
};

// Large enough for any GPU, small enough that sums of a few never overflow.
inline constexpr int64_t kByteRangeMax = std::numeric_limits<int64_t>::max() / 4;

inline ByteRange RangeOf(const model::PrintedBytes& b) {
  return {static_cast<int64_t>(std::min<uint64_t>(b.lo, kByteRangeMax)),
          static_cast<int64_t>(std::min<uint64_t>(b.hi, kByteRangeMax))};
}
inline ByteRange ExactRange(int64_t v) { return {v, v}; }
inline ByteRange operator+(ByteRange a, ByteRange b) { return {a.lo + b.lo, a.hi + b.hi}; }
inline ByteRange operator-(ByteRange a, ByteRange b) { return {a.lo - b.hi, a.hi - b.lo}; }
// Never below zero (a remainder of rounded figures can dip under it).
inline ByteRange NonNegative(ByteRange r) {
  return {std::max<int64_t>(r.lo, 0), std::max<int64_t>(r.hi, 0)};
}

// a >= b for every value the ranges allow / for some.
inline bool Always(ByteRange a, ByteRange b) { return a.lo >= b.hi; }
inline bool Sometimes(ByteRange a, ByteRange b) { return a.hi >= b.lo; }

// "4.39 GiB", or "4.38 GiB to 4.40 GiB" when the range shows in two decimals.
std::string FormatByteRange(ByteRange range);

}  // namespace vramscope::analysis
