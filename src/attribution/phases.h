// Phase detection: the iterations of a training loop in a trace, and forward / backward /
// optimizer step inside each.
//
// Evidence, strongest first: the stack of each event (autograd engine frames mark backward,
// nn.Module calls forward, torch.optim the step); then position (an event without a stack
// belongs to the phase of the last event that had one, and in a trace with Python-only stacks
// the stack-less allocations after forward are the autograd thread's, i.e. backward); then
// profiler step annotations ("ProfilerStep#N") for iteration boundaries. A new iteration begins
// at the first forward event that follows a backward or an optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attribution/stack_facts.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::attribution {

using model::kPhaseCount;
using model::Phase;
using model::PhaseName;

struct Iteration {
  int32_t device = 0;
  int32_t step = 0;  // 1-based within the trace (the trace may start mid-run)
  uint32_t first_event = 0, last_event = 0;  // inclusive, indices into Trace::events
  bool has_forward = false, has_backward = false, has_optimizer = false;
  // The first event of each phase inside the iteration (kNoEvent when absent).
  int64_t forward_begin = model::kNoEvent, backward_begin = model::kNoEvent,
          optimizer_begin = model::kNoEvent;
};

struct PhaseSpan {
  int32_t device = 0;
  int32_t step = 0;  // 0: before the first iteration
  Phase phase = Phase::kUnknown;
  uint32_t first_event = 0, last_event = 0;  // inclusive
};

struct Phases {
  std::vector<Phase> event_phase;  // parallel to Trace::events
  // The iteration of each event as runs: from `first_event` on (up to the next run), events
  // belong to `step`; before the first run, and on a device no run covers, step 0 (before the
  // first iteration). Steps change a few times per iteration: runs cost nothing next to the 4
  // bytes an event a parallel array took.
  struct StepRun {
    uint32_t first_event = 0;
    int32_t step = 0;
  };
  std::vector<StepRun> step_runs;     // by first_event, ascending
  std::vector<Iteration> iterations;  // by device, then step
  std::vector<PhaseSpan> spans;       // maximal runs of one phase, by device then event
  // How the phases were found ("C++ autograd frames", "Python frames and position", ...) and
  // whether anything was found at all.
  std::string evidence;
  bool detected = false;
  bool from_native_frames = false;

  Phase At(int64_t event) const {
    return event < 0 || static_cast<size_t>(event) >= event_phase.size()
               ? Phase::kUnknown
               : event_phase[static_cast<size_t>(event)];
  }
  int32_t StepAt(int64_t event) const;
  // Events from `event` on belong to `step`; called with events ascending.
  void SetStep(size_t event, int32_t step);
};

// `view` gives the recorded phase marks (a capture's over the source's).
Phases DetectPhases(const model::TraceView& view, StackFactsCache& facts);

}  // namespace vramscope::attribution
