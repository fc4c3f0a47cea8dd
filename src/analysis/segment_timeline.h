// The allocator's segments over time, computed once for every reporter: each segment (a
// cudaMalloc'd range, or a mapped range of an expandable segment) with the events between which it
// existed, its pool and stream, and, for every allocation, the segment that held it. Reporters
// (the database's vramscope_segment_timeline, the viewer's segment view) read this; none
// re-derives allocator state or guesses pools from block sizes.
//
// Recorded segments come from the trace's segment events and the snapshot's segments at the dump
// (a segment freed in the trace but never allocated in it existed before the trace; one at the
// dump that no event created existed throughout). A source without recorded segments (a memory
// timeline, a prediction's stream before its replay) gets the allocator model's segments from
// its run over the recorded requests, when there is one.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/simulation.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

// How a segment's pool is known.
enum class PoolEvidence : uint8_t {
  kDump,         // the snapshot's segment_type at the dump
  kSegmentSize,  // the allocator's segment sizes (allocator::PoolOfSegmentSize)
  kModel,        // the allocator model made the segment
};
const char* PoolEvidenceName(PoolEvidence evidence);

enum class SegmentSource : uint8_t {
  kNone,      // nothing recorded and no model run
  kRecorded,  // the trace's segment events and the dump
  kModel,     // the allocator model's run over the recorded requests
};
const char* SegmentSourceName(SegmentSource source);

struct SegmentSpan {
  int32_t device = 0;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  // Alive from first_event (its segment_alloc/map; kNoEvent: before the trace) up to end_event
  // (its segment_free/unmap; kNoEvent: still there at the end of the trace). Indices into
  // Trace::events.
  int64_t first_event = model::kNoEvent;
  int64_t end_event = model::kNoEvent;
  model::Pool pool = model::Pool::kLarge;
  PoolEvidence pool_evidence = PoolEvidence::kSegmentSize;
  bool expandable = false;
  // A CUDA graph's or MemPool's private pool (segment_pool_id other than (0, 0) at the dump),
  // with PyTorch's id of the pool. Segments released during the trace have no recorded pool.
  bool private_pool = false;
  int64_t pool_id[2] = {0, 0};
};

struct DeviceSegments {
  int32_t device = 0;
  SegmentSource source = SegmentSource::kNone;
  // The segment events' addresses were made from recorded totals (a profiler's Total Reserved):
  // sizes and times are right, addresses are not (TraceFacts::synthetic_segment_addresses).
  bool synthetic_addresses = false;
};

struct SegmentTimeline {
  std::vector<DeviceSegments> devices;  // parallel to Trace::devices
  std::vector<SegmentSpan> segments;    // by device, then in the order they appear
  // Per allocation (parallel to Trace::allocations): the index into `segments` of the segment
  // that held its block while it was live, or -1 (none recorded, or outside every segment).
  std::vector<int32_t> allocation_segment;
};

// `replay`: the allocator model's runs (runs[0] of each device), for sources without recorded
// segments; may be null.
SegmentTimeline ComputeSegmentTimeline(const model::TraceView& view, const Simulations* replay);

}  // namespace vramscope::analysis
