// Allocated and reserved memory after every event, per device, and their peaks.
//
// allocated = bytes of blocks handed to tensors (torch.cuda.memory_allocated()); it drops when a
// tensor is released (free_requested), as PyTorch's counter does, even if the block still waits
// for another stream. reserved = bytes of segments the caching allocator holds
// (torch.cuda.memory_reserved()). Both curves are anchored at the dump: the state the snapshot
// records at its end is exact, and the trace is walked back from it, so a trace that starts
// mid-run still gets correct levels.
#pragma once

#include <cstdint>
#include <vector>

#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

struct DeviceTimeline {
  int32_t device = 0;
  size_t begin = 0, end = 0;       // the device's event range in Trace::events
  std::vector<int64_t> allocated;  // after each event of the range
  // Reserved memory changes only at segment events: (event index, reserved after it), ascending.
  // A per-event array would cost 8 bytes an event for a handful of distinct values.
  std::vector<std::pair<size_t, int64_t>> reserved_steps;
  int64_t allocated_at_start = 0;  // before the first event of the trace
  int64_t reserved_at_start = 0;
  int64_t allocated_at_dump = 0;  // from the snapshot's segments (exact)
  int64_t reserved_at_dump = 0;
  int64_t active_at_dump = 0;
  int64_t requested_at_dump = 0;
  // Peaks over the trace and the dump; event == kNoEvent means "at the start of the trace"
  // (or at the dump when there is no trace).
  int64_t peak_allocated = 0;
  int64_t peak_allocated_event = model::kNoEvent;
  int64_t peak_reserved = 0;
  int64_t peak_reserved_event = model::kNoEvent;
  // How many allocations counted in the curve have an estimated (512 B-rounded) block size.
  uint64_t estimated_sizes = 0;

  // Reserved bytes right after event `event` (an index into Trace::events in [begin, end)).
  int64_t ReservedAfter(size_t event) const;
};

struct Timelines {
  std::vector<DeviceTimeline> devices;  // parallel to Trace::devices
  int64_t PeakAllocated() const;        // the largest per-device peak
};

Timelines ComputeTimelines(const model::TraceView& view);

// The events of `timeline` worth drawing when at most about `max_points` may be kept: all of them
// when they fit, else per bucket of consecutive events the ones with the lowest and highest
// allocated and the highest reserved, so every local extreme (and both peaks) survive. Returns
// indices into Trace::events, ascending.
std::vector<size_t> ReduceTimeline(const DeviceTimeline& timeline, size_t max_points);

// Allocations (indices into Trace::allocations) live right after `event` on `device`; with
// event == kNoEvent, those live at the start of the trace.
std::vector<size_t> LiveAfter(const model::Trace& trace, int32_t device, int64_t event);

}  // namespace vramscope::analysis
