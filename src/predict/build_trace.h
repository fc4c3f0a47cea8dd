// Turns a predicted tensor stream into the event model, through the model of PyTorch's caching
// allocator: every request is placed by the same code `vramscope simulate` uses, so a prediction
// carries reserved memory, segments and blocks, and reads like a recorded snapshot (the trace,
// the state at its end, segment events) for every later stage.
#pragma once

#include <cstdint>
#include <optional>

#include "allocator/allocator_settings.h"
#include "common/status.h"
#include "model/trace.h"
#include "predict/tensor_stream.h"

namespace vramscope::predict {

struct BuildOptions {
  allocator::AllocatorSettings settings;  // capacity: what the allocator may reserve
  int32_t device = 0;
};

struct BuiltTrace {
  model::Trace trace;
  // Where the run would have died, when the capacity was too small: the stream event index of
  // the request that failed (the trace ends with its kOom event).
  std::optional<size_t> oom_at;
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
};

// `stream` is consumed (its string table moves into the trace). A stream that frees an id it
// never allocated, or allocates an id twice, is invalid input (a damaged tracer file).
Result<BuiltTrace> BuildPredictedTrace(TensorStream stream, const BuildOptions& options);

// The peaks alone, without building a trace (what --fit runs for each candidate size): the
// same allocator decisions. `oom` is set when the run would not fit.
struct PeakOnly {
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
  bool oom = false;
};
Result<PeakOnly> SimulatePeaks(const TensorStream& stream,
                               const allocator::AllocatorSettings& settings);

}  // namespace vramscope::predict
