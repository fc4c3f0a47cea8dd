// XLA's reservation split into live buffers and its free pool: a JAX device memory profile (the
// live buffers, no allocator state) joined with the native trace `vramscope run --native` took in
// the same process (the driver allocations, which XLA's BFC pool is made of).
//
// XLA takes its pool from the driver up front (75% of the GPU by default) or as it grows, and
// sub-allocates every buffer inside it; nvidia-smi shows the pool whatever is in use. The native
// trace names each driver allocation's owner by the library that made the call (the recorder
// skips CUDA's and CUPTI's own frames): those of XLA's libraries are the pool, the rest (cuBLAS,
// cuDNN workspaces) sit outside it. The pool at its largest is taken as what XLA held when the
// profile was saved at the program's end (a BFC pool is not returned before the process ends),
// and becomes the profile's reserved memory on that device, so that the report reads it as
// reserved = allocated (the live buffers) + reserved but not allocated (XLA's free pool).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/trace.h"

namespace vramscope::pipeline {

struct XlaReservation {
  int32_t device = 0;
  uint64_t pool_bytes = 0;                // XLA's driver allocations at their largest
  uint64_t other_bytes = 0;               // the other libraries' driver allocations at that moment
  std::vector<std::string> other_owners;  // their libraries, largest first
};

// Whether a driver allocation's owning library (its innermost recorded frame's module) is XLA's.
bool IsXlaLibrary(std::string_view module);

// Per device of the native trace: XLA's pool at its largest and what else the driver held then.
std::vector<XlaReservation> XlaReservations(const model::Trace& native);

// Makes each reservation the profile's reserved memory on its device and says so in `notes`: the
// live buffers, XLA's free pool (the rest of the pool) and the driver allocations outside it.
// A device the profile does not hold, or a pool smaller than the live buffers (not the same
// run?), is said and left as it was.
void ApplyXlaReservations(const std::vector<XlaReservation>& reservations,
                          const std::string& native_path, model::Trace& profile,
                          std::vector<std::string>& notes);

// The same from XLA's own figure: the pool size its allocator reported for jax.devices()[0] at
// the program's end (the capture sidecar's memory_stats `pool_bytes`, on a GPU), for device 0,
// when no native trace was taken.
void ApplyXlaAllocatorPool(uint64_t pool_bytes, model::Trace& profile,
                           std::vector<std::string>& notes);

}  // namespace vramscope::pipeline
