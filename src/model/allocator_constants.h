// PyTorch's caching allocator's constants (c10/cuda/CUDACachingAllocator.cpp), unchanged from 1.13
// to 2.11: one definition for the allocator model, the sources that check what a snapshot may
// hold, and the model's own rounding of a request.
#pragma once

#include <cstdint>

namespace vramscope::model {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kMinBlockSize = 512;      // every block is a multiple of this
inline constexpr uint64_t kSmallSize = 1 * kMiB;    // requests up to this go to the small pool
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;  // segment size of the small pool
inline constexpr uint64_t kMinLargeAlloc =
    10 * kMiB;  // below this a large request gets kLargeBuffer
inline constexpr uint64_t kLargeBuffer = 20 * kMiB;
inline constexpr uint64_t kRoundLarge = 2 * kMiB;  // larger segments round up to this
// What every segment size PyTorch makes is a multiple of: kSmallBuffer, kLargeBuffer and
// kRoundLarge are, and so is large_segment_size_mb (a whole number of MiB, > 10), which newer
// versions let replace kLargeBuffer.
inline constexpr uint64_t kSegmentGranularity = kMiB;
static_assert(kSmallBuffer % kSegmentGranularity == 0 && kLargeBuffer % kSegmentGranularity == 0 &&
              kRoundLarge % kSegmentGranularity == 0);

}  // namespace vramscope::model
