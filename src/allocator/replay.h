// Replays the tensor requests of a recorded trace through the allocator model.
//
// Two modes:
// - Compare (`follow_recording`): the model answers every request and the answer is compared with
//   what really happened: the address of every allocation, every segment_alloc (size and order),
//   every release of cached segments (which ones, and whether the allocator's rule explains them),
//   the reserved curve, and the final state against the snapshot's segments. New segments get the
//   recorded addresses when the model asks for the same size the recording did, so block
//   addresses are comparable. After a divergence the model is put back in step with the
//   recording (the recorded placement is forced), so one difference is counted once.
// - What-if: the model alone decides under other settings or a capacity. The recording supplies
//   only the requests, the points where frees completed (record_stream waits), the user's
//   empty_cache calls, and the state at the start of a trace that begins mid-run.
//
// Traces that start mid-run are replayed from the state the recording implies: the segments that
// existed before (those at the dump, minus the ones allocated during the trace, plus the ones
// released during it) and the allocations alive before the trace, at their recorded addresses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/curve_reducer.h"
#include "allocator/pool_inference.h"
#include "common/status.h"
#include "model/trace.h"

namespace vramscope::allocator {

// What the replay does with the private pools (CUDA graphs, MemPools) the recording used.
enum class PoolMapping : uint8_t {
  kRecorded,  // each request goes to the pool the recording implies (pool_inference.h)
  kShared,    // every private pool's requests go to one pool, as graphs captured with one pool=
  kNone,      // no private pools: every request goes to the default pools (no graphs)
};
const char* PoolMappingName(PoolMapping mapping);

// The points a replay's curve keeps by default: as many as the report's simulated timeline
// stores (vramscope_sim_timeline).
inline constexpr size_t kDefaultCurvePoints = 30000;

struct ReplayOptions {
  AllocatorSettings settings;
  PoolMapping pools = PoolMapping::kRecorded;
  bool follow_recording = true;
  // The allocated / reserved / requested curve, reduced while replaying to about `curve_points`
  // points (curve_reducer.h; 0 keeps every event).
  bool record_curves = true;
  size_t curve_points = kDefaultCurvePoints;
  bool stop_at_oom = true;        // the run would have died there
  bool check_invariants = false;  // tests and fuzzing: check the model's state at the end
  // Replay only the events before this index of Trace::events (-1: all): final_state is then the
  // model's state after event stop_before_event - 1 (a window's end, pipeline/window.h).
  int64_t stop_before_event = -1;
};

// A segment action of the model, at the trace event whose request caused it.
struct SimulatedSegmentEvent {
  int64_t event;  // index into Trace::events
  SegmentEvent what;
};

struct OomPoint {
  int64_t event = -1;  // the alloc event that could not be served
  uint64_t requested = 0;
  uint64_t rounded = 0;
  uint64_t stream = 0;
  uint64_t allocated = 0;  // at the moment of the failure
  uint64_t reserved = 0;
  uint64_t allowed = 0;
};

// What the recording says about one burst of segment_free events.
struct ReleaseBurst {
  int64_t first_event = 0;
  uint64_t segments = 0;
  uint64_t bytes = 0;
  enum class Cause : uint8_t { kEmptyCache, kMallocRetry } cause = Cause::kEmptyCache;
  bool matches_rule = false;  // exactly the unsplit cached segments the model would release
  bool same_order = false;
};

struct ReplayComparison {
  uint64_t allocs = 0;
  uint64_t allocs_at_recorded_address = 0;
  uint64_t recorded_segment_allocs = 0;
  uint64_t model_segment_allocs = 0;
  uint64_t segment_allocs_matched = 0;  // same size, for the same request, in the same order
  uint64_t recorded_segment_frees = 0;
  uint64_t segment_frees_matched = 0;  // released by the rule the burst's cause implies
  uint64_t model_only_segment_frees = 0;
  std::vector<ReleaseBurst> bursts;
  uint64_t recorded_maps = 0;
  uint64_t recorded_unmaps = 0;
  uint64_t compared_points = 0;  // alloc and free events where reserved was compared
  uint64_t reserved_equal_points = 0;
  uint64_t max_reserved_difference = 0;
  // Final state against the snapshot's segments of this device.
  uint64_t final_segments_recorded = 0;
  uint64_t final_segments_matched = 0;  // same address, size and blocks
  uint64_t final_blocks_recorded = 0;
  uint64_t final_blocks_matched = 0;  // same address, size and allocated/free state
  // The first few divergences, one line each, with their event index.
  std::vector<std::string> divergences;
  uint64_t divergence_count = 0;
  uint64_t resyncs = 0;
};

// One private pool of a replay (the model's pools; with PoolMapping::kShared, the one shared).
struct PoolResult {
  MemPoolId id;
  uint64_t allocations = 0;    // requests served from it
  uint64_t peak_reserved = 0;  // its segments' bytes at their highest, after any event
  uint64_t reserved_at_end = 0;
  uint64_t allocated_at_end = 0;
  uint64_t cached_at_end = 0;  // free cached blocks: PyTorch's "allocated in private pools"
};

struct ReplayResult {
  int32_t device = 0;
  AllocatorSettings settings;
  bool follow_recording = false;
  int64_t begin_event = 0;  // the device's events are [begin_event, end_event)
  int64_t end_event = 0;
  int64_t events_replayed = 0;  // less than the range when the replay stopped at an OOM
  // Levels after the events the curve kept (ReplayOptions::curve_points), by event; empty
  // unless record_curves.
  std::vector<CurvePoint> curve;
  std::vector<SimulatedSegmentEvent> segment_events;
  AllocatorStats stats;
  uint64_t initial_reserved = 0;
  uint64_t initial_allocated = 0;
  uint64_t initial_segments = 0;
  uint64_t initial_blocks = 0;
  int64_t peak_reserved_event = -1;  // the first event at the peak of reserved memory
  uint64_t allocated_at_peak_reserved = 0;
  uint64_t empty_cache_calls = 0;  // recorded empty_cache points applied (what-if)
  std::optional<OomPoint> oom;
  std::vector<SegmentView> final_state;
  PoolMapping pool_mapping = PoolMapping::kRecorded;
  std::vector<PoolResult> pools;                  // the private pools, in order of creation
  ReplayComparison comparison;                    // compare mode only
  std::vector<std::string> notes;                 // what could not be modelled, and why
  std::vector<std::string> invariant_violations;  // with check_invariants; empty when sound
  // Compare mode: (allocation index, block bytes) for every allocation of the trace whose size
  // the recording left estimated (Allocation::size_exact false) and that the model placed at its
  // recorded address, or that was alive before the trace inside a segment the recording implies
  // (the allocator's split rules then fix its block), so the model's block is the real one. A
  // large-pool block the allocator did not split is bigger than the rounded request; this is how
  // the report learns it. analysis::TakeReplayedBlockSizes moves them into the interpretation.
  std::vector<std::pair<int32_t, uint64_t>> confirmed_block_sizes;

  // (reserved - allocated) / reserved at the peak of reserved memory.
  double FragmentationAtPeak() const;
};

// Replays the events of `device`. Errors only for a trace that gives nothing to replay.
Result<ReplayResult> Replay(const model::Trace& trace, int32_t device,
                            const ReplayOptions& options);

// The highest recorded reserved level after an event of `device` (the segments alive at the
// start, as Replay reconstructs them, plus the recorded segment events) and the first event at
// it; event -1 when the device has no events. One pass, no per-event storage.
struct ReservedPeak {
  uint64_t bytes = 0;
  int64_t event = -1;
};
ReservedPeak RecordedPeakReserved(const model::Trace& trace, int32_t device);

}  // namespace vramscope::allocator
