// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) for one device.
//
// It takes the same requests the real allocator takes (malloc of a size on a stream, free, the
// completion of a free that waited for other streams, empty_cache) and makes the same decisions:
// 512 B rounding and roundup_power2_divisions, the small and large pools, best fit over free blocks
// ordered by (stream, size, address), the split rules, merging of free neighbours, segment sizes,
// max_split_size / max_non_split_rounding, garbage collection under a memory fraction, the release
// of cached segments when cudaMalloc fails, expandable segments, and the device capacity. The rules
// and their sources are in docs/design/allocator-model.md.
//
// Where new segments live is not the allocator's decision but CUDA's: a `SegmentAddressSource`
// answers it, so that a replay can hand out the recorded addresses (and then every block address
// is reproduced) and a what-if run can use a synthetic address space.
//
// Cost: every operation is O(log n) in the number of free blocks of its pool (absl B-trees); the
// per-block state is a flat array indexed by BlockId.
#pragma once

#include <absl/container/btree_set.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "allocator/allocator_settings.h"
#include "model/trace.h"

namespace vramscope::allocator {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

// The allocator's two pools are the event model's (model::Pool): kSmall = 0, kLarge = 1 index
// per-pool arrays here.
using model::Pool;
using model::PoolName;

// round_size: what a request of `requested` bytes is rounded to before any search.
uint64_t RoundSize(uint64_t requested, const AllocatorSettings& settings);
// get_allocation_size: the size of the segment cudaMalloc'ed for a rounded request.
uint64_t SegmentSizeFor(uint64_t rounded);
inline Pool PoolFor(uint64_t rounded) {
  return rounded <= kSmallSize ? Pool::kSmall : Pool::kLarge;
}
// The pool a recorded cudaMalloc'd segment of `size` bytes belongs to, by the sizes the allocator
// gives segments (get_allocation_size): the small pool's are exactly 2 MiB, the large pool's
// 20 MiB or a multiple of 2 MiB of 10 MiB or more. (Expandable segments map pages instead: 2 MiB
// pages in the small pool, 20 MiB in the large; a mapping of a multiple of 20 MiB is taken as the
// large pool's.)
inline Pool PoolOfSegmentSize(uint64_t size, bool expandable = false) {
  if (expandable) return size % kLargeBuffer == 0 ? Pool::kLarge : Pool::kSmall;
  return size <= kSmallBuffer ? Pool::kSmall : Pool::kLarge;
}

// A private memory pool: a CUDA graph's (graph capture, torch.cuda.graph_pool_handle()) or a
// torch.cuda.MemPool's, named as PyTorch names it, by MempoolId_t (a pair of integers; (0, 0) is
// the default pools). Its blocks serve only requests routed to it, and its segments are released
// only after the pool is released (its graphs or MemPool destroyed): see
// docs/design/allocator-model.md, "Private pools".
struct MemPoolId {
  int64_t first = 0;
  int64_t second = 0;
  bool IsDefault() const { return first == 0 && second == 0; }
  auto operator<=>(const MemPoolId&) const = default;
};
// The model's handle of a pool: 0 is the default pools, 1.. the private pools in order of
// creation.
using PoolIndex = int32_t;
inline constexpr PoolIndex kDefaultPool = 0;
struct PrivatePoolOptions {
  // MemPool(use_on_oom=True), torch 2.8+: a request of the default pools for which cudaMalloc
  // failed takes a cached free block of this pool (never a new segment) before any cached
  // segment is released; the block stays this pool's. (2.8-2.9 tried it last, just before the
  // out-of-memory error; the model follows the newest order, PR #169699.)
  bool use_on_oom = false;
  // MemPool(no_split=True), torch 2.10+: blocks of this pool are never split (one tensor per
  // segment).
  bool no_split = false;
};

// What the model did to the device, in order: the actions that the real allocator records as
// trace entries, except alloc and free (those are answered to the caller directly).
enum class SegmentAction : uint8_t { kAlloc, kFree, kMap, kUnmap, kOom };
const char* SegmentActionName(SegmentAction action);
struct SegmentEvent {
  SegmentAction action;
  Pool pool;
  uint64_t addr;  // kOom: the bytes still free under the allowed maximum
  uint64_t size;  // kOom: the rounded request
  uint64_t stream;
  PoolIndex owner = kDefaultPool;  // the default pools or a private pool
};

// Hands out device addresses for new segments (cudaMalloc) and expandable ranges.
class SegmentAddressSource {
 public:
  virtual ~SegmentAddressSource() = default;
  virtual uint64_t NewSegment(uint64_t size, uint64_t stream, Pool pool) = 0;
  virtual void FreeSegment(uint64_t addr, uint64_t size) = 0;
};

// Addresses from a private range (lowest free address first, as cudaMalloc tends to do), starting
// at `base`, which the caller chooses above every address it will compare with.
class SyntheticAddresses : public SegmentAddressSource {
 public:
  explicit SyntheticAddresses(uint64_t base) : next_(base) {}
  uint64_t NewSegment(uint64_t size, uint64_t stream, Pool pool) override;
  void FreeSegment(uint64_t addr, uint64_t size) override;

 private:
  uint64_t next_;
  std::map<uint64_t, uint64_t> free_;  // released ranges: address -> size
};

struct AllocatorStats {
  uint64_t allocated = 0;  // Σ sizes of allocated blocks (torch.cuda.memory_allocated)
  uint64_t requested = 0;  // Σ requested sizes of allocated blocks
  uint64_t active = 0;     // allocated + blocks whose free waits for other streams
  uint64_t reserved = 0;   // Σ segment sizes, or mapped bytes of expandable segments
  uint64_t peak_allocated = 0;
  uint64_t peak_reserved = 0;
  uint64_t segments = 0;  // live segments, expandable ranges not counted
  uint64_t cuda_mallocs = 0;
  uint64_t cuda_frees = 0;
  uint64_t alloc_retries = 0;  // cudaMalloc failed and cached segments were released
  uint64_t ooms = 0;
  uint64_t gc_releases = 0;        // segments released by garbage collection
  uint64_t oversize_releases = 0;  // segments released by the max_split_size path
  // The part of `reserved` / `allocated` in private pools (CUDA graphs, MemPools): what PyTorch's
  // out-of-memory message calls "allocated in private pools" comes from these.
  uint64_t reserved_private = 0;
  uint64_t allocated_private = 0;
  uint64_t peak_reserved_private = 0;
};

struct MallocResult {
  BlockId block = kNoBlock;  // kNoBlock: out of memory
  uint64_t addr = 0;
  uint64_t size = 0;  // block bytes
  bool new_segment = false;
  bool ok() const { return block != kNoBlock; }
};

// One block as the model sees it; for state dumps and tests.
struct BlockView {
  uint64_t addr;
  uint64_t size;
  uint64_t requested;
  enum class State : uint8_t { kFree, kAllocated, kPendingFree, kUnmapped } state;
};
struct SegmentView {
  uint64_t addr;
  uint64_t size;  // expandable: the mapped bytes of this contiguous mapped range
  uint64_t stream;
  Pool pool;
  bool expandable;
  std::vector<BlockView> blocks;
  PoolIndex owner = kDefaultPool;
  MemPoolId pool_id;  // PyTorch's segment_pool_id
};

class CachingAllocator {
 public:
  CachingAllocator(const AllocatorSettings& settings, SegmentAddressSource* addresses);
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // torch's malloc(size, stream). On failure every unsplit cached segment has been released, an
  // kOom event is emitted and the result is not ok(). Requests of kMaxRequest or more fail at
  // once, as torch refuses them ("more than 1EB").
  static constexpr uint64_t kMaxRequest = uint64_t{1} << 60;
  // `owner`: the pool the request is routed to (PyTorch's get_pool: the private pool of a graph
  // capture or MemPool context that is active for this stream, else the default pools). Which
  // pool a request goes to is the program's decision, not the allocator's, so the caller says.
  MallocResult Malloc(uint64_t requested, uint64_t stream, PoolIndex owner = kDefaultPool);

  // --- private pools -------------------------------------------------------------------------
  // create_or_incref_pool: the pool named `id`, made on first use (use count 1), else its use
  // count goes up (another graph captured into it with pool=, another MemPool context). The
  // default id is refused (kDefaultPool is returned). `options` apply when the pool is made.
  PoolIndex UsePrivatePool(MemPoolId id, PrivatePoolOptions options = {});
  // release_pool: one user fewer. At zero the pool becomes freeable: its free unsplit segments
  // go back to CUDA at the next release of cached memory (empty_cache, or a failed cudaMalloc),
  // and the pool is forgotten once it holds no segment. Its blocks still allocated stay.
  void ReleasePrivatePool(PoolIndex pool);
  // The pool named `id`, or nullopt when none is alive.
  std::optional<PoolIndex> FindPrivatePool(MemPoolId id) const;
  MemPoolId PoolId(PoolIndex pool) const { return owners_[pool].id; }
  bool PoolFreeable(PoolIndex pool) const { return owners_[pool].freeable; }
  int PoolUseCount(PoolIndex pool) const { return owners_[pool].use_count; }
  size_t PoolCount() const { return owners_.size(); }
  // Bytes of segments / allocated blocks the pool holds now.
  uint64_t PoolReserved(PoolIndex pool) const { return owners_[pool].reserved; }
  uint64_t PoolAllocated(PoolIndex pool) const { return owners_[pool].allocated; }
  // What PyTorch's out-of-memory message calls "allocated in private pools (e.g., CUDA Graphs)":
  // the bytes of the *free cached* blocks of every private pool, live or freeable
  // (allocated_in_private_pools in CUDACachingAllocator.cpp; the allocated ones are already in
  // allocated_bytes). The message's "allocated by PyTorch" is allocated + this, its "reserved
  // but unallocated" reserved - allocated - this.
  uint64_t PrivatePoolsCachedBytes() const;
  // The tensor was released. The block stays active until FreeCompleted when the caller knows
  // it waits for events on other streams (record_stream); Free does both at once.
  void FreeRequested(BlockId block);
  void FreeCompleted(BlockId block);
  void Free(BlockId block) {
    FreeRequested(block);
    FreeCompleted(block);
  }
  bool IsPendingFree(BlockId b) const {
    return b >= 0 && static_cast<size_t>(b) < blocks_.size() &&
           blocks_[b].state == BlockView::State::kPendingFree && blocks_[b].segment >= 0;
  }
  bool IsAllocated(BlockId b) const {
    return b >= 0 && static_cast<size_t>(b) < blocks_.size() &&
           blocks_[b].state == BlockView::State::kAllocated && blocks_[b].segment >= 0;
  }
  // A caller's label for an allocated block (the replay stores its allocation index), so that a
  // block id that was reused after a merge is never mistaken for the old one. -1 once freed.
  void SetTag(BlockId block, int32_t tag) { blocks_[block].tag = tag; }
  int32_t Tag(BlockId block) const {
    return block >= 0 && static_cast<size_t>(block) < blocks_.size() ? blocks_[block].tag : -1;
  }
  // torch.cuda.empty_cache(): completes pending frees, releases every unsplit cached segment
  // (and unmaps the free pages of expandable segments).
  void EmptyCache();

  // --- state built from outside (traces that start mid-run, or a resynchronisation) ---------
  // A segment that exists already; all free. False (nothing added) when it is empty, not a
  // multiple of 512 B, wraps around the address space or overlaps a live segment.
  bool AddSegment(uint64_t addr, uint64_t size, uint64_t stream, Pool pool,
                  PoolIndex owner = kDefaultPool);
  // Marks [addr, addr+size) allocated; it must lie inside one free block of `stream`. With
  // `split_by_rule`, the space after it stays part of the block when the allocator's split rule
  // would not have split it off (as a real malloc placed there would have done). Returns
  // kNoBlock when it does not fit (the caller's picture of the state is wrong).
  BlockId AllocateAt(uint64_t addr, uint64_t size, uint64_t requested, uint64_t stream,
                     bool split_by_rule = false);
  // Releases a segment that is entirely free (as a recorded cudaFree says); false otherwise.
  bool ReleaseSegmentAt(uint64_t addr);
  // Frees a block without a trace of it (undoing a decision); merges like a free.
  void Discard(BlockId block) { Free(block); }

  // --- observation ---------------------------------------------------------------------------
  const AllocatorStats& stats() const { return stats_; }
  const AllocatorSettings& settings() const { return settings_; }
  // Segment events since the last call; the caller drains them after each request.
  std::vector<SegmentEvent>& segment_events() { return events_; }
  uint64_t BlockAddress(BlockId b) const { return blocks_[b].addr; }
  uint64_t BlockSize(BlockId b) const { return blocks_[b].size; }
  // Every live segment with its blocks, by (pool, address).
  std::vector<SegmentView> Segments() const;
  // Unsplit cached segments in the order a release would free them (the default pools, large
  // first, each by (stream, size, address), then each freeable private pool's large and small
  // blocks): what empty_cache would return now.
  std::vector<std::pair<uint64_t, uint64_t>> ReleasableSegments() const;
  size_t FreeBlockCount() const {
    size_t n = 0;
    for (PoolBlocks& pool : pools_) {
      Flush(pool);
      n += pool.free.size();
    }
    return n;
  }
  size_t LiveBlockCount() const { return blocks_.size() - spare_blocks_.size(); }
  // Checks the model's own invariants (blocks tile segments, free blocks are in the free set,
  // neighbours of free blocks are not free, counters equal sums). Empty when all hold. Properties
  // that only rule-following requests keep (every large-pool block above 1 MiB) are not checked:
  // a replay may seed any state the recording shows.
  std::vector<std::string> CheckInvariants() const;

 private:
  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;
    uint64_t stream = 0;
    uint64_t gc_base = 0;  // the pool's search count when the block became free
    BlockId prev = kNoBlock;
    BlockId next = kNoBlock;
    int32_t segment = -1;
    int32_t tag = -1;
    BlockView::State state = BlockView::State::kFree;
    Pool pool = Pool::kLarge;
    PoolIndex owner = kDefaultPool;
    bool expandable = false;
  };
  struct Key {
    uint64_t stream;
    uint64_t size;
    uint64_t addr;
    BlockId block;
    bool operator<(const Key& o) const {
      if (stream != o.stream) return stream < o.stream;
      if (size != o.size) return size < o.size;
      return addr < o.addr;
    }
  };
  struct AddrKey {
    uint64_t stream;
    uint64_t addr;
    BlockId block;
    bool operator<(const AddrKey& o) const {
      return stream != o.stream ? stream < o.stream : addr < o.addr;
    }
  };
  struct PoolBlocks {
    // Mapped free blocks: the best-fit set, plus the few freed last, held outside the tree
    // (oldest first; the oldest moves into the tree when a new one comes). Best fit takes the
    // smallest of the tree's candidate and the held blocks, so the order is exactly the tree's;
    // a block freed and soon taken again (the common case in a training loop) then costs no
    // insert or erase.
    static constexpr int kHeld = 8;
    absl::btree_set<Key> free;
    Key held[kHeld]{};
    int held_count = 0;
    absl::btree_set<AddrKey> unmapped;  // expandable: unmapped ranges by (stream, address)
    uint64_t searches = 0;              // get_free_block calls while GC is active (block age)
  };
  struct Segment {
    uint64_t addr = 0;
    uint64_t size = 0;  // virtual size for expandable segments
    uint64_t stream = 0;
    Pool pool = Pool::kLarge;
    bool expandable = false;
    bool live = false;
    BlockId head = kNoBlock;
    bool fallback = false;  // its address came from fallback_addresses_
    PoolIndex owner = kDefaultPool;
  };
  // The default pools (index 0) and each private pool.
  struct Owner {
    MemPoolId id;
    PrivatePoolOptions options;
    int use_count = 0;
    bool freeable = false;  // use count reached zero: released with the cache
    bool alive = true;      // forgotten once freeable and empty
    uint64_t reserved = 0;
    uint64_t allocated = 0;
    uint64_t segments = 0;  // PyTorch's cudaMalloc_count
  };

  BlockId NewBlock();
  void DeleteBlock(BlockId b);
  Key KeyOf(BlockId b) const {
    const Block& k = blocks_[b];
    return {k.stream, k.size, k.addr, b};
  }
  void InsertFree(BlockId b);
  void EraseFree(BlockId b);
  bool Mergeable(BlockId b) const;
  void MergeInto(BlockId dst, BlockId src);
  void MergeNeighbours(BlockId b);
  bool ShouldSplit(const Block& b, uint64_t size) const;
  BlockId CutAfter(BlockId b, uint64_t size);
  BlockId SplitLow(BlockId b, uint64_t size);

  BlockId GetFreeBlock(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size);
  BlockId AllocBlock(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size,
                     uint64_t alloc_size);
  bool ReleaseAvailableCachedBlocks(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size);
  void ReleaseCachedBlocks();
  void ReleaseBlocks(PoolIndex owner, Pool pool);
  void ForgetEmptyFreeablePools();
  // The (pool, size class) pairs release_cached_blocks frees, in its order: the default pools'
  // large then small blocks, then each freeable private pool's small then large ones. The one
  // place that order lives (ReleaseCachedBlocks and ReleasableSegments must agree with it).
  template <typename F>
  void ForEachReleasedPool(F&& f) const {
    f(kDefaultPool, Pool::kLarge);
    f(kDefaultPool, Pool::kSmall);
    for (size_t o = 1; o < owners_.size(); ++o) {
      if (!owners_[o].alive || !owners_[o].freeable) continue;
      f(static_cast<PoolIndex>(o), Pool::kSmall);
      f(static_cast<PoolIndex>(o), Pool::kLarge);
    }
  }
  BlockId FreeBlockOfOomPool(Pool pool, uint64_t stream, uint64_t size);
  void CountAllocated(const Block& b, int64_t sign);
  void ReleaseBlock(BlockId b);
  void GarbageCollect();
  void CompletePendingFrees();

  // Expandable segments.
  uint64_t ExpandableRangeSize(Pool pool) const;
  BlockId FindExpandableBlock(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size);
  BlockId TryAllocateExpandable(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size);
  BlockId MapBlock(BlockId b, uint64_t size);
  void UnmapBlock(BlockId b);
  // The device's memory; "unlimited" still stops at 64 PiB, so that sums of sizes and synthetic
  // addresses never wrap around, whatever a corrupt trace asks for.
  uint64_t DeviceLimit() const { return std::min(settings_.capacity, uint64_t{1} << 56); }
  uint64_t PageSize(Pool pool) const { return pool == Pool::kSmall ? kSmallBuffer : kLargeBuffer; }

  void Emit(SegmentAction action, Pool pool, uint64_t addr, uint64_t size, uint64_t stream,
            PoolIndex owner = kDefaultPool) {
    events_.push_back({action, pool, addr, size, stream, owner});
  }
  void AddReserved(PoolIndex owner, uint64_t bytes);
  void SubReserved(PoolIndex owner, uint64_t bytes);
  int32_t FindSegment(uint64_t addr) const;
  bool Overlaps(uint64_t addr, uint64_t size) const;
  uint64_t NewAddress(uint64_t size, uint64_t stream, Pool pool, bool* fallback);
  void FreeAddress(const Segment& seg, uint64_t addr, uint64_t size);

  AllocatorSettings settings_;
  SegmentAddressSource* addresses_;
  std::vector<Block> blocks_;
  std::vector<BlockId> spare_blocks_;
  // Moves the held block into the tree (before anything walks the tree). Logically const.
  static void Flush(PoolBlocks& pool) {
    for (int i = 0; i < pool.held_count; ++i) pool.free.insert(pool.held[i]);
    pool.held_count = 0;
  }
  // Free blocks of each (owner, size class): index 2 * owner + pool.
  mutable std::vector<PoolBlocks> pools_;
  PoolBlocks& Blocks(PoolIndex owner, Pool pool) const {
    return pools_[2 * static_cast<size_t>(owner) + static_cast<size_t>(pool)];
  }
  PoolBlocks& BlocksOf(const Block& b) const { return Blocks(b.owner, b.pool); }
  std::vector<Owner> owners_;
  std::map<MemPoolId, PoolIndex> owner_by_id_;  // live private pools
  std::vector<Segment> segments_;
  std::map<uint64_t, int32_t> segment_by_addr_;  // live segments by base address
  AllocatorStats stats_;
  std::vector<SegmentEvent> events_;
};

}  // namespace vramscope::allocator
