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

int64_t DeviceTimeline::ReservedAfter(size_t event) const {
  const auto it = std::upper_bound(
      reserved_steps.begin(), reserved_steps.end(), event,
      [](size_t e, const std::pair<size_t, int64_t>& step) { return e < step.first; });
  return it == reserved_steps.begin() ? reserved_at_start : std::prev(it)->second;
}

Timelines ComputeTimelines(const model::TraceView& view) {
  const model::Trace& trace = view.trace;
  const model::Events& ev = trace.events;
  Timelines out;
  out.devices.resize(trace.devices.size());
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    DeviceTimeline& t = out.devices[d];
    t.device = trace.devices[d];
    std::tie(t.begin, t.end) = trace.device_event_ranges[d];
    t.allocated.assign(t.end - t.begin, 0);
    for (const model::Segment& s : trace.segments) {
      if (s.device != t.device) continue;
      t.reserved_at_dump += static_cast<int64_t>(s.total_size);
      t.allocated_at_dump += static_cast<int64_t>(s.allocated_size);
      t.active_at_dump += static_cast<int64_t>(s.active_size);
      t.requested_at_dump += static_cast<int64_t>(s.requested_size);
    }
  }
  auto device_slot = [&](int32_t device) {
    return static_cast<size_t>(
        std::lower_bound(trace.devices.begin(), trace.devices.end(), device) -
        trace.devices.begin());
  };
  // Each allocation's block size enters the curve at its alloc and leaves at its release: first
  // as deltas in place, then summed.
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    const size_t slot = device_slot(a.device);
    if (slot >= out.devices.size()) continue;
    DeviceTimeline& t = out.devices[slot];
    const auto size = static_cast<int64_t>(view.BlockSize(i));
    if (a.alloc_event == kNoEvent) {
      t.allocated_at_start += size;
    } else {
      t.allocated[a.alloc_event - t.begin] += size;
    }
    if (a.ReleaseEvent() != kNoEvent) t.allocated[a.ReleaseEvent() - t.begin] -= size;
    if (!view.SizeExact(i)) ++t.estimated_sizes;
  }
  auto segment_delta = [&](size_t i) -> int64_t {
    switch (ev.action[i]) {
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        return static_cast<int64_t>(ev.size[i]);
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        return -static_cast<int64_t>(ev.size[i]);
      default:
        return 0;
    }
  };
  for (DeviceTimeline& t : out.devices) {
    // Segment events move reserved memory; walk back from the dump to the start. Sources
    // without an allocator state give the levels at the start instead, and the "dump" is the
    // end of the trace.
    int64_t segment_net = 0;
    for (size_t i = t.begin; i < t.end; ++i) segment_net += segment_delta(i);
    if (trace.facts.has_allocator_state) {
      t.reserved_at_start = t.reserved_at_dump - segment_net;
    } else {
      for (const model::StartLevels& level : trace.start_levels) {
        if (level.device != t.device) continue;
        t.reserved_at_start = level.reserved;
      }
      t.reserved_at_dump = t.reserved_at_start + segment_net;
    }
    int64_t allocated = t.allocated_at_start, reserved = t.reserved_at_start;
    t.peak_allocated = allocated;
    t.peak_reserved = reserved;
    for (size_t i = t.begin; i < t.end; ++i) {
      allocated += t.allocated[i - t.begin];
      t.allocated[i - t.begin] = allocated;
      if (const int64_t change = segment_delta(i); change != 0) {
        reserved += change;
        t.reserved_steps.emplace_back(i, reserved);
      }
      if (allocated > t.peak_allocated) {
        t.peak_allocated = allocated;
        t.peak_allocated_event = static_cast<int64_t>(i);
      }
      if (reserved > t.peak_reserved) {
        t.peak_reserved = reserved;
        t.peak_reserved_event = static_cast<int64_t>(i);
      }
    }
    if (!trace.facts.has_allocator_state) {
      t.allocated_at_dump = allocated;
      t.active_at_dump = allocated;
      for (const model::Allocation& a : trace.allocations) {
        if (a.device == t.device && a.ReleaseEvent() == kNoEvent) {
          t.requested_at_dump += static_cast<int64_t>(a.requested_size);
        }
      }
    }
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
    int64_t top_reserved = t.ReservedAfter(t.begin + start);
    for (size_t i = start; i < stop; ++i) {
      if (t.allocated[i] < t.allocated[lo]) lo = i;
      if (t.allocated[i] > t.allocated[hi]) hi = i;
    }
    // The highest reserved in the bucket is after one of its segment events (or at its start).
    auto step =
        std::upper_bound(t.reserved_steps.begin(), t.reserved_steps.end(), t.begin + start,
                         [](size_t e, const std::pair<size_t, int64_t>& s) { return e < s.first; });
    for (; step != t.reserved_steps.end() && step->first < t.begin + stop; ++step) {
      if (step->second > top_reserved) {
        top_reserved = step->second;
        top = step->first - t.begin;
      }
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
