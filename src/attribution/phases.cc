#include "attribution/phases.h"

#include <algorithm>

namespace vramscope::attribution {

int32_t Phases::StepAt(int64_t event) const {
  if (event < 0 || static_cast<size_t>(event) >= event_phase.size()) return 0;
  const auto after =
      std::upper_bound(step_runs.begin(), step_runs.end(), static_cast<uint64_t>(event),
                       [](uint64_t e, const StepRun& run) { return e < run.first_event; });
  return after == step_runs.begin() ? 0 : std::prev(after)->step;
}

void Phases::SetStep(size_t event, int32_t step) {
  if (step == (step_runs.empty() ? 0 : step_runs.back().step)) return;
  if (!step_runs.empty() && step_runs.back().first_event == event) {
    step_runs.back().step = step;
    return;
  }
  step_runs.push_back({static_cast<uint32_t>(event), step});
}

namespace {

// What one event's own stack says about the phase it ran in.
enum class Marker : uint8_t { kNone, kZeroGrad, kForward, kBackward, kOptimizer };

Marker MarkerOf(const StackFacts& f) {
  if (!f.known) return Marker::kNone;
  if (f.zero_grad) return Marker::kZeroGrad;
  // Recomputation under activation checkpointing runs forward code inside backward.
  if (f.in_backward) return Marker::kBackward;
  if (f.in_optimizer) return Marker::kOptimizer;
  if (f.in_forward) return Marker::kForward;
  return Marker::kNone;
}

// Splits one device's events [begin, end) into iterations by stack markers. Returns false when
// no event carries a marker.
bool FromMarkers(const model::Trace& trace, StackFactsCache& cache, size_t begin, size_t end,
                 const std::vector<size_t>& annotated_starts, bool& had_markers, Phases& out) {
  // One byte an event (most events carry a marker: a list of (event, marker) pairs cost 16).
  std::vector<Marker> marker_at(end - begin, Marker::kNone);
  bool forward_markers = false;
  had_markers = false;
  for (size_t i = begin; i < end; ++i) {
    const model::StackId stack = trace.events.stack[i];
    if (stack == model::kEmptyStack) continue;
    const Marker m = MarkerOf(cache.Get(stack));
    marker_at[i - begin] = m;
    had_markers |= m != Marker::kNone;
    forward_markers |= m == Marker::kForward;
  }
  if (!had_markers && annotated_starts.empty()) return false;

  // Iteration starts: the first forward, and every forward whose previous marker (zero_grad
  // aside) was backward or the optimizer. A new iteration owns the events after that marker.
  // The profiler's step annotations, when present, decide instead.
  std::vector<size_t> starts = annotated_starts;
  Marker previous = Marker::kNone;
  size_t previous_at = begin;
  for (size_t i = begin; i < end && annotated_starts.empty(); ++i) {
    const Marker m = marker_at[i - begin];
    if (m == Marker::kNone) continue;
    if (m == Marker::kForward) {
      if (starts.empty()) {
        starts.push_back(i);
      } else if (previous == Marker::kBackward || previous == Marker::kOptimizer) {
        starts.push_back(previous_at + 1);
      }
    }
    if (m != Marker::kZeroGrad) {
      previous = m;
      previous_at = i;
    }
  }

  // Assign each event its step and phase: the phase of the latest marker in its step. Events
  // before the first forward are step 0: setup, or the tail of an iteration when the trace
  // began mid-run (then they carry backward or optimizer markers).
  // Without forward markers (a profiler trace without module or Python events), what a step
  // does before its first backward or step marker is its forward pass.
  std::vector<bool> step_has_later_marker(starts.size() + 1, false);
  if (!forward_markers) {
    size_t k = 0;
    for (size_t i = begin; i < end; ++i) {
      const Marker m = marker_at[i - begin];
      while (k < starts.size() && starts[k] <= i) ++k;
      if (m == Marker::kBackward || m == Marker::kOptimizer) step_has_later_marker[k] = true;
    }
  }
  size_t next_start = 0;
  int32_t step = 0;
  bool step_marked = false;  // a marker was seen in the current step
  Phase phase = Phase::kSetup;
  bool step_saw_forward = false;
  for (size_t i = begin; i < end; ++i) {
    while (next_start < starts.size() && starts[next_start] <= i) {
      ++next_start;
      ++step;
      phase = Phase::kBeforeForward;
      step_saw_forward = false;
      step_marked = false;
    }
    if (!step_marked && step > 0 && !forward_markers && step_has_later_marker[next_start]) {
      phase = Phase::kForward;
      step_saw_forward = true;
    }
    if (const Marker m = marker_at[i - begin]; m != Marker::kNone) {
      step_marked = true;
      switch (m) {
        case Marker::kForward:
          // Forward code after backward in the same iteration would be a new iteration; in the
          // backward of a checkpointed model it carries the backward marker instead.
          if (step > 0 && phase != Phase::kBackward && phase != Phase::kOptimizer) {
            phase = Phase::kForward;
          }
          step_saw_forward = step_saw_forward || step > 0;
          break;
        case Marker::kBackward:
          phase = Phase::kBackward;
          break;
        case Marker::kOptimizer:
          phase = Phase::kOptimizer;
          break;
        case Marker::kZeroGrad:
          // zero_grad at the top of the loop belongs before forward; after the step, to it.
          if (step > 0) phase = step_saw_forward ? Phase::kOptimizer : Phase::kBeforeForward;
          break;
        case Marker::kNone:
          break;
      }
    }
    out.event_phase[i] = phase;
    out.SetStep(i, step);
  }
  return true;
}

// The first event of each profiler step ("ProfilerStep#N" START annotations) of one device, as
// event indices; empty when the source recorded none.
std::vector<size_t> StepStartsFromAnnotations(const model::Trace& trace, int32_t device,
                                              size_t begin, size_t end) {
  std::vector<int64_t> times;
  for (const model::Annotation& a : trace.annotations) {
    if (a.device != device || a.time_us == model::kNoTime) continue;
    bool start = false, step = false;
    for (const auto& [key, value] : a.fields) {
      if (key == "stage" && value == "START") start = true;
      if (key == "name" && value.rfind("ProfilerStep#", 0) == 0) step = true;
    }
    if (start && step) times.push_back(a.time_us);
  }
  std::sort(times.begin(), times.end());
  std::vector<size_t> starts;
  size_t i = begin;
  for (const int64_t t : times) {
    while (i < end && (trace.events.time_us[i] == model::kNoTime || trace.events.time_us[i] < t)) {
      ++i;
    }
    if (i < end && (starts.empty() || starts.back() != i)) starts.push_back(i);
  }
  return starts;
}

// Applies the phases the source recorded (Trace::phase_marks) to one device's events. Returns
// false when the source recorded none for it.
bool FromRecordedPhases(const model::TraceView& view, int32_t device, size_t begin, size_t end,
                        Phases& out) {
  bool any = false;
  size_t next = begin;
  Phase phase = Phase::kUnknown;
  int32_t step = 0;
  auto fill_to = [&](size_t to) {
    for (; next < to && next < end; ++next) {
      out.event_phase[next] = phase;
      out.SetStep(next, step);
    }
  };
  for (const model::PhaseMark& m : view.PhaseMarks()) {
    if (m.device != device) continue;
    any = true;
    fill_to(std::max<size_t>(m.event, begin));
    step = m.step;
    phase = m.phase;
  }
  if (any) fill_to(end);
  return any;
}

}  // namespace

Phases DetectPhases(const model::TraceView& view, StackFactsCache& cache) {
  const model::Trace& trace = view.trace;
  Phases out;
  const size_t n = trace.events.count();
  out.event_phase.assign(n, Phase::kUnknown);
  bool any_markers = false, any_annotations = false, any_recorded = false;
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const int32_t device = trace.devices[d];
    const auto [begin, end] = trace.device_event_ranges[d];
    if (begin == end) continue;
    out.SetStep(begin, 0);  // a device's events start before its first iteration
    const bool recorded = FromRecordedPhases(view, device, begin, end, out);
    any_recorded |= recorded;
    const std::vector<size_t> annotated = StepStartsFromAnnotations(trace, device, begin, end);
    bool had_markers = false;
    if (!recorded && FromMarkers(trace, cache, begin, end, annotated, had_markers, out)) {
      any_markers = any_markers || had_markers;
      any_annotations = any_annotations || !annotated.empty();
    }
    // Iterations and spans of this device.
    size_t run = 0;  // the first step run after event i
    for (size_t i = begin; i < end; ++i) {
      while (run < out.step_runs.size() && out.step_runs[run].first_event <= i) ++run;
      const int32_t step = run == 0 ? 0 : out.step_runs[run - 1].step;
      const Phase phase = out.event_phase[i];
      // Step 0 is listed when it is the tail of an iteration the trace began inside.
      if (step > 0 || phase == Phase::kBackward || phase == Phase::kOptimizer ||
          (!out.iterations.empty() && out.iterations.back().device == device &&
           out.iterations.back().step == 0)) {
        if (out.iterations.empty() || out.iterations.back().device != device ||
            out.iterations.back().step != step) {
          Iteration it;
          it.device = device;
          it.step = step;
          it.first_event = static_cast<uint32_t>(i);
          out.iterations.push_back(it);
        }
        Iteration& it = out.iterations.back();
        it.last_event = static_cast<uint32_t>(i);
        auto mark = [&](bool& has, int64_t& first) {
          if (!has) first = static_cast<int64_t>(i);
          has = true;
        };
        if (phase == Phase::kForward) mark(it.has_forward, it.forward_begin);
        if (phase == Phase::kBackward) mark(it.has_backward, it.backward_begin);
        if (phase == Phase::kOptimizer) mark(it.has_optimizer, it.optimizer_begin);
      }
      if (out.spans.empty() || out.spans.back().device != device || out.spans.back().step != step ||
          out.spans.back().phase != phase) {
        out.spans.push_back(
            {device, step, phase, static_cast<uint32_t>(i), static_cast<uint32_t>(i)});
      }
      out.spans.back().last_event = static_cast<uint32_t>(i);
    }
  }
  out.detected = any_markers || any_annotations || any_recorded;
  out.from_native_frames = any_markers && trace.facts.has_native_frames;
  if (any_recorded) {
    out.evidence = trace.facts.predicted ? "the predictor's own steps" : "the recorded phase marks";
  } else if (any_markers) {
    out.evidence = trace.facts.has_native_frames
                       ? "the stacks (C++ autograd frames, nn.Module calls, torch.optim)"
                       : "Python frames (nn.Module calls, torch.optim, Tensor.backward) and event "
                         "order: stack-less events after forward are the autograd thread's";
    if (any_annotations) out.evidence += ", with iterations from the ProfilerStep annotations";
  } else if (any_annotations) {
    out.evidence = "the profiler's ProfilerStep annotations (iterations only)";
  } else {
    out.evidence = "none: no stacks or step annotations were recorded";
  }
  return out;
}

}  // namespace vramscope::attribution
