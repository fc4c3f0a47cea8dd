// Source: a pprof profile of device memory, as JAX writes it
// (jax.profiler.save_device_memory_profile: gzipped protobuf in pprof's profile.proto format;
// pprof_profile.proto lists the fields read).
//
// JAX's profile holds the buffers alive when it was saved, aggregated into samples by (stack,
// labels): sample types ("allocations", "count") and ("space", "bytes"); labels "kind" ("buffer"
// or "executable") and "device" ("cpu:0", "cuda:0", ...); the stack is the Python stack that
// created the buffers, leaf first. Any pprof profile with a sample type of unit "bytes" named
// "space" or "inuse_space" is read the same way.
//
// Each sample of nonzero bytes becomes one alloc event on its device (the label's ordinal, else
// 0) with its stack: a sample of several buffers is one allocation of their total, as the file
// records no single buffer's size. Categories are the source's own: buffers created under
// optax's code are optimizer state; executables, and every other buffer, are unknown (the
// profile records no role: after a jitted step, weights, optimizer state and outputs share the
// stack of the line that called the step). No times, addresses or allocator state.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "model/trace.h"

namespace vramscope::pprof {

// The sources pick this one by the first bytes (sources/input_format: InputFormat::kPprof).
// Converts the uncompressed protobuf bytes. Errors are one line: "PATH: what is wrong; what to
// do".
Result<model::Trace> TraceFromPprof(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace vramscope::pprof
