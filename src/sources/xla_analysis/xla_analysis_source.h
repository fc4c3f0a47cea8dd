// Source: one jitted JAX step as XLA accounts for it, written by vramscope.xla (Python).
//
// `vramscope.xla.save_memory_analysis(step, *args, path=...)` compiles the step for its arguments
// and writes a JSON object whose first key is "vramscope_format": "xla-memory-analysis"
// (python/vramscope/xla.py, docs/design/xla-memory-analysis.md):
//
//   version           1
//   memory_analysis   jax's CompiledMemoryStats: argument_size_in_bytes, output_size_in_bytes,
//                     alias_size_in_bytes, temp_size_in_bytes, peak_memory_in_bytes, ...
//   arguments         every argument leaf: path, shape, dtype, bytes, category, rule, donated,
//                     aliased_output (the output leaf XLA writes into its buffer, or null)
//   outputs           every output leaf: the same, with aliases_argument instead
//   rules             the rules' sentences by name; function, backend, device_kind, producer
//
// The categories were decided by the writer, which saw the pytree's types (optax state objects,
// a TrainState); this source records them as the source's own (Events::category), with the
// leaf's path as its name. The step becomes the events of one execution on device 0, in the
// order XLA's runtime holds the buffers: the argument leaves (alive before the step), XLA's temp
// buffer (one allocation: the step's activations, gradients and scratch, which the memory
// analysis does not split), the output leaves that alias no argument, then the temp buffer's
// release. The peak is therefore arguments + temp + new outputs: what the device holds while the
// executable runs. Addresses are synthetic; there are no stacks, times or reserved memory.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/trace.h"

namespace vramscope::xla_analysis {

// True when `json` begins (after white space) with `{"vramscope_format": "xla-memory-analysis"`,
// the writer's first key: how the sources tell this file from a profiler trace.
bool IsXlaMemoryAnalysis(std::string_view json);

// Converts the document. Errors are one line, "PATH: WHERE: what is wrong; what to do".
Result<model::Trace> TraceFromXlaMemoryAnalysis(std::string_view json, const std::string& path);

}  // namespace vramscope::xla_analysis
