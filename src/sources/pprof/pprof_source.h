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
// JAX groups buffers by stack, device and size, so each sample of n buffers becomes n alloc events
// of its bytes/n on its device (the label's ordinal, else 0) with its stack; a sample whose bytes
// do not divide (another writer's grouping) is one allocation of its total. No times, addresses
// or allocator state.
//
// Categories: the profile records no role, so after a jitted step the weights, the optimizer
// state and the step's outputs share the stack of the line that called it. vramscope's own
// writer (python/vramscope/jax_memory.py, which `vramscope run` uses) splits JAX's samples into
// one per live array and labels each with `vramscope_role` (a category name), `vramscope_rule`
// (why) and `vramscope_name` (its pytree path), and says in the profile's comments what it could
// not decide; those labels are taken as the source's categories. An unlabelled buffer created
// under optax's code is optimizer state; executables and every other buffer are unknown.
//
// The step: the writer also adds a sample of no bytes with kind `vramscope_step` per device, named
// by `vramscope_name`, with XLA's analysis of the largest compiled computation as numeric labels
// (`vramscope_{argument,output,alias,temp}_bytes`). After that device's live buffers come its
// temp buffer (temporary) and its arguments and outputs beyond what is alive (unknown), both then
// freed: the peak is XLA's figure for the step or the live buffers plus the temp, a lower bound.
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
