// Which memory pool each request of a recorded trace was served from.
//
// PyTorch routes a request to a private pool (a CUDA graph's, or a torch.cuda.MemPool's) while a
// capture or `use_mem_pool` context is active for it; its trace entries do not say so (up to
// torch 2.11 the pickled trace entry has no pool key, although the C++ TraceEntry holds one).
// The snapshot says it for the segments alive at the dump: `segment_pool_id`. Inference, in one
// backward pass over a device's events:
// - a segment alive at the dump belongs to its recorded pool, back to its segment_alloc;
// - a segment released during the trace has no recorded pool: it is taken as the default pools',
//   and the notes count such segments when the trace has private pools at all;
// - an allocation belongs to the pool of the segment that holds its recorded address when it
//   was made.
// When a pool was released (its graphs or MemPool destroyed) is not recorded either; the replay
// takes the first recorded release of one of its segments as the latest moment (PyTorch frees a
// private pool's segments only once its use count is zero).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator/caching_allocator.h"
#include "model/trace.h"

namespace vramscope::allocator {

struct RecordedPools {
  // The private pools the device's segments name, in order of first appearance in the trace
  // (pools that only exist at the dump last). A pool's number in the maps below is its index
  // here plus one; 0 is the default pools.
  std::vector<MemPoolId> pools;
  // Event index -> pool number, for alloc and segment_alloc events served by a private pool
  // (events not in the map: the default pools).
  std::unordered_map<uint32_t, int32_t> event_pool;
  uint64_t private_allocs = 0;         // alloc events placed in a private pool
  uint64_t private_segments = 0;       // segments of private pools the trace or dump holds
  uint64_t segments_without_pool = 0;  // released in the trace: no recorded pool
  std::vector<std::string> notes;      // how the pools were found, for the reader

  int32_t PoolOfEvent(size_t event) const {
    auto it = event_pool.find(static_cast<uint32_t>(event));
    return it == event_pool.end() ? 0 : it->second;
  }
  bool empty() const { return pools.empty(); }
};

// The pools of `device`'s events [begin, end) of `trace`.
RecordedPools InferRecordedPools(const model::Trace& trace, int32_t device, size_t begin,
                                 size_t end);

}  // namespace vramscope::allocator
