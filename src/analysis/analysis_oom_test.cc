#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "analysis/analyze.h"
#include "analysis/oom.h"

namespace vramscope::analysis {
namespace {

using model::Action;
using model::BlockState;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f0000000000;

// One 40 MiB large-pool segment carved into A B C D (8 MiB each) and an 8 MiB tail. B and D are
// freed, leaving free blocks of 8 MiB (B) and 16 MiB (D and the tail), then a request of
// `request` fails. After the OOM the exception unwinds: A and C are freed before the dump, so the
// dump holds nothing live.
model::Trace FragmentedTrace(uint64_t request, uint64_t device_free) {
  model::Trace t;
  t.facts.has_allocator_state = true;
  t.facts.reserved_known = true;
  t.facts.has_trace = true;
  t.devices = {0};
  model::Segment seg;
  seg.address = kBase;
  seg.total_size = 40 * kMiB;
  seg.block_count = 1;
  t.segments.push_back(seg);
  model::Block free_block;
  free_block.address = kBase;
  free_block.size = 40 * kMiB;
  free_block.state = BlockState::kInactive;
  t.blocks.push_back(free_block);

  const model::FrameId frames[] = {
      t.frames.Intern({t.strings.Intern("/home/me/proj/model.py"), t.strings.Intern("forward"), 57,
                       model::ClassifyFrame("/home/me/proj/model.py")}),
      t.frames.Intern({t.strings.Intern("/home/me/proj/train.py"), t.strings.Intern("main"), 12,
                       model::ClassifyFrame("/home/me/proj/train.py")}),
  };
  const model::StackId stack = t.stacks.Intern(frames);
  model::Events& e = t.events;
  int64_t time = 1000;
  auto push = [&](Action a, uint64_t addr, uint64_t size, model::StackId s = model::kEmptyStack) {
    e.Push(a, 0, addr, size, 0, time += 10, s);
  };
  push(Action::kSegmentAlloc, kBase, 40 * kMiB);
  for (int k = 0; k < 4; ++k) push(Action::kAlloc, kBase + k * 8 * kMiB, 8 * kMiB, stack);
  for (const int k : {1, 3}) {
    push(Action::kFreeRequested, kBase + k * 8 * kMiB, 8 * kMiB);
    push(Action::kFreeCompleted, kBase + k * 8 * kMiB, 8 * kMiB);
  }
  const auto oom = static_cast<uint32_t>(e.count());
  push(Action::kOom, 0, request, stack);
  e.oom_device_free[oom] = device_free;
  for (const int k : {0, 2}) {
    push(Action::kFreeRequested, kBase + k * 8 * kMiB, 8 * kMiB);
    push(Action::kFreeCompleted, kBase + k * 8 * kMiB, 8 * kMiB);
  }
  t.device_event_ranges = {{0, e.count()}};
  model::BuildAllocations(t);
  return t;
}

TEST(Oom, FragmentationExplainedAtTheEventNotTheDump) {
  model::Trace t = FragmentedTrace(20 * kMiB, 1 * kMiB);
  const ProjectRoot root("/home/me/proj");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(t), root).value();
  const Analysis& a = *analysis_owner;
  ASSERT_EQ(a.summary.devices.size(), 1u);
  const DeviceSummary& d = a.summary.devices[0];
  EXPECT_EQ(d.allocated_at_dump, 0);  // the unwinding freed everything before the dump
  ASSERT_EQ(d.ooms.size(), 1u);
  const OomExplanation& o = d.ooms[0];
  EXPECT_EQ(o.event, 9);
  EXPECT_EQ(o.requested_bytes, 20 * kMiB);
  EXPECT_EQ(o.block_bytes, 20 * kMiB);
  EXPECT_EQ(o.segment_bytes, 20 * kMiB);
  EXPECT_FALSE(o.small_pool);
  EXPECT_EQ(o.site, "model.py:57 forward");
  EXPECT_TRUE(o.device_free_known);
  EXPECT_EQ(o.device_free_bytes, 1 * kMiB);
  EXPECT_EQ(o.allocated_bytes, static_cast<int64_t>(16 * kMiB));
  EXPECT_EQ(o.reserved_bytes, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(o.reserved_free_bytes, static_cast<int64_t>(24 * kMiB));
  ASSERT_TRUE(o.state_known) << o.state_note;
  EXPECT_EQ(o.largest_free_block_bytes, 16 * kMiB);
  EXPECT_EQ(o.usable_free_bytes, 24 * kMiB);
  EXPECT_EQ(o.usable_free_blocks, 2u);
  EXPECT_EQ(o.free_block_bytes, 24 * kMiB);
  EXPECT_TRUE(o.fragmentation);
  EXPECT_EQ(o.limit, OomLimit::kDevice);
  EXPECT_THAT(o.verdict, HasSubstr("fragmentation"));
  EXPECT_THAT(o.hint, HasSubstr("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
  // Live at the OOM: A and C, though nothing is live at the dump.
  EXPECT_EQ(o.live.bytes, 16 * kMiB);
  EXPECT_EQ(o.live.count, 2u);
  ASSERT_FALSE(o.live.by_site.empty());
  EXPECT_EQ(o.live.by_site[0].label, "model.py:57 forward");
  EXPECT_EQ(o.live.by_site[0].bytes, 16 * kMiB);
  uint64_t by_category = 0;
  for (const CategoryShare& c : o.live.by_category) by_category += c.bytes;
  EXPECT_EQ(by_category, o.live.bytes);
}

TEST(Oom, EnoughOnTheDeviceMeansTheProcessCapStoppedIt) {
  // 64 MiB requested with 24 MiB reserved but free: no fragmentation; the device had 80 GiB free.
  model::Trace t = FragmentedTrace(64 * kMiB, uint64_t{80} << 30);
  const ProjectRoot root("/home/me/proj");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(t), root).value();
  const Analysis& a = *analysis_owner;
  const OomExplanation& o = a.summary.devices.at(0).ooms.at(0);
  EXPECT_FALSE(o.fragmentation);
  EXPECT_EQ(o.limit, OomLimit::kAllocatorCap);
  EXPECT_EQ(o.segment_bytes, 64 * kMiB);
  EXPECT_EQ(o.cap_at_least_bytes, 40 * kMiB);  // reserved so far
  EXPECT_EQ(o.cap_below_bytes, 40 * kMiB + 64 * kMiB);
  EXPECT_THAT(o.verdict, HasSubstr("set_per_process_memory_fraction"));
  EXPECT_THAT(o.hint, HasSubstr("raise the memory cap"));
}

TEST(Oom, SmallRequestsLookInTheSmallPoolAndRoundUp) {
  // 1000 B is a small-pool request: 1024 B blocks, a 2 MiB segment; the large-pool free blocks
  // cannot serve it, and the device had nothing left.
  model::Trace t = FragmentedTrace(1000, 0);
  const ProjectRoot root("/home/me/proj");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(t), root).value();
  const Analysis& a = *analysis_owner;
  const OomExplanation& o = a.summary.devices.at(0).ooms.at(0);
  EXPECT_TRUE(o.small_pool);
  EXPECT_EQ(o.block_bytes, 1024u);
  EXPECT_EQ(o.segment_bytes, 2 * kMiB);
  ASSERT_TRUE(o.state_known);
  EXPECT_EQ(o.largest_free_block_bytes, 0u);  // no small-pool segment
  EXPECT_EQ(o.largest_free_block_any_bytes, 16 * kMiB);
  EXPECT_TRUE(o.fragmentation);  // free memory there, in the other pool
  EXPECT_EQ(o.limit, OomLimit::kDevice);
}

TEST(Oom, WithoutAnOomEventThereIsNothingToExplain) {
  model::Trace t = FragmentedTrace(20 * kMiB, 0);
  // Turn the oom entry into a snapshot marker.
  for (size_t i = 0; i < t.events.count(); ++i) {
    if (t.events.action[i] == Action::kOom) t.events.action[i] = Action::kSnapshot;
  }
  const ProjectRoot root("/home/me/proj");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(t), root).value();
  const Analysis& a = *analysis_owner;
  EXPECT_TRUE(a.summary.devices.at(0).ooms.empty());
}

TEST(Oom, FreeBlocksOfExpandableSegmentsAreNotRebuilt) {
  model::Trace t = FragmentedTrace(20 * kMiB, 1 * kMiB);
  t.segments[0].is_expandable = true;
  const ProjectRoot root("/home/me/proj");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(t), root).value();
  const Analysis& a = *analysis_owner;
  const OomExplanation& o = a.summary.devices.at(0).ooms.at(0);
  EXPECT_FALSE(o.state_known);
  EXPECT_THAT(o.state_note, HasSubstr("expandable"));
  // Without the blocks, fragmentation is judged from reserved - allocated.
  EXPECT_TRUE(o.fragmentation);
}

}  // namespace
}  // namespace vramscope::analysis
