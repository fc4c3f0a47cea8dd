// The figures every reporter shows: per device, the peaks (allocated and reserved, with when),
// the state at the dump, what was live at the peak grouped by allocation site and by category.
// A pure function of (trace, timelines, attribution); reporters only render it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "analysis/breakdown.h"
#include "analysis/oom.h"
#include "analysis/sites.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "model/trace.h"

namespace vramscope::analysis {

struct DeviceSummary {
  int32_t device = 0;
  uint64_t events = 0;
  uint64_t segments = 0, small_segments = 0, blocks = 0, active_blocks = 0;
  int64_t allocated_at_dump = 0, reserved_at_dump = 0, active_at_dump = 0, requested_at_dump = 0;
  int64_t largest_cached_free_block =
      0;  // inactive block: the biggest request served w/o cudaMalloc
  // Private pools (CUDA graphs, MemPools: segment_pool_id other than (0, 0)) at the dump: their
  // segments, the bytes they reserve (in reserved_at_dump too, as memory_stats() counts them),
  // and their free cached bytes, which no default-pool request can use: what PyTorch's OOM
  // message calls "allocated in private pools (e.g., CUDA Graphs)".
  uint64_t private_pools = 0, private_pool_segments = 0;
  int64_t reserved_in_private_pools = 0, cached_in_private_pools = 0;
  // Peaks. peak_*_event is an index into Trace::events, or kNoEvent (start of trace / dump).
  bool peak_from_trace = false;
  int64_t peak_allocated = 0, peak_allocated_event = model::kNoEvent;
  int64_t peak_allocated_time_us = model::kNoTime;
  int64_t peak_reserved = 0, peak_reserved_event = model::kNoEvent;
  int64_t peak_reserved_time_us = model::kNoTime;
  int64_t reserved_at_peak_allocated = 0;
  uint64_t estimated_sizes = 0;
  // Live at the peak of allocated memory.
  uint64_t live_at_peak_bytes = 0, live_at_peak_count = 0;
  std::vector<SiteGroup> live_at_peak_by_site;          // largest first, all of them
  std::vector<CategoryShare> live_at_peak_by_category;  // every category, fixed order
  std::vector<OwnerGroup> live_at_peak_by_owner;        // largest first, all of them
  // Bytes live at the peak by the confidence of the rule that categorised them (low..high).
  std::array<uint64_t, 3> live_at_peak_by_confidence{};
  // The iteration and phase the peak fell in (step 0: before the first iteration).
  int32_t peak_step = 0;
  attribution::Phase peak_phase = attribution::Phase::kUnknown;
  std::vector<IterationSummary> iterations;
  // Every out-of-memory the trace records, explained at its own event (analysis/oom.h); filled by
  // Analyze.
  std::vector<OomExplanation> ooms;
  int64_t first_time_us = model::kNoTime, last_time_us = model::kNoTime;
};

struct Summary {
  std::vector<DeviceSummary> devices;  // devices with segments or memory events
  int64_t peak_usage_bytes = 0;        // Skyline's figure: peak allocated (largest device)
  uint64_t allocations = 0;
};

Summary Summarize(const model::TraceView& view, const Timelines& timelines,
                  const attribution::Attribution& attribution, SiteNamer& sites,
                  OwnerNamer& owners);

}  // namespace vramscope::analysis
