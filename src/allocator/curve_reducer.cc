#include "allocator/curve_reducer.h"

#include <algorithm>

namespace vramscope::allocator {

CurveReducer::CurveReducer(size_t events, size_t max_points) {
  if (max_points == 0 || events <= max_points) return;
  const size_t buckets = std::max<size_t>(1, max_points / 3);
  bucket_ = (events + buckets - 1) / buckets;
  kept_.reserve(3 * buckets);
}

void CurveReducer::Add(int64_t event, uint64_t allocated, uint64_t reserved, uint64_t requested) {
  const CurvePoint p{event, allocated, reserved, requested};
  if (bucket_ == 1) {
    kept_.push_back(p);
    return;
  }
  if (in_bucket_ == 0) {
    lo_ = hi_ = top_reserved_ = p;
  } else {
    if (allocated < lo_.allocated) lo_ = p;
    if (allocated > hi_.allocated) hi_ = p;
    if (reserved > top_reserved_.reserved) top_reserved_ = p;
  }
  if (++in_bucket_ == bucket_) CloseBucket();
}

void CurveReducer::CloseBucket() {
  CurvePoint three[3] = {lo_, hi_, top_reserved_};
  std::sort(std::begin(three), std::end(three),
            [](const CurvePoint& a, const CurvePoint& b) { return a.event < b.event; });
  for (const CurvePoint& p : three) {
    if (kept_.empty() || kept_.back().event != p.event) kept_.push_back(p);
  }
  in_bucket_ = 0;
}

std::vector<CurvePoint> CurveReducer::Finish() {
  if (bucket_ != 1 && in_bucket_ > 0) CloseBucket();
  return std::move(kept_);
}

}  // namespace vramscope::allocator
