// Source: the memory events of a profiler XSpace (.xplane.pb), as TensorFlow's profiler writes
// it (tf.profiler.experimental.start/stop; <logdir>/plugins/profile/<run>/<host>.xplane.pb;
// xplane.proto lists the fields read).
//
// TensorFlow's BFC allocators record each allocation and release as a "MemoryAllocation" or
// "MemoryDeallocation" event on the host plane, with stats: addr, allocation_bytes (the
// allocator's rounded size), requested_bytes, bytes_allocated (in use after the event),
// allocator_name, and for allocations tf_op, region_type ("output", "temp"), data_type and
// shape. XLA's BFC allocator (JAX on a GPU) records the same events. Each allocator named
// "GPU_<n>_bfc" is device n; without one, the allocator with the most events (the CPU's, with
// TF_CPU_ALLOCATOR_USE_BFC=true) is device 0 and the others are left out, with a note.
//
// Events become alloc and free events with times; the memory in use before the first event is
// the start level. Categories are the source's own, decided by the rules of
// docs/design/xspace-memory-events.md: "vramscope.variable" annotations (vramscope.tf marks each
// variable's buffer with its path and role) make weights and optimizer state; tf.data threads
// make inputs; an optimizer's Initializer makes optimizer state; values with no region (a
// function's constants) are unknown; ops under gradient_tape/ make gradients (the shape of a
// marked weight) or temporaries; other ops under the optimizer's scope make temporaries; TF's
// temp regions are workspace; other outputs of a tf.function's ops are activations; what no
// rule decides is unknown. The most-called tf.function
// ("EagerLocalExecute: __inference_<name>_<n>") defines the steps.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/status.h"
#include "model/trace.h"

namespace vramscope::xspace {

// The sources pick this one by the first bytes (sources/input_format: InputFormat::kXSpace).
// Converts the uncompressed protobuf bytes. Errors are one line: "PATH: what is wrong; what to
// do".
Result<model::Trace> TraceFromXSpace(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace vramscope::xspace
