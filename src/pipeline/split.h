// `vramscope split`: a snapshot cut into pieces that are snapshots themselves. Piece i of N holds
// the i-th N-th of each device's events and the allocator's state at their end (window.h's
// AllocatorStateAfter), so that each replays alone as the whole does over those events, and
// PyTorch's memory_viz opens it (report/snapshot_pickle.h writes them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "pipeline/input.h"
#include "pipeline/load.h"
#include "pipeline/window.h"

namespace vramscope::pipeline {

inline constexpr int kMaxSlices = 10000;

struct SplitRequest {
  Input input;
  int slices = 0;  // 2 to kMaxSlices
  Control control;
  InputLimits limits;
};

struct SplitPiece {
  // [begin, end) of the whole trace's events, for each device.
  std::vector<std::pair<int32_t, std::pair<size_t, size_t>>> ranges;
  AllocatorState state;  // every device's, after the piece's last event
};

struct SplitPlan {
  Loaded loaded;
  std::vector<SplitPiece> pieces;
};

// Errors, one line naming the input: not a snapshot with a trace, a capture folder, a slice
// count out of range.
Result<SplitPlan> PlanSplit(const SplitRequest& request);

}  // namespace vramscope::pipeline
