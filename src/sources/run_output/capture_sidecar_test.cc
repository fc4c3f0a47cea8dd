// The capture sidecar: parsing (good, other formats, damaged) and applying it to a trace laid out
// as a snapshot of one training step would be (phases from the per-event marks and from times,
// weight/gradient/state names by address and time).
#include "sources/run_output/capture_sidecar.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "sources/run_output/capture_folder.h"

namespace vramscope::sources {
namespace {

using model::Action;

// One step of a Linear layer: weight (t=10), input (20), output (30) in forward, the weight's
// gradient (40) in backward, Adam's two states (50, 51) in the optimizer step.
struct StepTrace {
  model::Trace t;
  model::Interpretation in;  // what the sidecar adds beside `t`
  model::TraceView view() const { return {t, in}; }
  SidecarApplied Apply(const CaptureSidecar& sidecar) {
    return InterpretCaptureSidecar(sidecar, t, in);
  }
  StepTrace(bool with_marks) {
    auto push = [&](Action a, uint64_t addr, uint64_t size, int64_t time, const char* mark) {
      t.events.Push(a, 0, addr, size, 0, time * 1000, model::kEmptyStack);  // ms apart
      if (with_marks && mark != nullptr) {
        t.events.user_metadata[static_cast<uint32_t>(t.events.count() - 1)] =
            t.strings.Intern(mark);
      }
    };
    push(Action::kAlloc, 0x1000, 4096, 10, nullptr);                            // weight
    push(Action::kAlloc, 0x3000, 512, 20, nullptr);                             // input
    push(Action::kAlloc, 0x4000, 512, 30, "vramscope step=1 phase=forward");    // output
    push(Action::kAlloc, 0x5000, 4096, 40, "vramscope step=1 phase=backward");  // weight.grad
    push(Action::kFreeRequested, 0x4000, 512, 41, "vramscope step=1 phase=backward");
    push(Action::kFreeCompleted, 0x4000, 512, 41, "vramscope step=1 phase=backward");
    push(Action::kAlloc, 0x7000, 4096, 50, "vramscope step=1 phase=optimizer");  // exp_avg
    push(Action::kAlloc, 0x9000, 4096, 51, "vramscope step=1 phase=optimizer");  // exp_avg_sq
    push(Action::kAlloc, 0x4000, 512, 60, "vramscope step=1 phase=between");     // next batch
    t.devices = {0};
    t.device_event_ranges = {{0, t.events.count()}};
    t.facts.has_trace = true;
    t.facts.has_times = true;
    model::BuildAllocations(t);
  }
  // The name the sidecar gave the allocation made by event `i` ("" when none).
  std::string NameOf(uint32_t i) const { return std::string(view().TensorName(i)); }
  // The (phase, step) the interpretation's marks put event `i` in: the last mark at or before it
  // (model::PhaseMark: "from event `event` on"); set-up before the first.
  std::pair<model::Phase, int32_t> PhaseOf(uint32_t i) const {
    std::pair<model::Phase, int32_t> out{model::Phase::kSetup, 0};
    for (const model::PhaseMark& m : view().PhaseMarks()) {
      if (m.event <= i) out = {m.phase, m.step};
    }
    return out;
  }
};

constexpr const char* kSidecar = R"({
  "format": "vramscope-capture", "version": 1, "snapshot": "rank1.pickle",
  "process": {"pid": 77, "rank": 1, "local_rank": 1, "world_size": 2, "hostname": "node3",
              "torch": "2.11.0", "device": 0, "device_name": "NVIDIA H200", "framework": "plain"},
  "recording": {"stacks": "python", "context": "all", "max_entries": 1000, "fallback": null},
  "end": {"reason": "steps", "steps_completed": 1},
  "phases": [{"step": 1, "phase": "forward", "begin_us": 25000, "end_us": 35000},
             {"step": 1, "phase": "backward", "begin_us": 36000, "end_us": 45000},
             {"step": 1, "phase": "optimizer", "begin_us": 46000, "end_us": 55000},
             {"step": 1, "phase": "between", "begin_us": 56000, "end_us": 70000}],
  "tensors": [
    {"kind": "parameter", "name": "weight", "data_ptr": 4096, "nbytes": 4096, "seen_us": 12000,
     "step": 0},
    {"kind": "gradient", "name": "weight", "data_ptr": 20480, "nbytes": 4096, "seen_us": 46000,
     "step": 1},
    {"kind": "optimizer_state", "name": "weight.exp_avg", "data_ptr": 28672, "nbytes": 4096,
     "seen_us": 55000, "step": 1},
    {"kind": "optimizer_state", "name": "weight.exp_avg_sq", "data_ptr": 36864,
     "nbytes": 4096, "seen_us": 55000, "step": 1},
    {"kind": "gradient", "name": "never.allocated", "data_ptr": 999424, "nbytes": 4,
     "seen_us": 46000, "step": 1},
    {"kind": "something_new", "name": "x", "data_ptr": 1, "nbytes": 1}
  ],
  "oom": null
})";

CaptureSidecar Parse(const std::string& text) {
  auto parsed = ParseCaptureSidecar(text, "rank1.sidecar.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->has_value());
  return **parsed;
}

TEST(CaptureSidecar, ParsesProcessPhasesAndTensors) {
  const CaptureSidecar s = Parse(kSidecar);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.world_size, 2);
  EXPECT_EQ(s.hostname, "node3");
  EXPECT_EQ(s.end_reason, "steps");
  EXPECT_EQ(s.steps_completed, 1);
  ASSERT_EQ(s.phases.size(), 4u);
  EXPECT_EQ(s.phases[1].phase, "backward");
  EXPECT_EQ(s.phases[1].begin_us, 36000);
  ASSERT_EQ(s.tensors.size(), 5u);  // the unknown kind is skipped
  EXPECT_EQ(s.tensors[2].category, model::Category::kOptimizerState);
  EXPECT_FALSE(s.oom);
}

TEST(CaptureSidecar, OtherFormatsAreNotCaptureSidecars) {
  for (const char* text : {R"({"format": "vramscope-sidecar", "version": 1})", "[1, 2]"}) {
    auto parsed = ParseCaptureSidecar(text, "x.sidecar.json");
    ASSERT_TRUE(parsed.ok());
    EXPECT_FALSE(parsed->has_value()) << text;
  }
}

TEST(CaptureSidecar, DamagedSidecarsGetOneLineNamingTheFileAndField) {
  const std::string cut(kSidecar, 200);
  const std::pair<std::string, std::string> cases[] = {
      {cut, "is not valid JSON"},
      {R"({"format": "vramscope-capture", "version": 9})", "version 9"},
      {R"({"format": "vramscope-capture"})", "no format version"},
      {R"({"format": "vramscope-capture", "version": 1, "phases": {}})", "phases is not a list"},
      {R"({"format": "vramscope-capture", "version": 1, "tensors": [{"kind": "gradient",
          "name": "w", "data_ptr": -5}]})",
       "tensors[0].data_ptr is not a byte count"},
      {R"({"format": "vramscope-capture", "version": 1, "process": {"rank": "one"}})",
       "process.rank is not an integer"},
  };
  for (const auto& [text, expected] : cases) {
    auto parsed = ParseCaptureSidecar(text, "rank0.sidecar.json");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find("rank0.sidecar.json: "), std::string::npos);
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << parsed.status().message();
    EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos);
  }
}

// A JAX capture's sidecar as the bootstrap writes it on a GPU (bootstrap/frameworks.py): no
// snapshot, the profile beside it, XLA's allocator figures (PJRT's memory_stats names) and the
// out-of-memory error the program died of.
constexpr const char* kJaxSidecar = R"({"format": "vramscope-capture", "version": 1,
  "snapshot": null, "profile": "pid42.jax.prof",
  "process": {"pid": 42, "hostname": "h100-node", "torch": null, "jax": "0.10.2",
              "backend": "gpu", "device_name": "NVIDIA H100 80GB HBM3", "framework": "jax",
              "allocator": {"settings": {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
                            "memory_stats": {"bytes_in_use": 1073741824,
                                             "peak_bytes_in_use": 3221225472,
                                             "bytes_limit": 42949672960, "num_allocs": 812}}},
  "recording": {"profile": "jax", "started_us": 1, "cpu_test_mode": false, "on_oom": false},
  "end": {"reason": "oom", "steps_completed": 0, "time_us": 2,
          "exception": "JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes."},
  "phases": [], "tensors": [],
  "oom": {"message": "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.",
          "time_us": 2}})";

TEST(CaptureSidecar, AJaxCaptureExplainsXlasAllocatorAndQuotesXla) {
  const CaptureSidecar s = Parse(kJaxSidecar);
  ASSERT_TRUE(s.framework_allocator);
  EXPECT_EQ(s.framework_allocator->bytes_limit, 42949672960u);
  StepTrace trace(/*with_marks=*/false);
  trace.Apply(s);
  const std::string notes = fmt::format("{}", fmt::join(trace.in.notes, "\n"));
  EXPECT_NE(notes.find("the program ran out of GPU memory; XLA said: RESOURCE_EXHAUSTED"),
            std::string::npos)
      << notes;
  EXPECT_NE(notes.find("XLA's allocator at the end: 1.00 GiB in use, peak 3.00 GiB, limit 40.00 "
                       "GiB (set: XLA_PYTHON_CLIENT_MEM_FRACTION=.5); preallocated: .5 of the GPU"),
            std::string::npos)
      << notes;
}

TEST(CaptureSidecar, ATensorFlowCaptureSaysWhatItsPoolTakes) {
  const std::string text = R"({"format": "vramscope-capture", "version": 1, "snapshot": null,
    "process": {"framework": "tensorflow", "allocator": {
      "settings": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
      "memory_stats": {"current": 2048, "peak": 4096}}}})";
  StepTrace trace(/*with_marks=*/false);
  trace.Apply(Parse(text.c_str()));
  const std::string notes = fmt::format("{}", fmt::join(trace.in.notes, "\n"));
  EXPECT_NE(notes.find("TensorFlow's allocator at the end: 2.00 KiB in use, peak 4.00 KiB (set: "
                       "TF_FORCE_GPU_ALLOW_GROWTH=true); TF_FORCE_GPU_ALLOW_GROWTH=true: the BFC "
                       "pool grows"),
            std::string::npos)
      << notes;
  for (const char* bad : {R"({"settings": {"X": 1}})", R"({"memory_stats": {"peak": -1}})",
                          R"({"memory_stats": []})"}) {
    const std::string damaged = fmt::format(
        R"({{"format": "vramscope-capture", "version": 1, "process": {{"allocator": {}}}}})", bad);
    auto parsed = ParseCaptureSidecar(damaged, "pid1.sidecar.json");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("process.allocator"), std::string::npos)
        << parsed.status().message();
  }
}

TEST(CaptureSidecar, PhasesFromPerEventMarks) {
  StepTrace s(/*with_marks=*/true);
  const SidecarApplied applied = s.Apply(Parse(kSidecar));
  EXPECT_TRUE(applied.phases_from_metadata);
  using model::Phase;
  const std::vector<std::pair<Phase, int32_t>> expected = {
      {Phase::kSetup, 0},     {Phase::kSetup, 0},     {Phase::kForward, 1},
      {Phase::kBackward, 1},  {Phase::kBackward, 1},  {Phase::kBackward, 1},
      {Phase::kOptimizer, 1}, {Phase::kOptimizer, 1}, {Phase::kBeforeForward, 2}};
  for (uint32_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(s.PhaseOf(i), expected[i]) << "event " << i;
  }
}

TEST(CaptureSidecar, PhasesFromTimesWithoutMarks) {
  StepTrace s(/*with_marks=*/false);
  const SidecarApplied applied = s.Apply(Parse(kSidecar));
  EXPECT_FALSE(applied.phases_from_metadata);
  EXPECT_EQ(applied.phase_marks, 4u);
  using model::Phase;
  EXPECT_EQ(s.PhaseOf(1).first, Phase::kSetup);  // t=20 ms, before forward began at 25 ms
  EXPECT_EQ(s.PhaseOf(2).first, Phase::kForward);
  EXPECT_EQ(s.PhaseOf(3).first, Phase::kBackward);
  EXPECT_EQ(s.PhaseOf(6).first, Phase::kOptimizer);
  EXPECT_EQ(s.PhaseOf(8), std::make_pair(Phase::kBeforeForward, 2));
}

TEST(CaptureSidecar, NamesAndCategoriesByAddressAndTime) {
  StepTrace s(/*with_marks=*/true);
  const SidecarApplied applied = s.Apply(Parse(kSidecar));
  EXPECT_EQ(applied.tensors_named, 4u);
  EXPECT_EQ(applied.tensors_unmatched, 1u);
  EXPECT_EQ(s.NameOf(0), "weight");
  EXPECT_EQ(s.NameOf(3), "weight");
  EXPECT_EQ(s.NameOf(6), "weight.exp_avg");
  EXPECT_EQ(s.NameOf(7), "weight.exp_avg_sq");
  // The output at 0x4000 and the next batch there are not named: the sidecar saw no tensor there.
  EXPECT_EQ(s.NameOf(2), "");
  EXPECT_EQ(s.NameOf(8), "");
  auto category_of_event = [&](uint32_t event) {
    return s.view().RecordedCategory(event).value_or(model::Category::kUnknown);
  };
  EXPECT_EQ(category_of_event(0), model::Category::kWeight);
  EXPECT_EQ(category_of_event(3), model::Category::kGradient);
  EXPECT_EQ(category_of_event(6), model::Category::kOptimizerState);
  // Facts say who captured it and why it ended.
  const auto& notes = s.in.notes;
  // The trace stays as its snapshot had it: names, categories and notes are beside it.
  EXPECT_TRUE(s.t.events.tensor_name.empty());
  EXPECT_TRUE(s.t.events.category.empty());
  EXPECT_TRUE(s.t.phase_marks.empty());
  EXPECT_TRUE(s.t.facts.notes.empty());
  EXPECT_NE(std::find_if(notes.begin(), notes.end(),
                         [](const std::string& n) {
                           return n.find("rank 1 of 2 (local rank 1) on node3, NVIDIA H200") !=
                                  std::string::npos;
                         }),
            notes.end());
  EXPECT_NE(
      std::find(notes.begin(), notes.end(), "the capture ended after 1 training steps (--steps)"),
      notes.end());
}

TEST(CaptureSidecar, ATensorSeenBeforeItsAddressWasReusedNamesTheEarlierAllocation) {
  StepTrace s(/*with_marks=*/true);
  // The output at 0x4000 (30..41 ms) and the next batch there (60 ms): a name seen at 33 ms goes to
  // the output only.
  CaptureSidecar sidecar = Parse(kSidecar);
  sidecar.tensors = {{model::Category::kWeight, "buffer.at.0x4000", 0x4000, 0, 512, 33000, 1}};
  s.Apply(sidecar);
  EXPECT_EQ(s.NameOf(2), "buffer.at.0x4000");
  EXPECT_EQ(s.NameOf(8), "");
}

// NVML's samples ("nvml") and torch's per-phase counters ("memory"): read as written, and carried
// into the interpretation unchanged.
constexpr const char* kNvmlSidecar = R"({
  "format": "vramscope-capture", "version": 1, "snapshot": "pid9.pickle",
  "process": {"pid": 9},
  "phases": [{"step": 0, "phase": "setup", "begin_us": 10, "end_us": 20,
              "memory": {"allocated": 1024, "reserved": 2097152, "max_allocated": null,
                         "max_reserved": null}},
             {"step": 1, "phase": "forward", "begin_us": 20, "end_us": 30,
              "memory": {"allocated": 4096, "reserved": 4194304, "max_allocated": 8192,
                         "max_reserved": 6291456}},
             {"step": 1, "phase": "backward", "begin_us": 30, "end_us": 40, "memory": null}],
  "nvml": {"available": true, "driver": "580.65.06", "nvml_index": 1,
           "pci_bus_id": "00000000:3B:00.0", "name": "NVIDIA H100 80GB HBM3",
           "matched_by": "pci_bus_id", "torch_device": 0, "samples_dropped": 0,
           "samples_other_device": 1, "pid_note": null,
           "samples": [
    {"time_us": 10, "step": 0, "phase": "setup", "at": "start", "device_total": 85899345920,
     "device_used": 1073741824, "device_free": 84825604096, "device_reserved": 536870912,
     "process_listed": true, "process_used": 629145600,
     "other_processes": [{"pid": 4242, "used": 314572800}, {"pid": 4343, "used": null}],
     "other_processes_more": 0, "torch_reserved": 0, "torch_allocated": 0},
    {"time_us": 20, "step": 0, "phase": "setup", "at": "phase_end", "device_total": 85899345920,
     "device_used": 1082130432, "device_free": null, "device_reserved": null,
     "process_listed": false, "process_used": null, "other_processes": null,
     "other_processes_more": 3, "torch_reserved": null, "torch_allocated": null}]}
})";

TEST(CaptureSidecar, ParsesNvmlSamplesAndPhaseMemory) {
  const CaptureSidecar s = Parse(kNvmlSidecar);
  ASSERT_EQ(s.phases.size(), 3u);
  ASSERT_TRUE(s.phases[0].memory);
  EXPECT_EQ(s.phases[0].memory->allocated, 1024u);
  EXPECT_EQ(s.phases[0].memory->reserved, 2097152u);
  EXPECT_FALSE(s.phases[0].memory->max_reserved);
  ASSERT_TRUE(s.phases[1].memory);
  EXPECT_EQ(s.phases[1].memory->max_reserved, 6291456u);
  EXPECT_FALSE(s.phases[2].memory);
  ASSERT_TRUE(s.nvml);
  const model::DeviceUsage& u = *s.nvml;
  EXPECT_TRUE(u.available);
  EXPECT_EQ(u.driver, "580.65.06");
  EXPECT_EQ(u.nvml_index, 1);
  EXPECT_EQ(u.pci_bus_id, "00000000:3B:00.0");
  EXPECT_EQ(u.device_name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(u.matched_by, "pci_bus_id");
  EXPECT_EQ(u.samples_other_device, 1u);
  EXPECT_TRUE(u.pid_note.empty());
  ASSERT_EQ(u.samples.size(), 2u);
  const model::DeviceUsageSample& a = u.samples[0];
  EXPECT_EQ(a.time_us, 10);
  EXPECT_EQ(a.at, "start");
  EXPECT_EQ(a.phase, "setup");
  EXPECT_EQ(a.device_total, 85899345920u);
  EXPECT_EQ(a.device_used, 1073741824u);
  EXPECT_EQ(a.device_free, 84825604096u);
  EXPECT_EQ(a.device_reserved, 536870912u);
  EXPECT_TRUE(a.process_listed);
  EXPECT_EQ(a.process_used, 629145600u);
  ASSERT_TRUE(a.other_processes);
  ASSERT_EQ(a.other_processes->size(), 2u);
  EXPECT_EQ((*a.other_processes)[0].pid, 4242);
  EXPECT_EQ((*a.other_processes)[0].used, 314572800u);
  EXPECT_FALSE((*a.other_processes)[1].used);
  EXPECT_EQ(a.torch_reserved, 0u);
  const model::DeviceUsageSample& b = u.samples[1];
  EXPECT_FALSE(b.device_free || b.device_reserved || b.process_used || b.torch_reserved ||
               b.torch_allocated);
  EXPECT_FALSE(b.process_listed);
  EXPECT_FALSE(b.other_processes);  // NVML could not list them
  EXPECT_EQ(b.other_processes_more, 3u);

  // Carried into the interpretation as read.
  StepTrace t(/*with_marks=*/true);
  t.Apply(s);
  ASSERT_TRUE(t.in.device_usage);
  EXPECT_EQ(t.in.device_usage->samples.size(), 2u);
  EXPECT_EQ(t.in.device_usage->samples[0].process_used, 629145600u);
  ASSERT_EQ(t.in.phase_memory.size(), 2u);
  EXPECT_EQ(t.in.phase_memory[1].step, 1);
  EXPECT_EQ(t.in.phase_memory[1].phase, "forward");
  EXPECT_EQ(t.in.phase_memory[1].end_us, 30);
  EXPECT_EQ(t.in.phase_memory[1].reserved, 4194304u);
}

TEST(CaptureSidecar, NvmlUnavailableOrAbsent) {
  const CaptureSidecar off = Parse(R"({"format": "vramscope-capture", "version": 1,
    "nvml": {"available": false, "why": "nvidia-ml-py is not installed"}})");
  ASSERT_TRUE(off.nvml);
  EXPECT_FALSE(off.nvml->available);
  EXPECT_EQ(off.nvml->why_not, "nvidia-ml-py is not installed");
  EXPECT_TRUE(off.nvml->samples.empty());
  StepTrace t(/*with_marks=*/true);
  t.Apply(off);
  ASSERT_TRUE(t.in.device_usage);
  EXPECT_FALSE(t.in.device_usage->available);
  // A sidecar from before NVML was sampled (the unit-test sidecar above): no device usage.
  const CaptureSidecar old = Parse(kSidecar);
  EXPECT_FALSE(old.nvml);
  StepTrace u(/*with_marks=*/true);
  u.Apply(old);
  EXPECT_FALSE(u.in.device_usage);
  EXPECT_TRUE(u.in.phase_memory.empty());
}

TEST(CaptureSidecar, NvmlSamplesAndProcessesAreBounded) {
  std::string samples;
  for (size_t i = 0; i < kMaxNvmlSamples + 5; ++i) samples += i ? ",{}" : "{}";
  std::string others;
  for (size_t i = 0; i < kMaxNvmlProcesses + 7; ++i) {
    others += fmt::format("{}{{\"pid\": {}, \"used\": 1}}", i ? "," : "", i);
  }
  const CaptureSidecar s = Parse(fmt::format(
      R"({{"format": "vramscope-capture", "version": 1, "nvml": {{"available": true,
      "samples_dropped": 2, "samples": [{{"other_processes": [{}], "other_processes_more": 1}},
      {}]}}}})",
      others, samples));
  ASSERT_TRUE(s.nvml);
  ASSERT_EQ(s.nvml->samples.size(), kMaxNvmlSamples);
  EXPECT_EQ(s.nvml->samples_dropped, 2u + 6u);  // 1 + kMaxNvmlSamples + 5 written
  ASSERT_TRUE(s.nvml->samples[0].other_processes);
  EXPECT_EQ(s.nvml->samples[0].other_processes->size(), kMaxNvmlProcesses);
  EXPECT_EQ(s.nvml->samples[0].other_processes_more, 1u + 7u);
}

TEST(CaptureSidecar, MalformedNvmlFieldsGetOneLineNamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("nvml": [])", "nvml is not an object"},
      {R"("nvml": {"available": "yes"})", "nvml.available is not true or false"},
      {R"("nvml": {"available": false, "why": 3})", "nvml.why is not text"},
      {R"("nvml": {"available": true, "samples": {}})", "nvml.samples is not a list"},
      {R"("nvml": {"available": true, "samples": [{}, 5]})", "nvml.samples[1] is not an object"},
      {R"("nvml": {"available": true, "samples": [{"device_used": -1}]})",
       "nvml.samples[0].device_used is not a byte count"},
      {R"("nvml": {"available": true, "samples": [{"device_total": 1.5}]})",
       "nvml.samples[0].device_total is not a byte count"},
      {R"("nvml": {"available": true, "samples": [{"other_processes": [{"pid": "x"}]}]})",
       "nvml.samples[0].other_processes[0].pid is not an integer"},
      {R"("nvml": {"available": true, "samples": [{"other_processes": [7]}]})",
       "nvml.samples[0].other_processes[0] is not an object"},
      {R"("nvml": {"available": true, "samples": [{"process_used": true}]})",
       "nvml.samples[0].process_used is not a byte count"},
      {R"("phases": [{"step": 1, "memory": {"reserved": "lots"}}])",
       "phases[0].memory.reserved is not a byte count"},
      {R"("phases": [{"step": 1, "memory": 5}])", "phases[0].memory is not an object"},
  };
  for (const auto& [field, expected] : cases) {
    const std::string text = R"({"format": "vramscope-capture", "version": 1, )" + field + "}";
    auto parsed = ParseCaptureSidecar(text, "rank0.sidecar.json");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().message().rfind("rank0.sidecar.json: ", 0), 0u);
    EXPECT_NE(parsed.status().message().find(expected), std::string::npos)
        << parsed.status().message();
    EXPECT_EQ(parsed.status().message().find('\n'), std::string::npos);
  }
}

// Found by capture_sidecar_fuzzer (its corpus keeps the inputs: fuzz/capture_sidecar/corpus/).

// A phase that begins after the trace's last event (the real CPU capture's phases all do, against
// this trace's clock) marks none of its events: no mark may point past the device's events.
TEST(CaptureSidecarFuzzFinds, PhasesAfterTheLastEventLeaveNoMarkPastIt) {
  StepTrace s(/*with_marks=*/false);
  CaptureSidecar sidecar = Parse(kSidecar);
  sidecar.phases.push_back({2, "forward", 90000, 95000, {}});  // after the last event (60 ms)
  sidecar.phases.push_back({2, "backward", 96000, 99000, {}});
  const SidecarApplied applied = s.Apply(sidecar);
  EXPECT_EQ(applied.phase_marks, 4u);  // the four phases that hold events
  ASSERT_FALSE(s.in.phase_marks.empty());
  for (const model::PhaseMark& m : s.in.phase_marks) EXPECT_LT(m.event, s.t.events.count());
  EXPECT_EQ(s.PhaseOf(8).first, model::Phase::kBeforeForward);  // unchanged
}

// Steps and times at the ends of their types: step 2^31-1 followed by the optimizer's "between"
// phase overflowed the step counter, and a tensor seen at INT64_MAX µs (or an allocation freed
// then) overflowed the 50 µs matching slack. Both are undefined behaviour (UBSan stops the test).
TEST(CaptureSidecarFuzzFinds, StepsAndTimesAtTheEndsOfTheirTypes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto make = [&](model::Trace& t, bool marks) {
    auto push = [&](Action a, uint64_t addr, int64_t time, const char* mark) {
      t.events.Push(a, 0, addr, 4096, 0, time, model::kEmptyStack);
      if (marks && mark != nullptr) {
        t.events.user_metadata[static_cast<uint32_t>(t.events.count() - 1)] =
            t.strings.Intern(mark);
      }
    };
    push(Action::kAlloc, 0x1000, 10, "vramscope step=2147483647 phase=optimizer");
    push(Action::kAlloc, 0x2000, 20, "vramscope step=2147483647 phase=between");
    push(Action::kFreeRequested, 0x2000, kMax, nullptr);
    push(Action::kFreeCompleted, 0x2000, kMax, nullptr);
    push(Action::kAlloc, 0x3000, kMax, nullptr);
    t.devices = {0};
    t.device_event_ranges = {{0, t.events.count()}};
    t.facts.has_trace = true;
    t.facts.has_times = true;
    model::BuildAllocations(t);
  };
  model::Trace t;
  model::Interpretation in;
  make(t, true);
  CaptureSidecar sidecar = Parse(R"({"format": "vramscope-capture", "version": 1,
    "phases": [{"step": 9223372036854775807, "phase": "optimizer", "begin_us": 5},
               {"step": 1, "phase": "between", "begin_us": 15}],
    "tensors": [{"kind": "gradient", "name": "w.grad", "data_ptr": 8192, "nbytes": 4096,
                 "seen_us": 9223372036854775807},
                {"kind": "parameter", "name": "w", "data_ptr": 12288, "nbytes": 4096,
                 "seen_us": 9223372036854775807}]})");
  EXPECT_EQ(sidecar.phases[0].step, INT32_MAX);  // clamped when read
  const SidecarApplied applied = InterpretCaptureSidecar(sidecar, t, in);
  EXPECT_TRUE(applied.phases_from_metadata);
  ASSERT_EQ(in.phase_marks.size(), 2u);
  EXPECT_EQ(in.phase_marks[1].step, INT32_MAX);  // the step after the last there stays the last
  // Both tensors are matched: freed at INT64_MAX is not "freed before it was seen".
  EXPECT_EQ(applied.tensors_named, 2u);
  const model::TraceView view{t, in};
  EXPECT_EQ(view.TensorName(1), "w.grad");
  EXPECT_EQ(view.TensorName(4), "w");
  // From times, the same ends.
  model::Trace u;
  model::Interpretation from_times;
  make(u, false);
  EXPECT_EQ(InterpretCaptureSidecar(sidecar, u, from_times).phase_marks, 2u);
  EXPECT_EQ(from_times.phase_marks.back().step, INT32_MAX);
}

TEST(CaptureFolder, FindsRanksInOrderAndTheirFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fs::path("vramscope-capture-folder-test");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"rank10.pickle", "rank2.pickle", "rank2.sidecar.json", "pid5.pickle",
                           "rank3.vstrace", "notes.txt", "rankx.pickle", "report.sqlite"}) {
    std::ofstream(dir / name) << "x";
  }
  auto captures = FindCaptures(dir);
  ASSERT_TRUE(captures.ok()) << captures.status().message();
  std::vector<std::string> labels;
  for (const Capture& c : *captures) labels.push_back(c.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"rank2", "rank3", "rank10", "pid5"}));
  EXPECT_EQ((*captures)[0].sidecar.filename(), "rank2.sidecar.json");
  EXPECT_TRUE((*captures)[1].snapshot.empty());
  EXPECT_EQ((*captures)[1].native.filename(), "rank3.vstrace");
  EXPECT_EQ(CaptureFilesIn(dir).size(), 6u);  // not notes.txt
  EXPECT_EQ(SidecarBeside(dir / "rank2.pickle").filename(), "rank2.sidecar.json");
  EXPECT_TRUE(SidecarBeside(dir / "rank10.pickle").empty());
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto none = FindCaptures(dir);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("holds no captures"), std::string::npos);
  fs::remove_all(dir);
}

TEST(CaptureFolder, FrameworkProfilesAreRecordingsAndASnapshotComesFirst) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fs::path("vramscope-capture-folder-profiles");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* name : {"pid7.jax.prof", "pid7.sidecar.json", "pid7.vstrace", "rank0.xplane.pb",
                           "rank1.pickle", "rank1.jax.prof", "pid8.prof", "pid9.xplane.pb.gz"}) {
    std::ofstream(dir / name) << "x";
  }
  auto captures = FindCaptures(dir);
  ASSERT_TRUE(captures.ok()) << captures.status().message();
  ASSERT_EQ(captures->size(), 3u);  // rank0, rank1, pid7: not pid8.prof or a gzipped profile
  const Capture& rank0 = (*captures)[0];
  const Capture& rank1 = (*captures)[1];
  const Capture& pid7 = (*captures)[2];
  EXPECT_EQ(rank0.Recording().filename(), "rank0.xplane.pb");
  EXPECT_EQ(rank1.Recording().filename(), "rank1.pickle");
  EXPECT_EQ(rank1.profile.filename(), "rank1.jax.prof");
  // The framework's profile is categorised; the native trace beside it is the driver's view.
  EXPECT_EQ(pid7.Recording().filename(), "pid7.jax.prof");
  EXPECT_EQ(pid7.native.filename(), "pid7.vstrace");
  EXPECT_EQ(SidecarBeside(dir / "pid7.jax.prof").filename(), "pid7.sidecar.json");
  EXPECT_EQ(CaptureFilesIn(dir).size(), 6u);  // --force replaces the profiles too
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vramscope::sources
