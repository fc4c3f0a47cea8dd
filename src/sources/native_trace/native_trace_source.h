// Source: the native trace (.vstrace) that `vramscope run --native` records with CUPTI inside
// any CUDA process (src/native_capture/, docs/design/native-trace.md).
//
// What it holds is driver-level memory: every cuMemAlloc / cuMemAllocPitch / cuMemAllocManaged /
// cuMemAllocAsync / cuMemAllocFromPoolAsync and its free, and the virtual-memory API's mappings.
// A framework's own allocator (PyTorch's caching allocator, JAX/XLA's BFC allocator) sub-allocates
// tensors inside those, so the trace shows the framework's reserved memory, not its tensors.
//
// Each driver allocation becomes a segment (kSegmentAlloc ... kSegmentFree) and an allocation of
// the same size (kAlloc ... kFreeCompleted) at the same address, so that both the reserved and
// the allocated curves show driver-level memory. A VMM mapping (cuMemMap ... cuMemUnmap) becomes
// kSegmentMap/kSegmentUnmap plus an allocation of the mapped size: physical memory counts while
// it is mapped (cuMemCreate'd memory that is never mapped is reported in a note). A failed
// allocation becomes a kOom event. Native stacks (return addresses symbolized with dladdr in the
// process) become frames "module" / "symbol"; the NVTX range path of the allocating thread
// ("train_step/forward") becomes the event's user_metadata, and ranges named for a training
// phase (forward/fwd, backward/bwd, optimizer/optim/step) become Trace::phase_marks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/trace.h"

namespace vramscope::native_trace {

// Converts the bytes of a .vstrace file. `path` prefixes error messages (one line each); a trace
// cut short by a crash is not an error: it is read up to its last intact record and a note says
// where it stopped.
Result<model::Trace> TraceFromNativeTrace(std::span<const uint8_t> bytes, const std::string& path);

// The training phase an NVTX range's name stands for, if any: its words (split at
// non-alphanumerics, case changes and digits) include forward/fwd, backward/bwd,
// optimizer/optim, or the name is just "step" or "<optim...> step". "train_step" names none.
std::optional<model::Phase> PhaseOfRangeName(std::string_view name);

}  // namespace vramscope::native_trace
