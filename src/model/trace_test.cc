#include "model/trace.h"

#include <gtest/gtest.h>

namespace vramscope::model {
namespace {

TEST(RoundedRequestSize, FollowsThe512ByteRule) {
  EXPECT_EQ(RoundedRequestSize(0), 512u);
  EXPECT_EQ(RoundedRequestSize(1), 512u);
  EXPECT_EQ(RoundedRequestSize(511), 512u);
  EXPECT_EQ(RoundedRequestSize(512), 512u);
  EXPECT_EQ(RoundedRequestSize(513), 1024u);
  EXPECT_EQ(RoundedRequestSize(3200), 3584u);  // an (800,) fp32 tensor
  EXPECT_EQ(RoundedRequestSize(1 << 20), 1u << 20);
}

TEST(Interning, StacksShareTheirCallers) {
  Trace t;
  auto frame = [&](const char* file, int line) {
    return t.frames.Intern(
        {t.strings.Intern(file), t.strings.Intern("f"), line, ClassifyFrame(file)});
  };
  const FrameId a = frame("a.py", 1), b = frame("b.py", 2), c = frame("c.py", 3),
                d = frame("d.py", 4);
  const FrameId abc[] = {a, b, c};
  const FrameId dbc[] = {d, b, c};
  const StackId s1 = t.stacks.Intern(abc);
  const StackId s2 = t.stacks.Intern(dbc);
  EXPECT_NE(s1, s2);
  EXPECT_EQ(t.stacks.Intern(abc), s1);
  // The empty stack, c, b<-c, a<-b<-c, d<-b<-c.
  EXPECT_EQ(t.stacks.size(), 5u);
  EXPECT_EQ(t.stacks.parent(s1), t.stacks.parent(s2));
  EXPECT_EQ(t.stacks.Frames(s1), (std::vector<FrameId>{a, b, c}));
  EXPECT_EQ(t.stacks.depth(s1), 3u);
  EXPECT_EQ(t.frames.size(), 4u);
  EXPECT_EQ(frame("a.py", 1), a);
}

TEST(ClassifyFrame, PythonAndNative) {
  EXPECT_EQ(ClassifyFrame("/x/train.py"), FrameKind::kPython);
  EXPECT_EQ(ClassifyFrame("D:\\Dev\\model.py"), FrameKind::kPython);
  EXPECT_EQ(ClassifyFrame("<frozen importlib._bootstrap>"), FrameKind::kPython);
  EXPECT_EQ(ClassifyFrame("CUDACachingAllocator.cpp"), FrameKind::kNative);
  EXPECT_EQ(ClassifyFrame("??"), FrameKind::kNative);
  EXPECT_EQ(ClassifyFrame(""), FrameKind::kNative);
  EXPECT_EQ(ClassifyFrame("<unknown>"), FrameKind::kNative);
}

TEST(Actions, RoundTripNames) {
  for (const char* name :
       {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
        "segment_unmap", "oom", "snapshot", "user_defined", "annotate"}) {
    const auto action = ParseAction(name);
    ASSERT_TRUE(action.has_value()) << name;
    EXPECT_STREQ(ActionName(*action), name);
  }
  EXPECT_FALSE(ParseAction("teleport").has_value());
}

// One device, one 2 MiB segment holding three live blocks (D, C pending, E never traced).
Trace MidRunTrace() {
  Trace t;
  t.devices = {0};
  Segment seg;
  seg.address = 0x1000000;
  seg.total_size = 2 << 20;
  seg.pool = Pool::kSmall;
  seg.block_count = 4;
  t.segments.push_back(seg);
  auto block = [&](uint64_t addr, uint64_t size, uint64_t requested, BlockState state) {
    Block b;
    b.address = addr;
    b.size = size;
    b.requested_size = requested;
    b.state = state;
    t.blocks.push_back(b);
  };
  block(0x1000000, 2048, 2048, BlockState::kActiveAllocated);   // D
  block(0x1000800, 1024, 600, BlockState::kActivePendingFree);  // C
  block(0x1000c00, 4096, 4000, BlockState::kActiveAllocated);   // E
  block(0x1001c00, (2 << 20) - 0x1c00, 0, BlockState::kInactive);
  Events& e = t.events;
  e.Push(Action::kAlloc, 0, 0x2000, 1000, 0, 1, 0);            // 0: A
  e.Push(Action::kFreeRequested, 0, 0x2000, 1000, 0, 2, 0);    // 1
  e.Push(Action::kFreeCompleted, 0, 0x2000, 1000, 0, 3, 0);    // 2
  e.Push(Action::kFreeRequested, 0, 0x3000, 700, 0, 4, 0);     // 3: B, allocated before
  e.Push(Action::kFreeCompleted, 0, 0x3000, 700, 0, 5, 0);     // 4
  e.Push(Action::kAlloc, 0, 0x1000800, 600, 0, 6, 0);          // 5: C
  e.Push(Action::kFreeRequested, 0, 0x1000800, 600, 0, 7, 0);  // 6: waits for another stream
  e.Push(Action::kAlloc, 0, 0x1000000, 2048, 0, 8, 0);         // 7: D
  t.device_event_ranges = {{0, e.count()}};
  t.facts.has_trace = true;
  return t;
}

TEST(BuildAllocations, PairsLifetimesAcrossAMidRunTrace) {
  Trace t = MidRunTrace();
  BuildAllocations(t);
  ASSERT_EQ(t.allocations.size(), 5u);
  const Allocation& a = t.allocations[0];
  EXPECT_EQ(a.alloc_event, 0);
  EXPECT_EQ(a.free_requested_event, 1);
  EXPECT_EQ(a.free_completed_event, 2);
  EXPECT_EQ(a.size, 1024u);
  EXPECT_FALSE(a.size_exact);
  EXPECT_FALSE(a.alive_at_end);

  const Allocation& b = t.allocations[1];
  EXPECT_EQ(b.alloc_event, kNoEvent);
  EXPECT_EQ(b.free_requested_event, 3);
  EXPECT_EQ(b.ReleaseEvent(), 3);
  EXPECT_EQ(b.free_completed_event, 4);
  EXPECT_EQ(b.requested_size, 700u);

  const Allocation& c = t.allocations[2];
  EXPECT_EQ(c.alloc_event, 5);
  EXPECT_EQ(c.free_requested_event, 6);
  EXPECT_EQ(c.free_completed_event, kNoEvent);
  EXPECT_TRUE(c.alive_at_end);
  EXPECT_EQ(c.block, 1);
  EXPECT_TRUE(c.size_exact);

  const Allocation& d = t.allocations[3];
  EXPECT_EQ(d.alloc_event, 7);
  EXPECT_TRUE(d.alive_at_end);
  EXPECT_EQ(d.size, 2048u);
  EXPECT_TRUE(d.size_exact);

  const Allocation& e = t.allocations[4];  // alive before and after the trace
  EXPECT_EQ(e.alloc_event, kNoEvent);
  EXPECT_TRUE(e.alive_at_end);
  EXPECT_EQ(e.size, 4096u);
  EXPECT_EQ(e.requested_size, 4000u);

  EXPECT_TRUE(t.facts.starts_mid_run);
  EXPECT_EQ(t.facts.frees_without_alloc, 1u);
  EXPECT_EQ(t.facts.allocations_alive_before_trace, 2u);
}

TEST(CheckStateInvariants, HoldsForAConsistentSegment) {
  Trace t = MidRunTrace();
  t.segments[0].allocated_size = 2048 + 4096;
  t.segments[0].active_size = 2048 + 1024 + 4096;
  t.segments[0].requested_size = 2048 + 600 + 4000;
  EXPECT_TRUE(CheckStateInvariants(t).empty());
}

TEST(CheckStateInvariants, ReportsGapsAndWrongTotals) {
  Trace t = MidRunTrace();
  t.blocks[2].address += 512;  // a hole after block 1
  t.segments[0].allocated_size = 1;
  const auto problems = CheckStateInvariants(t);
  ASSERT_GE(problems.size(), 2u);
  EXPECT_NE(problems[0].find("block 2 starts at"), std::string::npos) << problems[0];
  bool mentions_allocated = false;
  for (const auto& p : problems)
    mentions_allocated |= p.find("allocated_size") != std::string::npos;
  EXPECT_TRUE(mentions_allocated);
}

}  // namespace
}  // namespace vramscope::model

namespace vramscope::model {
namespace {

TEST(DeviceEventRange, FindsEachDevicesEventsInSortedEvents) {
  Events ev;
  for (const int32_t d : {2, 0, 2, 5, 0}) ev.Push(Action::kAlloc, d, 0, 512, 0, kNoTime, 0);
  StableSortEventsByDevice(ev);
  EXPECT_EQ(DeviceEventRange(ev, 0), (std::pair<size_t, size_t>{0, 2}));
  EXPECT_EQ(DeviceEventRange(ev, 2), (std::pair<size_t, size_t>{2, 4}));
  EXPECT_EQ(DeviceEventRange(ev, 5), (std::pair<size_t, size_t>{4, 5}));
  const auto none = DeviceEventRange(ev, 3);
  EXPECT_EQ(none.first, none.second);
}

}  // namespace
}  // namespace vramscope::model
