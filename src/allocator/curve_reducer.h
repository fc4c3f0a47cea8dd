// The replay's memory curve, reduced while it is made.
//
// A replay of N events used to keep allocated, reserved and requested after every event (24
// bytes an event: 480 MB for a 20M-event trace) only for the report to keep about 30,000 points
// of it. The reducer keeps those points as the events go by: the events are cut into buckets of
// consecutive events, and each bucket keeps its event with the lowest allocated, the one with the
// highest allocated and the one with the highest reserved (the first of each on ties), so every
// local extreme and both peaks survive. Memory: the kept points only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace vramscope::allocator {

struct CurvePoint {
  int64_t event = 0;  // index into Trace::events; the levels are right after it
  uint64_t allocated = 0;
  uint64_t reserved = 0;
  uint64_t requested = 0;
};

class CurveReducer {
 public:
  // `events`: how many events will be added at most (the replay's range); `max_points`: about
  // how many points to keep (at most `max_points` when it is a multiple of 3), 0 to keep every
  // event. Buckets are sized from `events`, so a replay that stops early (an OOM) keeps fewer.
  CurveReducer(size_t events, size_t max_points);

  void Add(int64_t event, uint64_t allocated, uint64_t reserved, uint64_t requested);
  // The kept points, by event ascending, each once. Ends the reducer.
  std::vector<CurvePoint> Finish();

 private:
  void CloseBucket();

  size_t bucket_ = 1;  // events per bucket; 1 keeps every event
  size_t in_bucket_ = 0;
  CurvePoint lo_, hi_, top_reserved_;
  std::vector<CurvePoint> kept_;
};

}  // namespace vramscope::allocator
