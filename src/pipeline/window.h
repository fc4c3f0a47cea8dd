// A window of a recording (--from/--to, --step-range): the part of the trace a report covers.
//
// A memory snapshot holds the allocator's state when it was dumped and the events that led to
// it. A window keeps the events between two points and the state at the window's end, found by
// the allocator model's replay of the recording up to there (the replay follows the recorded
// addresses, so its state is the recording's); the window is then read as a snapshot dumped at
// its end whose trace began at its start, and every stage after loading sees nothing else. The
// report's notes say what was left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "pipeline/load.h"

namespace vramscope::pipeline {

// The allocator's segments and blocks of `device` after event `end - 1` of loaded.trace (an
// index into Trace::events within the device's range): the snapshot's own when `end` is the
// device's last event + 1, else the allocator model's replay of the recording up to there (it
// follows the recorded addresses), each live block's stack from the allocation holding it and
// each segment's from its segment_alloc. Segments by address; first_block/block_count index
// `blocks`. An error (one line naming the input) when the replay cannot run.
struct AllocatorState {
  std::vector<model::Segment> segments;
  std::vector<model::Block> blocks;
};
Result<AllocatorState> AllocatorStateAfter(const Loaded& loaded, int32_t device, size_t end);
// Appends `from`'s segments and blocks to `into` (the states of several devices in one list),
// renumbering first_block and each block's segment.
void AppendState(const AllocatorState& from, AllocatorState& into);

// The flags' syntax alone (no file needed): one line naming the flag and what it takes.
Status CheckWindow(const WindowRequest& window);

// Replaces loaded.trace and the event-keyed parts of loaded.interpretation by the window's.
// Errors (one line naming the input) for a source without an allocator state, a window holding
// no event, or steps the trace does not have.
Status ApplyWindow(const WindowRequest& window, Loaded& loaded);

}  // namespace vramscope::pipeline
