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
                   std::vector<std::tuple<uint64_t, uint64_t, bool>> blocks, MemPoolId pool_id = {},
                   uint64_t stream = 0) {
    model::Segment s;
    s.address = addr;
    s.stream = stream;
    s.pool_id[0] = pool_id.first;
    s.pool_id[1] = pool_id.second;
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
  ASSERT_EQ(r->curve.size(), 6u);  // a short trace keeps every event
  EXPECT_EQ(r->curve[2].event, 2);
  EXPECT_EQ(r->curve[2].allocated, 0u);
  EXPECT_EQ(r->curve[3].allocated, 4096u);
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

// --- private pools: hand-worked traces in the shape PyTorch records them
// --------------------------- A graph capture runs on a side stream (here 5) and its requests go to
// a private pool; the trace entries do not name the pool, the dump's segment_pool_id does. Every
// figure below is worked out by hand from the allocator's rules (docs/design/allocator-model.md,
// "Private pools").

constexpr uint64_t kCapture = 5;
constexpr uint64_t kPoolA = kBase + 64 * MiB;
constexpr uint64_t kPoolB = kBase + 128 * MiB;

ReplayResult ReplayPools(const model::Trace& trace, bool follow, PoolMapping pools,
                         uint64_t capacity = kUnlimited) {
  ReplayOptions o;
  o.follow_recording = follow;
  o.pools = pools;
  o.settings.capacity = capacity;
  o.check_invariants = true;
  auto r = Replay(trace, 0, o);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r->invariant_violations.empty()) << r->invariant_violations.front();
  return std::move(r).value();
}

void ExpectExact(const ReplayResult& r) {
  const ReplayComparison& c = r.comparison;
  EXPECT_EQ(c.allocs_at_recorded_address, c.allocs);
  EXPECT_EQ(c.segment_allocs_matched, c.recorded_segment_allocs);
  EXPECT_EQ(c.model_segment_allocs, c.recorded_segment_allocs);
  EXPECT_EQ(c.reserved_equal_points, c.compared_points);
  EXPECT_EQ(c.final_segments_matched, c.final_segments_recorded);
  EXPECT_EQ(c.final_blocks_matched, c.final_blocks_recorded);
  EXPECT_EQ(c.divergence_count, 0u) << (c.divergences.empty() ? "" : c.divergences.front());
}

// Graph 1 and graph 2 are captured with pool=graph_pool_handle() ({0, 1}): graph 2 reuses the
// block graph 1 freed, so the pool holds one 20 MiB segment.
std::unique_ptr<TraceBuilder> TwoGraphsSharingOnePool() {
  auto owner = std::make_unique<TraceBuilder>();
  TraceBuilder& b = *owner;
  b.Event(Action::kSegmentAlloc, kBase, 20 * MiB);  // a static input, default pools
  b.Alloc(kBase, 8 * MiB);
  // graph 1
  b.Event(Action::kSegmentAlloc, kPoolA, 20 * MiB, kCapture);
  b.Alloc(kPoolA, 6 * MiB, kCapture);
  b.Alloc(kPoolA + 6 * MiB, 6 * MiB, kCapture);  // graph 1's output, kept
  b.Free(kPoolA, 6 * MiB, kCapture);
  // graph 2: best fit in the pool is graph 1's freed 6 MiB block (the other free one is 8 MiB);
  // the 2 MiB left is more than 1 MiB, so it is split off.
  b.Alloc(kPoolA, 4 * MiB, kCapture);
  b.DumpSegment(kBase, 20 * MiB, model::Pool::kLarge,
                {{kBase, 8 * MiB, true}, {kBase + 8 * MiB, 12 * MiB, false}});
  b.DumpSegment(kPoolA, 20 * MiB, model::Pool::kLarge,
                {{kPoolA, 4 * MiB, true},
                 {kPoolA + 4 * MiB, 2 * MiB, false},
                 {kPoolA + 6 * MiB, 6 * MiB, true},
                 {kPoolA + 12 * MiB, 8 * MiB, false}},
                {0, 1}, kCapture);
  b.Finish();
  return owner;
}

// The same two graphs with a pool each ({1, 0} and {2, 0}): graph 2 cannot take the block graph 1
// freed and cudaMallocs a segment of its own.
std::unique_ptr<TraceBuilder> TwoGraphsWithTheirOwnPools() {
  auto owner = std::make_unique<TraceBuilder>();
  TraceBuilder& b = *owner;
  b.Event(Action::kSegmentAlloc, kPoolA, 20 * MiB, kCapture);
  b.Alloc(kPoolA, 6 * MiB, kCapture);
  b.Free(kPoolA, 6 * MiB, kCapture);
  b.Event(Action::kSegmentAlloc, kPoolB, 20 * MiB, kCapture);
  b.Alloc(kPoolB, 6 * MiB, kCapture);
  b.DumpSegment(kPoolA, 20 * MiB, model::Pool::kLarge, {{kPoolA, 20 * MiB, false}}, {1, 0},
                kCapture);
  b.DumpSegment(kPoolB, 20 * MiB, model::Pool::kLarge,
                {{kPoolB, 6 * MiB, true}, {kPoolB + 6 * MiB, 14 * MiB, false}}, {2, 0}, kCapture);
  b.Finish();
  return owner;
}

// A MemPool({0, 1}, use_on_oom=True) of 30 MiB, then a default-pool request for 20 MiB that
// cudaMalloc could not serve (the device had no room): PyTorch served it from the pool's cached
// block, with no segment_alloc. Only the address in the pool's segment tells.
std::unique_ptr<TraceBuilder> MemPoolUsedOnOom() {
  auto owner = std::make_unique<TraceBuilder>();
  TraceBuilder& b = *owner;
  b.Event(Action::kSegmentAlloc, kPoolA, 30 * MiB);
  b.Alloc(kPoolA, 30 * MiB);
  b.Free(kPoolA, 30 * MiB);
  b.Alloc(kPoolA, 20 * MiB);
  b.DumpSegment(kPoolA, 30 * MiB, model::Pool::kLarge,
                {{kPoolA, 20 * MiB, true}, {kPoolA + 20 * MiB, 10 * MiB, false}}, {0, 1});
  b.Finish();
  return owner;
}

TEST(PrivatePoolReplay, TwoGraphsSharingOnePoolReplayExactly) {
  const auto built = TwoGraphsSharingOnePool();
  const model::Trace& trace = built->t;
  const ReplayResult r = ReplayPools(trace, true, PoolMapping::kRecorded);
  ExpectExact(r);
  EXPECT_EQ(r.comparison.allocs, 4u);
  EXPECT_EQ(r.stats.reserved, 40 * MiB);
  EXPECT_EQ(r.stats.reserved_private, 20 * MiB);
  ASSERT_EQ(r.pools.size(), 1u);
  EXPECT_EQ(r.pools[0].id, (MemPoolId{0, 1}));
  EXPECT_EQ(r.pools[0].allocations, 3u);
  EXPECT_EQ(r.pools[0].peak_reserved, 20 * MiB);
  EXPECT_EQ(r.pools[0].allocated_at_end, 10 * MiB);
  EXPECT_EQ(r.pools[0].cached_at_end, 10 * MiB);
}

TEST(PrivatePoolReplay, TwoGraphsWithTheirOwnPoolsReplayExactly) {
  const auto built = TwoGraphsWithTheirOwnPools();
  const model::Trace& trace = built->t;
  const ReplayResult r = ReplayPools(trace, true, PoolMapping::kRecorded);
  ExpectExact(r);
  EXPECT_EQ(r.comparison.recorded_segment_allocs, 2u);
  EXPECT_EQ(r.stats.peak_reserved, 40 * MiB);
  ASSERT_EQ(r.pools.size(), 2u);
  EXPECT_EQ(r.pools[0].id, (MemPoolId{1, 0}));
  EXPECT_EQ(r.pools[1].id, (MemPoolId{2, 0}));
  EXPECT_EQ(r.pools[0].peak_reserved, 20 * MiB);
  EXPECT_EQ(r.pools[1].peak_reserved, 20 * MiB);
}

// Without pool inference the second capture would have reused the first one's block: a
// divergence. That is what the pools are for.
TEST(PrivatePoolReplay, IgnoringThePoolsDiverges) {
  const auto built = TwoGraphsWithTheirOwnPools();
  const model::Trace& trace = built->t;
  const ReplayResult r = ReplayPools(trace, true, PoolMapping::kNone);
  EXPECT_EQ(r.comparison.allocs_at_recorded_address, 1u);
  EXPECT_GT(r.comparison.divergence_count, 0u);
}

// What-ifs: sharing one pool saves graph 2's segment (40 -> 20 MiB); dropping the graphs too
// (their requests go to the default pools on the capture stream, where graph 1's block is free).
TEST(PrivatePoolReplay, WhatIfSharingOrDroppingThePools) {
  const auto built = TwoGraphsWithTheirOwnPools();
  const model::Trace& trace = built->t;
  const ReplayResult recorded = ReplayPools(trace, false, PoolMapping::kRecorded);
  EXPECT_EQ(recorded.stats.peak_reserved, 40 * MiB);
  EXPECT_EQ(recorded.stats.peak_reserved_private, 40 * MiB);
  const ReplayResult shared = ReplayPools(trace, false, PoolMapping::kShared);
  EXPECT_EQ(shared.stats.peak_reserved, 20 * MiB);
  ASSERT_EQ(shared.pools.size(), 1u);
  EXPECT_EQ(shared.pools[0].allocations, 2u);
  const ReplayResult none = ReplayPools(trace, false, PoolMapping::kNone);
  EXPECT_EQ(none.stats.peak_reserved, 20 * MiB);
  EXPECT_EQ(none.stats.reserved_private, 0u);
  EXPECT_TRUE(none.pools.empty());
}

TEST(PrivatePoolReplay, SharedPoolWhatIfOfAlreadySharedPoolChangesNothing) {
  const auto built = TwoGraphsSharingOnePool();
  const model::Trace& trace = built->t;
  const ReplayResult shared = ReplayPools(trace, false, PoolMapping::kShared);
  EXPECT_EQ(shared.stats.peak_reserved, 40 * MiB);
  // Without the pool, graph 1's and graph 2's requests on the capture stream still cannot use
  // the default stream's cached 12 MiB: a 20 MiB segment on stream 5 either way.
  const ReplayResult none = ReplayPools(trace, false, PoolMapping::kNone);
  EXPECT_EQ(none.stats.peak_reserved, 40 * MiB);
}

TEST(PrivatePoolReplay, MemPoolUsedOnOomReplaysExactly) {
  const auto built = MemPoolUsedOnOom();
  const model::Trace& trace = built->t;
  const ReplayResult r = ReplayPools(trace, true, PoolMapping::kRecorded);
  ExpectExact(r);
  EXPECT_EQ(r.comparison.recorded_segment_allocs, 1u);
  EXPECT_EQ(r.stats.reserved, 30 * MiB);
  ASSERT_EQ(r.pools.size(), 1u);
  EXPECT_EQ(r.pools[0].allocations, 2u);
  EXPECT_EQ(r.pools[0].allocated_at_end, 20 * MiB);
  // Without the MemPool every request is the default pools': the freed 30 MiB block serves the
  // 20 MiB request (split, 10 MiB left): still 30 MiB reserved.
  const ReplayResult none = ReplayPools(trace, false, PoolMapping::kNone);
  EXPECT_EQ(none.stats.peak_reserved, 30 * MiB);
}

}  // namespace
}  // namespace vramscope::allocator
