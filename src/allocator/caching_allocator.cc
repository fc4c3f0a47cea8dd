#include "allocator/caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cassert>

namespace vramscope::allocator {

const char* SegmentActionName(SegmentAction action) {
  switch (action) {
    case SegmentAction::kAlloc:
      return "segment_alloc";
    case SegmentAction::kFree:
      return "segment_free";
    case SegmentAction::kMap:
      return "segment_map";
    case SegmentAction::kUnmap:
      return "segment_unmap";
    case SegmentAction::kOom:
      return "oom";
  }
  return "?";
}

namespace {

// roundup_power2_next_division: the next of `divisions` equal steps between the powers of two
// around `size`; a power of two stays as it is.
uint64_t RoundUpToDivision(uint64_t size, uint64_t divisions) {
  if (std::has_single_bit(size)) return size;
  const uint64_t floor = std::bit_floor(size);
  const uint64_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  const uint64_t rounded_down = size & ~(step - 1);
  return rounded_down == size ? size : rounded_down + step;
}

}  // namespace

uint64_t RoundSize(uint64_t requested, const AllocatorSettings& settings) {
  if (requested < kMinBlockSize) return kMinBlockSize;
  // Bucket: floor(log2(size)) - 20, clamped to [0, 15] (1 MiB .. 32 GiB and above).
  const int log_size = std::bit_width(requested) - 1;
  const int bucket = std::clamp(log_size - 20, 0, static_cast<int>(kRoundupBuckets) - 1);
  const uint64_t divisions = settings.roundup_power2_divisions[static_cast<size_t>(bucket)];
  if (divisions > 1 && requested > kMinBlockSize * divisions) {
    return RoundUpToDivision(requested, divisions);
  }
  return kMinBlockSize * ((requested + kMinBlockSize - 1) / kMinBlockSize);
}

uint64_t SegmentSizeFor(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

// --- SyntheticAddresses ------------------------------------------------------------------------

uint64_t SyntheticAddresses::NewSegment(uint64_t size, uint64_t /*stream*/, Pool /*pool*/) {
  // cudaMalloc aligns to 2 MiB granules at least; keep the same alignment.
  const uint64_t need = (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= need) {
      const uint64_t addr = it->first;
      const uint64_t left = it->second - need;
      free_.erase(it);
      if (left > 0) free_.emplace(addr + need, left);
      return addr;
    }
  }
  const uint64_t addr = next_;
  next_ += need;
  return addr;
}

void SyntheticAddresses::FreeSegment(uint64_t addr, uint64_t size) {
  uint64_t start = addr;
  uint64_t len = (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + len == next->first) {
    len += next->second;
    free_.erase(next);
  }
  if (start + len == next_) {
    next_ = start;  // the top of the range shrinks back
  } else {
    free_.emplace(start, len);
  }
}

// --- blocks and the free set -------------------------------------------------------------------

CachingAllocator::CachingAllocator(const AllocatorSettings& settings,
                                   SegmentAddressSource* addresses)
    : settings_(settings), addresses_(addresses), pools_(2), owners_(1) {}

BlockId CachingAllocator::NewBlock() {
  if (!spare_blocks_.empty()) {
    const BlockId b = spare_blocks_.back();
    spare_blocks_.pop_back();
    blocks_[b] = Block{};
    return b;
  }
  blocks_.emplace_back();
  return static_cast<BlockId>(blocks_.size() - 1);
}

void CachingAllocator::DeleteBlock(BlockId b) {
  blocks_[b].segment = -1;
  spare_blocks_.push_back(b);
}

void CachingAllocator::InsertFree(BlockId b) {
  Block& k = blocks_[b];
  PoolBlocks& pool = BlocksOf(k);
  if (k.state == BlockView::State::kUnmapped) {
    pool.unmapped.insert({k.stream, k.addr, b});
  } else {
    k.state = BlockView::State::kFree;
    k.gc_base = pool.searches;  // age restarts whenever a block (re)enters the free set
    if (pool.held_count == PoolBlocks::kHeld) {
      pool.free.insert(pool.held[0]);
      std::copy(pool.held + 1, pool.held + PoolBlocks::kHeld, pool.held);
      --pool.held_count;
    }
    pool.held[pool.held_count++] = KeyOf(b);
  }
}

void CachingAllocator::EraseFree(BlockId b) {
  const Block& k = blocks_[b];
  PoolBlocks& pool = BlocksOf(k);
  if (k.state == BlockView::State::kUnmapped) {
    pool.unmapped.erase({k.stream, k.addr, b});
  } else {
    for (int i = pool.held_count; i-- > 0;) {
      if (pool.held[i].block == b) {
        std::copy(pool.held + i + 1, pool.held + pool.held_count, pool.held + i);
        --pool.held_count;
        return;
      }
    }
    pool.free.erase(KeyOf(b));
  }
}

bool CachingAllocator::Mergeable(BlockId b) const {
  if (b == kNoBlock) return false;
  const auto s = blocks_[b].state;
  return s == BlockView::State::kFree || s == BlockView::State::kUnmapped;
}

// try_merge_blocks: `src` (a free neighbour of `dst` in the same mapping state) disappears into
// `dst`, which keeps the lower address.
void CachingAllocator::MergeInto(BlockId dst, BlockId src) {
  Block& d = blocks_[dst];
  Block& s = blocks_[src];
  EraseFree(src);
  if (d.prev == src) {
    d.addr = s.addr;
    d.prev = s.prev;
    if (d.prev != kNoBlock) {
      blocks_[d.prev].next = dst;
    } else {
      segments_[d.segment].head = dst;
    }
  } else {
    d.next = s.next;
    if (d.next != kNoBlock) blocks_[d.next].prev = dst;
  }
  d.size += s.size;
  DeleteBlock(src);
}

// Merges `b` (not in any set yet) with its previous, then its next neighbour when they are free
// in the same mapping state, as free_block does.
void CachingAllocator::MergeNeighbours(BlockId b) {
  const bool unmapped = blocks_[b].state == BlockView::State::kUnmapped;
  for (const BlockId n : {blocks_[b].prev, blocks_[b].next}) {
    if (!Mergeable(n)) continue;
    if ((blocks_[n].state == BlockView::State::kUnmapped) != unmapped) continue;
    MergeInto(b, n);
  }
}

bool CachingAllocator::ShouldSplit(const Block& b, uint64_t size) const {
  const uint64_t remaining = b.size - size;
  if (b.owner != kDefaultPool && owners_[b.owner].options.no_split) return false;
  // With expandable segments on, every large block splits like a small one: the global flag
  // decides, not whether this block is expandable.
  if (b.pool == Pool::kSmall || settings_.expandable_segments) {
    return remaining >= kMinBlockSize;
  }
  return size < settings_.max_split_size && remaining > kSmallSize;
}

// `b` keeps [addr, addr+size); the rest becomes a new block right after it, in the same state,
// linked but in no set. Every split (malloc, map, unmap) goes through here.
BlockId CachingAllocator::CutAfter(BlockId b, uint64_t size) {
  const BlockId r = NewBlock();  // before taking references: it may grow blocks_
  Block& k = blocks_[b];
  Block& rest = blocks_[r];
  rest = k;
  rest.addr = k.addr + size;
  rest.size = k.size - size;
  rest.prev = b;
  if (rest.next != kNoBlock) blocks_[rest.next].prev = r;
  k.next = r;
  k.size = size;
  return r;
}

// Splits the free block `b` so that it keeps [addr, addr+size); the rest goes to the free set.
BlockId CachingAllocator::SplitLow(BlockId b, uint64_t size) {
  const BlockId r = CutAfter(b, size);
  InsertFree(r);
  return r;
}

// --- malloc ------------------------------------------------------------------------------------

BlockId CachingAllocator::GetFreeBlock(PoolIndex owner, Pool pool_kind, uint64_t stream,
                                       uint64_t size) {
  PoolBlocks& pool = Blocks(owner, pool_kind);
  if (settings_.GarbageCollectionActive()) ++pool.searches;
  if (settings_.expandable_segments) Flush(pool);  // its best fit walks the tree's order
  const Key want{stream, size, 0, kNoBlock};
  auto it = pool.free.lower_bound(want);
  const bool tree_fits = it != pool.free.end() && it->stream == stream;
  int best_held = -1;
  for (int i = 0; i < pool.held_count; ++i) {
    const Key& h = pool.held[i];
    if (h.stream == stream && !(h < want) && (best_held < 0 || h < pool.held[best_held])) {
      best_held = i;
    }
  }
  if (!tree_fits && best_held < 0) return kNoBlock;
  bool moved = false;  // `it` left the lower bound (expandable best fit below)
  if (best_held >= 0 && (!tree_fits || pool.held[best_held] < *it)) {
    // A held block is the best fit: the same rejections, and no tree operation.
    const Key h = pool.held[best_held];
    if (size < settings_.max_split_size && h.size >= settings_.max_split_size) return kNoBlock;
    if (size >= settings_.max_split_size && h.size >= size + settings_.max_non_split_rounding) {
      return kNoBlock;
    }
    std::copy(pool.held + best_held + 1, pool.held + pool.held_count, pool.held + best_held);
    --pool.held_count;
    return h.block;
  }
  if (blocks_[it->block].expandable) {
    // A free block right before unmapped space counts as the size it can grow to, so that best
    // fit prefers blocks that cannot grow and keeps the growth frontier for large requests.
    auto grow_size = [&](BlockId b) {
      const Block& k = blocks_[b];
      const bool unmapped_next =
          k.next != kNoBlock && blocks_[k.next].state == BlockView::State::kUnmapped;
      return k.size + (unmapped_next ? blocks_[k.next].size : 0);
    };
    auto next = std::next(it);
    while (blocks_[it->block].expandable && next != pool.free.end() && next->stream == stream &&
           grow_size(next->block) < grow_size(it->block)) {
      it = next++;
      moved = true;
    }
  }
  const uint64_t found = it->size;
  // An oversize block never serves a request below max_split_size, and serves a larger request
  // only when the unsplit slack stays under max_non_split_rounding.
  if (size < settings_.max_split_size && found >= settings_.max_split_size) return kNoBlock;
  if (size >= settings_.max_split_size && found >= size + settings_.max_non_split_rounding) {
    return kNoBlock;
  }
  const BlockId b = it->block;
  // Split in place: the remainder's key replaces this one's without moving in the tree, which
  // holds when `it` is the first key >= the request (no tree key lies in [size, found)) and the
  // remainder is at least the request.
  if (!moved && !blocks_[b].expandable && ShouldSplit(blocks_[b], size) && found - size >= size) {
    const BlockId r = CutAfter(b, size);
    Block& rest = blocks_[r];
    rest.state = BlockView::State::kFree;
    rest.gc_base = pool.searches;  // as if it had entered the free set
    Key& key = const_cast<Key&>(*it);
    key.size = rest.size;
    key.addr = rest.addr;
    key.block = r;
    return b;
  }
  pool.free.erase(it);
  return b;
}

void CachingAllocator::AddReserved(PoolIndex owner, uint64_t bytes) {
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  owners_[owner].reserved += bytes;
  if (owner != kDefaultPool) {
    stats_.reserved_private += bytes;
    stats_.peak_reserved_private = std::max(stats_.peak_reserved_private, stats_.reserved_private);
  }
}

void CachingAllocator::SubReserved(PoolIndex owner, uint64_t bytes) {
  stats_.reserved -= bytes;
  owners_[owner].reserved -= bytes;
  if (owner != kDefaultPool) stats_.reserved_private -= bytes;
}

// Adds (sign 1) or removes (sign -1) an allocated block in the counters.
void CachingAllocator::CountAllocated(const Block& b, int64_t sign) {
  if (sign > 0) {
    stats_.allocated += b.size;
    stats_.requested += b.requested;
    stats_.active += b.size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    owners_[b.owner].allocated += b.size;
    if (b.owner != kDefaultPool) stats_.allocated_private += b.size;
  } else {
    stats_.allocated -= b.size;
    stats_.requested -= b.requested;
    owners_[b.owner].allocated -= b.size;
    if (b.owner != kDefaultPool) stats_.allocated_private -= b.size;
  }
}

BlockId CachingAllocator::AllocBlock(PoolIndex owner, Pool pool, uint64_t stream, uint64_t size,
                                     uint64_t alloc_size) {
  // A memory fraction refuses by the segment size, before any CUDA call, on both paths.
  if (settings_.memory_fraction > 0 &&
      (alloc_size > settings_.AllowedMaximum() ||
       stats_.reserved > settings_.AllowedMaximum() - alloc_size)) {
    return kNoBlock;
  }
  if (settings_.expandable_segments) return TryAllocateExpandable(owner, pool, stream, size);
  const uint64_t capacity = DeviceLimit();
  if (alloc_size > capacity || stats_.reserved > capacity - alloc_size) {
    return kNoBlock;  // cudaMalloc fails: the device is full
  }
  bool fallback = false;
  const uint64_t addr = NewAddress(alloc_size, stream, pool, &fallback);
  const BlockId b = NewBlock();
  Block& k = blocks_[b];
  k.addr = addr;
  k.size = alloc_size;
  k.stream = stream;
  k.pool = pool;
  k.owner = owner;
  k.segment = static_cast<int32_t>(segments_.size());
  segments_.push_back({addr, alloc_size, stream, pool, false, true, b, fallback, owner});
  segment_by_addr_[addr] = k.segment;
  AddReserved(owner, alloc_size);
  ++owners_[owner].segments;
  ++stats_.segments;
  ++stats_.cuda_mallocs;
  Emit(SegmentAction::kAlloc, pool, addr, alloc_size, stream, owner);
  return b;
}

MallocResult CachingAllocator::Malloc(uint64_t requested, uint64_t stream, PoolIndex owner) {
  MallocResult result;
  if (owner < 0 || static_cast<size_t>(owner) >= owners_.size() || !owners_[owner].alive) {
    owner = kDefaultPool;  // a pool that is gone: the caller's mistake, served by the default
  }
  if (requested >= kMaxRequest) {
    ++stats_.ooms;
    Emit(SegmentAction::kOom, Pool::kLarge, 0, requested, stream);
    return result;
  }
  const uint64_t size = RoundSize(requested, settings_);
  const Pool pool = PoolFor(size);
  BlockId b = GetFreeBlock(owner, pool, stream, size);
  if (b == kNoBlock) {
    if (settings_.GarbageCollectionActive()) GarbageCollect();
    const uint64_t alloc_size = SegmentSizeFor(size);
    b = AllocBlock(owner, pool, stream, size, alloc_size);
    bool cached = false;  // served by a use_on_oom pool's cached block
    if (b == kNoBlock && owner == kDefaultPool) {
      b = FreeBlockOfOomPool(pool, stream, size);
      cached = b != kNoBlock;
      if (cached) owner = blocks_[b].owner;
    }
    if (b == kNoBlock && ReleaseAvailableCachedBlocks(owner, pool, stream, size)) {
      b = AllocBlock(owner, pool, stream, size, alloc_size);
    }
    // A request routed to a private pool is made while a capture or MemPool context is active,
    // and then PyTorch never releases the whole cache (captures_underway is not empty).
    if (b == kNoBlock && owner == kDefaultPool) {
      ReleaseCachedBlocks();
      ++stats_.alloc_retries;
      b = AllocBlock(owner, pool, stream, size, alloc_size);
    }
    if (b == kNoBlock) {
      ++stats_.ooms;
      const uint64_t allowed = settings_.AllowedMaximum();
      Emit(SegmentAction::kOom, pool, allowed > stats_.reserved ? allowed - stats_.reserved : 0,
           size, stream);
      return result;
    }
    result.new_segment = !cached;
  }
  Block& k = blocks_[b];
  if (k.size > size && ShouldSplit(k, size)) SplitLow(b, size);
  Block& kept = blocks_[b];
  kept.state = BlockView::State::kAllocated;
  kept.requested = requested;
  CountAllocated(kept, 1);
  result.block = b;
  result.addr = kept.addr;
  result.size = kept.size;
  return result;
}

// --- free --------------------------------------------------------------------------------------

void CachingAllocator::FreeRequested(BlockId b) {
  Block& k = blocks_[b];
  assert(k.state == BlockView::State::kAllocated);
  k.state = BlockView::State::kPendingFree;
  CountAllocated(k, -1);
}

void CachingAllocator::FreeCompleted(BlockId b) {
  Block& k = blocks_[b];
  assert(k.state == BlockView::State::kPendingFree);
  stats_.active -= k.size;
  k.requested = 0;
  k.tag = -1;
  k.state = BlockView::State::kFree;
  MergeNeighbours(b);
  InsertFree(b);
}

// synchronize_and_free_events: every waiting free completes. Rare (empty_cache, a failed
// cudaMalloc), so a scan of the blocks rather than a list kept up on every free. Completing
// merges only free neighbours and creates no block, so the scan stays valid.
void CachingAllocator::CompletePendingFrees() {
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (IsPendingFree(static_cast<BlockId>(b))) FreeCompleted(static_cast<BlockId>(b));
  }
}

// --- releasing cached memory -------------------------------------------------------------------

void CachingAllocator::ReleaseBlock(BlockId b) {
  const Block k = blocks_[b];
  assert(k.prev == kNoBlock && k.next == kNoBlock && !k.expandable);
  EraseFree(b);
  Segment& seg = segments_[k.segment];
  seg.live = false;
  segment_by_addr_.erase(seg.addr);
  SubReserved(k.owner, k.size);
  --owners_[k.owner].segments;
  --stats_.segments;
  ++stats_.cuda_frees;
  FreeAddress(seg, k.addr, k.size);
  Emit(SegmentAction::kFree, k.pool, k.addr, k.size, k.stream, k.owner);
  DeleteBlock(b);
}

void CachingAllocator::ReleaseBlocks(PoolIndex owner, Pool pool_kind) {
  PoolBlocks& pool = Blocks(owner, pool_kind);
  Flush(pool);
  std::vector<BlockId> whole;
  std::vector<BlockId> expandable;
  for (const Key& key : pool.free) {
    const Block& k = blocks_[key.block];
    if (k.expandable) {
      expandable.push_back(key.block);
    } else if (k.prev == kNoBlock && k.next == kNoBlock) {
      whole.push_back(key.block);
    }
  }
  for (const BlockId b : whole) ReleaseBlock(b);
  for (const BlockId b : expandable) {
    if (blocks_[b].segment >= 0 && blocks_[b].state == BlockView::State::kFree) UnmapBlock(b);
  }
  // An expandable range that is entirely unmapped again gives its addresses back (no trace).
  std::vector<BlockId> empty_ranges;
  for (const AddrKey& key : pool.unmapped) {
    const Block& k = blocks_[key.block];
    if (k.prev == kNoBlock && k.next == kNoBlock) empty_ranges.push_back(key.block);
  }
  for (const BlockId b : empty_ranges) {
    const Block k = blocks_[b];
    EraseFree(b);
    Segment& seg = segments_[k.segment];
    seg.live = false;
    segment_by_addr_.erase(seg.addr);
    FreeAddress(seg, seg.addr, seg.size);
    DeleteBlock(b);
  }
}

// release_cached_blocks: the default pools' unsplit cached segments, then those of every private
// pool whose users are all gone (graph_pools_freeable); such a pool is forgotten once it holds no
// segment. The cached blocks of a pool still in use stay: its graphs replay into them.
void CachingAllocator::ReleaseCachedBlocks() {
  CompletePendingFrees();
  ForEachReleasedPool([&](PoolIndex owner, Pool pool) { ReleaseBlocks(owner, pool); });
  ForgetEmptyFreeablePools();
}

void CachingAllocator::ForgetEmptyFreeablePools() {
  for (size_t o = 1; o < owners_.size(); ++o) {
    Owner& pool = owners_[o];
    if (pool.alive && pool.freeable && pool.segments == 0 && pool.reserved == 0) {
      pool.alive = false;
      owner_by_id_.erase(pool.id);
    }
  }
}

PoolIndex CachingAllocator::UsePrivatePool(MemPoolId id, PrivatePoolOptions options) {
  if (id.IsDefault()) return kDefaultPool;
  auto it = owner_by_id_.find(id);
  if (it != owner_by_id_.end()) {
    Owner& pool = owners_[it->second];
    ++pool.use_count;
    pool.freeable = false;  // in use again before its release (PyTorch: removed from freeable)
    return it->second;
  }
  const auto index = static_cast<PoolIndex>(owners_.size());
  Owner pool;
  pool.id = id;
  pool.options = options;
  pool.use_count = 1;
  owners_.push_back(pool);
  pools_.resize(pools_.size() + 2);
  owner_by_id_[id] = index;
  return index;
}

void CachingAllocator::ReleasePrivatePool(PoolIndex index) {
  if (index <= kDefaultPool || static_cast<size_t>(index) >= owners_.size()) return;
  Owner& pool = owners_[index];
  if (!pool.alive || pool.use_count == 0) return;
  if (--pool.use_count == 0) pool.freeable = true;
}

// try_mempool_fallback: a request of the default pools whose cudaMalloc failed takes a cached
// block of a MemPool made with use_on_oom (the first such pool, in order of creation, with a
// fitting block of this stream); the block stays that pool's. A pool whose users are gone
// (~MemPool unsets use_on_oom first) is not asked.
BlockId CachingAllocator::FreeBlockOfOomPool(Pool pool, uint64_t stream, uint64_t size) {
  for (size_t o = 1; o < owners_.size(); ++o) {
    if (!owners_[o].alive || owners_[o].freeable || !owners_[o].options.use_on_oom) continue;
    const BlockId b = GetFreeBlock(static_cast<PoolIndex>(o), pool, stream, size);
    if (b != kNoBlock) return b;
  }
  return kNoBlock;
}

uint64_t CachingAllocator::PrivatePoolsCachedBytes() const {
  uint64_t bytes = 0;
  for (size_t o = 1; o < owners_.size(); ++o) {
    if (!owners_[o].alive) continue;
    for (const Pool p : {Pool::kSmall, Pool::kLarge}) {
      PoolBlocks& pool = Blocks(static_cast<PoolIndex>(o), p);
      Flush(pool);
      for (const Key& key : pool.free) bytes += blocks_[key.block].size;
    }
  }
  return bytes;
}

std::optional<PoolIndex> CachingAllocator::FindPrivatePool(MemPoolId id) const {
  auto it = owner_by_id_.find(id);
  if (it == owner_by_id_.end()) return std::nullopt;
  return it->second;
}

void CachingAllocator::EmptyCache() { ReleaseCachedBlocks(); }

bool CachingAllocator::ReleaseAvailableCachedBlocks(PoolIndex owner, Pool pool_kind,
                                                    uint64_t stream, uint64_t size) {
  if (settings_.max_split_size == kUnlimited) return false;
  PoolBlocks& pool = Blocks(owner, pool_kind);
  Flush(pool);
  const uint64_t key_size = std::max(size, settings_.max_split_size);
  auto it = pool.free.lower_bound(Key{stream, key_size, 0, kNoBlock});
  if (it == pool.free.end() || it->stream != stream || blocks_[it->block].expandable) {
    // No single oversize block is large enough: release oversize blocks of this stream from the
    // largest down until enough is released.
    // Blocks released on the way stay released even when they do not add up to enough.
    if (it == pool.free.begin()) return false;
    --it;
    std::vector<BlockId> candidates;
    for (;;) {
      if (it->size < settings_.max_split_size || it->stream != stream) break;
      candidates.push_back(it->block);
      if (it == pool.free.begin()) break;
      --it;
    }
    uint64_t released = 0;
    for (const BlockId b : candidates) {
      if (released >= key_size) break;
      const Block& k = blocks_[b];
      if (k.expandable || k.prev != kNoBlock || k.next != kNoBlock) continue;
      released += k.size;
      ReleaseBlock(b);
      ++stats_.oversize_releases;
    }
    return released >= key_size;
  }
  const BlockId b = it->block;
  if (blocks_[b].prev != kNoBlock || blocks_[b].next != kNoBlock) return false;
  ReleaseBlock(b);
  ++stats_.oversize_releases;
  return true;
}

// garbage_collect_cached_blocks: once reserved memory passes threshold x allowed, release unsplit
// large-pool cached segments whose age (best-fit searches since they became free) is at least the
// mean age, repeating with the new mean until enough is reclaimed or nothing more goes.
void CachingAllocator::GarbageCollect() {
  const uint64_t allowed = settings_.AllowedMaximum();
  const auto threshold =
      static_cast<uint64_t>(settings_.garbage_collection_threshold * static_cast<double>(allowed));
  if (stats_.reserved <= threshold) return;
  const uint64_t target = stats_.reserved - threshold;
  PoolBlocks& pool = Blocks(kDefaultPool, Pool::kLarge);
  Flush(pool);
  auto age = [&](BlockId b) { return pool.searches - blocks_[b].gc_base; };
  auto freeable = [&](BlockId b) {
    const Block& k = blocks_[b];
    return !k.expandable && k.prev == kNoBlock && k.next == kNoBlock;
  };
  uint64_t total_age = 0;
  uint64_t count = 0;
  for (const Key& key : pool.free) {
    if (freeable(key.block)) {
      total_age += age(key.block);
      ++count;
    }
  }
  uint64_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    const double mean = static_cast<double>(total_age) / static_cast<double>(count);
    freed = false;
    std::vector<BlockId> victims;
    for (const Key& key : pool.free) {
      if (freeable(key.block) && static_cast<double>(age(key.block)) >= mean) {
        victims.push_back(key.block);
      }
    }
    for (const BlockId b : victims) {
      freed = true;
      reclaimed += blocks_[b].size;
      total_age -= age(b);
      --count;
      ReleaseBlock(b);
      ++stats_.gc_releases;
    }
  }
}

// --- expandable segments -----------------------------------------------------------------------

uint64_t CachingAllocator::ExpandableRangeSize(Pool pool) const {
  // One virtual range per (stream, pool) of 9/8 of the device's memory, in whole pages.
  uint64_t total = settings_.total_memory;
  if (total == 0) total = settings_.capacity != kUnlimited ? settings_.capacity : uint64_t{1} << 40;
  // ExpandableSegment: max_handles = ceil((total + total / 8) / page).
  const uint64_t page = PageSize(pool);
  return (total + total / 8 + page - 1) / page * page;
}

BlockId CachingAllocator::FindExpandableBlock(PoolIndex owner, Pool pool_kind, uint64_t stream,
                                              uint64_t size) {
  PoolBlocks& pool = Blocks(owner, pool_kind);
  auto usable = [&](BlockId b) { return Mergeable(b); };
  auto has_room = [&](BlockId b) {
    uint64_t bytes = 0;
    while (bytes < size && b != kNoBlock && usable(b)) {
      bytes += blocks_[b].size;
      b = blocks_[b].next;
    }
    return bytes >= size;
  };
  for (auto it = pool.unmapped.lower_bound(AddrKey{stream, 0, kNoBlock});
       it != pool.unmapped.end() && it->stream == stream; ++it) {
    BlockId c = it->block;
    // The lowest unmapped range, starting early at a free mapped block right before it.
    if (usable(blocks_[c].prev)) c = blocks_[c].prev;
    if (has_room(c)) return c;
  }
  // A new virtual range, all unmapped; a request larger than a whole range cannot be served.
  const uint64_t range = ExpandableRangeSize(pool_kind);
  if (range < size) return kNoBlock;
  bool fallback = false;
  const uint64_t addr = NewAddress(range, stream, pool_kind, &fallback);
  const BlockId b = NewBlock();
  Block& k = blocks_[b];
  k.addr = addr;
  k.size = range;
  k.stream = stream;
  k.pool = pool_kind;
  k.owner = owner;
  k.expandable = true;
  k.state = BlockView::State::kUnmapped;
  k.segment = static_cast<int32_t>(segments_.size());
  segments_.push_back({addr, range, stream, pool_kind, true, true, b, fallback, owner});
  segment_by_addr_[addr] = k.segment;
  InsertFree(b);
  return b;
}

// Maps whole pages at the start of the unmapped block `b`, enough for `size` bytes; the mapped
// part merges with free mapped neighbours. Returns the (merged) mapped block, in the free set, or
// kNoBlock when the device has no room.
BlockId CachingAllocator::MapBlock(BlockId b, uint64_t size) {
  const Pool pool = blocks_[b].pool;
  const uint64_t page = PageSize(pool);
  const uint64_t mapped = std::min((size + page - 1) / page * page, blocks_[b].size);
  const uint64_t capacity = DeviceLimit();
  if (mapped > capacity || stats_.reserved > capacity - mapped) {
    return kNoBlock;  // no physical memory for the pages
  }
  EraseFree(b);
  // The unmapped rest stays a block of its own after this one.
  if (blocks_[b].size > mapped) InsertFree(CutAfter(b, mapped));
  Block& k = blocks_[b];
  const uint64_t map_addr = k.addr;
  k.state = BlockView::State::kFree;
  MergeNeighbours(b);
  InsertFree(b);
  AddReserved(k.owner, mapped);
  ++stats_.cuda_mallocs;
  Emit(SegmentAction::kMap, pool, map_addr, mapped, k.stream, k.owner);
  return b;
}

BlockId CachingAllocator::TryAllocateExpandable(PoolIndex owner, Pool pool_kind, uint64_t stream,
                                                uint64_t size) {
  BlockId c = FindExpandableBlock(owner, pool_kind, stream, size);
  if (c == kNoBlock) return kNoBlock;
  if (blocks_[c].state == BlockView::State::kUnmapped) {
    c = MapBlock(c, std::min(blocks_[c].size, size));
    if (c == kNoBlock) return kNoBlock;
  }
  while (blocks_[c].size < size) {
    const BlockId next = blocks_[c].next;
    // Pages mapped so far stay mapped when the rest cannot be (as in torch).
    if (next == kNoBlock || blocks_[next].state != BlockView::State::kUnmapped) return kNoBlock;
    const uint64_t remaining = size - blocks_[c].size;
    c = MapBlock(next, std::min(remaining, blocks_[next].size));
    if (c == kNoBlock) return kNoBlock;
  }
  EraseFree(c);
  return c;
}

// Unmaps the whole pages inside the free block `b`; partial pages at either end stay mapped free
// blocks.
void CachingAllocator::UnmapBlock(BlockId b) {
  const Pool pool = blocks_[b].pool;
  const uint64_t page = PageSize(pool);
  const Block k = blocks_[b];
  const uint64_t seg_base = segments_[k.segment].addr;
  const uint64_t first = seg_base + (k.addr - seg_base + page - 1) / page * page;
  const uint64_t last = seg_base + (k.addr + k.size - seg_base) / page * page;
  if (last <= first) return;
  EraseFree(b);
  BlockId middle = b;
  if (first > k.addr) {
    // [k.addr, first) stays mapped: `b` becomes the free block before the unmapped range.
    middle = CutAfter(b, first - k.addr);
    InsertFree(b);
  }
  // [last, end) stays mapped too: a free block after it.
  if (last < k.addr + k.size) InsertFree(CutAfter(middle, last - first));
  blocks_[middle].state = BlockView::State::kUnmapped;
  MergeNeighbours(middle);
  InsertFree(middle);
  SubReserved(k.owner, last - first);
  ++stats_.cuda_frees;
  Emit(SegmentAction::kUnmap, pool, first, last - first, k.stream, k.owner);
}

// --- state from outside ------------------------------------------------------------------------

bool CachingAllocator::AddSegment(uint64_t addr, uint64_t size, uint64_t stream, Pool pool,
                                  PoolIndex owner) {
  if (size % kMinBlockSize != 0 || size > DeviceLimit() || Overlaps(addr, size)) return false;
  if (owner < 0 || static_cast<size_t>(owner) >= owners_.size() || !owners_[owner].alive) {
    owner = kDefaultPool;
  }
  const BlockId b = NewBlock();
  Block& k = blocks_[b];
  k.addr = addr;
  k.size = size;
  k.stream = stream;
  k.pool = pool;
  k.owner = owner;
  k.segment = static_cast<int32_t>(segments_.size());
  segments_.push_back({addr, size, stream, pool, false, true, b, false, owner});
  segment_by_addr_[addr] = k.segment;
  AddReserved(owner, size);
  ++owners_[owner].segments;
  ++stats_.segments;
  InsertFree(b);
  return true;
}

bool CachingAllocator::Overlaps(uint64_t addr, uint64_t size) const {
  if (size == 0 || addr > kUnlimited - size) return true;
  auto next = segment_by_addr_.lower_bound(addr);
  if (next != segment_by_addr_.end() && next->first < addr + size) return true;
  if (next != segment_by_addr_.begin()) {
    const Segment& prev = segments_[std::prev(next)->second];
    if (prev.addr + prev.size > addr) return true;
  }
  return false;
}

uint64_t CachingAllocator::NewAddress(uint64_t size, uint64_t stream, Pool pool, bool* fallback) {
  const uint64_t addr = addresses_->NewSegment(size, stream, pool);
  *fallback = Overlaps(addr, size);
  if (!*fallback) return addr;
  // An address source that hands out memory the model still holds (a recording that contradicts
  // the model's state) is overruled: the segment goes right above the highest live segment.
  // With no live segment the address itself was unusable (it wraps past 2^64: found by
  // native_trace_fuzzer, which read the top of an empty map): start from the lowest aligned one.
  uint64_t above = kRoundLarge;
  if (!segment_by_addr_.empty()) {
    const Segment& top = segments_[segment_by_addr_.rbegin()->second];
    above = (top.addr + top.size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  }
  return above > kUnlimited - size ? addr : above;
}

void CachingAllocator::FreeAddress(const Segment& seg, uint64_t addr, uint64_t size) {
  if (!seg.fallback) addresses_->FreeSegment(addr, size);
}

int32_t CachingAllocator::FindSegment(uint64_t addr) const {
  auto it = segment_by_addr_.upper_bound(addr);
  if (it == segment_by_addr_.begin()) return -1;
  --it;
  const Segment& s = segments_[it->second];
  return addr < s.addr + s.size ? it->second : -1;
}

BlockId CachingAllocator::AllocateAt(uint64_t addr, uint64_t size, uint64_t requested,
                                     uint64_t stream, bool split_by_rule) {
  const int32_t seg = FindSegment(addr);
  if (seg < 0 || size == 0) return kNoBlock;
  BlockId b = segments_[seg].head;
  while (b != kNoBlock && blocks_[b].addr + blocks_[b].size <= addr) b = blocks_[b].next;
  if (b == kNoBlock || blocks_[b].state != BlockView::State::kFree) return kNoBlock;
  if (blocks_[b].stream != stream || size > blocks_[b].addr + blocks_[b].size - addr) {
    return kNoBlock;
  }
  EraseFree(b);
  if (blocks_[b].addr < addr) {
    // Keep [block start, addr) free: split there and continue with the upper part.
    const BlockId upper = SplitLow(b, addr - blocks_[b].addr);  // inserts `upper` as free
    EraseFree(upper);
    InsertFree(b);
    b = upper;
  }
  if (blocks_[b].size > size && (!split_by_rule || ShouldSplit(blocks_[b], size))) {
    SplitLow(b, size);
  }
  Block& k = blocks_[b];
  k.state = BlockView::State::kAllocated;
  k.requested = requested;
  CountAllocated(k, 1);
  return b;
}

bool CachingAllocator::ReleaseSegmentAt(uint64_t addr) {
  auto it = segment_by_addr_.find(addr);
  if (it == segment_by_addr_.end()) return false;
  const Segment& s = segments_[it->second];
  const BlockId b = s.head;
  if (s.expandable || blocks_[b].next != kNoBlock || blocks_[b].state != BlockView::State::kFree) {
    return false;
  }
  ReleaseBlock(b);
  return true;
}

// --- observation -------------------------------------------------------------------------------

std::vector<SegmentView> CachingAllocator::Segments() const {
  std::vector<SegmentView> out;
  for (const auto& [addr, id] : segment_by_addr_) {
    const Segment& s = segments_[id];
    SegmentView* view = nullptr;
    for (BlockId b = s.head; b != kNoBlock; b = blocks_[b].next) {
      const Block& k = blocks_[b];
      if (k.state == BlockView::State::kUnmapped) {
        view = nullptr;  // expandable: a mapped range ends here
        continue;
      }
      if (view == nullptr) {
        out.push_back(
            {k.addr, 0, s.stream, s.pool, s.expandable, {}, s.owner, owners_[s.owner].id});
        view = &out.back();
      }
      view->size += k.size;
      view->blocks.push_back({k.addr, k.size, k.requested, k.state});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const SegmentView& a, const SegmentView& b) {
    if (a.owner != b.owner) return a.owner < b.owner;
    return a.pool != b.pool ? a.pool < b.pool : a.addr < b.addr;
  });
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> CachingAllocator::ReleasableSegments() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto add = [&](PoolIndex owner, Pool p) {
    PoolBlocks& pool = Blocks(owner, p);
    Flush(pool);
    for (const Key& key : pool.free) {
      const Block& k = blocks_[key.block];
      if (!k.expandable && k.prev == kNoBlock && k.next == kNoBlock) {
        out.emplace_back(k.addr, k.size);
      }
    }
  };
  ForEachReleasedPool(add);
  return out;
}

std::vector<std::string> CachingAllocator::CheckInvariants() const {
  for (PoolBlocks& pool : pools_) Flush(pool);
  std::vector<std::string> problems;
  std::vector<uint64_t> owner_reserved(owners_.size(), 0);
  std::vector<uint64_t> owner_allocated(owners_.size(), 0);
  uint64_t allocated = 0;
  uint64_t requested = 0;
  uint64_t active = 0;
  uint64_t reserved = 0;
  size_t free_count = 0;
  size_t unmapped_count = 0;
  for (const auto& [addr, id] : segment_by_addr_) {
    const Segment& s = segments_[id];
    uint64_t at = s.addr;
    BlockId prev = kNoBlock;
    bool prev_free = false;
    bool prev_unmapped = false;
    for (BlockId b = s.head; b != kNoBlock; b = blocks_[b].next) {
      const Block& k = blocks_[b];
      if (k.prev != prev) problems.push_back(fmt::format("block {:#x}: bad prev link", k.addr));
      if (k.addr != at) problems.push_back(fmt::format("block {:#x}: gap or overlap", k.addr));
      if (k.segment != id) problems.push_back(fmt::format("block {:#x}: wrong segment", k.addr));
      const bool is_free = k.state == BlockView::State::kFree;
      const bool is_unmapped = k.state == BlockView::State::kUnmapped;
      if ((is_free && prev_free) || (is_unmapped && prev_unmapped)) {
        problems.push_back(fmt::format("block {:#x}: free neighbours not merged", k.addr));
      }
      const PoolBlocks& pool = BlocksOf(k);
      if (k.owner != s.owner) problems.push_back(fmt::format("block {:#x}: wrong pool", k.addr));
      if (is_free) {
        ++free_count;
        if (!pool.free.contains(KeyOf(b))) {
          problems.push_back(fmt::format("block {:#x}: free but not in the free set", k.addr));
        }
      }
      if (is_unmapped) ++unmapped_count;
      if (!is_unmapped) {
        reserved += k.size;
        owner_reserved[s.owner] += k.size;
      }
      if (k.state == BlockView::State::kAllocated) {
        allocated += k.size;
        requested += k.requested;
        owner_allocated[s.owner] += k.size;
      }
      if (k.state == BlockView::State::kAllocated || k.state == BlockView::State::kPendingFree) {
        active += k.size;
      }
      at += k.size;
      prev = b;
      prev_free = is_free;
      prev_unmapped = is_unmapped;
    }
    if (at != s.addr + s.size) {
      problems.push_back(fmt::format("segment {:#x}: blocks do not cover it", s.addr));
    }
  }
  if (free_count != FreeBlockCount()) {
    problems.push_back(
        fmt::format("{} free blocks but {} in the free sets", free_count, FreeBlockCount()));
  }
  size_t unmapped_in_sets = 0;
  for (const PoolBlocks& pool : pools_) unmapped_in_sets += pool.unmapped.size();
  if (unmapped_count != unmapped_in_sets) problems.push_back("unmapped set out of step");
  uint64_t private_reserved = 0;
  uint64_t private_allocated = 0;
  for (size_t o = 0; o < owners_.size(); ++o) {
    if (owner_reserved[o] != owners_[o].reserved || owner_allocated[o] != owners_[o].allocated) {
      problems.push_back(fmt::format("pool {}: its counters are out of step", o));
    }
    if (o > 0) {
      private_reserved += owner_reserved[o];
      private_allocated += owner_allocated[o];
    }
  }
  if (private_reserved != stats_.reserved_private ||
      private_allocated != stats_.allocated_private) {
    problems.push_back("private-pool counters out of step");
  }
  if (allocated != stats_.allocated) problems.push_back("allocated counter out of step");
  if (requested != stats_.requested) problems.push_back("requested counter out of step");
  if (active != stats_.active) problems.push_back("active counter out of step");
  if (reserved != stats_.reserved) problems.push_back("reserved counter out of step");
  return problems;
}

}  // namespace vramscope::allocator
