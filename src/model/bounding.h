// Which rank of a job bounds it: the one rule that the ranks of a capture folder, `predict
// --all-ranks`'s traced ranks and a parallel layout's rank roles (before and after the allocator
// places them) all follow. The highest reserved peak bounds the job (it is what must fit the GPU);
// a tie goes to the higher allocated peak, then to the first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

namespace vramscope::model {

struct RankPeaks {
  int64_t reserved = 0;
  int64_t allocated = 0;
};

// The index of the bounding item of `items` (0 when empty); `peaks(item)` gives its RankPeaks.
template <typename Items, typename PeaksOf>
size_t BoundingIndex(const Items& items, PeaksOf peaks) {
  size_t best = 0, i = 0;
  RankPeaks top{};
  for (const auto& item : items) {
    const RankPeaks p = peaks(item);
    if (i == 0 || std::tie(p.reserved, p.allocated) > std::tie(top.reserved, top.allocated)) {
      best = i;
      top = p;
    }
    ++i;
  }
  return best;
}

}  // namespace vramscope::model
