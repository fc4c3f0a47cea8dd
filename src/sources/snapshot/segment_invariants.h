// Allocator-state invariants of a PyTorch memory snapshot, checked when it is loaded.
//
// PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp) builds a snapshot's segments by
// walking each segment's blocks, and writes its trace entries from the sizes it computed, so a file
// it wrote holds these by construction:
//  - the segments of one device are disjoint, and a segment's address + total_size stays below
//    2^64;
//  - a segment's total_size is a positive multiple of 1 MiB (segments are 2 MiB, 20 MiB, or a
//    request rounded up to 2 MiB; large_segment_size_mb, any whole number of MiB above 10, replaces
//    the 20 MiB and the 20 MiB pages of expandable segments);
//  - a block's size is a positive multiple of 512 bytes (kMinBlockSize: every request is rounded
//    to it, and roundup_power2_divisions steps are multiples of it), and the blocks tile their
//    segment exactly: the first starts at the segment's address, each next one where the previous
//    ends, the last ends at address + total_size;
//  - allocated_size = the sum of the sizes of the active_allocated blocks, active_size = the sum of
//    the sizes of the active blocks (allocated or pending free), requested_size = the sum of the
//    requested_size of the active blocks; an active block's requested_size is at most its size
//    (an inactive block keeps a stale requested_size, which nothing constrains);
//  - trace entries' sizes: alloc and free_* carry the caller's requested size, unrounded, and at
//    least 1 (a request of 0 bytes never reaches the allocator); segment_alloc/free/map/unmap a
//    segment's (or whole pages') size, a positive multiple of 1 MiB as above; oom the rounded
//    request, a positive multiple of 512.
// Every real snapshot of ../shared/fixtures/real and every golden satisfies all of them (checked
// when they were introduced), so a violation is damage, or a file PyTorch did not write: the
// snapshot source refuses it, naming the first offending segment, block or entry. No violation is
// kept and noted, because no real PyTorch file is known to carry one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "model/trace.h"

namespace vramscope::snapshot {

// What the file said of a converted segment that the model does not keep; one per
// trace.segments entry, in the same (device, address) order.
struct SegmentOrigin {
  uint32_t index = 0;  // position in the snapshot's segments list
  // Whether the file carried the field: older files lack some, and the model holds 0 for them.
  bool has_allocated_size = false;
  bool has_active_size = false;
  bool has_requested_size = false;
};

// Likewise for a converted block; one per trace.blocks entry.
struct BlockOrigin {
  uint32_t index = 0;  // position in its segment's blocks list
  // The model's requested_size is the block's own 'requested_size' (2.0+), the value PyTorch
  // summed; false when it is absent or was taken from a 1.13 history record instead.
  bool has_requested_size = false;
};

// The first violated invariant: where (positions in the file, for the error message's path) and
// what is wrong with the numbers, as a phrase without the path or a remedy.
struct Violation {
  uint32_t segment = 0;
  std::optional<uint32_t> block;  // nullopt: the segment itself
  std::string what;
};

// Checks the segments and blocks of `trace` (as the snapshot source converted them: segments
// sorted by (device, address), each one's blocks contiguous and sorted by address). Segments are
// checked one by one in the file's order, each one's blocks in address order, then the segments
// of each device against each other. `segments` and `blocks` run parallel to trace.segments and
// trace.blocks.
std::optional<Violation> FindSegmentViolation(const model::Trace& trace,
                                              std::span<const SegmentOrigin> segments,
                                              std::span<const BlockOrigin> blocks);

// Whether a trace entry's `size` (as the file carried it) is one PyTorch records for `action`;
// what is wrong with it otherwise, as a phrase. Actions without a rule (snapshot, user_defined,
// annotate, unknown ones) always pass. Called once per trace entry: allocates only on failure.
std::optional<std::string> FindEntrySizeViolation(model::Action action, uint64_t size);

}  // namespace vramscope::snapshot
