// A PyTorch memory snapshot written back: the pickle torch.cuda.memory._snapshot() dumps
// ({"segments": [...], "device_traces": [[...], ...], "allocator_settings": {...}}), holding
// a part of a trace's events and the allocator's state at their end, so that PyTorch's
// memory_viz opens it and vramscope reads it as any snapshot (`vramscope split`).
//
// Fields as torch 2.x names them (docs in shared/spec/README.md, "snapshot format"): segments
// with device, address, total_size, allocated_size, active_size, requested_size, stream,
// segment_type, segment_pool_id, is_expandable, frames and blocks (address, size,
// requested_size, state, frames); trace entries with action, addr, size, stream, time_us,
// frames and, where recorded, compile_context and user_metadata. Frames innermost first, as
// recorded. Pickle protocol 2, no memo: every reader since Python 2.3 takes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/trace.h"

namespace vramscope::report {

struct SnapshotPart {
  const model::Trace* trace = nullptr;  // tables, events, settings
  // [begin, end) of Trace::events for each device written; the others get an empty trace.
  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> ranges;
  // The state at the events' end; first_block/block_count index `blocks`.
  std::vector<model::Segment> segments;
  std::vector<model::Block> blocks;
};

std::string SnapshotPickle(const SnapshotPart& part);

// Whether the file at `path` begins as SnapshotPickle's output does (Python's pickler and
// PyTorch never write that opening): a piece an earlier `vramscope split` wrote, which a new one
// may replace.
bool IsSnapshotPickleWeWrote(const std::string& path);

}  // namespace vramscope::report
