#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "analysis/analyze.h"
#include "analysis/sites.h"
#include "analysis/timeline.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::analysis {
namespace {

using model::Action;
using model::BlockState;
using model::kNoEvent;

// One 2 MiB small-pool segment: live blocks D (2048 B) and E (4096 B, alive before the trace) and
// C (pending free); A lives and dies in the trace; B was allocated before it.
model::Trace MidRunTrace(bool with_segment_free) {
  model::Trace t;
  t.facts.has_allocator_state = true;
  t.facts.reserved_known = true;
  t.devices = {0};
  model::Segment seg;
  seg.address = 0x1000000;
  seg.total_size = 2 << 20;
  seg.allocated_size = 2048 + 4096;
  seg.block_count = 4;
  t.segments.push_back(seg);
  auto block = [&](uint64_t addr, uint64_t size, uint64_t requested, BlockState state) {
    model::Block b;
    b.address = addr;
    b.size = size;
    b.requested_size = requested;
    b.state = state;
    t.blocks.push_back(b);
  };
  block(0x1000000, 2048, 2048, BlockState::kActiveAllocated);
  block(0x1000800, 1024, 600, BlockState::kActivePendingFree);
  block(0x1000c00, 4096, 4000, BlockState::kActiveAllocated);
  block(0x1001c00, (2 << 20) - 0x1c00, 0, BlockState::kInactive);
  model::Events& e = t.events;
  e.Push(Action::kAlloc, 0, 0x2000, 1000, 0, 100, 0);                                      // 0
  e.Push(Action::kFreeRequested, 0, 0x2000, 1000, 0, 200, 0);                              // 1
  e.Push(Action::kFreeCompleted, 0, 0x2000, 1000, 0, 300, 0);                              // 2
  e.Push(Action::kFreeRequested, 0, 0x3000, 700, 0, 400, 0);                               // 3
  e.Push(Action::kFreeCompleted, 0, 0x3000, 700, 0, 500, 0);                               // 4
  e.Push(Action::kAlloc, 0, 0x1000800, 600, 0, 600, 0);                                    // 5
  e.Push(Action::kFreeRequested, 0, 0x1000800, 600, 0, 700, 0);                            // 6
  e.Push(Action::kAlloc, 0, 0x1000000, 2048, 0, 800, 0);                                   // 7
  if (with_segment_free) e.Push(Action::kSegmentFree, 0, 0x9000000, 20 << 20, 0, 900, 0);  // 8
  t.device_event_ranges = {{0, e.count()}};
  t.facts.has_trace = true;
  model::BuildAllocations(t);
  return t;
}

TEST(Timelines, AnchoredAtTheDumpAndDropAtFreeRequested) {
  const model::Trace t = MidRunTrace(false);
  const Timelines tl = ComputeTimelines(model::Uninterpreted(t));
  ASSERT_EQ(tl.devices.size(), 1u);
  const DeviceTimeline& d = tl.devices[0];
  EXPECT_EQ(d.allocated_at_start, 1024 + 4096);  // B (700 B -> 1024) and E
  EXPECT_EQ(d.allocated, (std::vector<int64_t>{6144, 5120, 5120, 4096, 4096, 5120, 4096, 6144}));
  EXPECT_EQ(d.allocated.back(), d.allocated_at_dump);
  EXPECT_EQ(d.peak_allocated, 6144);
  EXPECT_EQ(d.peak_allocated_event, 0);  // the first time it was reached
  EXPECT_EQ(d.reserved_at_start, 2 << 20);
  EXPECT_EQ(d.peak_reserved, 2 << 20);
  EXPECT_EQ(d.peak_reserved_event, kNoEvent);
  EXPECT_EQ(d.estimated_sizes, 2u);  // A and B were freed: their block sizes are rounded requests
}

TEST(Timelines, ReservedWalksBackFromTheDump) {
  const model::Trace t = MidRunTrace(true);
  const DeviceTimeline d = ComputeTimelines(model::Uninterpreted(t)).devices[0];
  EXPECT_EQ(d.reserved_at_start, (2 << 20) + (20 << 20));  // the freed segment existed before
  EXPECT_EQ(d.ReservedAfter(d.end - 1), 2 << 20);
  EXPECT_EQ(d.ReservedAfter(d.end - 2), (2 << 20) + (20 << 20));  // before the segment_free
  EXPECT_EQ(d.peak_reserved, (2 << 20) + (20 << 20));
}

TEST(LiveAfter, SeesWhatWasAliveAtEachMoment) {
  const model::Trace t = MidRunTrace(false);
  auto addrs = [&](int64_t event) {
    std::vector<uint64_t> out;
    for (size_t i : LiveAfter(t, 0, event)) out.push_back(t.allocations[i].addr);
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(addrs(kNoEvent), (std::vector<uint64_t>{0x3000, 0x1000c00}));
  EXPECT_EQ(addrs(0), (std::vector<uint64_t>{0x2000, 0x3000, 0x1000c00}));
  EXPECT_EQ(addrs(7), (std::vector<uint64_t>{0x1000000, 0x1000c00}));
}

TEST(Sites, ProjectFramesFirstRelativePaths) {
  model::Trace t;
  auto frame = [&](const std::string& file, int line, const std::string& fn) {
    return t.frames.Intern(
        {t.strings.Intern(file), t.strings.Intern(fn), line, model::ClassifyFrame(file)});
  };
  const model::FrameId ids[] = {
      frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
      frame("??", 0, "at::_ops::addmm::call(at::Tensor const&)"),
      frame("/env/site-packages/torch/nn/modules/linear.py", 116, "forward"),
      frame("/env/site-packages/transformers/models/gpt2/modeling_gpt2.py", 300, "forward"),
      frame("/home/me/proj/model.py", 42, "forward"),
      frame("/home/me/proj/train.py", 10, "main"),
  };
  const model::StackId stack = t.stacks.Intern(ids);
  {
    const ProjectRoot root("/home/me/proj/");
    SiteNamer sites(t, root);
    EXPECT_EQ(sites.Label(sites.Site(stack)), "model.py:42 forward");
    EXPECT_EQ(sites.ProjectFrames(stack),
              (std::vector<std::pair<std::string, int32_t>>{{"model.py", 42}, {"train.py", 10}}));
  }
  {
    const ProjectRoot root("/elsewhere");
    SiteNamer sites(t, root);
    EXPECT_EQ(sites.Label(sites.Site(stack)), "models/gpt2/modeling_gpt2.py:300 forward");
    EXPECT_TRUE(sites.ProjectFrames(stack).empty());
  }
  const ProjectRoot root("/home/me/proj");
  EXPECT_FALSE(root.Relative("/home/me/project2/x.py").has_value());
  EXPECT_EQ(root.Relative("/home/me/proj/a/b.py"), "a/b.py");
  EXPECT_EQ(NativeName("at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&)"),
            "at::native::(anonymous namespace)::addmm_out_cuda_impl");
  EXPECT_EQ(NativeName("at::_ops::mm::redispatch(c10::DispatchKeySet)"), "aten::mm");
  SiteNamer sites(t, root);
  EXPECT_EQ(sites.Label(SiteNamer::kNoSite), "(no stack recorded)");
}

TEST(Analyze, BuiltInExampleFigures) {
  const std::string path =
      std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle";
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto trace = snapshot::LoadSnapshot(**file);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const ProjectRoot root("/home/user/mlp_example");
  const std::unique_ptr<const Analysis> analysis_owner =
      Analyze(model::Uninterpreted(*trace), root).value();
  const Analysis& a = *analysis_owner;
  ASSERT_EQ(a.summary.devices.size(), 1u);
  const DeviceSummary& d = a.summary.devices[0];
  // The generator's own replay (examples/make_example_snapshot.py) prints these figures.
  EXPECT_EQ(d.peak_allocated, 185700864);
  EXPECT_EQ(d.reserved_at_dump, 195035136);
  EXPECT_EQ(d.allocated_at_dump, 151339008);
  EXPECT_EQ(a.timelines.devices[0].allocated.back(), d.allocated_at_dump);
  EXPECT_EQ(a.summary.peak_usage_bytes, 185700864);
  // Every byte live at the peak is in exactly one category.
  uint64_t by_category = 0;
  for (const auto& c : d.live_at_peak_by_category) by_category += c.bytes;
  EXPECT_EQ(by_category, d.live_at_peak_bytes);
  EXPECT_EQ(static_cast<int64_t>(d.live_at_peak_bytes), d.peak_allocated);
  // Adam state (2 x parameters) and weights are recognised.
  auto bytes_of = [&](attribution::Category c) {
    return d.live_at_peak_by_category[static_cast<int>(c)].bytes;
  };
  EXPECT_EQ(bytes_of(attribution::Category::kOptimizerState),
            2 * bytes_of(attribution::Category::kWeight));
  EXPECT_GT(bytes_of(attribution::Category::kWorkspace), 0u);
  EXPECT_FALSE(a.entries.weights.empty());
  for (const auto& w : a.entries.weights) EXPECT_EQ(w.grad_size_bytes, w.size_bytes) << w.name;
}

TEST(Analyze, FullTraceFixturesEndWhereTheDumpIs) {
  for (const char* name : {"snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
                           "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle",
                           "snapshot_torch2.11_windows_cs336_compilectx.pickle",
                           "snapshot_torch2.6_cs336_2.7b_forward.pickle"}) {
    const std::string path = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/" + name;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
    auto file = MappedFile::Open(path);
    ASSERT_TRUE(file.ok());
    auto trace = snapshot::LoadSnapshot(**file);
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    const Timelines tl = ComputeTimelines(model::Uninterpreted(*trace));
    for (const DeviceTimeline& d : tl.devices) {
      ASSERT_FALSE(d.allocated.empty()) << name;
      EXPECT_EQ(d.allocated.back(), d.allocated_at_dump) << name;
      EXPECT_EQ(d.ReservedAfter(d.end - 1), d.reserved_at_dump) << name;
      EXPECT_GE(d.peak_allocated, d.allocated_at_dump) << name;
      EXPECT_GE(d.peak_reserved, d.peak_allocated) << name;
      for (size_t i = 0; i < d.allocated.size(); ++i) {
        ASSERT_GE(d.allocated[i], 0) << name << " event " << i;
        ASSERT_LE(d.allocated[i], d.ReservedAfter(d.begin + i)) << name << " event " << i;
      }
    }
  }
}

}  // namespace
}  // namespace vramscope::analysis
