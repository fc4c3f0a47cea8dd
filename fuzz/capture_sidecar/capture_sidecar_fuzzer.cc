// libFuzzer target for the capture sidecar (`vramscope run`'s <label>.sidecar.json): parsing it,
// and interpreting it beside small traces as the pipeline does (src/pipeline/load.cc).
//
// The input is the sidecar's text. A failure must be one InvalidInput line naming the file. A
// success must keep the parser's promises (steps not negative, only the three named kinds, no
// unnamed tensor, NVML's samples and processes within their bounds) and is then applied to four
// traces: one whose events carry phase marks (some of them made from the sidecar's own phases, so
// the input reaches the mark parser), one with times only and allocations at the sidecar's tensor
// addresses and times, one with extreme times, and one with no trace. After each: the trace
// unchanged, phase marks ordered by device then event and inside their device's events, names given
// only to allocation events of allocations that exist (each with its category), the counts it
// returns consistent; then the rest of the pipeline a report runs.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target capture_sidecar_fuzzer).
// Run:   capture_sidecar_fuzzer -max_len=4096
// -dict=src/sources/run_output/capture_sidecar_fuzzer.dict
//          NEW_CORPUS_DIR fuzz/capture_sidecar/corpus
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "analysis/analyze.h"
#include "sources/run_output/capture_sidecar.h"

namespace {

using vramscope::model::Action;
using vramscope::model::Category;
using vramscope::model::kNoTime;
using vramscope::model::Trace;
using vramscope::sources::CaptureSidecar;

constexpr const char* kPath = "fuzz.sidecar.json";
constexpr size_t kMaxDerived = 32;  // events made from the sidecar's phases or tensors

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min() + 1;
  }
  return out;
}

class TraceBuilder {
 public:
  void Event(Action a, int32_t device, uint64_t addr, uint64_t size, int64_t time,
             std::string_view mark = {}) {
    t.events.Push(a, device, addr, size, 0, time, vramscope::model::kEmptyStack);
    if (!mark.empty()) {
      t.events.user_metadata[static_cast<uint32_t>(t.events.count() - 1)] = t.strings.Intern(mark);
    }
  }
  void Alloc(int32_t device, uint64_t addr, uint64_t size, int64_t time,
             std::string_view mark = {}) {
    Event(Action::kAlloc, device, addr, size, time, mark);
  }
  void Free(int32_t device, uint64_t addr, uint64_t size, int64_t time,
            std::string_view mark = {}) {
    Event(Action::kFreeRequested, device, addr, size, time, mark);
    Event(Action::kFreeCompleted, device, addr, size, time, mark);
  }
  // One training step of a Linear layer on `device` (as capture_sidecar_test lays it out):
  // weight, input, output in forward, the gradient in backward, two states in the optimizer.
  void Step(int32_t device, bool marks) {
    auto m = [&](const char* text) { return marks ? std::string_view(text) : std::string_view(); };
    Alloc(device, 0x1000, 4096, 10'000);
    Alloc(device, 0x3000, 512, 20'000);
    Alloc(device, 0x4000, 512, 30'000, m("vramscope step=1 phase=forward"));
    Alloc(device, 0x5000, 4096, 40'000, m("vramscope step=1 phase=backward"));
    Free(device, 0x4000, 512, 41'000, m("vramscope step=1 phase=backward"));
    Alloc(device, 0x7000, 4096, 50'000, m("vramscope step=1 phase=optimizer"));
    Alloc(device, 0x9000, 4096, 51'000, m("vramscope step=1 phase=optimizer"));
    Alloc(device, 0x4000, 512, 60'000, m("vramscope step=1 phase=between"));
  }
  // Devices in the order their events were pushed (callers push them ascending).
  Trace Finish(bool has_times) {
    const auto& dev = t.events.device;
    for (size_t i = 0; i < dev.size(); ++i) {
      if (i == 0 || dev[i] != dev[i - 1]) {
        t.devices.push_back(dev[i]);
        t.device_event_ranges.emplace_back(i, i);
      }
      t.device_event_ranges.back().second = i + 1;
    }
    t.facts.has_trace = t.events.count() > 0;
    t.facts.has_times = has_times;
    t.facts.has_allocator_state = false;
    vramscope::model::BuildAllocations(t);
    return std::move(t);
  }

 private:
  Trace t;
};

// Phase marks made from the sidecar's phases: well formed on device 0, and the phase's raw text
// after "vramscope step=" on device 1, so the input reaches the mark parser.
Trace MarkedTrace(const CaptureSidecar& s) {
  TraceBuilder b;
  for (int32_t device : {0, 1}) {
    b.Step(device, true);
    for (size_t k = 0; k < std::min(s.phases.size(), kMaxDerived); ++k) {
      const auto& p = s.phases[k];
      const std::string mark =
          device == 0 ? "vramscope step=" + std::to_string(p.step) + " phase=" + p.phase
                      : "vramscope step=" + p.phase;
      b.Alloc(device, 0x100000 + 0x1000 * k, 512, p.begin_us, mark);
    }
  }
  return b.Finish(true);
}

// No marks; allocations where the sidecar says its tensors were, around when it saw them.
Trace TimedTrace(const CaptureSidecar& s) {
  TraceBuilder b;
  b.Step(0, false);
  for (size_t k = 0; k < std::min(s.tensors.size(), kMaxDerived); ++k) {
    const auto& t = s.tensors[k];
    const uint64_t ptr = t.storage_ptr != 0 ? t.storage_ptr : t.data_ptr;
    const uint64_t size = std::clamp<uint64_t>(t.nbytes, 1, uint64_t{1} << 40);
    const int64_t seen = t.seen_us == kNoTime ? 70'000 : t.seen_us;
    b.Alloc(0, ptr, size, SaturatingAdd(seen, k % 3 == 0 ? 60 : -10));
    if (k % 2 == 1) b.Free(0, ptr, size, SaturatingAdd(seen, k % 4 == 1 ? 40 : -100));
  }
  return b.Finish(true);
}

// Times at the ends of the clock: matching must not overflow.
Trace ExtremeTimesTrace() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min() + 1;  // kNoTime is the minimum
  TraceBuilder b;
  b.Alloc(0, 0x1000, 4096, kMin);
  b.Alloc(0, 0x3000, 512, kNoTime);
  b.Free(0, 0x3000, 512, kMax);
  b.Alloc(0, 0x5000, 4096, -5);
  b.Free(0, 0x5000, 4096, kMax - 10, "vramscope step=2147483647 phase=backward");
  b.Alloc(0, 0x5000, 4096, kMax, "vramscope step=1 phase=optimizer");
  b.Alloc(0, 0x7000, 4096, kMax);
  b.Free(0, 0x7000, 4096, kMin);
  return b.Finish(true);
}

void CheckParsed(const CaptureSidecar& s) {
  Check(s.path == kPath);
  for (const auto& p : s.phases) Check(p.step >= 0);
  for (const auto& t : s.tensors) {
    Check(!t.name.empty() && t.step >= 0);
    Check(t.category == Category::kWeight || t.category == Category::kGradient ||
          t.category == Category::kOptimizerState);
  }
  if (s.oom) Check(s.oom->step >= 0);
  for (const auto& p : s.phases) {
    if (p.memory) Check(p.memory->step == p.step && p.memory->phase == p.phase);
  }
  // NVML's samples: bounded, and only when NVML was available.
  if (s.nvml) {
    Check(s.nvml->samples.size() <= vramscope::sources::kMaxNvmlSamples);
    if (!s.nvml->available) Check(s.nvml->samples.empty());
    for (const auto& x : s.nvml->samples) {
      Check(x.step >= 0);
      if (x.other_processes) {
        Check(x.other_processes->size() <= vramscope::sources::kMaxNvmlProcesses);
      }
    }
  }
}

void CheckApplied(const CaptureSidecar& s, const vramscope::sources::SidecarApplied& applied,
                  const Trace& t, const std::vector<std::string>& notes_before,
                  const vramscope::model::Interpretation& in) {
  const auto& ev = t.events;
  const size_t n = ev.count();
  // The trace stays as it was read: what the sidecar says is beside it.
  Check(t.phase_marks.empty() && ev.tensor_name.empty() && ev.category.empty());
  Check(t.facts.notes == notes_before);
  // Phase marks: by device (in the trace's device order), then strictly by event, each inside
  // its device's events.
  const auto& marks = in.phase_marks;
  Check((applied.phase_marks > 0) == !marks.empty());
  if (!t.facts.has_trace) Check(marks.empty());
  size_t device_index = 0;
  for (size_t m = 0; m < marks.size(); ++m) {
    const auto& mark = marks[m];
    while (device_index < t.devices.size() && t.devices[device_index] != mark.device) {
      ++device_index;
    }
    Check(device_index < t.devices.size());  // a device of the trace, in order
    const auto [begin, end] = t.device_event_ranges[device_index];
    Check(mark.event >= begin && mark.event < end);
    Check(ev.device[mark.event] == mark.device);
    Check(mark.step >= 0);
    if (m > 0 && marks[m - 1].device == mark.device) Check(marks[m - 1].event < mark.event);
  }
  // Names: only on the alloc event of an allocation of the trace, each with its category; the
  // trace had none of either before.
  std::unordered_set<int64_t> alloc_events;
  for (const auto& a : t.allocations) {
    if (a.alloc_event != vramscope::model::kNoEvent) alloc_events.insert(a.alloc_event);
  }
  Check(in.tensor_name.size() == applied.tensors_named);
  Check(in.category.size() == applied.tensors_named);
  for (const auto& [event, name] : in.tensor_name) {
    Check(event < n && ev.action[event] == Action::kAlloc);
    Check(alloc_events.count(event) == 1);
    Check(!name.empty());
    const auto c = in.category.find(event);
    Check(c != in.category.end());
    Check(c->second == Category::kWeight || c->second == Category::kGradient ||
          c->second == Category::kOptimizerState);
  }
  Check(applied.tensors_unmatched <= s.tensors.size());
  Check(applied.tensors_named + applied.tensors_unmatched <= s.tensors.size());
  Check(in.format_suffix == " + vramscope run sidecar");
  // NVML's samples and the per-phase counters: carried as read.
  Check(in.device_usage.has_value() == s.nvml.has_value());
  if (s.nvml) Check(in.device_usage->samples.size() == s.nvml->samples.size());
  Check(in.phase_memory.size() ==
        static_cast<size_t>(std::count_if(s.phases.begin(), s.phases.end(),
                                          [](const auto& p) { return p.memory.has_value(); })));
  for (const std::string& note : in.notes) Check(note.find('\n') == std::string::npos);
}

void ApplyTo(const CaptureSidecar& s, Trace t) {
  vramscope::model::Interpretation in;
  const std::vector<std::string> notes_before = t.facts.notes;
  const auto applied = vramscope::sources::InterpretCaptureSidecar(s, t, in);
  CheckApplied(s, applied, t, notes_before, in);
  // The analyses a report then runs, over the trace and what the sidecar said.
  const vramscope::analysis::ProjectRoot root("/proj");
  const auto analyzed = vramscope::analysis::Analyze(vramscope::model::TraceView{t, in}, root);
  Check(analyzed.ok());
  const auto& a = *analyzed;
  Check(a->timelines.devices.size() == t.devices.size());
  Check(a->attribution.allocations.size() == t.allocations.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = vramscope::sources::ParseCaptureSidecar(text, kPath);
  if (!parsed.ok()) {
    const std::string& message = parsed.status().message();
    Check(parsed.status().IsInputError());
    Check(message.rfind(std::string(kPath) + ": ", 0) == 0);
    Check(message.find('\n') == std::string::npos);
    return 0;
  }
  if (!parsed->has_value()) return 0;  // JSON of another format
  const CaptureSidecar& s = **parsed;
  CheckParsed(s);
  ApplyTo(s, MarkedTrace(s));
  ApplyTo(s, TimedTrace(s));
  ApplyTo(s, ExtremeTimesTrace());
  ApplyTo(s, TraceBuilder().Finish(false));
  return 0;
}
