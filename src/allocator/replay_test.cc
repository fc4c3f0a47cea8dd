// The replay against real recordings (exact reproduction), its sensitivity (a wrong rule must show
// up as divergences), mid-run reconstruction, recorded releases, record_stream waits and what-if
// runs, on real fixtures where they exist and on small hand-built traces for what none shows.
#include "allocator/replay.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "common/mapped_file.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::allocator {
namespace {

using model::Action;
constexpr uint64_t MiB = uint64_t{1} << 20;

std::unique_ptr<model::Trace> LoadFixture(const std::string& name) {
  const std::string path = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/" + name;
  if (!std::filesystem::exists(path)) return nullptr;
  auto file = MappedFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return nullptr;
  auto trace = snapshot::LoadSnapshot(**file);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  if (!trace.ok()) return nullptr;
  return std::make_unique<model::Trace>(std::move(trace).value());
}

ReplayResult ReplayRecorded(const model::Trace& trace, ReplayOptions options = {}) {
  auto settings = SettingsFromSnapshot(trace.allocator_settings);
  EXPECT_TRUE(settings.ok());
  options.settings = *settings;
  auto r = Replay(trace, trace.devices.back(), options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

struct Expected {
  const char* file;
  uint64_t allocs;
  uint64_t segment_allocs;
  uint64_t segment_frees;
  uint64_t final_segments;
  uint64_t final_blocks;
};

class RealFixture : public ::testing::TestWithParam<Expected> {};

// Every real snapshot with a full trace: every allocation at its recorded address, every
// segment_alloc with the recorded size in the recorded order, every recorded release explained,
// the reserved curve equal at every alloc/free event, and the final state equal to the dump.
TEST_P(RealFixture, ReplayReproducesTheRecordingExactly) {
  const Expected& e = GetParam();
  auto trace = LoadFixture(e.file);
  if (!trace) GTEST_SKIP() << e.file << " absent (../shared/fixtures/real)";
  const ReplayResult r = ReplayRecorded(*trace);
  const ReplayComparison& c = r.comparison;
  EXPECT_EQ(c.allocs, e.allocs);
  EXPECT_EQ(c.allocs_at_recorded_address, e.allocs);
  EXPECT_EQ(c.recorded_segment_allocs, e.segment_allocs);
  EXPECT_EQ(c.model_segment_allocs, e.segment_allocs);
  EXPECT_EQ(c.segment_allocs_matched, e.segment_allocs);
  EXPECT_EQ(c.recorded_segment_frees, e.segment_frees);
  EXPECT_EQ(c.segment_frees_matched, e.segment_frees);
  EXPECT_EQ(c.reserved_equal_points, c.compared_points);
  EXPECT_GT(c.compared_points, e.allocs);
  EXPECT_EQ(c.max_reserved_difference, 0u);
  EXPECT_EQ(c.final_segments_recorded, e.final_segments);
  EXPECT_EQ(c.final_segments_matched, e.final_segments);
  EXPECT_EQ(c.final_blocks_recorded, e.final_blocks);
  EXPECT_EQ(c.final_blocks_matched, e.final_blocks);
  EXPECT_EQ(c.divergence_count, 0u) << (c.divergences.empty() ? "" : c.divergences.front());
  EXPECT_EQ(c.resyncs, 0u);
  EXPECT_EQ(r.events_replayed, r.end_event - r.begin_event);
}

INSTANTIATE_TEST_SUITE_P(
    Snapshots, RealFixture,
    ::testing::Values(
        Expected{"snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle", 1935, 7, 0, 10,
                 54},
        Expected{"snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle", 3505, 152, 0, 215,
                 1079},
        Expected{"snapshot_torch2.6_cs336_2.7b_forward.pickle", 3020, 178, 742, 961, 2077},
        Expected{"snapshot_torch2.11_windows_cs336_compilectx.pickle", 1721, 0, 0, 216, 455}));

// The cs336 trace begins with 742 segment_free events and no failed allocation after them: an
// empty_cache() call. They are exactly the unsplit cached segments, in the rule's order.
TEST(RealReplay, Cs336EmptyCacheBurstIsTheRuleExactly) {
  auto trace = LoadFixture("snapshot_torch2.6_cs336_2.7b_forward.pickle");
  if (!trace) GTEST_SKIP();
  const ReplayResult r = ReplayRecorded(*trace);
  ASSERT_EQ(r.comparison.bursts.size(), 1u);
  const ReleaseBurst& b = r.comparison.bursts[0];
  EXPECT_EQ(b.first_event, r.begin_event);
  EXPECT_EQ(b.segments, 742u);
  uint64_t recorded_bytes = 0;
  for (int64_t i = b.first_event; i < b.first_event + 742; ++i) {
    ASSERT_EQ(trace->events.action[i], Action::kSegmentFree);
    recorded_bytes += trace->events.size[i];
  }
  EXPECT_EQ(b.bytes, recorded_bytes);
  EXPECT_EQ(b.cause, ReleaseBurst::Cause::kEmptyCache);
  EXPECT_TRUE(b.matches_rule);
  EXPECT_TRUE(b.same_order);
  // 1,525 segments existed when the trace began: 961 at the dump - 178 allocated + 742 freed.
  EXPECT_EQ(r.initial_segments, 961u - 178u + 742u);
}

// The comparison is not vacuous: the same recording replayed under a rule it was not recorded
// with diverges, and each divergence is named.
TEST(RealReplay, AWrongRuleShowsUpAsDivergences) {
  auto trace = LoadFixture("snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle");
  if (!trace) GTEST_SKIP();
  ReplayOptions options;
  options.settings.max_split_size = 40 * MiB;  // the run used no max_split_size
  auto r = Replay(*trace, 0, options);
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->comparison.divergence_count, 0u);
  EXPECT_LT(r->comparison.allocs_at_recorded_address, r->comparison.allocs);
  EXPECT_FALSE(r->comparison.divergences.empty());
  EXPECT_NE(r->comparison.divergences[0].find("event "), std::string::npos);

  ReplayOptions rounding;
  rounding.settings.roundup_power2_divisions.fill(4);
  auto q = Replay(*trace, 0, rounding);
  ASSERT_TRUE(q.ok());
  EXPECT_LT(q->comparison.segment_allocs_matched, q->comparison.recorded_segment_allocs);
}

// A what-if under a capacity below the recorded peak stops at the first request that cannot be
// served, after releasing the cache; above the peak it fits with the recorded decisions.
TEST(RealReplay, CapacityWhatIf) {
  auto trace = LoadFixture("snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle");
  if (!trace) GTEST_SKIP();
  ReplayOptions tight;
  tight.follow_recording = false;
  tight.settings.capacity = 4ull << 30;
  auto r = Replay(*trace, 0, tight);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->oom.has_value());
  EXPECT_EQ(trace->events.action[r->oom->event], Action::kAlloc);
  EXPECT_LE(r->oom->reserved, tight.settings.capacity);
  EXPECT_GT(r->oom->reserved + SegmentSizeFor(r->oom->rounded), tight.settings.capacity);
  EXPECT_GE(r->stats.alloc_retries, 1u);
  EXPECT_LE(r->stats.peak_reserved, tight.settings.capacity);
  EXPECT_LT(r->events_replayed, r->end_event - r->begin_event);

  const ReplayResult recorded = ReplayRecorded(*trace);
  ReplayOptions roomy;
  roomy.follow_recording = false;
  roomy.settings.capacity = recorded.stats.peak_reserved;
  auto s = Replay(*trace, 0, roomy);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->oom.has_value());
  EXPECT_EQ(s->stats.peak_reserved, recorded.stats.peak_reserved);
  EXPECT_EQ(s->stats.alloc_retries, 0u);
}

// --- hand-built traces -------------------------------------------------------------------------

struct TraceBuilder {
  model::Trace t;
  void Event(Action a, uint64_t addr, uint64_t size, uint64_t stream = 0) {
    t.events.Push(a, 0, addr, size, stream, model::kNoTime, model::kEmptyStack);
  }
  void Alloc(uint64_t addr, uint64_t size, uint64_t stream = 0) {
    Event(Action::kAlloc, addr, size, stream);
  }
  void Free(uint64_t addr, uint64_t size, uint64_t stream = 0) {
    Event(Action::kFreeRequested, addr, size, stream);
    Event(Action::kFreeCompleted, addr, size, stream);
  }
  // A segment at the dump with its blocks (address, size, active).
  void DumpSegment(uint64_t addr, uint64_t size, model::Pool pool,
                   std::vector<std::tuple<uint64_t, uint64_t, bool>> blocks) {
    model::Segment s;
    s.address = addr;
    s.total_size = size;
    s.pool = pool;
    s.first_block = static_cast<uint32_t>(t.blocks.size());
    s.block_count = static_cast<uint32_t>(blocks.size());
    for (const auto& [a, sz, active] : blocks) {
      model::Block b;
      b.address = a;
      b.size = sz;
      b.requested_size = sz;
      b.state = active ? model::BlockState::kActiveAllocated : model::BlockState::kInactive;
      b.segment = static_cast<uint32_t>(t.segments.size());
      t.blocks.push_back(b);
      if (active) s.allocated_size += sz;
    }
    t.segments.push_back(s);
  }
  const model::Trace& Finish() {
    t.devices = {0};
    t.device_event_ranges = {{0, t.events.count()}};
    t.facts.has_trace = true;
    model::BuildAllocations(t);
    return t;
  }
};

constexpr uint64_t kBase = 0x7f0000000000;

// A trace that starts mid-run: a 20 MiB segment holds a block allocated before the trace for a
// 19.2 MiB request. The 0.8 MiB after it cannot be a free large-pool block (they are all larger
// than 1 MiB), so it is that block's unsplit remainder: the block is the whole segment.
TEST(SyntheticReplay, MidRunBlockKeepsItsUnsplitRemainder) {
  TraceBuilder b;
  const uint64_t req = 19 * MiB + 200 * 1024;  // 19.2 MiB, not a multiple of 1 MiB
  b.Free(kBase, req);                          // allocated before the trace
  b.Alloc(kBase, 19 * MiB + 900 * 1024);       // reuses the whole segment, no cudaMalloc
  b.DumpSegment(kBase, 20 * MiB, model::Pool::kLarge, {{kBase, 20 * MiB, true}});
  const model::Trace& trace = b.Finish();
  ReplayOptions o;
  auto r = Replay(trace, 0, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->initial_segments, 1u);
  EXPECT_EQ(r->initial_blocks, 1u);
  EXPECT_EQ(r->initial_allocated, 20 * MiB);  // not 19.2 MiB rounded to 512 B
  EXPECT_EQ(r->comparison.allocs_at_recorded_address, 1u);
  EXPECT_EQ(r->comparison.model_segment_allocs, 0u);
  EXPECT_EQ(r->comparison.final_blocks_matched, 1u);
}

// A recorded release followed by a new segment and its allocation is the allocator freeing its
// cache after a failed cudaMalloc: the compare mode checks the rule, a what-if leaves it to the
// model's own capacity (none here: nothing is released).
TEST(SyntheticReplay, ReleaseAfterFailedMallocIsNotAnEmptyCacheCall) {
  TraceBuilder b;
  b.Event(Action::kSegmentAlloc, kBase, 20 * MiB);
  b.Alloc(kBase, 8 * MiB);
  b.Free(kBase, 8 * MiB);
  b.Event(Action::kSegmentFree, kBase, 20 * MiB);
  b.Event(Action::kSegmentAlloc, kBase + 64 * MiB, 40 * MiB);
  b.Alloc(kBase + 64 * MiB, 40 * MiB);
  b.DumpSegment(kBase + 64 * MiB, 40 * MiB, model::Pool::kLarge,
                {{kBase + 64 * MiB, 40 * MiB, true}});
  const model::Trace& trace = b.Finish();
  auto r = Replay(trace, 0, ReplayOptions{});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->comparison.bursts.size(), 1u);
  EXPECT_EQ(r->comparison.bursts[0].cause, ReleaseBurst::Cause::kMallocRetry);
  EXPECT_TRUE(r->comparison.bursts[0].matches_rule);
  EXPECT_EQ(r->comparison.segment_frees_matched, 1u);
  EXPECT_EQ(r->comparison.allocs_at_recorded_address, 2u);
  EXPECT_EQ(r->comparison.divergence_count, 0u);

  ReplayOptions what_if;
  what_if.follow_recording = false;
  auto w = Replay(trace, 0, what_if);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->empty_cache_calls, 0u);
  EXPECT_EQ(w->stats.reserved, 60 * MiB);  // unlimited memory: the 20 MiB segment stays cached
  // With 50 MiB the model itself must release the cached segment, as the recording did.
  what_if.settings.capacity = 50 * MiB;
  auto x = Replay(trace, 0, what_if);
  ASSERT_TRUE(x.ok());
  EXPECT_FALSE(x->oom.has_value());
  EXPECT_EQ(x->stats.alloc_retries, 1u);
  EXPECT_EQ(x->stats.reserved, 40 * MiB);
}

// record_stream: the recorded free_completed comes later than free_requested, and the block must
// not be reused in between; the replay follows the recorded completion point.
TEST(SyntheticReplay, PendingFreeIsNotReusedBeforeItCompletes) {
  TraceBuilder b;
  b.Event(Action::kSegmentAlloc, kBase, 2 * MiB);
  b.Alloc(kBase, 4096);
  b.Event(Action::kFreeRequested, kBase, 4096);
  b.Alloc(kBase + 4096, 4096);  // the first block still waits for another stream
  b.Event(Action::kFreeCompleted, kBase, 4096);
  b.Alloc(kBase, 4096);  // now it is back
  b.DumpSegment(
      kBase, 2 * MiB, model::Pool::kSmall,
      {{kBase, 4096, true}, {kBase + 4096, 4096, true}, {kBase + 8192, 2 * MiB - 8192, false}});
  const model::Trace& trace = b.Finish();
  auto r = Replay(trace, 0, ReplayOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->comparison.allocs, 3u);
  EXPECT_EQ(r->comparison.allocs_at_recorded_address, 3u);
  EXPECT_EQ(r->comparison.final_blocks_matched, 3u);
  // Allocated drops at free_requested (event 2), active only at free_completed.
  EXPECT_EQ(r->allocated[2], 0u);
  EXPECT_EQ(r->allocated[3], 4096u);
}

// A divergence is counted once: the model is put back on the recorded placement and the rest of
// the trace matches again.
TEST(SyntheticReplay, DivergenceIsFollowedByResynchronisation) {
  TraceBuilder b;
  b.Event(Action::kSegmentAlloc, kBase, 2 * MiB);
  b.Alloc(kBase + 1 * MiB, 4096);  // not where best fit puts it (the low address)
  // Best fit again: the smaller of the two free blocks, right after the first allocation.
  b.Alloc(kBase + 1 * MiB + 4096, 4096);
  b.DumpSegment(kBase, 2 * MiB, model::Pool::kSmall,
                {{kBase, MiB, false},
                 {kBase + MiB, 4096, true},
                 {kBase + MiB + 4096, 4096, true},
                 {kBase + MiB + 8192, MiB - 8192, false}});
  const model::Trace& trace = b.Finish();
  auto r = Replay(trace, 0, ReplayOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->comparison.allocs_at_recorded_address, 1u);
  EXPECT_EQ(r->comparison.divergence_count, 1u);
  EXPECT_EQ(r->comparison.resyncs, 1u);
  EXPECT_EQ(r->comparison.final_blocks_matched, 4u);
  EXPECT_NE(r->comparison.divergences[0].find("a different cached block was chosen"),
            std::string::npos);
}

TEST(SyntheticReplay, NothingToReplayIsAClearError) {
  TraceBuilder b;
  b.DumpSegment(kBase, 2 * MiB, model::Pool::kSmall, {{kBase, 2 * MiB, false}});
  b.t.devices = {0};
  b.t.device_event_ranges = {{0, 0}};
  auto r = Replay(b.t, 0, ReplayOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no trace events"), std::string::npos);
}

}  // namespace
}  // namespace vramscope::allocator
