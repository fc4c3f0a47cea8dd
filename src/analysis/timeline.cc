#include "analysis/timeline.h"

#include <algorithm>

namespace vramscope::analysis {

using model::Action;
using model::kNoEvent;

int64_t Timelines::PeakAllocated() const {
  int64_t peak = 0;
  for (const auto& d : devices) peak = std::max(peak, d.peak_allocated);
  return peak;
}

Timelines ComputeTimelines(const model::Trace& trace) {
  const model::Events& ev = trace.events;
  // Each alloc/free event's allocation, so the curve uses the allocation's block size.
  std::vector<int64_t> delta(ev.count(), 0);
  std::vector<int64_t> start_allocated(trace.devices.size(), 0);
  std::vector<uint64_t> estimated(trace.devices.size(), 0);
  auto device_slot = [&](int32_t device) {
    return static_cast<size_t>(
        std::lower_bound(trace.devices.begin(), trace.devices.end(), device) -
        trace.devices.begin());
  };
  for (const model::Allocation& a : trace.allocations) {
    const auto size = static_cast<int64_t>(a.size);
    const size_t slot = device_slot(a.device);
    if (slot >= trace.devices.size()) continue;
    if (a.alloc_event == kNoEvent) {
      start_allocated[slot] += size;
    } else {
      delta[a.alloc_event] += size;
    }
    if (a.ReleaseEvent() != kNoEvent) delta[a.ReleaseEvent()] -= size;
    if (!a.size_exact) ++estimated[slot];
  }

  Timelines out;
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    DeviceTimeline t;
    t.device = trace.devices[d];
    std::tie(t.begin, t.end) = trace.device_event_ranges[d];
    t.estimated_sizes = estimated[d];
    for (const model::Segment& s : trace.segments) {
      if (s.device != t.device) continue;
      t.reserved_at_dump += static_cast<int64_t>(s.total_size);
      t.allocated_at_dump += static_cast<int64_t>(s.allocated_size);
      t.active_at_dump += static_cast<int64_t>(s.active_size);
      t.requested_at_dump += static_cast<int64_t>(s.requested_size);
    }
    // Segment events move reserved memory; walk back from the dump to the start.
    int64_t segment_net = 0;
    for (size_t i = t.begin; i < t.end; ++i) {
      switch (ev.action[i]) {
        case Action::kSegmentAlloc:
        case Action::kSegmentMap:
          segment_net += static_cast<int64_t>(ev.size[i]);
          break;
        case Action::kSegmentFree:
        case Action::kSegmentUnmap:
          segment_net -= static_cast<int64_t>(ev.size[i]);
          break;
        default:
          break;
      }
    }
    t.reserved_at_start = t.reserved_at_dump - segment_net;
    t.allocated_at_start = start_allocated[d];
    t.allocated.resize(t.end - t.begin);
    t.reserved.resize(t.end - t.begin);
    int64_t allocated = t.allocated_at_start, reserved = t.reserved_at_start;
    t.peak_allocated = allocated;
    t.peak_reserved = reserved;
    for (size_t i = t.begin; i < t.end; ++i) {
      allocated += delta[i];
      switch (ev.action[i]) {
        case Action::kSegmentAlloc:
        case Action::kSegmentMap:
          reserved += static_cast<int64_t>(ev.size[i]);
          break;
        case Action::kSegmentFree:
        case Action::kSegmentUnmap:
          reserved -= static_cast<int64_t>(ev.size[i]);
          break;
        default:
          break;
      }
      t.allocated[i - t.begin] = allocated;
      t.reserved[i - t.begin] = reserved;
      if (allocated > t.peak_allocated) {
        t.peak_allocated = allocated;
        t.peak_allocated_event = static_cast<int64_t>(i);
      }
      if (reserved > t.peak_reserved) {
        t.peak_reserved = reserved;
        t.peak_reserved_event = static_cast<int64_t>(i);
      }
    }
    out.devices.push_back(std::move(t));
  }
  return out;
}

std::vector<size_t> ReduceTimeline(const DeviceTimeline& t, size_t max_points) {
  const size_t n = t.end - t.begin;
  std::vector<size_t> out;
  if (n <= max_points || max_points < 3) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = t.begin + i;
    return out;
  }
  // The first and last events are always kept (where the curve starts and where it ends).
  out.push_back(t.begin);
  const size_t bucket = (n + max_points / 3 - 1) / (max_points / 3);
  for (size_t start = 0; start < n; start += bucket) {
    const size_t stop = std::min(n, start + bucket);
    size_t lo = start, hi = start, top = start;
    for (size_t i = start; i < stop; ++i) {
      if (t.allocated[i] < t.allocated[lo]) lo = i;
      if (t.allocated[i] > t.allocated[hi]) hi = i;
      if (t.reserved[i] > t.reserved[top]) top = i;
    }
    size_t keep[3] = {lo, hi, top};
    std::sort(keep, keep + 3);
    for (size_t k = 0; k < 3; ++k) {
      if (t.begin + keep[k] != out.back()) out.push_back(t.begin + keep[k]);
    }
  }
  if (out.back() != t.end - 1) out.push_back(t.end - 1);
  return out;
}

std::vector<size_t> LiveAfter(const model::Trace& trace, int32_t device, int64_t event) {
  std::vector<size_t> out;
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (a.device != device) continue;
    const bool born = a.alloc_event == kNoEvent || (event != kNoEvent && a.alloc_event <= event);
    const bool released =
        a.ReleaseEvent() != kNoEvent && event != kNoEvent && a.ReleaseEvent() <= event;
    // At the start of the trace, allocations freed during it were alive too.
    if (born && !released) out.push_back(i);
  }
  return out;
}

}  // namespace vramscope::analysis
