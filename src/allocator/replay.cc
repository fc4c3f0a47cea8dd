#include "allocator/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>

namespace vramscope::allocator {

const char* PoolMappingName(PoolMapping mapping) {
  switch (mapping) {
    case PoolMapping::kRecorded:
      return "recorded";
    case PoolMapping::kShared:
      return "shared";
    case PoolMapping::kNone:
      return "none";
  }
  return "?";
}

double ReplayResult::FragmentationAtPeak() const {
  if (stats.peak_reserved == 0) return 0;
  const double reserved = static_cast<double>(stats.peak_reserved);
  return (reserved - static_cast<double>(allocated_at_peak_reserved)) / reserved;
}

namespace {

using model::Action;
constexpr size_t kMaxDivergenceLines = 20;

struct InitialSegment {
  uint64_t addr;
  uint64_t size;
  uint64_t stream;
  Pool pool;
  MemPoolId pool_id;  // (0, 0) for the default pools, and for segments the trace released
};
struct InitialBlock {
  uint64_t addr;
  uint64_t size;
  uint64_t requested;
  uint64_t stream;
  int32_t allocation;
  bool exact;
  // The block lies inside a segment the recording implies, so the allocator's rules fix its size
  // (below): the replay reports it with the sizes it confirmed.
  bool established = false;
};

// Segments that existed when the trace began: those at the dump, walked back through the
// recorded segment events (an alloc means it did not exist before; a free means it did).
std::map<uint64_t, InitialSegment> InitialSegments(const model::Trace& trace, int32_t device,
                                                   size_t begin, size_t end,
                                                   uint64_t* skipped_expandable) {
  std::map<uint64_t, InitialSegment> segs;
  for (const model::Segment& s : trace.segments) {
    if (s.device != device) continue;
    if (s.is_expandable) {
      ++*skipped_expandable;
      continue;
    }
    segs[s.address] = {s.address, s.total_size, s.stream, s.pool, {s.pool_id[0], s.pool_id[1]}};
  }
  const model::Events& ev = trace.events;
  for (size_t i = end; i-- > begin;) {
    if (ev.action[i] == Action::kSegmentAlloc) {
      segs.erase(ev.addr[i]);
    } else if (ev.action[i] == Action::kSegmentFree) {
      segs[ev.addr[i]] = {ev.addr[i], ev.size[i], ev.stream[i], PoolOfSegmentSize(ev.size[i]), {}};
    }
  }
  return segs;
}

// Allocations alive when the trace began, with their block sizes. A block whose size is not
// known exactly (it was freed during the trace, which records only the requested size) takes
// the rounded request; in the large pool, a gap of 1 MiB or less after it cannot be a free block
// (every large-pool block is larger), so it is the unsplit remainder of this one. Inside a known
// segment that fixes the block: the small pool always splits off the rest (sizes are multiples of
// 512 B), and the large pool splits off more than 1 MiB or nothing.
std::vector<InitialBlock> InitialBlocks(const model::Trace& trace, int32_t device,
                                        const std::map<uint64_t, InitialSegment>& segs,
                                        const AllocatorSettings& settings) {
  std::vector<InitialBlock> blocks;
  for (size_t a = 0; a < trace.allocations.size(); ++a) {
    const model::Allocation& al = trace.allocations[a];
    if (al.device != device || al.alloc_event != model::kNoEvent) continue;
    // A pre-trace allocation whose only record is a free_completed that comes right after
    // the snapshot began is still allocated (its free was requested before the trace).
    const uint64_t size = al.size_exact ? al.size : RoundSize(al.requested_size, settings);
    blocks.push_back(
        {al.addr, size, al.requested_size, al.stream, static_cast<int32_t>(a), al.size_exact});
  }
  std::sort(blocks.begin(), blocks.end(),
            [](const InitialBlock& x, const InitialBlock& y) { return x.addr < y.addr; });
  for (size_t k = 0; k < blocks.size(); ++k) {
    InitialBlock& b = blocks[k];
    if (b.exact) continue;
    auto it = segs.upper_bound(b.addr);
    if (it == segs.begin()) continue;
    --it;
    const InitialSegment& s = it->second;
    if (b.addr + b.size > s.addr + s.size) continue;
    b.established = true;
    if (s.pool != Pool::kLarge) continue;
    uint64_t boundary = s.addr + s.size;
    if (k + 1 < blocks.size() && blocks[k + 1].addr < boundary) boundary = blocks[k + 1].addr;
    if (boundary <= b.addr + b.size) continue;
    const uint64_t gap = boundary - (b.addr + b.size);
    const bool oversize = b.size >= settings.max_split_size;
    if (gap <= kSmallSize || (oversize && gap < settings.max_non_split_rounding)) b.size += gap;
  }
  return blocks;
}

// New segments take the recorded address when the model asks for the size the recording
// allocated before the same request; otherwise a synthetic one above every recorded address.
class ReplayAddresses : public SegmentAddressSource {
 public:
  struct Recorded {
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    int64_t event;
  };
  explicit ReplayAddresses(uint64_t synthetic_base)
      : synthetic_(synthetic_base), synthetic_base_(synthetic_base) {}

  uint64_t NewSegment(uint64_t size, uint64_t stream, Pool pool) override {
    if (!queue.empty() && queue.front().size == size && queue.front().stream == stream) {
      const uint64_t addr = queue.front().addr;
      queue.pop_front();
      ++matched;
      return addr;
    }
    return synthetic_.NewSegment(size, stream, pool);
  }
  void FreeSegment(uint64_t addr, uint64_t size) override {
    if (addr >= synthetic_base_) synthetic_.FreeSegment(addr, size);
  }
  bool IsSynthetic(uint64_t addr) const { return addr >= synthetic_base_; }

  std::deque<Recorded> queue;  // recorded segment_allocs not yet taken, in order
  uint64_t matched = 0;

 private:
  SyntheticAddresses synthetic_;
  uint64_t synthetic_base_;
};

uint64_t SyntheticBase(const model::Trace& trace) {
  // Saturating: a corrupt trace may hold addresses near the top of the 64-bit space.
  auto end_of = [](uint64_t addr, uint64_t size) {
    return addr > kUnlimited - size ? kUnlimited : addr + size;
  };
  uint64_t top = 0;
  for (const model::Segment& s : trace.segments)
    top = std::max(top, end_of(s.address, s.total_size));
  const model::Events& ev = trace.events;
  for (size_t i = 0; i < ev.count(); ++i) {
    if (ev.action[i] != Action::kOom) top = std::max(top, end_of(ev.addr[i], ev.size[i]));
  }
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // Real device addresses are below 2^49; past that the synthetic range simply starts at 2^62.
  if (top > (uint64_t{1} << 61)) return uint64_t{1} << 62;
  return (top / kGiB + 16) * kGiB;
}

bool IsActiveState(BlockView::State s) {
  return s == BlockView::State::kAllocated || s == BlockView::State::kPendingFree;
}

class Replayer {
 public:
  Replayer(const model::Trace& trace, int32_t device, const ReplayOptions& options)
      : trace_(trace),
        ev_(trace.events),
        options_(options),
        addresses_(SyntheticBase(trace)),
        model_(options.settings, &addresses_) {
    result_.device = device;
    result_.settings = options.settings;
    result_.follow_recording = options.follow_recording;
  }

  Result<ReplayResult> Run() {
    const auto [begin, end] = trace_.EventRange(result_.device);
    begin_ = begin;
    end_ = end;
    result_.begin_event = static_cast<int64_t>(begin);
    result_.end_event = static_cast<int64_t>(end);
    if (begin == end) {
      return InvalidInput(
          fmt::format("device {} has no trace events to replay (the snapshot was taken without "
                      "torch.cuda.memory._record_memory_history, or that device was idle)",
                      result_.device));
    }
    if (!trace_.facts.has_trace) {
      return InvalidInput(
          "the snapshot holds no alloc/free trace to replay; record one with "
          "torch.cuda.memory._record_memory_history() before the step");
    }
    SetUpInitialState();
    recorded_reserved_ = model_.stats().reserved;
    peak_reserved_ = model_.stats().reserved;
    peak_allocated_ = model_.stats().allocated;
    result_.peak_reserved_event = static_cast<int64_t>(begin);
    result_.allocated_at_peak_reserved = model_.stats().allocated;
    size_t i = begin;
    const size_t stop = options_.stop_before_event >= 0
                            ? std::min(end, static_cast<size_t>(options_.stop_before_event))
                            : end;
    if (options_.record_curves) curve_.emplace(stop - begin, options_.curve_points);
    for (; i < stop; ++i) {
      if (!Step(i)) break;
      Drain(i);
      Sample(i);
    }
    result_.events_replayed = static_cast<int64_t>(i - begin);
    Finish();
    return std::move(result_);
  }

 private:
  // The model's pool for the recording's pool number `n` (0: default), made on first use.
  PoolIndex ModelPool(int32_t n) {
    if (n <= 0 || options_.pools == PoolMapping::kNone) return kDefaultPool;
    if (options_.pools == PoolMapping::kShared) n = 1;
    if (model_pool_.size() <= static_cast<size_t>(n)) model_pool_.resize(n + 1, kDefaultPool);
    if (model_pool_[n] == kDefaultPool) {
      model_pool_[n] = model_.UsePrivatePool(recorded_pools_.pools[n - 1]);
      if (pool_results_.size() < static_cast<size_t>(model_pool_[n])) {
        pool_results_.resize(model_pool_[n]);
      }
      pool_results_[model_pool_[n] - 1].id = recorded_pools_.pools[n - 1];
    }
    return model_pool_[n];
  }
  int32_t PoolNumber(MemPoolId id) const {
    for (size_t k = 0; k < recorded_pools_.pools.size(); ++k) {
      if (recorded_pools_.pools[k] == id) return static_cast<int32_t>(k + 1);
    }
    return 0;
  }

  void SetUpInitialState() {
    recorded_pools_ = InferRecordedPools(trace_, result_.device, begin_, end_);
    result_.pool_mapping = options_.pools;
    if (!recorded_pools_.empty()) {
      for (const std::string& note : recorded_pools_.notes) result_.notes.push_back(note);
      if (options_.pools != PoolMapping::kRecorded) {
        result_.notes.push_back(
            options_.pools == PoolMapping::kShared
                ? fmt::format("what-if: the {} private pool(s) share one pool",
                              recorded_pools_.pools.size())
                : fmt::format("what-if: no private pools (the graphs' and MemPools' requests go "
                              "to the default pools)"));
      }
    }
    uint64_t skipped_expandable = 0;
    const auto segs = InitialSegments(trace_, result_.device, begin_, end_, &skipped_expandable);
    if (skipped_expandable > 0) {
      result_.notes.push_back(fmt::format(
          "{} expandable segment(s) at the dump are not reconstructed at the start of the "
          "trace; the replay starts without them",
          skipped_expandable));
    }
    uint64_t refused = 0;
    for (const auto& [addr, s] : segs) {
      const PoolIndex owner =
          s.pool_id.IsDefault() ? kDefaultPool : ModelPool(PoolNumber(s.pool_id));
      if (!model_.AddSegment(s.addr, s.size, s.stream, s.pool, owner)) ++refused;
    }
    if (refused > 0) {
      result_.notes.push_back(fmt::format(
          "{} segment(s) the recording implies at the start overlap others or have an impossible "
          "size; they are left out",
          refused));
    }
    block_of_.assign(trace_.allocations.size(), kNoBlock);
    uint64_t unplaced = 0;
    for (const InitialBlock& b : InitialBlocks(trace_, result_.device, segs, options_.settings)) {
      const BlockId id = model_.AllocateAt(b.addr, b.size, b.requested, b.stream);
      if (id == kNoBlock) {
        ++unplaced;
        continue;
      }
      model_.SetTag(id, b.allocation);
      block_of_[b.allocation] = id;
      ++result_.initial_blocks;
      if (b.established && !b.exact)
        result_.confirmed_block_sizes.emplace_back(b.allocation, b.size);
    }
    if (unplaced > 0) {
      result_.notes.push_back(fmt::format(
          "{} allocation(s) alive before the trace lie outside the segments the recording "
          "implies; they are left out",
          unplaced));
    }
    result_.initial_segments = segs.size();
    result_.initial_reserved = model_.stats().reserved;
    result_.initial_allocated = model_.stats().allocated;
    if (!segs.empty() || result_.initial_blocks > 0) {
      result_.notes.push_back(fmt::format(
          "the trace starts with {} segment(s) ({} bytes) and {} allocation(s) already in place; "
          "they are rebuilt from the recording",
          segs.size(), result_.initial_reserved, result_.initial_blocks));
    }
    // Which allocation each alloc/free event belongs to.
    alloc_of_.assign(end_ - begin_, -1);
    for (size_t a = 0; a < trace_.allocations.size(); ++a) {
      const model::Allocation& al = trace_.allocations[a];
      if (al.device != result_.device) continue;
      for (const int64_t e :
           {static_cast<int64_t>(al.alloc_event), static_cast<int64_t>(al.free_requested_event),
            static_cast<int64_t>(al.free_completed_event)}) {
        if (e >= static_cast<int64_t>(begin_) && e < static_cast<int64_t>(end_)) {
          alloc_of_[static_cast<size_t>(e) - begin_] = static_cast<int32_t>(a);
        }
      }
    }
  }

  void Diverge(std::string line) {
    ++result_.comparison.divergence_count;
    if (result_.comparison.divergences.size() < kMaxDivergenceLines) {
      result_.comparison.divergences.push_back(std::move(line));
    }
  }

  // Returns false to stop the replay (an OOM in a what-if run).
  bool Step(size_t i) {
    switch (ev_.action[i]) {
      case Action::kAlloc:
        return OnAlloc(i);
      case Action::kFreeRequested:
        OnFreeRequested(i);
        return true;
      case Action::kFreeCompleted:
        OnFreeCompleted(i);
        return true;
      case Action::kSegmentAlloc:
        recorded_reserved_ += ev_.size[i];
        ++result_.comparison.recorded_segment_allocs;
        addresses_.queue.push_back(
            {ev_.addr[i], ev_.size[i], ev_.stream[i], static_cast<int64_t>(i)});
        return true;
      case Action::kSegmentFree:
        OnSegmentFree(i);
        return true;
      case Action::kSegmentMap:
        recorded_reserved_ += ev_.size[i];
        ++result_.comparison.recorded_maps;
        return true;
      case Action::kSegmentUnmap:
        recorded_reserved_ -= std::min(recorded_reserved_, ev_.size[i]);
        ++result_.comparison.recorded_unmaps;
        return true;
      case Action::kOom: {
        auto free_it = ev_.oom_device_free.find(static_cast<uint32_t>(i));
        result_.notes.push_back(fmt::format(
            "the recorded run ran out of memory at event {} (a request of {} bytes{}); the "
            "failed request is not in the trace",
            i, ev_.size[i],
            free_it != ev_.oom_device_free.end()
                ? fmt::format(", {} bytes free on the device", free_it->second)
                : ""));
        return true;
      }
      default:
        return true;
    }
  }

  bool OnAlloc(size_t i) {
    const uint64_t requested = ev_.size[i];
    const uint64_t stream = ev_.stream[i];
    const int32_t a = alloc_of_[i - begin_];
    const uint64_t matched_before = addresses_.matched;
    const size_t events_before = model_.segment_events().size();
    const PoolIndex owner = ModelPool(recorded_pools_.PoolOfEvent(i));
    const MallocResult m = model_.Malloc(requested, stream, owner);
    if (m.ok() && owner != kDefaultPool) ++pool_results_[owner - 1].allocations;
    uint64_t model_new_segment = 0;
    uint64_t model_new_segment_size = 0;
    for (size_t k = events_before; k < model_.segment_events().size(); ++k) {
      const SegmentEvent& e = model_.segment_events()[k];
      if (e.action == SegmentAction::kAlloc) {
        ++result_.comparison.model_segment_allocs;
        model_new_segment = e.addr;
        model_new_segment_size = e.size;
      } else if (e.action == SegmentAction::kMap) {
        model_new_segment = e.addr;  // new memory too, though not a segment of its own
        model_new_segment_size = e.size;
      }
    }
    if (!m.ok()) {
      OomPoint oom;
      oom.event = static_cast<int64_t>(i);
      oom.requested = requested;
      oom.rounded = RoundSize(requested, options_.settings);
      oom.stream = stream;
      oom.allocated = model_.stats().allocated;
      oom.reserved = model_.stats().reserved;
      oom.allowed = options_.settings.AllowedMaximum();
      if (!result_.oom) result_.oom = oom;
      if (options_.stop_at_oom) return false;
      return true;
    }
    result_.comparison.segment_allocs_matched += addresses_.matched - matched_before;
    if (!options_.follow_recording) {
      Bind(a, m.block);
      return true;
    }
    ++result_.comparison.allocs;
    if (m.addr == ev_.addr[i]) {
      ++result_.comparison.allocs_at_recorded_address;
      if (a >= 0 && !trace_.allocations[a].size_exact) {
        result_.confirmed_block_sizes.emplace_back(a, m.size);
      }
      Bind(a, m.block);
      AdoptLeftoverSegments(i);
      return true;
    }
    // The model placed it elsewhere: say why, then follow the recording.
    std::string why;
    if (!addresses_.queue.empty() && model_new_segment == 0) {
      why = fmt::format(
          "the recording allocated a new {}-byte segment, the model reused a cached "
          "block",
          addresses_.queue.front().size);
    } else if (model_new_segment != 0 && addresses_.IsSynthetic(model_new_segment)) {
      why = addresses_.queue.empty()
                ? fmt::format(
                      "the model allocated a new {}-byte segment, the recording reused a "
                      "cached block",
                      model_new_segment_size)
                : fmt::format("the model allocated a {}-byte segment, the recording {} bytes",
                              model_new_segment_size, addresses_.queue.front().size);
    } else {
      why = "a different cached block was chosen";
    }
    ++result_.comparison.resyncs;
    model_.Discard(m.block);
    if (model_new_segment != 0 && addresses_.IsSynthetic(model_new_segment) &&
        model_.ReleaseSegmentAt(model_new_segment)) {
      --result_.comparison.model_segment_allocs;
    }
    AdoptLeftoverSegments(i);  // their lines come first: their events come first
    Diverge(fmt::format("event {}: alloc of {} bytes: model at {:#x}, recording at {:#x} ({})", i,
                        requested, m.addr, ev_.addr[i], why));
    const BlockId forced = model_.AllocateAt(ev_.addr[i], RoundSize(requested, options_.settings),
                                             requested, stream, /*split_by_rule=*/true);
    if (forced == kNoBlock) {
      Diverge(
          fmt::format("event {}: the recorded address {:#x} is not free in the model; this "
                      "allocation is left out",
                      i, ev_.addr[i]));
      return true;
    }
    Bind(a, forced);
    return true;
  }

  // Recorded segment_allocs the model did not make: in compare mode the segment is added so that
  // the state follows the recording.
  void AdoptLeftoverSegments(size_t i) {
    while (!addresses_.queue.empty()) {
      const auto r = addresses_.queue.front();
      addresses_.queue.pop_front();
      Diverge(
          fmt::format("event {}: the recording allocated a {}-byte segment at {:#x} that the "
                      "model did not need",
                      r.event, r.size, r.addr));
      const PoolIndex owner = ModelPool(recorded_pools_.PoolOfEvent(static_cast<size_t>(r.event)));
      if (!model_.AddSegment(r.addr, r.size, r.stream, PoolOfSegmentSize(r.size), owner)) {
        Diverge(fmt::format("event {}: the recorded segment at {:#x} overlaps one the model holds",
                            r.event, r.addr));
      }
    }
    (void)i;
  }

  void Bind(int32_t a, BlockId b) {
    if (a < 0) return;
    block_of_[a] = b;
    model_.SetTag(b, a);
  }

  BlockId BlockOf(size_t i) const {
    const int32_t a = alloc_of_[i - begin_];
    if (a < 0) return kNoBlock;
    const BlockId b = block_of_[a];
    return model_.Tag(b) == a ? b : kNoBlock;
  }

  void OnFreeRequested(size_t i) {
    const BlockId b = BlockOf(i);
    if (b == kNoBlock || !model_.IsAllocated(b)) return;
    if (trace_.facts.Skipped("free_completed")) {
      // Recorded with skip_actions=["free_completed"]: no completion will come; the block is
      // taken as free at its request (what a free on a stream with no pending work does).
      model_.Free(b);
      block_of_[alloc_of_[i - begin_]] = kNoBlock;
      return;
    }
    model_.FreeRequested(b);
  }

  void OnFreeCompleted(size_t i) {
    const BlockId b = BlockOf(i);
    if (b == kNoBlock) return;  // completed already (empty_cache), or never placed
    if (model_.IsPendingFree(b)) {
      model_.FreeCompleted(b);
    } else if (model_.IsAllocated(b)) {
      model_.Free(b);  // the trace began between its free_requested and free_completed
    }
    block_of_[alloc_of_[i - begin_]] = kNoBlock;
  }

  void OnSegmentFree(size_t i) {
    recorded_reserved_ -= std::min(recorded_reserved_, ev_.size[i]);
    ++result_.comparison.recorded_segment_frees;
    const bool starts_burst = i == begin_ || ev_.action[i - 1] != Action::kSegmentFree;
    if (starts_burst) BeginBurst(i);
    if (!options_.follow_recording) return;
    ReleaseBurst& burst = result_.comparison.bursts.back();
    if (model_.ReleaseSegmentAt(ev_.addr[i])) {
      if (burst.matches_rule) ++result_.comparison.segment_frees_matched;
    } else {
      Diverge(
          fmt::format("event {}: the recording released the segment at {:#x} ({} bytes), "
                      "which the model does not hold as an entirely free segment",
                      i, ev_.addr[i], ev_.size[i]));
    }
  }

  void BeginBurst(size_t i) {
    ReleaseBurst burst;
    burst.first_event = static_cast<int64_t>(i);
    std::vector<std::pair<uint64_t, uint64_t>> recorded;
    size_t j = i;
    for (; j < end_ && ev_.action[j] == Action::kSegmentFree; ++j) {
      recorded.emplace_back(ev_.addr[j], ev_.size[j]);
      burst.bytes += ev_.size[j];
    }
    burst.segments = recorded.size();
    // cudaMalloc failed, the cache was released, and the retry allocated: the burst is followed
    // by the segment allocation of the request that triggered it.
    const bool retry = j < end_ && (ev_.action[j] == Action::kSegmentAlloc ||
                                    ev_.action[j] == Action::kSegmentMap);
    burst.cause = retry ? ReleaseBurst::Cause::kMallocRetry : ReleaseBurst::Cause::kEmptyCache;
    const auto expected = model_.ReleasableSegments();
    if (options_.follow_recording) {
      const std::set<std::pair<uint64_t, uint64_t>> want(expected.begin(), expected.end());
      const std::set<std::pair<uint64_t, uint64_t>> got(recorded.begin(), recorded.end());
      bool oversize_subset = false;
      if (retry && options_.settings.max_split_size != kUnlimited) {
        oversize_subset = std::all_of(recorded.begin(), recorded.end(), [&](const auto& r) {
          return want.count(r) > 0 && r.second >= options_.settings.max_split_size;
        });
      }
      burst.matches_rule = want == got || oversize_subset;
      burst.same_order = expected == recorded;
      if (!burst.matches_rule) {
        size_t missing = 0;
        for (const auto& r : recorded) missing += want.count(r) == 0 ? 1 : 0;
        Diverge(fmt::format(
            "event {}: the recording released {} segment(s) ({} not entirely free in the "
            "model); the rule releases {}",
            i, recorded.size(), missing, expected.size()));
      }
    } else if (!retry) {
      // A what-if keeps the user's empty_cache() calls; a release because cudaMalloc failed is
      // the model's own decision under its capacity.
      model_.EmptyCache();
      ++result_.empty_cache_calls;
    }
    if (retry) {
      result_.notes.push_back(fmt::format(
          "event {}: cudaMalloc failed in the recorded run with {} bytes reserved, and {} cached "
          "segment(s) ({} bytes) were released before the retry: the device was full there",
          i, recorded_reserved_ + burst.bytes - ev_.size[i], burst.segments, burst.bytes));
    }
    result_.comparison.bursts.push_back(burst);
  }

  void Drain(size_t i) {
    auto& events = model_.segment_events();
    for (const SegmentEvent& e : events) {
      result_.segment_events.push_back({static_cast<int64_t>(i), e});
    }
    events.clear();
  }

  void Sample(size_t i) {
    const AllocatorStats& s = model_.stats();
    if (curve_) curve_->Add(static_cast<int64_t>(i), s.allocated, s.reserved, s.requested);
    if (s.reserved > peak_reserved_) {
      peak_reserved_ = s.reserved;
      result_.peak_reserved_event = static_cast<int64_t>(i);
      result_.allocated_at_peak_reserved = s.allocated;
    }
    peak_allocated_ = std::max(peak_allocated_, s.allocated);
    for (size_t o = 0; o < pool_results_.size(); ++o) {
      PoolResult& p = pool_results_[o];
      p.peak_reserved =
          std::max(p.peak_reserved, model_.PoolReserved(static_cast<PoolIndex>(o + 1)));
    }
    if (options_.follow_recording) {
      const Action a = ev_.action[i];
      if (a == Action::kAlloc || a == Action::kFreeRequested || a == Action::kFreeCompleted) {
        ++result_.comparison.compared_points;
        const uint64_t diff = s.reserved > recorded_reserved_ ? s.reserved - recorded_reserved_
                                                              : recorded_reserved_ - s.reserved;
        if (diff == 0) ++result_.comparison.reserved_equal_points;
        result_.comparison.max_reserved_difference =
            std::max(result_.comparison.max_reserved_difference, diff);
      }
    }
  }

  void Finish() {
    result_.stats = model_.stats();
    // Peaks as sampled after each event: a decision undone to follow the recording (a segment
    // the model allocated and gave back at once) is not part of the curve.
    result_.stats.peak_reserved = peak_reserved_;
    result_.stats.peak_allocated = peak_allocated_;
    if (curve_) result_.curve = curve_->Finish();
    result_.final_state = model_.Segments();
    for (size_t o = 0; o < pool_results_.size(); ++o) {
      PoolResult& p = pool_results_[o];
      const auto index = static_cast<PoolIndex>(o + 1);
      p.reserved_at_end = model_.PoolReserved(index);
      p.allocated_at_end = model_.PoolAllocated(index);
      p.cached_at_end = p.reserved_at_end - p.allocated_at_end;
    }
    result_.pools = std::move(pool_results_);
    if (options_.check_invariants) result_.invariant_violations = model_.CheckInvariants();
    if (!options_.follow_recording) return;
    // Compare with the snapshot's segments of this device.
    std::unordered_map<uint64_t, const SegmentView*> mine;
    for (const SegmentView& s : result_.final_state) mine[s.addr] = &s;
    ReplayComparison& c = result_.comparison;
    for (const model::Segment& s : trace_.segments) {
      if (s.device != result_.device) continue;
      ++c.final_segments_recorded;
      c.final_blocks_recorded += s.block_count;
      auto it = mine.find(s.address);
      if (it == mine.end() || it->second->size != s.total_size) continue;
      const SegmentView& m = *it->second;
      bool all = m.blocks.size() == s.block_count;
      for (uint32_t k = 0; k < s.block_count; ++k) {
        const model::Block& rb = trace_.blocks[s.first_block + k];
        const bool found = std::any_of(m.blocks.begin(), m.blocks.end(), [&](const BlockView& b) {
          return b.addr == rb.address && b.size == rb.size &&
                 IsActiveState(b.state) == model::IsActive(rb.state);
        });
        if (found) {
          ++c.final_blocks_matched;
        } else {
          all = false;
        }
      }
      if (all) ++c.final_segments_matched;
    }
  }

  const model::Trace& trace_;
  const model::Events& ev_;
  const ReplayOptions& options_;
  ReplayAddresses addresses_;
  CachingAllocator model_;
  ReplayResult result_;
  std::optional<CurveReducer> curve_;  // with record_curves
  size_t begin_ = 0;
  size_t end_ = 0;
  std::vector<int32_t> alloc_of_;  // per event of the range: its allocation, or -1
  std::vector<BlockId> block_of_;  // per allocation: its block in the model
  RecordedPools recorded_pools_;
  std::vector<PoolIndex> model_pool_;     // recording's pool number -> the model's pool
  std::vector<PoolResult> pool_results_;  // per model private pool (index - 1)
  uint64_t recorded_reserved_ = 0;
  uint64_t peak_reserved_ = 0;
  uint64_t peak_allocated_ = 0;
};

}  // namespace

Result<ReplayResult> Replay(const model::Trace& trace, int32_t device,
                            const ReplayOptions& options) {
  Replayer replayer(trace, device, options);
  return replayer.Run();
}

ReservedPeak RecordedPeakReserved(const model::Trace& trace, int32_t device) {
  const auto [begin, end] = trace.EventRange(device);
  uint64_t skipped = 0;
  uint64_t reserved = 0;
  for (const auto& [addr, s] : InitialSegments(trace, device, begin, end, &skipped)) {
    reserved += s.size;
  }
  ReservedPeak peak;
  const model::Events& ev = trace.events;
  for (size_t i = begin; i < end; ++i) {
    switch (ev.action[i]) {
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        reserved += ev.size[i];
        break;
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        reserved -= std::min(reserved, ev.size[i]);
        break;
      default:
        break;
    }
    if (peak.event < 0 || reserved > peak.bytes) peak = {reserved, static_cast<int64_t>(i)};
  }
  return peak;
}

}  // namespace vramscope::allocator
