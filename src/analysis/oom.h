// The out-of-memory story: for every `oom` entry of the trace (PyTorch records one when its
// caching allocator cannot serve a request, after it has released what cached memory it could),
// what was asked for and by whom, the allocator's state at that moment, whether fragmentation
// explains it or the memory really was used up (and under which limit), what was live then, and
// one thing to try.
//
// Everything is computed at the oom event itself, not at the dump: a snapshot taken after the
// exception unwound (the usual case) no longer holds the tensors that filled the device.
//
// The allocator's state at the event (its free blocks) is rebuilt from the recording: the
// segments at the dump walked back through the segment events, and the blocks of the allocations
// live at the event. The replay of the allocator model follows the same recording, so its state
// there is the same; it exposes only its final state, which is why the recording is read here.
//
// A pure function of (trace, timelines, attribution); reporters only render it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/breakdown.h"
#include "analysis/segment_timeline.h"
#include "analysis/sites.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "attribution/stack_facts.h"
#include "model/trace.h"

namespace vramscope::analysis {

// What stopped the allocator from getting more memory.
enum class OomLimit : uint8_t {
  kUnknown,       // the trace does not record the device's free memory
  kDevice,        // the device had less free memory than the segment the allocator needed
  kAllocatorCap,  // the device had enough: a cap on the process stopped it (memory fraction)
};
const char* OomLimitName(OomLimit limit);  // "unknown", "device", "allocator_cap"

struct OomExplanation {
  int32_t device = 0;
  int64_t event = model::kNoEvent;  // index into Trace::events
  int64_t time_us = model::kNoTime;
  int32_t step = 0;  // 0: before the first iteration
  attribution::Phase phase = attribution::Phase::kUnknown;

  // The failing request. PyTorch records it already rounded to its block size.
  uint64_t requested_bytes = 0;  // as the oom entry records it
  uint64_t block_bytes = 0;      // the block the allocator looked for (recorded settings)
  // The memory it tried to get from CUDA for it: a new segment (what PyTorch's message calls
  // "Tried to allocate"). Expandable segments map pages instead; then it equals block_bytes.
  uint64_t segment_bytes = 0;
  bool small_pool = false;  // the request was for the small pool (1 MiB or less)
  uint64_t stream = 0;
  model::StackId stack = model::kEmptyStack;
  std::string site;       // "model.py:219 forward"; empty without a stack
  std::string operation;  // "aten::gelu"; empty when no frame names one

  // Levels right before the failure (the oom entry changes nothing).
  bool device_free_known = false;
  uint64_t device_free_bytes = 0;   // cudaMemGetInfo's free bytes, as PyTorch recorded them
  int64_t allocated_bytes = 0;      // torch.cuda.memory_allocated()
  int64_t reserved_bytes = 0;       // torch.cuda.memory_reserved()
  int64_t reserved_free_bytes = 0;  // reserved - allocated ("reserved by PyTorch but unallocated")

  // The allocator's free blocks at the event, rebuilt from the recording (see above). When it
  // cannot be rebuilt, state_known is false and state_note says why.
  bool state_known = false;
  std::string state_note;
  uint64_t largest_free_block_bytes = 0;  // usable for the request: its pool and stream
  uint64_t usable_free_bytes = 0;         // all free blocks of the request's pool and stream
  uint64_t usable_free_blocks = 0;
  uint64_t largest_free_block_any_bytes = 0;  // any pool or stream
  uint64_t free_block_bytes = 0;              // all free blocks, any pool or stream
  bool expandable_segments = false;           // the recorded setting

  // The verdict.
  // Fragmentation explains it: enough reserved memory was free, but no free block was large
  // enough (or the free memory lay in the other pool or on other streams).
  bool fragmentation = false;
  OomLimit limit = OomLimit::kUnknown;
  // kAllocatorCap: the cap lies in [cap_at_least_bytes, cap_below_bytes): the run reserved the
  // former (its peak reserved so far; 0 when that is not below the upper bound, after memory was
  // released), and reserving the segment on top of what was reserved passed it.
  uint64_t cap_at_least_bytes = 0;
  uint64_t cap_below_bytes = 0;
  std::string verdict;  // one sentence: why it failed
  std::string hint;     // one sentence: what to try first

  // What was live at the event.
  LiveBreakdown live;
};

// One explanation per oom event of `device` (its events in Trace::events), in order. `facts`
// names the operation of the failing request's stack.
std::vector<OomExplanation> ExplainOoms(const model::TraceView& view,
                                        const SegmentTimeline& segments,
                                        const DeviceTimeline& timeline,
                                        const attribution::Attribution& attribution,
                                        SiteNamer& sites, OwnerNamer& owners,
                                        attribution::StackFactsCache& facts);

}  // namespace vramscope::analysis
