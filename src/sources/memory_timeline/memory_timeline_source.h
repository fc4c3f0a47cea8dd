// Source: the raw memory timeline of PyTorch's memory profiler.
//
// torch.profiler.profile(profile_memory=True, record_shapes=True, with_stack=True) followed by
// prof.export_memory_timeline("x.raw.json.gz", device="cuda:0") (a path ending in raw.json.gz) or
// prof.mem_tl.export_memory_timeline_raw("x.json", "cuda:0") writes a JSON list of records
//
//   [t_ns, action, bytes, category]
//
// (torch/profiler/_memory_profiler.py, MemoryProfileTimeline.export_memory_timeline_raw, torch
// 2.1+). The list is sorted by time, pre-existing tensors first with t_ns = -1.
//   action   1 PREEXISTING, 2 CREATE, 3 INCREMENT_VERSION, 4 DESTROY (Action.value)
//   bytes    the tensor's storage bytes: positive for PREEXISTING and CREATE, negative for
//            DESTROY; an in-place update writes two INCREMENT_VERSION records at the same time,
//            (-bytes, category of the old version) then (+bytes, category of the new version)
//   category index in _CATEGORY_TO_COLORS: 0 PARAMETER, 1 OPTIMIZER_STATE, 2 INPUT, 3 TEMPORARY,
//            4 ACTIVATION, 5 GRADIENT, 6 AUTOGRAD_DETAIL, 7 None (not categorized)
//
// The file records neither the device (it is one device's timeline; shown as device 0), nor
// addresses, stacks, allocator blocks or reserved memory. Every positive record becomes an alloc
// event whose PyTorch category is recorded in Events::category (AUTOGRAD_DETAIL as temporary,
// see the .cc); every negative record a free_requested + free_completed of the latest live
// tensor of the same category and size. An INCREMENT_VERSION pair that keeps its category
// changes no memory and adds no event. Tensors get synthetic addresses (512 x their ordinal).
#pragma once

#include <string>
#include <string_view>

#include "common/json_sax.h"
#include "common/status.h"
#include "model/trace.h"

namespace vramscope::memory_timeline {

// Converts the JSON text of a raw memory timeline. `path` prefixes error messages, which are one
// line: "PATH: record N: what is wrong; what to do" (N is the 0-based index into the list), or
// "PATH: invalid JSON at byte N (what); the file is truncated|damaged" for text that is not JSON
// (N from 0). `options.progress` hears how much of the text is read (a mapped file releases
// those pages).
Result<model::Trace> TraceFromMemoryTimeline(std::string_view json, const std::string& path,
                                             const json_sax::ParseOptions& options = {});

}  // namespace vramscope::memory_timeline
