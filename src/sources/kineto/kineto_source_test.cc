#include "sources/kineto/kineto_source.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/gzip.h"

namespace vramscope::kineto {
namespace {

using model::Action;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

const std::string kFixtures = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/";

Result<model::Trace> Load(const std::string& text, const std::string& path = "t.json") {
  return TraceFromKinetoJson(text, path);
}

// ---- synthetic traces, shaped like the real ones ---------------------------------------------

struct Mem {
  double ts;
  int64_t bytes;
  int64_t addr = -1;       // -1: no Addr (legacy)
  int64_t allocated = -1;  // -1: no Total Allocated
  int64_t reserved = -1;   // -1: no Total Reserved
  int device = 0;
  int type = 1;
  int tid = 100;
};

json MemEvent(const Mem& m) {
  json args = {
      {"Device Type", m.type}, {"Device Id", m.type == 0 ? -1 : m.device}, {"Bytes", m.bytes}};
  if (m.addr >= 0) args["Addr"] = m.addr;
  if (m.allocated >= 0) args["Total Allocated"] = m.allocated;
  if (m.reserved >= 0) args["Total Reserved"] = m.reserved;
  return {{"ph", "i"},  {"cat", "cpu_instant_event"},
          {"s", "t"},   {"name", "[memory]"},
          {"pid", 100}, {"tid", m.tid},
          {"ts", m.ts}, {"args", args}};
}

json Span(const std::string& cat, const std::string& name, double ts, double dur, int tid = 100) {
  return {{"ph", "X"},  {"cat", cat}, {"name", name}, {"pid", 100},
          {"tid", tid}, {"ts", ts},   {"dur", dur},   {"args", json::object()}};
}

std::string Doc(const std::vector<json>& events) {
  json doc = {{"schemaVersion", 1}, {"traceEvents", events}};
  return doc.dump();
}

std::vector<Action> Actions(const model::Trace& t) {
  return {t.events.action.begin(), t.events.action.end()};
}

// The memory levels the trace's events imply, computed here from the events alone (an oracle
// independent of the analysis' curves): each allocation's block bytes from its alloc to its
// release, allocations alive before the trace at the start, and reserved memory from the start
// level the source read plus the segment events.
struct Levels {
  int64_t allocated_at_start = 0;
  int64_t peak_allocated = 0, peak_reserved = 0;
  std::vector<int64_t> allocated, reserved;  // right after every alloc / free_requested
};

Levels LevelsOf(const model::Trace& t, size_t device_slot = 0) {
  const int32_t device = t.devices.at(device_slot);
  std::vector<int64_t> delta(t.events.count(), 0);
  Levels out;
  for (const model::Allocation& a : t.allocations) {
    if (a.device != device) continue;
    const auto size = static_cast<int64_t>(a.size);
    if (a.alloc_event == model::kNoEvent) {
      out.allocated_at_start += size;
    } else {
      delta[a.alloc_event] += size;
    }
    if (a.ReleaseEvent() != model::kNoEvent) delta[a.ReleaseEvent()] -= size;
  }
  int64_t reserved = 0;
  for (const model::StartLevels& level : t.start_levels) {
    if (level.device == device) reserved = level.reserved;
  }
  int64_t allocated = out.allocated_at_start;
  out.peak_allocated = allocated;
  out.peak_reserved = reserved;
  for (size_t i = 0; i < t.events.count(); ++i) {
    if (t.events.device[i] != device) continue;
    allocated += delta[i];
    const Action a = t.events.action[i];
    if (a == Action::kSegmentAlloc || a == Action::kSegmentMap) {
      reserved += static_cast<int64_t>(t.events.size[i]);
    } else if (a == Action::kSegmentFree || a == Action::kSegmentUnmap) {
      reserved -= static_cast<int64_t>(t.events.size[i]);
    }
    out.peak_allocated = std::max(out.peak_allocated, allocated);
    out.peak_reserved = std::max(out.peak_reserved, reserved);
    if (a != Action::kAlloc && a != Action::kFreeRequested) continue;
    out.allocated.push_back(allocated);
    out.reserved.push_back(reserved);
  }
  return out;
}

// allocated (and reserved) right after every alloc / free_requested, in event order.
std::vector<int64_t> AllocatedAtMemoryEvents(const model::Trace& t, size_t device_slot = 0,
                                             std::vector<int64_t>* reserved = nullptr) {
  Levels levels = LevelsOf(t, device_slot);
  if (reserved != nullptr) *reserved = std::move(levels.reserved);
  return levels.allocated;
}

std::vector<std::string> FrameNames(const model::Trace& t, model::StackId stack) {
  std::vector<std::string> out;
  t.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    const model::Frame& f = t.frames.Get(id);
    std::string s(t.strings.Get(f.filename));
    if (!s.empty()) s += ":" + std::to_string(f.line) + " ";
    s += t.strings.Get(f.function);
    s += f.kind == model::FrameKind::kPython ? " [py]" : " [native]";
    out.push_back(s);
  });
  return out;
}

TEST(KinetoSource, PairsAllocationsByAddr) {
  const std::string text = Doc({
      MemEvent({10.0, 1024, 0x1000, 1024, 2 << 20}),
      MemEvent({11.0, 2048, 0x2000, 3072, 2 << 20}),
      MemEvent({12.0, -1024, 0x1000, 2048, 2 << 20}),
      MemEvent({13.0, 512, 0x1000, 2560, 2 << 20}),
      MemEvent({14.0, -2048, 0x2000, 512, 2 << 20}),
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  EXPECT_EQ(t.devices, std::vector<int32_t>{0});
  EXPECT_EQ(Actions(t), (std::vector<Action>{Action::kAlloc, Action::kAlloc, Action::kFreeRequested,
                                             Action::kFreeCompleted, Action::kAlloc,
                                             Action::kFreeRequested, Action::kFreeCompleted}));
  EXPECT_EQ(t.events.time_us, (std::vector<int64_t>{10, 11, 12, 12, 13, 14, 14}));
  EXPECT_EQ(t.events.size[2], 1024u);
  ASSERT_EQ(t.allocations.size(), 3u);
  EXPECT_EQ(t.allocations[0].alloc_event, 0);
  EXPECT_EQ(t.allocations[0].free_requested_event, 2);
  EXPECT_EQ(t.allocations[0].free_completed_event, 3);
  EXPECT_EQ(t.allocations[1].free_requested_event, 5);
  EXPECT_TRUE(t.allocations[2].alive_at_end);
  EXPECT_EQ(t.allocations[2].size, 512u);
  EXPECT_TRUE(t.allocations[2].size_exact);
  EXPECT_EQ(AllocatedAtMemoryEvents(t), (std::vector<int64_t>{1024, 3072, 2048, 2560, 512}));
  EXPECT_FALSE(t.facts.has_allocator_state);
  EXPECT_TRUE(t.facts.sizes_are_block_sizes);
  EXPECT_TRUE(t.facts.reserved_known);
  EXPECT_TRUE(t.facts.has_trace);
  EXPECT_TRUE(t.facts.has_times);
  EXPECT_FALSE(t.facts.starts_mid_run);
  EXPECT_EQ(t.source.format, "PyTorch profiler trace (Kineto JSON)");
  EXPECT_THAT(t.source.generation, HasSubstr("Addr/Total Allocated"));
  EXPECT_EQ(t.source.path, "t.json");
}

TEST(KinetoSource, LegacySchemaPairsFreesLifoBySize) {
  const std::string text = Doc({
      MemEvent({1, 512}),    // x
      MemEvent({2, 512}),    // y
      MemEvent({3, 1024}),   // z
      MemEvent({4, -512}),   // y (the most recent open 512)
      MemEvent({5, -512}),   // x
      MemEvent({6, -4096}),  // allocated before the trace
      MemEvent({7, -1024}),  // z
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  const auto& ev = t.events;
  // Synthetic addresses: distinct per allocation, frees carry their allocation's address.
  EXPECT_NE(ev.addr[0], ev.addr[1]);
  EXPECT_EQ(ev.addr[3], ev.addr[1]);  // first free: y
  EXPECT_EQ(ev.addr[5], ev.addr[0]);  // second free: x
  EXPECT_EQ(ev.addr[9], ev.addr[2]);  // z
  ASSERT_EQ(t.allocations.size(), 4u);
  EXPECT_EQ(t.facts.frees_without_alloc, 1u);
  EXPECT_EQ(t.facts.allocations_alive_before_trace, 1u);
  EXPECT_THAT(t.source.generation, HasSubstr("legacy"));
  EXPECT_FALSE(t.facts.reserved_known);
  ASSERT_EQ(t.start_levels.size(), 1u);
  EXPECT_EQ(t.start_levels[0].untracked_allocated, 0);
  EXPECT_EQ(t.start_levels[0].reserved, 0);
  // Without totals the curve counts what the trace shows: the pre-trace 4096 at the start.
  EXPECT_EQ(AllocatedAtMemoryEvents(t),
            (std::vector<int64_t>{4608, 5120, 6144, 5632, 5120, 1024, 0}));
  const std::string notes = fmt::format("{}", fmt::join(t.facts.notes, "\n"));
  EXPECT_THAT(notes, HasSubstr("a guess"));
  EXPECT_THAT(notes, HasSubstr("reserved memory is unknown"));
}

TEST(KinetoSource, ReservedChangesBecomeSegmentEvents) {
  const int64_t mb = 1 << 20;
  const std::string text = Doc({
      MemEvent({1, 4096, 0x10, 4096, 2 * mb}),
      MemEvent({2, 3 * mb, 0x20, 3 * mb + 4096, 6 * mb}),  // the allocator grew by 4 MiB
      MemEvent({3, -3 * mb, 0x20, 4096, 6 * mb}),
      MemEvent({4, -4096, 0x10, 0, 2 * mb}),  // empty_cache released 4 MiB before this event
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  EXPECT_EQ(Actions(t), (std::vector<Action>{Action::kAlloc, Action::kSegmentAlloc, Action::kAlloc,
                                             Action::kFreeRequested, Action::kFreeCompleted,
                                             Action::kSegmentFree, Action::kFreeRequested,
                                             Action::kFreeCompleted}));
  EXPECT_EQ(t.events.size[1], static_cast<uint64_t>(4 * mb));
  EXPECT_EQ(t.events.size[5], static_cast<uint64_t>(4 * mb));
  EXPECT_EQ(t.events.time_us[1], 2);
  EXPECT_EQ(t.start_levels[0].reserved, 2 * mb);
  EXPECT_TRUE(t.facts.reserved_known);
  EXPECT_TRUE(t.facts.has_segment_events);
  std::vector<int64_t> reserved;
  EXPECT_EQ(AllocatedAtMemoryEvents(t, 0, &reserved),
            (std::vector<int64_t>{4096, 3 * mb + 4096, 4096, 0}));
  EXPECT_EQ(reserved, (std::vector<int64_t>{2 * mb, 6 * mb, 6 * mb, 2 * mb}));
  const Levels levels = LevelsOf(t);
  EXPECT_EQ(levels.peak_reserved, 6 * mb);
  EXPECT_EQ(levels.peak_allocated, 3 * mb + 4096);
}

TEST(KinetoSource, UntrackedStartLevelMakesTheCurveMatchTotals) {
  // 9000 B were allocated before recording; 512 of them (at 0x99) are freed during the trace.
  const std::string text = Doc({
      MemEvent({1, 1000, 0x10, 10000, 1 << 20}),
      MemEvent({2, -512, 0x99, 9488, 1 << 20}),
      MemEvent({3, -1000, 0x10, 8488, 1 << 20}),
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  ASSERT_EQ(t.start_levels.size(), 1u);
  EXPECT_EQ(t.start_levels[0].untracked_allocated, 9000 - 512);
  EXPECT_EQ(t.facts.frees_without_alloc, 1u);
  EXPECT_TRUE(t.facts.starts_mid_run);
  EXPECT_EQ(AllocatedAtMemoryEvents(t), (std::vector<int64_t>{10000, 9488, 8488}));
  EXPECT_EQ(LevelsOf(t).allocated_at_start, 9000);
}

TEST(KinetoSource, TimeOrderWithTiesInFileOrderAndFractionalTimes) {
  // Out of order in the file (another thread written later); equal times keep file order.
  const std::string text = Doc({
      MemEvent({5.2506, 512, 0x30, 1536, 1 << 20}),
      MemEvent({5.2504, 512, 0x10, 512, 1 << 20, 0, 1, 200}),
      MemEvent({5.2504, 512, 0x20, 1024, 1 << 20, 0, 1, 200}),
      MemEvent({7.5, -512, 0x30, 1024, 1 << 20}),
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  EXPECT_EQ(t.events.addr[0], 0x10u);
  EXPECT_EQ(t.events.addr[1], 0x20u);
  EXPECT_EQ(t.events.addr[2], 0x30u);
  EXPECT_EQ(t.events.time_us, (std::vector<int64_t>{5, 5, 5, 8, 8}));
  EXPECT_EQ(AllocatedAtMemoryEvents(t), (std::vector<int64_t>{512, 1024, 1536, 1024}));
  const std::string notes = fmt::format("{}", fmt::join(t.facts.notes, "\n"));
  EXPECT_THAT(notes, Not(HasSubstr("does not follow")));
}

TEST(KinetoSource, TimesAreExactAtEpochMagnitudes) {
  // Integer microseconds since the epoch (torch 1.x), fractional ones (2.x, nanosecond digits)
  // and an exponent: parsed exactly, ordered by the exact time, rounded half away from zero.
  auto event = [](const std::string& ts, int64_t addr, int64_t allocated) {
    return R"({"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":)" + ts +
           R"(,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":)" + std::to_string(addr) +
           R"(,"Total Allocated":)" + std::to_string(allocated) + "}}";
  };
  const std::string text = "{\"traceEvents\":[" + event("1428625746340.7155", 3, 1536) + "," +
                           event("1428625746340.7154", 2, 1024) + "," +
                           event("1.4286257463395e12", 1, 512) + "]}";
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->events.addr, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(trace->events.time_us,
            (std::vector<int64_t>{1428625746340, 1428625746341, 1428625746341}));
  auto legacy = Load("{\"traceEvents\":[" + event("1623142623460121", 1, 512) + "," +
                     event("1623142623460120", 2, 1024) + "]}");
  ASSERT_TRUE(legacy.ok()) << legacy.status().message();
  EXPECT_EQ(legacy->events.addr, (std::vector<uint64_t>{2, 1}));
  EXPECT_EQ(legacy->events.time_us, (std::vector<int64_t>{1623142623460120, 1623142623460121}));
}

TEST(KinetoSource, InconsistentTotalsAreNoted) {
  const std::string text = Doc({
      MemEvent({1, 512, 0x10, 512, 1 << 20}),
      MemEvent({2, 512, 0x20, 4096, 1 << 20}),  // an event was lost
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_THAT(fmt::format("{}", fmt::join(trace->facts.notes, "\n")),
              HasSubstr("at 1 [memory] events 'Total Allocated' does not follow"));
}

TEST(KinetoSource, ProfilerStepsBecomeAnnotations) {
  const std::string text = Doc({
      Span("user_annotation", "ProfilerStep#3", 100.4, 50.2),
      MemEvent({120, 512, 0x10, 512, 1 << 20, 2}),
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  ASSERT_EQ(t.annotations.size(), 2u);
  EXPECT_EQ(t.annotations[0].device, 2);
  EXPECT_EQ(t.annotations[0].time_us, 100);
  EXPECT_EQ(t.annotations[1].time_us, 151);
  using Fields = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(t.annotations[0].fields, (Fields{{"stage", "START"}, {"name", "ProfilerStep#3"}}));
  EXPECT_EQ(t.annotations[1].fields, (Fields{{"stage", "END"}, {"name", "ProfilerStep#3"}}));
  // The step is not a frame.
  EXPECT_EQ(t.events.stack[0], model::kEmptyStack);
  EXPECT_FALSE(t.facts.has_stacks);
}

TEST(KinetoSource, StacksFromEnclosingOperatorsAndPythonFunctions) {
  const std::string text = Doc({
      // Written in no particular order, as Kineto does.
      Span("cpu_op", "aten::addmm", 30, 40), Span("python_function", "train.py(10): main", 0, 100),
      Span("python_function", "nn.Module: Linear_0", 10, 80),
      Span("python_function", "torch/nn/modules/linear.py(125): forward", 12, 76),
      Span("python_function", "<built-in function linear>", 15, 70),
      Span("cpu_op", "aten::linear", 20, 60),
      Span("python_function", "<built-in method to of Tensor object at 0x7d67180cc190>", 90, 5),
      Span("cpu_op", "aten::_to_copy", 91, 3),
      Span("cpu_op", "aten::empty", 10, 80, /*tid=*/300),  // another thread
      MemEvent({40, 512, 0x10, 512, 1 << 20}), MemEvent({41, 512, 0x20, 1024, 1 << 20}),
      MemEvent({75, -512, 0x10, 512, 1 << 20}), MemEvent({92, 1024, 0x30, 1536, 1 << 20}),
      MemEvent({98, 1024, 0x40, 2560, 1 << 20}),
      MemEvent({99, 1024, 0x50, 3584, 1 << 20, 0, 1, 200}),  // a thread without spans
      MemEvent({100, 1024, 0x60, 4608, 1 << 20}),            // at the end of main: inside
      MemEvent({100.5, 1024, 0x70, 5632, 1 << 20}),          // after it
  });
  auto trace = Load(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  const auto& stack = t.events.stack;
  const std::vector<std::string> in_addmm = {
      "aten::addmm [native]",
      "aten::linear [native]",
      "<built-in function linear> [py]",
      "torch/nn/modules/linear.py:125 forward [py]",
      "nn.Module:0 Linear_0 [py]",
      "train.py:10 main [py]",
  };
  EXPECT_EQ(FrameNames(t, stack[0]), in_addmm);
  EXPECT_EQ(stack[1], stack[0]);  // interned: the same stack
  EXPECT_EQ(FrameNames(t, stack[2]),
            std::vector<std::string>(in_addmm.begin() + 1, in_addmm.end()));
  EXPECT_EQ(stack[3], stack[2]);  // the free's two events share it
  EXPECT_EQ(FrameNames(t, stack[4]),
            (std::vector<std::string>{"aten::_to_copy [native]",
                                      "<built-in method to of Tensor object> [py]",
                                      "train.py:10 main [py]"}));
  EXPECT_EQ(FrameNames(t, stack[5]), std::vector<std::string>{"train.py:10 main [py]"});
  EXPECT_EQ(stack[6], model::kEmptyStack);
  EXPECT_EQ(stack[7], stack[5]);
  EXPECT_EQ(stack[8], model::kEmptyStack);
  EXPECT_TRUE(t.facts.has_stacks);
  EXPECT_TRUE(t.facts.has_python_frames);
  EXPECT_TRUE(t.facts.has_native_frames);
  // The allocation's stack is the alloc event's.
  EXPECT_EQ(t.allocations[0].alloc_stack, stack[0]);
  EXPECT_EQ(t.allocations[0].free_stack, stack[2]);
  EXPECT_THAT(t.source.generation_evidence, HasSubstr("python_function"));
}

TEST(KinetoSource, LegacyOperatorsWithCallStackAndStringTids) {
  // torch 1.9: operators have category "Operator", a string tid and a "Call stack" arg; the
  // [memory] events have a numeric tid.
  json op = {
      {"ph", "X"},
      {"cat", "Operator"},
      {"name", "aten::conv2d"},
      {"pid", 7},
      {"tid", "7"},
      {"ts", 100},
      {"dur", 50},
      {"args",
       {{"Call stack", "/site/torch/nn/modules/conv.py(439): forward;train.py(54): <module>"}}}};
  json inner = {{"ph", "X"}, {"cat", "Operator"}, {"name", "aten::empty"}, {"pid", 7}, {"tid", "7"},
                {"ts", 110}, {"dur", 5},          {"args", json::object()}};
  json step = {{"ph", "X"}, {"cat", "Operator"}, {"name", "ProfilerStep#5"},
               {"pid", 7},  {"tid", "7"},        {"ts", 90},
               {"dur", 100}};
  json mem = {{"ph", "i"},
              {"s", "t"},
              {"name", "[memory]"},
              {"pid", 7},
              {"tid", 7},
              {"ts", 112},
              {"args", {{"Device Type", 1}, {"Device Id", 0}, {"Bytes", 512}}}};
  auto trace = Load(Doc({step, op, inner, mem}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(FrameNames(*trace, trace->events.stack[0]),
            (std::vector<std::string>{"aten::empty [native]", "aten::conv2d [native]",
                                      "/site/torch/nn/modules/conv.py:439 forward [py]",
                                      "train.py:54 <module> [py]"}));
  EXPECT_EQ(trace->annotations.size(), 2u);
}

TEST(KinetoSource, RocmDeviceTypeIsRead) {
  json m = MemEvent({1, 512, 0x10, 512, 1 << 20, 0, 6});
  m["args"]["finished"] = true;
  auto trace = Load(Doc({m}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->events.count(), 1u);
  EXPECT_THAT(trace->source.generation_evidence, HasSubstr("HIP"));
}

TEST(KinetoSource, CpuMemoryEventsAreSkippedAndCounted) {
  auto trace = Load(Doc({
      MemEvent({1, 8, 0x99, 8, 0, 0, 0}),
      MemEvent({2, 512, 0x10, 512, 1 << 20}),
      MemEvent({3, -8, 0x99, 0, 0, 0, 0}),
  }));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->events.count(), 1u);
  EXPECT_THAT(fmt::format("{}", fmt::join(trace->facts.notes, "\n")),
              HasSubstr("2 CPU [memory] events skipped"));
}

TEST(KinetoSource, SeveralDevicesAreContiguousRuns) {
  auto trace = Load(Doc({
      MemEvent({1, 512, 0x10, 512, 1 << 20, 1}),
      MemEvent({2, 512, 0x10, 512, 1 << 20, 0}),
      MemEvent({3, 1024, 0x20, 1536, 1 << 20, 1}),
  }));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->devices, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(trace->device_event_ranges, (std::vector<std::pair<size_t, size_t>>{{0, 1}, {1, 3}}));
  EXPECT_EQ(trace->events.device, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(AllocatedAtMemoryEvents(*trace, 1), (std::vector<int64_t>{512, 1536}));
}

TEST(KinetoSource, ChromeArrayForm) {
  const json events = json::array({MemEvent({1, 512, 0x10, 512, 1 << 20})});
  auto trace = Load(events.dump());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->events.count(), 1u);
}

// ---- errors: one line naming the file, what is wrong, where and what to do ------------------

void ExpectError(const std::string& text, const std::vector<std::string>& phrases) {
  auto trace = Load(text, "bad.json");
  ASSERT_FALSE(trace.ok()) << text;
  EXPECT_EQ(trace.status().code(), StatusCode::kInvalidInput);
  const std::string& m = trace.status().message();
  EXPECT_THAT(m, StartsWith("bad.json: "));
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const std::string& p : phrases) EXPECT_THAT(m, HasSubstr(p)) << text;
}

json WithArg(json event, const std::string& key, json value) {
  event["args"][key] = std::move(value);
  return event;
}

TEST(KinetoSourceErrors, MalformedJsonNamesTheBytePosition) {
  ExpectError(R"({"traceEvents": [tru]})", {"invalid JSON at byte 21", "corrupt"});
  ExpectError(R"({"traceEvents": [{"name": "[memory]")", {"invalid JSON", "truncated"});
  ExpectError(Doc({MemEvent({1, 512, 0x10, 512, 0})}) + "xx", {"invalid JSON"});
}

TEST(KinetoSourceErrors, NotAProfilerTrace) {
  ExpectError(R"({"foo": 1, "bar": [1, 2]})",
              {"JSON object without 'traceEvents'", "'foo', 'bar'", "memory snapshots"});
  ExpectError(R"({"traceEvents": {"a": 1}})", {"'traceEvents' is an object", "expected a list"});
  ExpectError(R"({"traceEvents": 5})", {"'traceEvents' is the integer 5"});
  ExpectError(R"({"traceEvents": [{"name": "x"}, 7]})",
              {"event 1 is the integer 7", "expected an event object"});
  ExpectError(R"({"traceEvents": [[1]]})", {"event 0 is a list"});
  ExpectError("42", {"single value"});
  // Keys and values are quoted on one line, escaped and cut short.
  ExpectError(
      R"({"a\nb": 1, "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9": 2})",
      {"'a\\x0ab'", "\u00e9\u00e9...'"});
}

TEST(KinetoSourceErrors, NoGpuMemoryEvents) {
  ExpectError(R"({"traceEvents": []})",
              {"JSON", "holds no GPU [memory] events",
               "record with torch.profiler.profile(profile_memory=True)"});
  ExpectError(R"([{"ph": "X"}])", {"JSON", "holds no GPU [memory] events", "1 events"});
  ExpectError(Doc({MemEvent({1, 8, 0x99, 8, 0, 0, 0})}),
              {"holds no GPU [memory] events", "1 of CPU memory"});
  ExpectError(Doc({MemEvent({1, 8, 0x99, 8, 0, 0, 12})}), {"1 of device type 12"});
}

TEST(KinetoSourceErrors, WrongTypesAndAbsurdValues) {
  const json ok = MemEvent({1, 512, 0x10, 512, 1 << 20});
  const json other = MemEvent({0.5, 512, 0x20, 1024, 1 << 20});
  ExpectError(Doc({other, WithArg(ok, "Bytes", "512")}),
              {"[memory] event 1", "'Bytes' is a string (\"512\")", "expected an integer"});
  ExpectError(Doc({WithArg(ok, "Bytes", 1.5)}), {"'Bytes' is the number 1.5"});
  ExpectError(Doc({WithArg(ok, "Bytes", int64_t{1} << 60)}), {"'Bytes'", "outside", "corrupt"});
  ExpectError(Doc({WithArg(ok, "Device Id", 1 << 20)}), {"'Device Id'", "outside"});
  ExpectError(Doc({WithArg(ok, "Device Id", -1)}), {"'Device Id' is -1"});
  ExpectError(Doc({WithArg(ok, "Device Type", nullptr)}), {"'Device Type' is null"});
  ExpectError(Doc({WithArg(ok, "Addr", -5)}), {"'Addr' is the integer -5", "non-negative"});
  ExpectError(Doc({WithArg(ok, "Total Allocated", json::array())}),
              {"'Total Allocated' is an object or list"});
  ExpectError(Doc({WithArg(ok, "Total Reserved", -1)}), {"'Total Reserved' is -1"});
  json no_bytes = ok;
  no_bytes["args"].erase("Bytes");
  ExpectError(Doc({no_bytes}), {"[memory] event 0 has no 'Bytes'"});
  json bad_ts = ok;
  bad_ts["ts"] = "soon";
  ExpectError(Doc({bad_ts}), {"'ts' is a string (\"soon\")"});
  bad_ts["ts"] = 1e300;
  ExpectError(Doc({bad_ts}), {"'ts' is the number 1e+300"});
  json no_addr = ok;
  no_addr["args"].erase("Addr");
  ExpectError(Doc({ok, no_addr}), {"[memory] event 1 lacks 'Addr'", "mix of two"});
}

TEST(KinetoSourceErrors, UnusableSpansAreNotedNotFatal) {
  json span = Span("cpu_op", "aten::empty", 0, 10);
  span["dur"] = "long";
  auto trace = Load(Doc({span, MemEvent({1, 512, 0x10, 512, 1 << 20})}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_THAT(fmt::format("{}", fmt::join(trace->facts.notes, "\n")),
              HasSubstr("1 operator or Python events without a usable"));
}

TEST(KinetoSourceErrors, ZeroByteEventsAreSkipped) {
  auto trace = Load(Doc({MemEvent({1, 0, 0, 0, 0}), MemEvent({2, 512, 0x10, 512, 1 << 20})}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->events.count(), 1u);
}

// ---- the real traces of ../shared/fixtures/real/ ---------------------------------------------

struct Fixture {
  const char* file;
  size_t gpu_memory_events;  // README, section B
  size_t frees;
  bool totals;
  int64_t peak_allocated;  // the file's max Total Allocated (0: none)
  int64_t peak_reserved;
};

const Fixture kFixturesB[] = {
    {"kineto_nov2022_v100_ddp_rank1_profile_memory.json.gz", 26770, 13385, true, 6629508096,
     12782141440},
    {"kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz", 2250, 1125, true, 2088508416,
     2629828608},
    {"kineto_torch2.7rocm_mi300x_qwen1.5-0.5b_inference.json.gz", 2588, 1294, true, 2219047936,
     2533359616},
    {"kineto_torch1.9_v100_resnet50_legacy_memory_schema.pt.trace.json.gz", 8220, 4110, false, 0,
     0},
};

std::string ReadGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto text = Gunzip(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : std::string();
}

struct Expected {
  double ts;
  size_t index;
  int64_t device, bytes, allocated, reserved;
};

// The GPU [memory] events, read with nlohmann's DOM (filtered as it parses, so the 54 MB file
// stays small), in time order (file order for equal times).
std::vector<Expected> ExpectedEvents(const std::string& text, size_t* negative_all) {
  std::vector<Expected> out;
  size_t index = 0;
  *negative_all = 0;
  const json doc = json::parse(text, [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 2 && event == json::parse_event_t::object_end) {
      const size_t i = index++;
      if (!parsed.contains("name") || parsed["name"] != "[memory]") return false;
      const json& a = parsed["args"];
      if (a["Bytes"].get<int64_t>() < 0) ++*negative_all;
      const int type = a["Device Type"].get<int>();
      if (type == 1 || type == 6) {
        out.push_back({parsed["ts"].get<double>(), i, a["Device Id"].get<int64_t>(),
                       a["Bytes"].get<int64_t>(), a.value("Total Allocated", int64_t{-1}),
                       a.value("Total Reserved", int64_t{-1})});
      }
      return false;
    }
    return true;
  });
  std::stable_sort(out.begin(), out.end(),
                   [](const Expected& a, const Expected& b) { return a.ts < b.ts; });
  return out;
}

class KinetoFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(KinetoFixture, LevelsEqualTheProfilersTotals) {
  const Fixture& f = GetParam();
  const std::string path = kFixtures + f.file;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  const std::string text = ReadGzip(path);
  auto trace = Load(text, path);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  size_t negative_all = 0;
  const std::vector<Expected> expected = ExpectedEvents(text, &negative_all);
  ASSERT_EQ(expected.size(), f.gpu_memory_events);
  ASSERT_EQ(t.devices.size(), 1u);
  for (const Expected& e : expected) ASSERT_EQ(e.device, t.devices[0]);

  size_t allocs = 0, frees = 0;
  for (Action a : t.events.action) {
    allocs += a == Action::kAlloc;
    frees += a == Action::kFreeRequested;
  }
  EXPECT_EQ(allocs + frees, f.gpu_memory_events);
  EXPECT_EQ(frees, f.frees);
  EXPECT_EQ(t.source.format, "PyTorch profiler trace (Kineto JSON)");

  std::vector<int64_t> reserved;
  const std::vector<int64_t> allocated = AllocatedAtMemoryEvents(t, 0, &reserved);
  ASSERT_EQ(allocated.size(), expected.size());
  const Levels tl = LevelsOf(t);
  if (f.totals) {
    size_t allocated_mismatch = 0, reserved_mismatch = 0, first_mismatch = SIZE_MAX;
    int64_t max_allocated = 0, max_reserved = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (allocated[i] != expected[i].allocated) {
        ++allocated_mismatch;
        first_mismatch = std::min(first_mismatch, i);
      }
      reserved_mismatch += reserved[i] != expected[i].reserved;
      max_allocated = std::max(max_allocated, expected[i].allocated);
      max_reserved = std::max(max_reserved, expected[i].reserved);
    }
    EXPECT_EQ(allocated_mismatch, 0u) << "first at memory event " << first_mismatch;
    EXPECT_EQ(reserved_mismatch, 0u);
    EXPECT_EQ(max_allocated, f.peak_allocated);
    EXPECT_EQ(max_reserved, f.peak_reserved);
    EXPECT_EQ(tl.peak_allocated, f.peak_allocated);
    EXPECT_EQ(tl.peak_reserved, f.peak_reserved);
    EXPECT_TRUE(t.facts.reserved_known);
    EXPECT_THAT(t.source.generation, HasSubstr("Addr/Total Allocated"));
  } else {
    // Legacy: the README's counts, including CPU frees, and a curve that never goes below 0
    // and ends at what the pairing leaves alive.
    EXPECT_EQ(negative_all, 6418u);
    EXPECT_THAT(t.source.generation, HasSubstr("legacy"));
    int64_t signed_sum = 0, alive_before = 0, alive_at_end = 0;
    for (const Expected& e : expected) signed_sum += e.bytes;
    for (const model::Allocation& a : t.allocations) {
      if (a.alloc_event == model::kNoEvent) alive_before += static_cast<int64_t>(a.size);
      if (a.ReleaseEvent() == model::kNoEvent) alive_at_end += static_cast<int64_t>(a.size);
    }
    for (int64_t level : allocated) ASSERT_GE(level, 0);
    EXPECT_EQ(allocated.back(), alive_before + signed_sum);
    EXPECT_EQ(allocated.back(), alive_at_end);
    std::printf("[ legacy   ] %zu allocations, %lld B alive before the trace, %lld B at the end\n",
                t.allocations.size(), static_cast<long long>(alive_before),
                static_cast<long long>(alive_at_end));
  }

  // Operator stacks.
  size_t with_op = 0, total = 0;
  for (const model::Allocation& a : t.allocations) {
    if (a.alloc_event == model::kNoEvent) continue;
    ++total;
    bool op = false;
    t.stacks.ForEachFrame(a.alloc_stack, [&](model::FrameId id) {
      const model::Frame& fr = t.frames.Get(id);
      op = op || (fr.kind == model::FrameKind::kNative &&
                  t.strings.Get(fr.function).substr(0, 6) == "aten::");
    });
    with_op += op;
  }
  std::printf("[ stacks   ] %s: %zu of %zu allocations (%.1f%%) have an aten:: operator frame\n",
              f.file, with_op, total, 100.0 * static_cast<double>(with_op) / total);
  EXPECT_GT(with_op * 10, total * 9);
}

INSTANTIATE_TEST_SUITE_P(Real, KinetoFixture, ::testing::ValuesIn(kFixturesB),
                         [](const ::testing::TestParamInfo<Fixture>& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.find(".json"));
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(KinetoFixtureExtras, QwenStacksHaveModulesAndPythonFrames) {
  const std::string path = kFixtures + "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto trace = Load(ReadGzip(path), path);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const model::Trace& t = *trace;
  EXPECT_TRUE(t.facts.has_python_frames);
  EXPECT_TRUE(t.facts.has_native_frames);
  bool module = false, linear = false;
  for (size_t i = 0; i < t.frames.size(); ++i) {
    const model::Frame& f = t.frames.Get(static_cast<model::FrameId>(i));
    module = module || (t.strings.Get(f.filename) == "nn.Module" &&
                        t.strings.Get(f.function) == "Qwen2DecoderLayer_0");
    linear = linear || (t.strings.Get(f.filename) == "torch/nn/modules/linear.py" &&
                        t.strings.Get(f.function) == "forward" && f.line > 0);
  }
  EXPECT_TRUE(module);
  EXPECT_TRUE(linear);
  // One profiler step, on the trace's device.
  ASSERT_EQ(t.annotations.size(), 2u);
  EXPECT_EQ(t.annotations[0].fields[1].second, "ProfilerStep#6");
  // Stacks are shared: far fewer distinct stacks than allocations.
  std::printf("[ stacks   ] %zu frames, %zu stack nodes for %zu allocations\n", t.frames.size(),
              t.stacks.size(), t.allocations.size());
}

}  // namespace
}  // namespace vramscope::kineto
