// One test (or a small group) per rule of PyTorch's CUDA caching allocator, each built from the
// rule's own boundary cases. The rules are summarised in the project's allocator policy
// (shared/spec/allocator-policy.md); sizes below are exact byte counts, addresses come from a
// scripted address source so that every placement can be asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <deque>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "allocator/allocator_settings.h"
#include "allocator/caching_allocator.h"

namespace vramscope::allocator {

bool operator==(const SegmentEvent& a, const SegmentEvent& b) {
  return a.action == b.action && a.pool == b.pool && a.addr == b.addr && a.size == b.size &&
         a.stream == b.stream;
}
void PrintTo(const SegmentEvent& e, std::ostream* os) {
  *os << SegmentActionName(e.action) << "(" << PoolName(e.pool) << ", addr=0x" << std::hex << e.addr
      << std::dec << ", size=" << e.size << ", stream=" << e.stream << ")";
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using State = BlockView::State;

constexpr uint64_t MiB = kMiB;
constexpr uint64_t GiB = 1024 * kMiB;

// Hands out addresses deterministically: queued addresses first, then a bump pointer from `base`
// (never reusing released ranges, so every new segment has a fresh, predictable address). Records
// every request and release.
class ScriptedAddresses : public SegmentAddressSource {
 public:
  struct Request {
    uint64_t size;
    uint64_t stream;
    Pool pool;
    bool operator==(const Request&) const = default;
  };
  explicit ScriptedAddresses(uint64_t base) : next_(base) {}
  void Queue(uint64_t addr) { queued_.push_back(addr); }
  uint64_t NewSegment(uint64_t size, uint64_t stream, Pool pool) override {
    requests.push_back({size, stream, pool});
    if (!queued_.empty()) {
      const uint64_t addr = queued_.front();
      queued_.pop_front();
      return addr;
    }
    const uint64_t addr = next_;
    next_ += (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    return addr;
  }
  void FreeSegment(uint64_t addr, uint64_t size) override { frees.emplace_back(addr, size); }

  std::vector<Request> requests;
  std::vector<std::pair<uint64_t, uint64_t>> frees;

 private:
  uint64_t next_;
  std::deque<uint64_t> queued_;
};

constexpr uint64_t kBase = uint64_t{1} << 32;  // first address the scripted source hands out

SegmentEvent Ev(SegmentAction action, Pool pool, uint64_t addr, uint64_t size,
                uint64_t stream = 0) {
  return {action, pool, addr, size, stream};
}
SegmentEvent SegAlloc(Pool pool, uint64_t addr, uint64_t size, uint64_t stream = 0) {
  return Ev(SegmentAction::kAlloc, pool, addr, size, stream);
}
SegmentEvent SegFree(Pool pool, uint64_t addr, uint64_t size, uint64_t stream = 0) {
  return Ev(SegmentAction::kFree, pool, addr, size, stream);
}
constexpr Pool kSmall = Pool::kSmall;
constexpr Pool kLarge = Pool::kLarge;

AllocatorSettings Divisions(std::initializer_list<std::pair<size_t, uint32_t>> buckets) {
  AllocatorSettings s;
  for (const auto& [bucket, d] : buckets) s.roundup_power2_divisions[bucket] = d;
  return s;
}
AllocatorSettings AllDivisions(uint32_t d) {
  AllocatorSettings s;
  s.roundup_power2_divisions.fill(d);
  return s;
}

// A test with one allocator over a scripted address source; every test ends by checking the
// model's invariants.
class AllocatorTest : public ::testing::Test {
 protected:
  void Make(const AllocatorSettings& settings) {
    alloc_ = std::make_unique<CachingAllocator>(settings, &addrs_);
  }
  void TearDown() override {
    if (alloc_) ExpectInvariants();
  }
  void ExpectInvariants() { EXPECT_THAT(alloc_->CheckInvariants(), IsEmpty()); }

  // Malloc that must succeed; returns the block.
  MallocResult M(uint64_t size, uint64_t stream = 0) {
    const MallocResult r = alloc_->Malloc(size, stream);
    EXPECT_TRUE(r.ok()) << "malloc of " << size << " on stream " << stream;
    return r;
  }
  // The segment events since the last call.
  std::vector<SegmentEvent> Drain() {
    std::vector<SegmentEvent> out;
    out.swap(alloc_->segment_events());
    return out;
  }
  const AllocatorStats& Stats() const { return alloc_->stats(); }
  // (addr, size, state) of every block of the segment that contains `addr`.
  std::vector<std::tuple<uint64_t, uint64_t, State>> BlocksOf(uint64_t addr) const {
    std::vector<std::tuple<uint64_t, uint64_t, State>> out;
    for (const SegmentView& s : alloc_->Segments()) {
      if (addr < s.addr || addr >= s.addr + s.size) continue;
      for (const BlockView& b : s.blocks) out.emplace_back(b.addr, b.size, b.state);
    }
    return out;
  }

  ScriptedAddresses addrs_{kBase};
  std::unique_ptr<CachingAllocator> alloc_;
};

// --- round_size ---------------------------------------------------------------------------------

TEST(RoundSize, BelowMinimumBlockIs512) {
  EXPECT_EQ(RoundSize(1, {}), 512u);
  EXPECT_EQ(RoundSize(511, {}), 512u);
}

TEST(RoundSize, MultiplesOf512StayAndOthersRoundUp) {
  EXPECT_EQ(RoundSize(512, {}), 512u);
  EXPECT_EQ(RoundSize(513, {}), 1024u);
  EXPECT_EQ(RoundSize(1024, {}), 1024u);
  EXPECT_EQ(RoundSize(1025, {}), 1536u);
  EXPECT_EQ(RoundSize(10 * MiB + 1, {}), 10 * MiB + 512);
}

TEST(RoundSize, PowerTwoDivisionsRoundToTheNextStep) {
  const AllocatorSettings d4 = AllDivisions(4);
  // 1.3 MiB: the steps between 1 MiB and 2 MiB are 256 KiB, so 1.25 MiB < size -> 1.5 MiB.
  EXPECT_EQ(RoundSize(MiB + 300 * 1024, d4), MiB + 512 * 1024);
  // A size on a step stays, and so does a power of two.
  EXPECT_EQ(RoundSize(MiB + 256 * 1024, d4), MiB + 256 * 1024);
  EXPECT_EQ(RoundSize(2 * MiB, d4), 2 * MiB);
  EXPECT_EQ(RoundSize(64 * MiB, d4), 64 * MiB);
  // 40 MiB + 1 with 4 divisions: steps of 8 MiB above 32 MiB -> 48 MiB.
  EXPECT_EQ(RoundSize(40 * MiB + 1, d4), 48 * MiB);
}

TEST(RoundSize, DivisionsOnlyAboveFiveTwelveTimesD) {
  const AllocatorSettings d4 = AllDivisions(4);
  // 1200 <= 512*4: plain 512 rounding (1536), not the next quarter step (1280).
  EXPECT_EQ(RoundSize(1200, d4), 1536u);
  // size == 512*d exactly uses the plain rule (and is a power of two anyway).
  EXPECT_EQ(RoundSize(2048, d4), 2048u);
  EXPECT_EQ(RoundSize(2049, d4), 2560u);
  // Where it shows: 4096 divisions of [1 MiB, 2 MiB) are 256 B steps, but 512*4096 = 2 MiB is
  // above every size of that bucket, so sizes stay multiples of 512.
  const AllocatorSettings d4096 = AllDivisions(4096);
  EXPECT_EQ(RoundSize(MiB + 300 * 1024 + 100, d4096), MiB + 300 * 1024 + 512);
}

TEST(RoundSize, DivisionsBucketIsLog2MinusTwentyClamped) {
  // Bucket 0 covers every size below 2 MiB, sub-MiB sizes included.
  const AllocatorSettings b0 = Divisions({{0, 4}});
  EXPECT_EQ(RoundSize(600 * 1024 + 1, b0), 640u * 1024);  // steps of 128 KiB above 512 KiB
  EXPECT_EQ(RoundSize(3 * MiB + 1, b0), 3 * MiB + 512);   // bucket 1: no divisions
  const AllocatorSettings b1 = Divisions({{1, 2}});
  EXPECT_EQ(RoundSize(600 * 1024 + 1, b1), 600u * 1024 + 512);  // bucket 0: none
  EXPECT_EQ(RoundSize(MiB + 300 * 1024, b1), MiB + 300 * 1024);
  EXPECT_EQ(RoundSize(3 * MiB + 1, b1), 4 * MiB);  // [2 MiB, 4 MiB) in halves
  // Bucket 15 covers every size from 32 GiB up.
  const AllocatorSettings b15 = Divisions({{15, 2}});
  EXPECT_EQ(RoundSize(48 * GiB + 1, b15), 64 * GiB);
  EXPECT_EQ(RoundSize(100 * GiB, b15), 128 * GiB);          // log2 = 36, clamped to 15
  EXPECT_EQ(RoundSize(20 * GiB + 1, b15), 20 * GiB + 512);  // bucket 14: none
}

TEST(RoundSize, OneDivisionIsPlainRounding) {
  EXPECT_EQ(RoundSize(MiB + 300 * 1024 + 1, AllDivisions(1)), MiB + 300 * 1024 + 512);
}

// --- get_allocation_size ------------------------------------------------------------------------

TEST(SegmentSizeFor, SmallRequestsGetTwoMiB) {
  EXPECT_EQ(SegmentSizeFor(512), 2 * MiB);
  EXPECT_EQ(SegmentSizeFor(MiB), 2 * MiB);
}

TEST(SegmentSizeFor, BelowTenMiBGetsTwentyMiB) {
  EXPECT_EQ(SegmentSizeFor(MiB + 512), 20 * MiB);
  EXPECT_EQ(SegmentSizeFor(10 * MiB - 512), 20 * MiB);
}

TEST(SegmentSizeFor, FromTenMiBRoundsToTwoMiB) {
  EXPECT_EQ(SegmentSizeFor(10 * MiB), 10 * MiB);
  EXPECT_EQ(SegmentSizeFor(RoundSize(10 * MiB + 1, {})), 12 * MiB);
  EXPECT_EQ(SegmentSizeFor(12 * MiB), 12 * MiB);
}

TEST_F(AllocatorTest, MallocCudaMallocsTheSegmentSize) {
  Make({});
  const MallocResult r = M(10 * MiB + 1);
  EXPECT_TRUE(r.new_segment);
  EXPECT_EQ(r.addr, kBase);
  EXPECT_EQ(r.size, 10 * MiB + 512);  // 2 MiB - 512 left over > 1 MiB: split
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 12 * MiB)));
  EXPECT_EQ(Stats().reserved, 12 * MiB);
  EXPECT_EQ(Stats().allocated, 10 * MiB + 512);
  EXPECT_EQ(Stats().requested, 10 * MiB + 1);
}

// --- pools --------------------------------------------------------------------------------------

TEST(Pools, RoundedSizeUpToOneMiBIsSmall) {
  EXPECT_EQ(PoolFor(512), Pool::kSmall);
  EXPECT_EQ(PoolFor(MiB), Pool::kSmall);
  EXPECT_EQ(PoolFor(MiB + 512), Pool::kLarge);
}

TEST_F(AllocatorTest, PoolsByRoundedSize) {
  Make({});
  M(MiB);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kSmall, kBase, 2 * MiB)));
  M(MiB + 1);  // rounds to 1 MiB + 512: large
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase + 2 * MiB, 20 * MiB)));
  // The small segment's remaining 1 MiB serves a small request, never a large one.
  const MallocResult small = M(MiB);
  EXPECT_FALSE(small.new_segment);
  EXPECT_EQ(small.addr, kBase + MiB);
  EXPECT_EQ(Stats().reserved, 22 * MiB);
}

TEST_F(AllocatorTest, StreamsNeverShareCachedBlocks) {
  Make({});
  const MallocResult a = M(1000, /*stream=*/1);
  alloc_->Free(a.block);
  Drain();
  const MallocResult b = M(1000, /*stream=*/2);
  EXPECT_TRUE(b.new_segment);
  EXPECT_EQ(b.addr, kBase + 2 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kSmall, kBase + 2 * MiB, 2 * MiB, 2)));
  EXPECT_EQ(Stats().reserved, 4 * MiB);
  // Stream 1 still gets its own cached block back.
  const MallocResult c = M(1000, /*stream=*/1);
  EXPECT_FALSE(c.new_segment);
  EXPECT_EQ(c.addr, kBase);
  EXPECT_THAT(Drain(), IsEmpty());
}

// --- best fit -----------------------------------------------------------------------------------

TEST_F(AllocatorTest, BestFitTakesTheSmallestBlockThatFits) {
  Make({});
  constexpr uint64_t A = 0x10000000, B = 0x40000000, C = 0x20000000, D = 0x30000000;
  constexpr uint64_t E = 0x08000000;
  alloc_->AddSegment(A, 30 * MiB, 0, kLarge);
  alloc_->AddSegment(B, 24 * MiB, 0, kLarge);
  alloc_->AddSegment(C, 24 * MiB, 0, kLarge);
  alloc_->AddSegment(D, 22 * MiB, 0, kLarge);
  alloc_->AddSegment(E, 22 * MiB, 1, kLarge);  // another stream, lower address: never used
  EXPECT_EQ(M(21 * MiB).addr, D);
  // Ties (two 24 MiB blocks) go to the lower address, not the segment added first.
  EXPECT_EQ(M(23 * MiB).addr, C);
  EXPECT_EQ(M(23 * MiB).addr, B);
  const MallocResult a = M(25 * MiB);
  EXPECT_EQ(a.addr, A);
  EXPECT_EQ(a.size, 25 * MiB);
  EXPECT_THAT(BlocksOf(A), ElementsAre(std::tuple(A, 25 * MiB, State::kAllocated),
                                       std::tuple(A + 25 * MiB, 5 * MiB, State::kFree)));
  EXPECT_THAT(Drain(), IsEmpty());
  EXPECT_TRUE(addrs_.requests.empty());
  // Nothing of stream 0 fits 21 MiB any more: a new segment, although stream 1 has one.
  const MallocResult n = M(21 * MiB);
  EXPECT_TRUE(n.new_segment);
  EXPECT_EQ(n.addr, kBase);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 22 * MiB)));
}

TEST_F(AllocatorTest, BestFitTieBetweenCudaMallocedSegmentsGoesToLowerAddress) {
  Make({});
  addrs_.Queue(0x200000000);
  addrs_.Queue(0x100000000);
  const MallocResult high = M(11 * MiB);  // 12 MiB segments, 1 MiB left: not split
  const MallocResult low = M(11 * MiB);
  EXPECT_EQ(high.addr, 0x200000000u);
  EXPECT_EQ(low.addr, 0x100000000u);
  alloc_->Free(high.block);
  alloc_->Free(low.block);
  EXPECT_EQ(alloc_->FreeBlockCount(), 2u);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, 0x200000000, 12 * MiB),
                                   SegAlloc(kLarge, 0x100000000, 12 * MiB)));
  EXPECT_EQ(M(5 * MiB).addr, 0x100000000u);            // tie: the lower address
  EXPECT_EQ(M(5 * MiB).addr, 0x100000000u + 5 * MiB);  // the 7 MiB remainder now fits best
  EXPECT_THAT(Drain(), IsEmpty());
}

// --- split rules --------------------------------------------------------------------------------

TEST_F(AllocatorTest, SmallPoolSplitsARemainderOf512) {
  Make({});
  const MallocResult a = M(MiB);
  EXPECT_EQ(a.size, MiB);
  const MallocResult b = M(MiB - 512);  // takes the 1 MiB remainder; 512 left: split
  EXPECT_EQ(b.addr, kBase + MiB);
  EXPECT_EQ(b.size, MiB - 512);
  EXPECT_THAT(BlocksOf(kBase),
              ElementsAre(std::tuple(kBase, MiB, State::kAllocated),
                          std::tuple(kBase + MiB, MiB - 512, State::kAllocated),
                          std::tuple(kBase + 2 * MiB - 512, uint64_t{512}, State::kFree)));
  const MallocResult c = M(1);  // exact fit: remainder 0, nothing to split
  EXPECT_EQ(c.addr, kBase + 2 * MiB - 512);
  EXPECT_EQ(c.size, 512u);
  EXPECT_EQ(alloc_->FreeBlockCount(), 0u);
  EXPECT_EQ(Stats().allocated, 2 * MiB);
  EXPECT_EQ(Stats().requested, 2 * MiB - 511);
  EXPECT_EQ(Stats().cuda_mallocs, 1u);
}

TEST_F(AllocatorTest, LargePoolRemainderOfExactlyOneMiBIsNotSplit) {
  Make({});
  const MallocResult r = M(19 * MiB);  // 20 MiB segment, 1 MiB left
  EXPECT_EQ(r.size, 20 * MiB);
  EXPECT_EQ(Stats().allocated, 20 * MiB);
  EXPECT_EQ(Stats().requested, 19 * MiB);
  EXPECT_EQ(alloc_->FreeBlockCount(), 0u);
  EXPECT_THAT(BlocksOf(kBase), ElementsAre(std::tuple(kBase, 20 * MiB, State::kAllocated)));
}

TEST_F(AllocatorTest, LargePoolRemainderAboveOneMiBIsSplit) {
  Make({});
  const MallocResult r = M(19 * MiB - 512);  // 1 MiB + 512 left
  EXPECT_EQ(r.size, 19 * MiB - 512);
  EXPECT_EQ(Stats().allocated, 19 * MiB - 512);
  EXPECT_THAT(BlocksOf(kBase),
              ElementsAre(std::tuple(kBase, 19 * MiB - 512, State::kAllocated),
                          std::tuple(kBase + 19 * MiB - 512, MiB + 512, State::kFree)));
}

TEST_F(AllocatorTest, RequestAtMaxSplitSizeIsNeverSplit) {
  AllocatorSettings s;
  s.max_split_size = 40 * MiB;
  Make(s);
  constexpr uint64_t X = 0x10000000;
  alloc_->AddSegment(X, 50 * MiB, 0, kLarge);
  const MallocResult r = M(40 * MiB);  // 50 < 40 + 20: taken whole, 10 MiB unsplit
  EXPECT_EQ(r.addr, X);
  EXPECT_EQ(r.size, 50 * MiB);
  EXPECT_FALSE(r.new_segment);
  EXPECT_EQ(Stats().allocated, 50 * MiB);
  EXPECT_EQ(alloc_->FreeBlockCount(), 0u);
  // The same 1 MiB + 512 remainder of a new segment is split below max_split_size, not at it.
  const MallocResult below = M(37 * MiB - 512);
  EXPECT_EQ(below.size, 37 * MiB - 512);
  const MallocResult at = M(41 * MiB - 512);
  EXPECT_EQ(at.size, 42 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 38 * MiB),
                                   SegAlloc(kLarge, kBase + 38 * MiB, 42 * MiB)));
}

TEST_F(AllocatorTest, ExpandableSegmentsSplitLargeBlocksAt512) {
  AllocatorSettings s;
  s.expandable_segments = true;
  s.total_memory = GiB;
  Make(s);
  const MallocResult r = M(20 * MiB - 512);  // one 20 MiB page, 512 left: split
  EXPECT_EQ(r.size, 20 * MiB - 512);
  EXPECT_EQ(Stats().allocated, 20 * MiB - 512);
  EXPECT_EQ(Stats().reserved, 20 * MiB);
  EXPECT_THAT(BlocksOf(kBase),
              ElementsAre(std::tuple(kBase, 20 * MiB - 512, State::kAllocated),
                          std::tuple(kBase + 20 * MiB - 512, uint64_t{512}, State::kFree)));
}

TEST_F(AllocatorTest, ExpandableSegmentsFlagSplitsOrdinaryLargeBlocksToo) {
  AllocatorSettings s;
  s.expandable_segments = true;
  s.total_memory = GiB;
  Make(s);
  constexpr uint64_t X = 0x10000000;
  alloc_->AddSegment(X, 20 * MiB, 0, kLarge);  // a cudaMalloc'ed segment from before
  const MallocResult r = M(20 * MiB - 512);
  EXPECT_EQ(r.addr, X);
  EXPECT_EQ(r.size, 20 * MiB - 512);
  EXPECT_THAT(BlocksOf(X),
              ElementsAre(std::tuple(X, 20 * MiB - 512, State::kAllocated),
                          std::tuple(X + 20 * MiB - 512, uint64_t{512}, State::kFree)));
}

// --- free and merging ---------------------------------------------------------------------------

TEST_F(AllocatorTest, FreeMergesWithFreeNeighboursKeepingTheLowerAddress) {
  Make({});
  const MallocResult a = M(1000);
  const MallocResult b = M(1000);
  const MallocResult c = M(1000);
  EXPECT_EQ(b.addr, kBase + 1024);
  EXPECT_EQ(c.addr, kBase + 2048);
  alloc_->Free(b.block);  // both neighbours allocated: no merge
  EXPECT_THAT(BlocksOf(kBase),
              ElementsAre(std::tuple(kBase, uint64_t{1024}, State::kAllocated),
                          std::tuple(kBase + 1024, uint64_t{1024}, State::kFree),
                          std::tuple(kBase + 2048, uint64_t{1024}, State::kAllocated),
                          std::tuple(kBase + 3072, 2 * MiB - 3072, State::kFree)));
  alloc_->Free(a.block);  // merges with its next neighbour
  EXPECT_THAT(BlocksOf(kBase),
              ElementsAre(std::tuple(kBase, 2048, State::kFree),
                          std::tuple(kBase + 2048, uint64_t{1024}, State::kAllocated),
                          std::tuple(kBase + 3072, 2 * MiB - 3072, State::kFree)));
  alloc_->Free(c.block);  // merges with both
  EXPECT_THAT(BlocksOf(kBase), ElementsAre(std::tuple(kBase, 2 * MiB, State::kFree)));
  EXPECT_EQ(alloc_->FreeBlockCount(), 1u);
  EXPECT_EQ(Stats().allocated, 0u);
  EXPECT_EQ(Stats().active, 0u);
  EXPECT_EQ(Stats().reserved, 2 * MiB);  // freeing never returns a segment
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kSmall, kBase, 2 * MiB)));
}

TEST_F(AllocatorTest, NoMergeWithPendingFreeNeighbour) {
  Make({});
  const MallocResult a = M(1000);
  const MallocResult b = M(1000);
  alloc_->FreeRequested(a.block);
  alloc_->Free(b.block);  // merges with the free remainder, not with the pending block
  EXPECT_THAT(BlocksOf(kBase), ElementsAre(std::tuple(kBase, uint64_t{1024}, State::kPendingFree),
                                           std::tuple(kBase + 1024, 2 * MiB - 1024, State::kFree)));
  alloc_->FreeCompleted(a.block);
  EXPECT_THAT(BlocksOf(kBase), ElementsAre(std::tuple(kBase, 2 * MiB, State::kFree)));
}

// --- max_split_size / max_non_split_rounding ----------------------------------------------------

class MaxSplitTest : public AllocatorTest {
 protected:
  static constexpr uint64_t X = 0x10000000;
  void MakeWith(uint64_t non_split_rounding = kLargeBuffer) {
    AllocatorSettings s;
    s.max_split_size = 40 * MiB;
    s.max_non_split_rounding = non_split_rounding;
    Make(s);
  }
};

TEST_F(MaxSplitTest, SmallerRequestNeverTakesAnOversizeBlock) {
  MakeWith();
  alloc_->AddSegment(X, 40 * MiB, 0, kLarge);  // the only cached block, exactly max_split_size
  const MallocResult r = M(30 * MiB);
  EXPECT_TRUE(r.new_segment);
  EXPECT_EQ(r.addr, kBase);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 30 * MiB)));
  EXPECT_THAT(BlocksOf(X), ElementsAre(std::tuple(X, 40 * MiB, State::kFree)));
}

TEST_F(MaxSplitTest, SmallerRequestTakesABlockJustBelowMaxSplit) {
  MakeWith();
  alloc_->AddSegment(X, 40 * MiB - 512, 0, kLarge);
  const MallocResult r = M(39 * MiB);  // 1 MiB - 512 left: not split
  EXPECT_EQ(r.addr, X);
  EXPECT_EQ(r.size, 40 * MiB - 512);
  EXPECT_THAT(Drain(), IsEmpty());
}

TEST_F(MaxSplitTest, OversizeRequestRefusesBlockAtRequestPlusTwentyMiB) {
  MakeWith();
  alloc_->AddSegment(X, 60 * MiB, 0, kLarge);
  const MallocResult r = M(40 * MiB);  // 60 >= 40 + 20: refused
  EXPECT_TRUE(r.new_segment);
  EXPECT_EQ(r.addr, kBase);
  EXPECT_EQ(r.size, 40 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 40 * MiB)));
}

TEST_F(MaxSplitTest, OversizeRequestTakesBlockBelowRequestPlusTwentyMiB) {
  MakeWith();
  alloc_->AddSegment(X, 60 * MiB - 512, 0, kLarge);
  const MallocResult r = M(40 * MiB);
  EXPECT_FALSE(r.new_segment);
  EXPECT_EQ(r.addr, X);
  EXPECT_EQ(r.size, 60 * MiB - 512);  // the whole block, unsplit
  EXPECT_EQ(Stats().allocated, 60 * MiB - 512);
  EXPECT_EQ(Stats().requested, 40 * MiB);
  EXPECT_THAT(Drain(), IsEmpty());
}

TEST_F(MaxSplitTest, MaxNonSplitRoundingMovesTheBound) {
  MakeWith(/*non_split_rounding=*/30 * MiB);
  alloc_->AddSegment(X, 70 * MiB - 512, 0, kLarge);
  alloc_->AddSegment(X + 128 * MiB, 70 * MiB, 1, kLarge);
  const MallocResult taken = M(40 * MiB, 0);
  EXPECT_EQ(taken.addr, X);
  EXPECT_EQ(taken.size, 70 * MiB - 512);
  const MallocResult refused = M(40 * MiB, 1);  // 70 >= 40 + 30
  EXPECT_TRUE(refused.new_segment);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 40 * MiB, 1)));
}

// --- cudaMalloc failure: release cached segments and retry --------------------------------------

TEST_F(AllocatorTest, FailedCudaMallocReleasesUnsplitCachedSegmentsAndRetries) {
  AllocatorSettings s;
  s.capacity = 60 * MiB;
  Make(s);
  const MallocResult split = M(5 * MiB);  // 20 MiB segment, split: never released
  const MallocResult a = M(20 * MiB);
  const MallocResult b = M(20 * MiB);
  EXPECT_EQ(a.addr, kBase + 20 * MiB);
  EXPECT_EQ(b.addr, kBase + 40 * MiB);
  alloc_->Free(a.block);
  alloc_->Free(b.block);
  Drain();
  EXPECT_EQ(Stats().reserved, 60 * MiB);

  const MallocResult r = M(30 * MiB);  // 60 + 30 > 60: release A and B, then 20 + 30 fits
  EXPECT_TRUE(r.new_segment);
  EXPECT_EQ(r.addr, kBase + 60 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase + 20 * MiB, 20 * MiB),
                                   SegFree(kLarge, kBase + 40 * MiB, 20 * MiB),
                                   SegAlloc(kLarge, kBase + 60 * MiB, 30 * MiB)));
  EXPECT_EQ(Stats().alloc_retries, 1u);
  EXPECT_EQ(Stats().cuda_frees, 2u);
  EXPECT_EQ(Stats().reserved, 50 * MiB);
  EXPECT_EQ(Stats().ooms, 0u);
  EXPECT_THAT(addrs_.frees, ElementsAre(std::pair(kBase + 20 * MiB, 20 * MiB),
                                        std::pair(kBase + 40 * MiB, 20 * MiB)));
  EXPECT_THAT(BlocksOf(split.addr),
              ElementsAre(std::tuple(kBase, 5 * MiB, State::kAllocated),
                          std::tuple(kBase + 5 * MiB, 15 * MiB, State::kFree)));

  // Still no room: the split segment stays, and the request fails with an OOM event.
  const MallocResult oom = alloc_->Malloc(16 * MiB, 0);
  EXPECT_FALSE(oom.ok());
  EXPECT_THAT(Drain(), ElementsAre(Ev(SegmentAction::kOom, kLarge, 10 * MiB, 16 * MiB)));
  EXPECT_EQ(Stats().alloc_retries, 2u);
  EXPECT_EQ(Stats().ooms, 1u);
  EXPECT_EQ(Stats().reserved, 50 * MiB);
  EXPECT_EQ(Stats().allocated, 35 * MiB);
}

TEST_F(AllocatorTest, OomEventCarriesTheRoundedRequest) {
  AllocatorSettings s;
  s.capacity = 30 * MiB;
  Make(s);
  M(20 * MiB);
  Drain();
  EXPECT_FALSE(alloc_->Malloc(10 * MiB + 1, 0).ok());  // 12 MiB segment, 10 MiB free
  EXPECT_THAT(Drain(), ElementsAre(Ev(SegmentAction::kOom, kLarge, 10 * MiB, 10 * MiB + 512)));
  // A segment that fits exactly is fine.
  EXPECT_TRUE(alloc_->Malloc(10 * MiB, 0).ok());
  EXPECT_EQ(Stats().reserved, 30 * MiB);
}

TEST_F(AllocatorTest, RetryCompletesPendingFreesFirst) {
  AllocatorSettings s;
  s.capacity = 40 * MiB;
  Make(s);
  const MallocResult a = M(20 * MiB);
  alloc_->FreeRequested(a.block);  // waits for another stream
  Drain();
  const MallocResult r = M(30 * MiB);
  EXPECT_FALSE(alloc_->IsPendingFree(a.block));
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase, 20 * MiB),
                                   SegAlloc(kLarge, kBase + 20 * MiB, 30 * MiB)));
  EXPECT_EQ(r.addr, kBase + 20 * MiB);
  EXPECT_EQ(Stats().alloc_retries, 1u);
  EXPECT_EQ(Stats().active, 30 * MiB);
}

// --- release_available_cached_blocks (max_split_size set) ---------------------------------------

class OversizeReleaseTest : public AllocatorTest {
 protected:
  void MakeWith(uint64_t capacity) {
    AllocatorSettings s;
    s.max_split_size = 24 * MiB;
    s.capacity = capacity;
    Make(s);
  }
};

TEST_F(OversizeReleaseTest, ReleasesOneOversizeBlockLargeEnough) {
  MakeWith(90 * MiB);
  const MallocResult a = M(30 * MiB);
  const MallocResult b = M(50 * MiB);
  M(10 * MiB);
  alloc_->Free(a.block);
  alloc_->Free(b.block);
  Drain();
  // 10 MiB < max_split may not take the oversize blocks; no room for a segment; the smallest
  // oversize block of at least max(10, 24) MiB goes, and nothing else.
  const MallocResult r = M(10 * MiB);
  EXPECT_TRUE(r.new_segment);
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase, 30 * MiB),
                                   SegAlloc(kLarge, kBase + 90 * MiB, 10 * MiB)));
  EXPECT_EQ(Stats().oversize_releases, 1u);
  EXPECT_EQ(Stats().alloc_retries, 0u);
  EXPECT_THAT(alloc_->ReleasableSegments(), ElementsAre(std::pair(kBase + 30 * MiB, 50 * MiB)));
}

TEST_F(OversizeReleaseTest, ReleasesOversizeBlocksLargestFirstUntilEnough) {
  MakeWith(100 * MiB);
  const MallocResult a = M(30 * MiB);
  const MallocResult b = M(50 * MiB);
  M(20 * MiB);  // below max_split: stays
  alloc_->Free(a.block);
  alloc_->Free(b.block);
  Drain();
  const MallocResult r = M(60 * MiB);
  EXPECT_TRUE(r.new_segment);
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase + 30 * MiB, 50 * MiB),
                                   SegFree(kLarge, kBase, 30 * MiB),
                                   SegAlloc(kLarge, kBase + 100 * MiB, 60 * MiB)));
  EXPECT_EQ(Stats().oversize_releases, 2u);
  EXPECT_EQ(Stats().alloc_retries, 0u);
  EXPECT_EQ(Stats().reserved, 80 * MiB);
}

TEST_F(OversizeReleaseTest, NotEnoughReleasedStaysReleasedThenOom) {
  MakeWith(100 * MiB);
  const MallocResult a = M(30 * MiB);
  const MallocResult b = M(50 * MiB);
  M(20 * MiB);
  alloc_->Free(a.block);
  alloc_->Free(b.block);
  Drain();
  EXPECT_FALSE(alloc_->Malloc(90 * MiB, 0).ok());
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase + 30 * MiB, 50 * MiB),
                                   SegFree(kLarge, kBase, 30 * MiB),
                                   Ev(SegmentAction::kOom, kLarge, 80 * MiB, 90 * MiB)));
  EXPECT_EQ(Stats().oversize_releases, 2u);
  EXPECT_EQ(Stats().alloc_retries, 1u);
  EXPECT_EQ(Stats().reserved, 20 * MiB);
}

// --- garbage collection
// ---------------------------------------------------------------------------

class GarbageCollectionTest : public AllocatorTest {
 protected:
  // Allowed: 0.5 x 200 MiB = 100 MiB; threshold 0.5 -> collect above 50 MiB reserved.
  void Run(bool with_fraction) {
    AllocatorSettings s;
    s.garbage_collection_threshold = 0.5;
    if (with_fraction) {
      s.memory_fraction = 0.5;
      s.total_memory = 200 * MiB;
    } else {
      s.capacity = 100 * MiB;
    }
    Make(s);
    const MallocResult small = M(1000);  // small pool: never collected
    alloc_->Free(small.block);
    const MallocResult a = M(20 * MiB);  // large search 1
    const MallocResult b = M(22 * MiB);  // large search 2
    alloc_->Free(a.block);               // A and B become free at search 2
    alloc_->Free(b.block);
    Drain();
    // Large search 3: 44 MiB reserved, below the threshold: nothing collected.
    const MallocResult c = M(24 * MiB);
    EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase + 44 * MiB, 24 * MiB)));
    alloc_->Free(c.block);  // C becomes free at search 3
    // Large search 4: ages A 2, B 2, C 1 (mean 5/3).
    M(26 * MiB);
  }
};

TEST_F(GarbageCollectionTest, ReleasesOldUnsplitLargeBlocksAboveThreshold) {
  Run(/*with_fraction=*/true);
  // 68 MiB reserved > 50: the blocks at least as old as the mean (A, B) go; C stays.
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase + 2 * MiB, 20 * MiB),
                                   SegFree(kLarge, kBase + 22 * MiB, 22 * MiB),
                                   SegAlloc(kLarge, kBase + 68 * MiB, 26 * MiB)));
  EXPECT_EQ(Stats().gc_releases, 2u);
  EXPECT_EQ(Stats().alloc_retries, 0u);
  EXPECT_EQ(Stats().reserved, 52 * MiB);
  EXPECT_THAT(alloc_->ReleasableSegments(),
              ElementsAre(std::pair(kBase + 44 * MiB, 24 * MiB), std::pair(kBase, 2 * MiB)));
}

TEST_F(GarbageCollectionTest, NothingWithoutAMemoryFraction) {
  Run(/*with_fraction=*/false);
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase + 68 * MiB, 26 * MiB)));
  EXPECT_EQ(Stats().gc_releases, 0u);
  EXPECT_EQ(Stats().reserved, 94 * MiB);
}

TEST_F(AllocatorTest, GarbageCollectionSkipsSplitSegments) {
  AllocatorSettings s;
  s.garbage_collection_threshold = 0.1;
  s.memory_fraction = 0.5;
  s.total_memory = 200 * MiB;  // collect above 10 MiB reserved
  Make(s);
  M(5 * MiB);  // 20 MiB segment, split, with a 15 MiB free remainder
  Drain();
  M(16 * MiB);  // 20 MiB reserved > 10: but the only candidate is split
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase + 20 * MiB, 16 * MiB)));
  EXPECT_EQ(Stats().gc_releases, 0u);
}

// --- memory fraction
// ------------------------------------------------------------------------------

TEST_F(AllocatorTest, MemoryFractionRefusesSegmentsBeyondIt) {
  AllocatorSettings s;
  s.memory_fraction = 0.25;
  s.total_memory = 96 * MiB;  // allowed: 24 MiB
  Make(s);
  M(20 * MiB);
  M(MiB);  // 2 MiB small segment: 22 MiB
  M(MiB);  // its remainder
  // 20 MiB segment for 4 MiB: 42 > 24, refused without asking CUDA.
  EXPECT_FALSE(alloc_->Malloc(4 * MiB, 0).ok());
  EXPECT_EQ(addrs_.requests.size(), 2u);
  M(MiB);  // another 2 MiB segment: exactly 24 MiB, allowed
  M(MiB);  // its remainder
  EXPECT_EQ(Stats().reserved, 24 * MiB);
  EXPECT_FALSE(alloc_->Malloc(MiB, 0).ok());  // 26 > 24
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 20 * MiB),
                                   SegAlloc(kSmall, kBase + 20 * MiB, 2 * MiB),
                                   Ev(SegmentAction::kOom, kLarge, 2 * MiB, 4 * MiB),
                                   SegAlloc(kSmall, kBase + 22 * MiB, 2 * MiB),
                                   Ev(SegmentAction::kOom, kSmall, 0, MiB)));
  EXPECT_EQ(Stats().ooms, 2u);
}

// --- expandable segments
// --------------------------------------------------------------------------

class ExpandableTest : public AllocatorTest {
 protected:
  void MakeWith(uint64_t total_memory = GiB) {
    AllocatorSettings s;
    s.expandable_segments = true;
    s.total_memory = total_memory;
    Make(s);
  }
  static SegmentEvent Map(Pool pool, uint64_t addr, uint64_t size, uint64_t stream = 0) {
    return Ev(SegmentAction::kMap, pool, addr, size, stream);
  }
  static SegmentEvent Unmap(Pool pool, uint64_t addr, uint64_t size, uint64_t stream = 0) {
    return Ev(SegmentAction::kUnmap, pool, addr, size, stream);
  }
};

TEST_F(ExpandableTest, SmallPoolMapsTwoMiBPages) {
  MakeWith();
  const MallocResult a = M(1000);
  EXPECT_EQ(a.addr, kBase);
  EXPECT_THAT(Drain(), ElementsAre(Map(kSmall, kBase, 2 * MiB)));
  EXPECT_EQ(Stats().reserved, 2 * MiB);
  EXPECT_EQ(M(1000).addr, kBase + 1024);  // right after, in the mapped page
  EXPECT_EQ(M(MiB).addr, kBase + 2048);   // still fits in the first page
  const MallocResult d = M(MiB);          // spans into a second page
  EXPECT_EQ(d.addr, kBase + MiB + 2048);
  EXPECT_THAT(Drain(), ElementsAre(Map(kSmall, kBase + 2 * MiB, 2 * MiB)));
  EXPECT_EQ(Stats().reserved, 4 * MiB);
  EXPECT_EQ(Stats().allocated, 2 * MiB + 2048);
  EXPECT_THAT(addrs_.requests, ElementsAre(ScriptedAddresses::Request{1152 * MiB, 0, kSmall}));
}

TEST_F(ExpandableTest, LargePoolMapsTwentyMiBPagesAndEmptyCacheUnmapsWholePages) {
  MakeWith();
  const MallocResult a = M(30 * MiB);
  EXPECT_EQ(a.addr, kBase);
  EXPECT_EQ(a.size, 30 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(Map(kLarge, kBase, 40 * MiB)));
  EXPECT_EQ(Stats().reserved, 40 * MiB);
  const MallocResult b = M(15 * MiB);  // 10 MiB free after A, one more page mapped
  EXPECT_EQ(b.addr, kBase + 30 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(Map(kLarge, kBase + 40 * MiB, 20 * MiB)));
  EXPECT_EQ(Stats().reserved, 60 * MiB);
  EXPECT_EQ(Stats().allocated, 45 * MiB);

  alloc_->Free(b.block);  // [30, 60) MiB free
  alloc_->EmptyCache();   // the page [40, 60) goes; [30, 40) is part of a used page
  EXPECT_THAT(Drain(), ElementsAre(Unmap(kLarge, kBase + 40 * MiB, 20 * MiB)));
  EXPECT_EQ(Stats().reserved, 40 * MiB);
  const std::vector<SegmentView> segs = alloc_->Segments();
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_TRUE(segs[0].expandable);
  EXPECT_EQ(segs[0].addr, kBase);
  EXPECT_EQ(segs[0].size, 40 * MiB);
  EXPECT_THAT(BlocksOf(kBase), ElementsAre(std::tuple(kBase, 30 * MiB, State::kAllocated),
                                           std::tuple(kBase + 30 * MiB, 10 * MiB, State::kFree)));

  alloc_->Free(a.block);
  alloc_->EmptyCache();
  EXPECT_THAT(Drain(), ElementsAre(Unmap(kLarge, kBase, 40 * MiB)));
  EXPECT_EQ(Stats().reserved, 0u);
  EXPECT_THAT(alloc_->Segments(), IsEmpty());
  // The virtual range went back once nothing in it was mapped.
  EXPECT_THAT(addrs_.frees, ElementsAre(std::pair(kBase, 1160 * MiB)));
}

TEST_F(ExpandableTest, VirtualRangeIsNineEighthsOfMemoryInWholePages) {
  // ceil((T + T/8) / page) pages: 112.5 MiB -> 57 pages of 2 MiB, 6 pages of 20 MiB.
  MakeWith(100 * MiB);
  M(1000, 0);
  M(2 * MiB, 0);
  EXPECT_THAT(addrs_.requests, ElementsAre(ScriptedAddresses::Request{114 * MiB, 0, kSmall},
                                           ScriptedAddresses::Request{120 * MiB, 0, kLarge}));
}

TEST_F(ExpandableTest, EachStreamGetsItsOwnRange) {
  MakeWith();
  M(30 * MiB, 1);
  const MallocResult other = M(5 * MiB, 2);  // stream 1's free 10 MiB is not stream 2's
  EXPECT_EQ(other.addr, kBase + 1160 * MiB);
  EXPECT_THAT(Drain(), ElementsAre(Map(kLarge, kBase, 40 * MiB, 1),
                                   Map(kLarge, kBase + 1160 * MiB, 20 * MiB, 2)));
}

// --- pending frees (record_stream)
// ----------------------------------------------------------------

TEST_F(AllocatorTest, PendingFreeIsNotReusableUntilCompleted) {
  Make({});
  const MallocResult a = M(1000);
  alloc_->FreeRequested(a.block);
  EXPECT_TRUE(alloc_->IsPendingFree(a.block));
  EXPECT_FALSE(alloc_->IsAllocated(a.block));
  EXPECT_EQ(Stats().allocated, 0u);
  EXPECT_EQ(Stats().requested, 0u);
  EXPECT_EQ(Stats().active, 1024u);
  const MallocResult b = M(1000);
  EXPECT_EQ(b.addr, kBase + 1024);  // not a's block
  alloc_->FreeCompleted(a.block);
  EXPECT_EQ(Stats().active, 1024u);
  const MallocResult c = M(1000);  // a's block is now the best fit
  EXPECT_EQ(c.addr, kBase);
  EXPECT_EQ(Stats().allocated, 2048u);
}

TEST_F(AllocatorTest, EmptyCacheCompletesPendingFreesFirst) {
  Make({});
  const MallocResult a = M(20 * MiB);
  alloc_->FreeRequested(a.block);
  Drain();
  alloc_->EmptyCache();
  EXPECT_FALSE(alloc_->IsPendingFree(a.block));
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase, 20 * MiB)));
  EXPECT_EQ(Stats().reserved, 0u);
  EXPECT_EQ(Stats().active, 0u);
}

// --- empty_cache --------------------------------------------------------------------------------

TEST_F(AllocatorTest, EmptyCacheReleasesUnsplitSegmentsLargeFirstByStreamSizeAddress) {
  Make({});
  constexpr uint64_t L1 = 0x10000000, L2 = 0x20000000, L3 = 0x30000000, L4 = 0x40000000;
  constexpr uint64_t L5 = 0x50000000, S1 = 0x60000000, S2 = 0x61000000, S3 = 0x62000000;
  alloc_->AddSegment(L4, 30 * MiB, 1, kLarge);
  alloc_->AddSegment(L1, 40 * MiB, 0, kLarge);
  alloc_->AddSegment(L3, 20 * MiB, 0, kLarge);
  alloc_->AddSegment(L2, 20 * MiB, 0, kLarge);
  alloc_->AddSegment(L5, 20 * MiB, 0, kLarge);
  alloc_->AddSegment(S2, 2 * MiB, 0, kSmall);
  alloc_->AddSegment(S3, 2 * MiB, 1, kSmall);
  alloc_->AddSegment(S1, 2 * MiB, 0, kSmall);
  ASSERT_NE(alloc_->AllocateAt(L5, 5 * MiB, 5 * MiB, 0), kNoBlock);  // split: stays
  const std::vector<std::pair<uint64_t, uint64_t>> expected = {
      {L2, 20 * MiB}, {L3, 20 * MiB}, {L1, 40 * MiB}, {L4, 30 * MiB},
      {S1, 2 * MiB},  {S2, 2 * MiB},  {S3, 2 * MiB}};
  EXPECT_EQ(alloc_->ReleasableSegments(), expected);
  alloc_->EmptyCache();
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, L2, 20 * MiB), SegFree(kLarge, L3, 20 * MiB),
                                   SegFree(kLarge, L1, 40 * MiB), SegFree(kLarge, L4, 30 * MiB, 1),
                                   SegFree(kSmall, S1, 2 * MiB), SegFree(kSmall, S2, 2 * MiB),
                                   SegFree(kSmall, S3, 2 * MiB, 1)));
  EXPECT_EQ(addrs_.frees, expected);
  EXPECT_EQ(Stats().reserved, 20 * MiB);
  EXPECT_EQ(Stats().segments, 1u);
  EXPECT_THAT(alloc_->ReleasableSegments(), IsEmpty());
}

// --- state from outside
// ---------------------------------------------------------------------------

TEST_F(AllocatorTest, AddSegmentAndAllocateAt) {
  Make({});
  constexpr uint64_t A = 0x10000000;
  alloc_->AddSegment(A, 20 * MiB, 0, kLarge);
  EXPECT_EQ(Stats().reserved, 20 * MiB);
  EXPECT_EQ(Stats().segments, 1u);
  EXPECT_THAT(Drain(), IsEmpty());
  EXPECT_TRUE(addrs_.requests.empty());

  const BlockId b = alloc_->AllocateAt(A + 4 * MiB, 6 * MiB, 6 * MiB - 100, 0);
  ASSERT_NE(b, kNoBlock);
  EXPECT_EQ(alloc_->BlockAddress(b), A + 4 * MiB);
  EXPECT_EQ(alloc_->BlockSize(b), 6 * MiB);
  EXPECT_THAT(BlocksOf(A), ElementsAre(std::tuple(A, 4 * MiB, State::kFree),
                                       std::tuple(A + 4 * MiB, 6 * MiB, State::kAllocated),
                                       std::tuple(A + 10 * MiB, 10 * MiB, State::kFree)));
  EXPECT_EQ(Stats().allocated, 6 * MiB);
  EXPECT_EQ(Stats().requested, 6 * MiB - 100);

  EXPECT_EQ(alloc_->AllocateAt(A + 2 * MiB, 4 * MiB, 4 * MiB, 0), kNoBlock);   // overlaps b
  EXPECT_EQ(alloc_->AllocateAt(A + 12 * MiB, 9 * MiB, 9 * MiB, 0), kNoBlock);  // past the end
  EXPECT_EQ(alloc_->AllocateAt(A, 2 * MiB, 2 * MiB, 1), kNoBlock);             // other stream
  EXPECT_EQ(alloc_->AllocateAt(A + 20 * MiB, 2 * MiB, 2 * MiB, 0), kNoBlock);  // no segment
  EXPECT_EQ(alloc_->AllocateAt(A, 0, 0, 0), kNoBlock);

  // The block placed mid-run behaves like any other: the free space before it serves a malloc
  // (best fit, 1 MiB left: not split) and it merges with the space after it when freed.
  const MallocResult m = M(3 * MiB);
  EXPECT_EQ(m.addr, A);
  EXPECT_EQ(m.size, 4 * MiB);
  alloc_->Free(b);
  EXPECT_THAT(BlocksOf(A), ElementsAre(std::tuple(A, 4 * MiB, State::kAllocated),
                                       std::tuple(A + 4 * MiB, 16 * MiB, State::kFree)));
}

TEST_F(AllocatorTest, AllocateAtSplitByRule) {
  Make({});
  constexpr uint64_t A = 0x10000000, B = 0x20000000;
  alloc_->AddSegment(A, 20 * MiB, 0, kLarge);
  alloc_->AddSegment(B, 20 * MiB, 0, kLarge);
  // By the rule a 1 MiB remainder stays part of the block...
  const BlockId a = alloc_->AllocateAt(A, 19 * MiB, 19 * MiB, 0, /*split_by_rule=*/true);
  EXPECT_EQ(alloc_->BlockSize(a), 20 * MiB);
  // ...and 1 MiB + 512 is split off.
  const BlockId b = alloc_->AllocateAt(B, 19 * MiB - 512, 19 * MiB - 512, 0, true);
  EXPECT_EQ(alloc_->BlockSize(b), 19 * MiB - 512);
  EXPECT_EQ(Stats().allocated, 39 * MiB - 512);
  EXPECT_EQ(alloc_->FreeBlockCount(), 1u);
}

TEST_F(AllocatorTest, ReleaseSegmentAtOnlyReleasesWholeFreeSegments) {
  Make({});
  constexpr uint64_t A = 0x10000000;
  alloc_->AddSegment(A, 20 * MiB, 0, kLarge);
  const BlockId b = alloc_->AllocateAt(A + 4 * MiB, 6 * MiB, 6 * MiB, 0);
  EXPECT_FALSE(alloc_->ReleaseSegmentAt(A));  // partly allocated
  alloc_->Free(b);
  EXPECT_FALSE(alloc_->ReleaseSegmentAt(A + 4 * MiB));  // not a segment's address
  EXPECT_FALSE(alloc_->ReleaseSegmentAt(0x20000000));
  EXPECT_TRUE(alloc_->ReleaseSegmentAt(A));
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, A, 20 * MiB)));
  EXPECT_EQ(Stats().reserved, 0u);
  EXPECT_EQ(Stats().segments, 0u);
  EXPECT_THAT(alloc_->Segments(), IsEmpty());
  EXPECT_FALSE(alloc_->ReleaseSegmentAt(A));  // already gone
}

// --- settings: PYTORCH_CUDA_ALLOC_CONF
// ------------------------------------------------------------

std::string ErrorOf(std::string_view conf) {
  const Result<AllocatorSettings> r = ParseAllocConf(conf);
  return r.ok() ? std::string("(accepted)") : r.status().message();
}

TEST(ParseAllocConf, EmptyGivesDefaults) {
  for (std::string_view conf : {"", "  "}) {
    const Result<AllocatorSettings> r = ParseAllocConf(conf);
    ASSERT_TRUE(r.ok()) << conf;
    EXPECT_EQ(*r, AllocatorSettings{});
  }
  EXPECT_EQ(AllocatorSettings{}.ToAllocConf(), "");
}

TEST(ParseAllocConf, MaxSplitSizeAtLeastTwenty) {
  EXPECT_THAT(ErrorOf("max_split_size_mb:5"), HasSubstr("max_split_size_mb"));
  EXPECT_THAT(ErrorOf("max_split_size_mb:19"), HasSubstr("max_split_size_mb"));
  const Result<AllocatorSettings> r = ParseAllocConf("max_split_size_mb:20");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_split_size, 20 * MiB);
  EXPECT_EQ(ParseAllocConf("max_split_size_mb:512")->max_split_size, 512 * MiB);
  EXPECT_THAT(ErrorOf("max_split_size_mb:lots"), HasSubstr("max_split_size_mb"));
}

TEST(ParseAllocConf, MaxNonSplitRounding) {
  EXPECT_EQ(ParseAllocConf("max_non_split_rounding_mb:64")->max_non_split_rounding, 64 * MiB);
  EXPECT_THAT(ErrorOf("max_non_split_rounding_mb:10"), HasSubstr("max_non_split_rounding_mb"));
}

TEST(ParseAllocConf, UnknownKeyIsNamed) {
  EXPECT_THAT(ErrorOf("max_split_size_mb:40,no_such_option:3"), HasSubstr("no_such_option"));
}

TEST(ParseAllocConf, DivisionsList) {
  const Result<AllocatorSettings> r = ParseAllocConf("roundup_power2_divisions:[256:1,512:2,>:8]");
  ASSERT_TRUE(r.ok()) << r.status().message();
  // 256 MiB is bucket 8: the first entry fills 0..8; 512 is bucket 9; ">" fills 10..15.
  const std::array<uint32_t, 16> expected = {1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8};
  EXPECT_EQ(r->roundup_power2_divisions, expected);
}

TEST(ParseAllocConf, DivisionsListLeavesGapsAtZero) {
  const Result<AllocatorSettings> r = ParseAllocConf("roundup_power2_divisions:[64:8,256:4]");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::array<uint32_t, 16> expected = {8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(r->roundup_power2_divisions, expected);
}

TEST(ParseAllocConf, DivisionsListGreaterFirstKeepsTheFirstEntryFill) {
  // ">" first starts after bucket 0; it is not an explicit entry, so 64:8 still fills 0..6.
  const Result<AllocatorSettings> r = ParseAllocConf("roundup_power2_divisions:[>:2,64:8]");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::array<uint32_t, 16> expected = {8, 8, 8, 8, 8, 8, 8, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  EXPECT_EQ(r->roundup_power2_divisions, expected);
}

TEST(ParseAllocConf, DivisionsListClampsTheBucket) {
  const Result<AllocatorSettings> r = ParseAllocConf("roundup_power2_divisions:[65536:2]");
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::array<uint32_t, 16> expected;
  expected.fill(2);
  EXPECT_EQ(r->roundup_power2_divisions, expected);
}

TEST(ParseAllocConf, DivisionsListChecksValues) {
  EXPECT_TRUE(ParseAllocConf("roundup_power2_divisions:[256:0,>:4]").ok());  // 0 allowed in a list
  EXPECT_THAT(ErrorOf("roundup_power2_divisions:[256:3]"), HasSubstr("roundup_power2_divisions"));
  EXPECT_THAT(ErrorOf("roundup_power2_divisions:[100:2]"), HasSubstr("roundup_power2_divisions"));
}

TEST(ParseAllocConf, DivisionsSingleValueMustBeAPowerOfTwo) {
  const Result<AllocatorSettings> r = ParseAllocConf("roundup_power2_divisions:4");
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::array<uint32_t, 16> fours;
  fours.fill(4);
  EXPECT_EQ(r->roundup_power2_divisions, fours);
  EXPECT_TRUE(ParseAllocConf("roundup_power2_divisions:1").ok());
  EXPECT_THAT(ErrorOf("roundup_power2_divisions:0"), HasSubstr("roundup_power2_divisions"));
  EXPECT_THAT(ErrorOf("roundup_power2_divisions:3"), HasSubstr("roundup_power2_divisions"));
}

TEST(ParseAllocConf, GarbageCollectionThresholdOpenInterval) {
  for (const char* bad : {"0", "1", "1.5", "-0.5"}) {
    EXPECT_THAT(ErrorOf(std::string("garbage_collection_threshold:") + bad),
                HasSubstr("garbage_collection_threshold"))
        << bad;
  }
  const Result<AllocatorSettings> r = ParseAllocConf("garbage_collection_threshold:0.6");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->garbage_collection_threshold, 0.6);
}

TEST(ParseAllocConf, ExpandableSegmentsExactlyTrueOrFalse) {
  EXPECT_TRUE(ParseAllocConf("expandable_segments:True")->expandable_segments);
  EXPECT_FALSE(ParseAllocConf("expandable_segments:False")->expandable_segments);
  EXPECT_THAT(ErrorOf("expandable_segments:maybe"), HasSubstr("expandable_segments"));
  // torch compares with "True" and "False" exactly.
  EXPECT_THAT(ErrorOf("expandable_segments:true"), HasSubstr("expandable_segments"));
}

TEST(ParseAllocConf, Backend) {
  EXPECT_THAT(ErrorOf("backend:cudaMallocAsync"), HasSubstr("cudaMallocAsync"));
  EXPECT_TRUE(ParseAllocConf("backend:native").ok());
  EXPECT_THAT(ErrorOf("backend:other"), HasSubstr("backend"));
}

TEST(ParseAllocConf, SpacesTolerated) {
  const Result<AllocatorSettings> r = ParseAllocConf(
      " max_split_size_mb : 40 , expandable_segments: True ,"
      "roundup_power2_divisions: [ 256 : 1 , > : 4 ] ");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_split_size, 40 * MiB);
  EXPECT_TRUE(r->expandable_segments);
  EXPECT_EQ(r->roundup_power2_divisions[8], 1u);
  EXPECT_EQ(r->roundup_power2_divisions[9], 4u);
}

TEST(ParseAllocConf, IgnoredOptionsAreStillChecked) {
  EXPECT_TRUE(
      ParseAllocConf("release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False").ok());
  EXPECT_THAT(ErrorOf("release_lock_on_cudamalloc:yes"), HasSubstr("release_lock_on_cudamalloc"));
}

TEST(ParseAllocConf, ToAllocConfRoundTrips) {
  const std::string conf =
      "max_split_size_mb:40,max_non_split_rounding_mb:30,roundup_power2_divisions:[256:1,512:2,>:"
      "8],garbage_collection_threshold:0.6,expandable_segments:True";
  const Result<AllocatorSettings> r = ParseAllocConf(conf);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Result<AllocatorSettings> again = ParseAllocConf(r->ToAllocConf());
  ASSERT_TRUE(again.ok()) << again.status().message() << " in " << r->ToAllocConf();
  EXPECT_EQ(*again, *r);

  AllocatorSettings s;
  s.max_split_size = 40 * MiB;
  s.expandable_segments = true;
  EXPECT_EQ(s.ToAllocConf(), "max_split_size_mb:40,expandable_segments:True");
  s.roundup_power2_divisions.fill(4);
  EXPECT_EQ(s.ToAllocConf(),
            "max_split_size_mb:40,roundup_power2_divisions:4,expandable_segments:True");
  EXPECT_EQ(*ParseAllocConf(s.ToAllocConf()), s);
}

// --- settings: the snapshot's allocator_settings -----------------------------------------------

TEST(SettingsFromSnapshot, ReadsTheFlattenedKeys) {
  const Result<AllocatorSettings> r =
      SettingsFromSnapshot({{"max_split_size", "-1"},
                            {"roundup_power2_divisions.512", "2"},
                            {"roundup_power2_divisions.1", "4"},
                            {"expandable_segments", "True"},
                            {"garbage_collection_threshold", "0.0"},
                            {"release_lock_on_cudamalloc", "False"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_split_size, kUnlimited);
  std::array<uint32_t, 16> expected{};
  expected[0] = 4;
  expected[9] = 2;
  EXPECT_EQ(r->roundup_power2_divisions, expected);
  EXPECT_TRUE(r->expandable_segments);
  EXPECT_EQ(r->garbage_collection_threshold, 0.0);
}

TEST(SettingsFromSnapshot, MaxSplitSizeInBytes) {
  const Result<AllocatorSettings> r = SettingsFromSnapshot(
      {{"max_split_size", "41943040"}, {"max_non_split_rounding", "31457280"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_split_size, 40 * MiB);
  EXPECT_EQ(r->max_non_split_rounding, 30 * MiB);
}

TEST(SettingsFromSnapshot, BadValueNamesTheKey) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"max_split_size", "lots"},
                                                        {"expandable_segments", "maybe"},
                                                        {"garbage_collection_threshold", "1.5"},
                                                        {"roundup_power2_divisions.300", "2"}}) {
    const Result<AllocatorSettings> r = SettingsFromSnapshot({{key, value}});
    ASSERT_FALSE(r.ok()) << key << "=" << value;
    EXPECT_THAT(r.status().message(), HasSubstr(key));
  }
}

// --- private pools (CUDA graphs, torch.cuda.MemPool) ---------------------------------------------
// The rules, from CUDACachingAllocator.cpp (Note [Interaction with CUDA graph capture], get_pool,
// free_block, release_cached_blocks, try_mempool_fallback, should_split); the facts and their
// versions are in docs/design/allocator-model.md, "Private pools".

constexpr MemPoolId kGraphPool{1, 0};   // a graph's own pool: {uuid, 0}
constexpr MemPoolId kSharedPool{0, 1};  // graph_pool_handle() / MemPool: {0, uid}

TEST_F(AllocatorTest, PrivatePoolBlocksServeOnlyTheirPool) {
  Make({});
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  EXPECT_NE(g, kDefaultPool);
  const MallocResult in_pool = alloc_->Malloc(4 * MiB, 0, g);  // 20 MiB segment of the pool
  ASSERT_TRUE(in_pool.ok());
  EXPECT_THAT(Drain(), ElementsAre(SegAlloc(kLarge, kBase, 20 * MiB)));
  alloc_->Free(in_pool.block);
  // The default pools cannot use the pool's free 20 MiB: a segment of their own.
  const MallocResult outside = M(4 * MiB);
  EXPECT_EQ(outside.addr, kBase + 20 * MiB);
  EXPECT_TRUE(outside.new_segment);
  alloc_->Free(outside.block);
  // And the pool does not take the default pools' free block either: its own, at its address.
  const MallocResult again = alloc_->Malloc(4 * MiB, 0, g);
  EXPECT_EQ(again.addr, kBase);
  EXPECT_FALSE(again.new_segment);
  EXPECT_EQ(Stats().reserved, 40 * MiB);
  EXPECT_EQ(Stats().reserved_private, 20 * MiB);
  EXPECT_EQ(Stats().allocated_private, 4 * MiB);
  EXPECT_EQ(alloc_->PoolReserved(g), 20 * MiB);
  EXPECT_EQ(alloc_->PoolAllocated(g), 4 * MiB);
}

TEST_F(AllocatorTest, PrivatePoolReusesFreedBlocksWithinItsStreamOnly) {
  Make({});
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  const MallocResult a = alloc_->Malloc(512, 7, g);
  alloc_->Free(a.block);
  const MallocResult same_stream = alloc_->Malloc(512, 7, g);
  EXPECT_EQ(same_stream.addr, a.addr);
  const MallocResult other_stream = alloc_->Malloc(512, 8, g);
  EXPECT_TRUE(other_stream.new_segment);
  EXPECT_EQ(Stats().reserved_private, 4 * MiB);  // two 2 MiB small segments
}

TEST_F(AllocatorTest, EmptyCacheKeepsALivePoolAndReleasesItOnceFreeable) {
  Make({});
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  const MallocResult a = alloc_->Malloc(30 * MiB, 0, g);
  const MallocResult b = alloc_->Malloc(512, 0, g);
  alloc_->Free(a.block);
  alloc_->Free(b.block);
  Drain();
  alloc_->EmptyCache();  // the graph is alive: its pool keeps its memory
  EXPECT_THAT(Drain(), IsEmpty());
  EXPECT_EQ(Stats().reserved, 32 * MiB);
  alloc_->ReleasePrivatePool(g);  // graph.reset()
  EXPECT_TRUE(alloc_->PoolFreeable(g));
  EXPECT_EQ(Stats().reserved, 32 * MiB);  // freeable is not freed: that waits for empty_cache
  alloc_->EmptyCache();
  // The freeable pool's small blocks, then its large ones (release_cached_blocks' order).
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kSmall, kBase + 30 * MiB, 2 * MiB),
                                   SegFree(kLarge, kBase, 30 * MiB)));
  EXPECT_EQ(Stats().reserved, 0u);
  EXPECT_EQ(Stats().reserved_private, 0u);
  EXPECT_FALSE(alloc_->FindPrivatePool(kGraphPool).has_value());  // forgotten once empty
}

TEST_F(AllocatorTest, AFreeablePoolWithALiveTensorKeepsThatSegment) {
  Make({});
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  const MallocResult output = alloc_->Malloc(30 * MiB, 0, g);  // the graph's output, still used
  const MallocResult scratch = alloc_->Malloc(40 * MiB, 0, g);
  alloc_->Free(scratch.block);
  alloc_->ReleasePrivatePool(g);
  Drain();
  alloc_->EmptyCache();
  EXPECT_THAT(Drain(), ElementsAre(SegFree(kLarge, kBase + 30 * MiB, 40 * MiB)));
  ASSERT_TRUE(alloc_->FindPrivatePool(kGraphPool).has_value());  // cudaMalloc_count is 1
  alloc_->Free(output.block);  // returns to the pool, not to the default pools
  EXPECT_EQ(M(30 * MiB).addr, kBase + 70 * MiB);
  alloc_->EmptyCache();
  EXPECT_FALSE(alloc_->FindPrivatePool(kGraphPool).has_value());
}

TEST_F(AllocatorTest, GraphsSharingAPoolReleaseItWhenTheLastGoes) {
  Make({});
  const PoolIndex first = alloc_->UsePrivatePool(kSharedPool);
  const MallocResult a = alloc_->Malloc(6 * MiB, 0, first);  // graph 1's scratch: 20 MiB segment
  alloc_->Free(a.block);
  const PoolIndex second = alloc_->UsePrivatePool(kSharedPool);  // graph 2, pool=same handle
  EXPECT_EQ(second, first);
  EXPECT_EQ(alloc_->PoolUseCount(first), 2);
  const MallocResult b = alloc_->Malloc(8 * MiB, 0, second);  // reuses graph 1's freed block
  EXPECT_EQ(b.addr, kBase);
  EXPECT_FALSE(b.new_segment);
  alloc_->Free(b.block);
  EXPECT_EQ(Stats().peak_reserved_private, 20 * MiB);  // not 40: the pool is shared
  alloc_->ReleasePrivatePool(first);
  alloc_->EmptyCache();
  EXPECT_EQ(Stats().reserved, 20 * MiB);  // graph 2 still holds the pool
  alloc_->ReleasePrivatePool(second);
  alloc_->EmptyCache();
  EXPECT_EQ(Stats().reserved, 0u);
}

TEST_F(AllocatorTest, GraphsWithTheirOwnPoolsReserveBoth) {
  Make({});
  const PoolIndex first = alloc_->UsePrivatePool({1, 0});
  const MallocResult a = alloc_->Malloc(6 * MiB, 0, first);
  alloc_->Free(a.block);
  const PoolIndex second = alloc_->UsePrivatePool({2, 0});
  EXPECT_NE(second, first);
  const MallocResult b = alloc_->Malloc(8 * MiB, 0, second);
  EXPECT_EQ(b.addr, kBase + 20 * MiB);
  EXPECT_TRUE(b.new_segment);
  EXPECT_EQ(Stats().peak_reserved_private, 40 * MiB);
}

TEST_F(AllocatorTest, UseOnOomPoolServesADefaultRequestWhenCudaMallocFails) {
  AllocatorSettings s;
  s.capacity = 40 * MiB;
  Make(s);
  const PoolIndex m = alloc_->UsePrivatePool(kSharedPool, {.use_on_oom = true});
  const MallocResult in_pool = alloc_->Malloc(30 * MiB, 0, m);
  alloc_->Free(in_pool.block);
  Drain();
  // 30 MiB reserved by the pool; a 20 MiB default request cannot get a segment (30 + 20 > 40) and
  // takes the pool's cached block, split at the large-pool rule (10 MiB > 1 MiB remains).
  const MallocResult r = M(20 * MiB);
  EXPECT_EQ(r.addr, kBase);
  EXPECT_FALSE(r.new_segment);
  EXPECT_THAT(Drain(), IsEmpty());  // nothing released, nothing allocated
  EXPECT_EQ(Stats().alloc_retries, 0u);
  EXPECT_EQ(alloc_->PoolAllocated(m), 20 * MiB);  // the block stays the pool's
  alloc_->Free(r.block);
  EXPECT_EQ(alloc_->PoolAllocated(m), 0u);
}

TEST_F(AllocatorTest, WithoutUseOnOomTheDefaultRequestRunsOutOfMemory) {
  AllocatorSettings s;
  s.capacity = 40 * MiB;
  Make(s);
  const PoolIndex m = alloc_->UsePrivatePool(kSharedPool);
  const MallocResult in_pool = alloc_->Malloc(30 * MiB, 0, m);
  alloc_->Free(in_pool.block);
  Drain();
  EXPECT_FALSE(alloc_->Malloc(20 * MiB, 0).ok());  // the live pool's cache is not released
  EXPECT_THAT(Drain(), ElementsAre(Ev(SegmentAction::kOom, kLarge, 10 * MiB, 20 * MiB)));
  EXPECT_EQ(Stats().reserved, 30 * MiB);
}

TEST_F(AllocatorTest, UseOnOomNeverGrowsThePoolAndIsOffOnceReleased) {
  AllocatorSettings s;
  s.capacity = 40 * MiB;
  Make(s);
  const PoolIndex m = alloc_->UsePrivatePool(kSharedPool, {.use_on_oom = true});
  const MallocResult small = alloc_->Malloc(10 * MiB, 0, m);  // 10 MiB segment, all allocated
  (void)small;
  Drain();
  // No free block in the pool: the fallback makes no segment there; the default pools' own
  // cudaMalloc (30 MiB) fits.
  const MallocResult r = M(30 * MiB);
  EXPECT_EQ(r.addr, kBase + 10 * MiB);
  alloc_->Free(r.block);
  alloc_->Free(small.block);
  alloc_->ReleasePrivatePool(m);  // ~MemPool: use_on_oom is unset first
  Drain();
  // A freeable pool is not asked: the request releases the cache (the pool's 10 MiB and the
  // default 30 MiB) and cudaMallocs.
  const MallocResult after = M(36 * MiB);
  EXPECT_TRUE(after.new_segment);
  EXPECT_EQ(Stats().alloc_retries, 1u);
}

TEST_F(AllocatorTest, RequestsInAPoolNeverReleaseTheWholeCache) {
  AllocatorSettings s;
  s.capacity = 40 * MiB;
  Make(s);
  const MallocResult cached = M(30 * MiB);
  alloc_->Free(cached.block);
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  Drain();
  // During capture (captures_underway not empty) a failed cudaMalloc is not retried after
  // release_cached_blocks: the default pools' 30 MiB stay cached and the capture runs out.
  EXPECT_FALSE(alloc_->Malloc(20 * MiB, 0, g).ok());
  EXPECT_THAT(Drain(), ElementsAre(Ev(SegmentAction::kOom, kLarge, 10 * MiB, 20 * MiB)));
  EXPECT_EQ(Stats().alloc_retries, 0u);
}

TEST_F(AllocatorTest, NoSplitPoolKeepsOneTensorPerSegment) {
  Make({});
  const PoolIndex m = alloc_->UsePrivatePool(kSharedPool, {.no_split = true});
  const MallocResult a = alloc_->Malloc(512, 0, m);
  EXPECT_THAT(BlocksOf(a.addr), ElementsAre(std::tuple(a.addr, 2 * MiB, State::kAllocated)));
  EXPECT_EQ(Stats().allocated, 2 * MiB);
  const MallocResult b = alloc_->Malloc(512, 0, m);
  EXPECT_TRUE(b.new_segment);
  // The default pools still split.
  const MallocResult c = M(512);
  EXPECT_THAT(BlocksOf(c.addr), ElementsAre(std::tuple(c.addr, 512u, State::kAllocated),
                                            std::tuple(c.addr + 512, 2 * MiB - 512, State::kFree)));
}

TEST_F(AllocatorTest, PrivatePoolsCachedBytesIsTheOomMessagesFigure) {
  Make({});
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  const MallocResult a = alloc_->Malloc(12 * MiB, 0, g);
  const MallocResult b = alloc_->Malloc(12 * MiB, 0, g);
  alloc_->Free(a.block);
  (void)b;
  M(4 * MiB);  // the default pools' blocks do not count
  // Only free cached blocks of private pools: 12 MiB (the allocated 12 MiB is in allocated).
  EXPECT_EQ(alloc_->PrivatePoolsCachedBytes(), 12 * MiB);
}

TEST_F(ExpandableTest, APrivatePoolGetsItsOwnExpandableRange) {
  MakeWith();
  const PoolIndex g = alloc_->UsePrivatePool(kGraphPool);
  const MallocResult outside = M(4 * MiB);
  const MallocResult inside = alloc_->Malloc(4 * MiB, 0, g);
  ASSERT_TRUE(inside.ok());
  // Two virtual ranges of the large pool on stream 0: the default pools' and the graph's.
  EXPECT_NE(inside.addr, outside.addr + 4 * MiB);
  EXPECT_EQ(Stats().reserved, 40 * MiB);  // one 20 MiB page each
  EXPECT_EQ(Stats().reserved_private, 20 * MiB);
}

}  // namespace
}  // namespace vramscope::allocator
