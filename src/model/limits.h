// Plausibility limits every source applies to what an input claims, so that one file format is
// not trusted further than another. A value past a limit is not a GPU's: the source refuses it (or
// skips it and says so) with one line naming the limit. They are far beyond any real hardware and
// keep the arithmetic of the later stages (sums of sizes, event indices) away from overflow.
#pragma once

#include <cstdint>

namespace vramscope::model {

// One allocation, block, segment or tensor: 1 PiB. The largest GPU today has under 0.2 TiB.
inline constexpr uint64_t kMaxPlausibleBytes = uint64_t{1} << 50;
// Memory live at once on one device (a sum of allocations): 64 PiB, so that sums over a million
// allocations at the limit above still fit an int64.
inline constexpr uint64_t kMaxPlausibleLiveBytes = uint64_t{1} << 56;
// A device ordinal (CUDA_VISIBLE_DEVICES numbering, a profiler's "Device Id").
inline constexpr int64_t kMaxDeviceOrdinal = (int64_t{1} << 16) - 1;
// The most trace events one Trace holds: event indices are 32-bit.
inline constexpr uint64_t kMaxEvents = 0x7fffffff;

}  // namespace vramscope::model
