// The tensor-level event stream of predicted training steps: the contract between the things
// that predict what a step allocates (the built-in families and layer lists through the step
// simulator, the Python tracer's file) and the allocator model that turns it into a report.
//
// Every allocation a step makes, in order: its bytes as PyTorch requests them (before the
// allocator's rounding), what it is (category), whose it is (name) and the operation that made
// it; every free; the phase boundaries; and the matmul and convolution calls that make CUDA
// libraries allocate workspaces (their sizes depend on the GPU and the PyTorch version, so they
// are added by device_rules, not by the producer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/category.h"
#include "model/interning.h"
#include "model/trace.h"

namespace vramscope::predict {

// Which CPU thread issues the kernels: the autograd engine runs backward on its own thread, and
// cuBLAS handles (with their workspaces) are per thread.
enum class Thread : uint8_t { kMain, kBackward };

struct StreamEvent {
  enum class Kind : uint8_t {
    kAlloc,       // id, bytes, category, name, op
    kFree,        // id
    kPhase,       // step, phase
    kEmptyCache,  // torch.cuda.empty_cache()
    kMatmul,      // thread, op: a cuBLAS call (workspaces at the first one per thread)
    kConv,        // thread, bytes: a cuDNN convolution needing this much workspace (0: unknown)
  };
  Kind kind = Kind::kAlloc;
  Thread thread = Thread::kMain;
  model::Category category = model::Category::kTemporary;
  model::Phase phase = model::Phase::kSetup;
  int32_t step = 0;
  uint64_t id = 0;
  uint64_t bytes = 0;
  model::StringId name = model::kEmptyString;  // kPhase: the loop's own name ("zero_grad")
  model::StringId op = model::kEmptyString;
  // kAlloc: the private pool it came from (a CUDA graph pool; tracer stream version 2), 0 for
  // the caching allocator's default pools. BuildPredictedTrace serves it from that private pool
  // of the allocator model, held to the end (the graphs keep their pool for their lifetime).
  uint32_t pool = 0;
  // kAlloc: the CUDA stream it was allocated on (tracer stream version 3): 0 the default stream,
  // else the number of a stream the traced code made (FSDP2's all-gather copy-in and
  // reduce-scatter streams). The allocator model keeps each stream's cached blocks apart, as
  // the caching allocator does.
  uint32_t cuda_stream = 0;
  // Added by device_rules (workspaces) rather than by the producer: a written stream leaves
  // them out, since its reader adds them again from the markers.
  bool derived = false;
};

struct TensorStream {
  model::StringTable strings;  // names and operations; moves into the trace
  std::vector<StreamEvent> events;
  model::PredictionInfo info;

  // Helpers for producers.
  // `label` is the training loop's finer name for the phase ("zero_grad", "inputs",
  // "step_end"), the names the goldens' sidecars use.
  void Phase(int32_t step, model::Phase phase, std::string_view label = {}) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kPhase;
    e.step = step;
    e.phase = phase;
    if (!label.empty()) e.name = strings.Intern(label);
    events.push_back(e);
  }
};

}  // namespace vramscope::predict
