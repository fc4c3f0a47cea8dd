#include "predict/build_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "allocator/caching_allocator.h"
#include "common/units.h"

namespace vramscope::predict {

namespace {

using allocator::BlockId;
using allocator::CachingAllocator;
using allocator::SegmentAction;
using allocator::SyntheticAddresses;

// Device addresses of a prediction: a range no real CUDA allocation would use, so that nobody
// mistakes them for recorded ones.
constexpr uint64_t kAddressBase = 0x7e0000000000ULL;

model::Action ActionOf(SegmentAction a) {
  switch (a) {
    case SegmentAction::kAlloc:
      return model::Action::kSegmentAlloc;
    case SegmentAction::kFree:
      return model::Action::kSegmentFree;
    case SegmentAction::kMap:
      return model::Action::kSegmentMap;
    case SegmentAction::kUnmap:
      return model::Action::kSegmentUnmap;
    case SegmentAction::kOom:
      return model::Action::kOom;
  }
  return model::Action::kOther;
}

// The allocator settings in the flattened form snapshots record them (SettingsFromSnapshot), so
// that a replay of the prediction uses the settings it was made with.
std::vector<std::pair<std::string, std::string>> SnapshotSettings(
    const allocator::AllocatorSettings& s) {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("max_split_size", s.max_split_size == allocator::kUnlimited
                                         ? std::string("-1")
                                         : std::to_string(s.max_split_size));
  out.emplace_back("max_non_split_rounding", std::to_string(s.max_non_split_rounding));
  out.emplace_back("garbage_collection_threshold",
                   fmt::format("{}", s.garbage_collection_threshold));
  out.emplace_back("expandable_segments", s.expandable_segments ? "True" : "False");
  for (size_t i = 0; i < s.roundup_power2_divisions.size(); ++i) {
    if (s.roundup_power2_divisions[i] > 1) {
      out.emplace_back(fmt::format("roundup_power2_divisions.{}", uint64_t{1} << i),
                       std::to_string(s.roundup_power2_divisions[i]));
    }
  }
  return out;
}

Status DamagedStream(size_t index, std::string_view what) {
  return InvalidInput(fmt::format("tensor stream event {}: {}", index, what));
}

}  // namespace

Result<BuiltTrace> BuildPredictedTrace(TensorStream stream, const BuildOptions& options) {
  BuiltTrace out;
  model::Trace& trace = out.trace;
  trace.strings = std::move(stream.strings);
  trace.prediction = std::move(stream.info);
  SyntheticAddresses addresses(kAddressBase);
  CachingAllocator alloc(options.settings, &addresses);
  const int32_t dev = options.device;
  model::Events& ev = trace.events;
  ev.Reserve(stream.events.size() * 2);

  struct Live {
    BlockId block;
    uint32_t cuda_stream;  // the stream it was allocated on (its free is recorded on it)
  };
  std::unordered_map<uint64_t, Live> live;
  std::unordered_map<uint64_t, bool> seen;  // ids ever allocated
  std::unordered_map<uint32_t, uint64_t> block_size_of_event;
  // The stream's CUDA graph pools: the allocator model's private pool for each (PyTorch's id
  // {0, n}, as graph_pool_handle() makes for cudagraph trees), never released.
  struct GraphPool {
    allocator::PoolIndex index = allocator::kDefaultPool;
    uint64_t allocations = 0;
    uint64_t peak_reserved = 0;
  };
  std::map<uint32_t, GraphPool> graph_pools;
  int32_t step = 0;
  model::Phase phase = model::Phase::kSetup;
  bool phase_pending = false;

  auto drain_segments = [&] {
    for (const allocator::SegmentEvent& s : alloc.segment_events()) {
      if (s.action == SegmentAction::kOom) continue;  // pushed with the failing request
      ev.Push(ActionOf(s.action), dev, s.addr, s.size, s.stream, model::kNoTime,
              model::kEmptyStack);
    }
    alloc.segment_events().clear();
  };
  auto mark_phase = [&] {
    if (!phase_pending) return;
    trace.phase_marks.push_back({dev, static_cast<uint32_t>(ev.count()), step, phase});
    phase_pending = false;
  };

  for (size_t i = 0; i < stream.events.size(); ++i) {
    const StreamEvent& e = stream.events[i];
    switch (e.kind) {
      case StreamEvent::Kind::kPhase:
        step = e.step;
        phase = e.phase;
        phase_pending = true;
        break;
      case StreamEvent::Kind::kAlloc: {
        if (seen.count(e.id) > 0)
          return DamagedStream(i, fmt::format("id {} allocated twice", e.id));
        seen.emplace(e.id, true);
        if (e.bytes == 0) break;  // PyTorch makes no allocation for an empty storage
        mark_phase();
        GraphPool* graph_pool = nullptr;
        if (e.pool != 0) {
          graph_pool = &graph_pools[e.pool];
          if (graph_pool->index == allocator::kDefaultPool) {
            graph_pool->index = alloc.UsePrivatePool({0, static_cast<int64_t>(e.pool)});
          }
        }
        const allocator::MallocResult r =
            alloc.Malloc(e.bytes, e.cuda_stream,
                         graph_pool != nullptr ? graph_pool->index : allocator::kDefaultPool);
        if (graph_pool != nullptr && r.ok()) {
          ++graph_pool->allocations;
          graph_pool->peak_reserved =
              std::max(graph_pool->peak_reserved, alloc.PoolReserved(graph_pool->index));
        }
        drain_segments();
        if (!r.ok()) {
          const uint64_t allowed = options.settings.AllowedMaximum();
          const uint64_t reserved = alloc.stats().reserved;
          const auto oom_index = static_cast<uint32_t>(ev.count());
          ev.Push(model::Action::kOom, dev, 0, e.bytes, e.cuda_stream, model::kNoTime,
                  model::kEmptyStack);
          ev.oom_device_free[oom_index] = allowed > reserved ? allowed - reserved : 0;
          out.oom_at = i;
          i = stream.events.size();  // the run dies here
          break;
        }
        const auto index = static_cast<uint32_t>(ev.count());
        ev.Push(model::Action::kAlloc, dev, r.addr, e.bytes, e.cuda_stream, model::kNoTime,
                model::kEmptyStack);
        ev.category[index] = e.category;
        if (e.name != model::kEmptyString) ev.tensor_name[index] = e.name;
        if (e.op != model::kEmptyString) ev.operation[index] = e.op;
        block_size_of_event[index] = r.size;
        live.emplace(e.id, Live{r.block, e.cuda_stream});
        break;
      }
      case StreamEvent::Kind::kFree: {
        auto it = live.find(e.id);
        if (it == live.end()) {
          if (seen.count(e.id) > 0) break;  // an empty storage, or freed after an OOM
          return DamagedStream(i, fmt::format("id {} freed but never allocated", e.id));
        }
        mark_phase();
        const uint64_t addr = alloc.BlockAddress(it->second.block);
        const uint64_t size = alloc.BlockSize(it->second.block);
        alloc.FreeRequested(it->second.block);
        const uint32_t cuda_stream = it->second.cuda_stream;
        ev.Push(model::Action::kFreeRequested, dev, addr, size, cuda_stream, model::kNoTime,
                model::kEmptyStack);
        alloc.FreeCompleted(it->second.block);
        drain_segments();
        ev.Push(model::Action::kFreeCompleted, dev, addr, size, cuda_stream, model::kNoTime,
                model::kEmptyStack);
        live.erase(it);
        break;
      }
      case StreamEvent::Kind::kEmptyCache:
        mark_phase();
        alloc.EmptyCache();
        drain_segments();
        break;
      case StreamEvent::Kind::kMatmul:
      case StreamEvent::Kind::kConv:
        break;  // device_rules turned these into workspace allocations
    }
    if (ev.count() >= model::kMaxEvents) {
      return InvalidInput("the predicted step has more events than one trace holds (2^31)");
    }
  }
  for (const auto& [id, pool] : graph_pools) {
    if (!trace.prediction) break;
    trace.prediction->assumptions.push_back(fmt::format(
        "CUDA graph pool {}: its {} allocations are served from a private pool of the allocator "
        "model (segments of its own, whose blocks only the graphs' requests reuse), held to the "
        "end: the graphs keep their pool for their lifetime; the pool reserves {} at its peak",
        id, pool.allocations, FormatBytes(static_cast<int64_t>(pool.peak_reserved))));
  }
  // The state at the end, as a snapshot's segments.
  for (const allocator::SegmentView& s : alloc.Segments()) {
    model::Segment seg;
    seg.device = dev;
    seg.address = s.addr;
    seg.total_size = s.size;
    seg.stream = s.stream;
    seg.pool = s.pool == allocator::Pool::kSmall ? model::Pool::kSmall : model::Pool::kLarge;
    seg.pool_id[0] = s.pool_id.first;
    seg.pool_id[1] = s.pool_id.second;
    seg.is_expandable = s.expandable;
    seg.first_block = static_cast<uint32_t>(trace.blocks.size());
    for (const allocator::BlockView& b : s.blocks) {
      if (b.state == allocator::BlockView::State::kUnmapped) continue;
      model::Block block;
      block.address = b.addr;
      block.size = b.size;
      block.requested_size = b.requested;
      block.segment = static_cast<uint32_t>(trace.segments.size());
      switch (b.state) {
        case allocator::BlockView::State::kAllocated:
          block.state = model::BlockState::kActiveAllocated;
          seg.allocated_size += b.size;
          seg.active_size += b.size;
          seg.requested_size += b.requested;
          break;
        case allocator::BlockView::State::kPendingFree:
          block.state = model::BlockState::kActivePendingFree;
          seg.active_size += b.size;
          break;
        default:
          block.state = model::BlockState::kInactive;
          break;
      }
      trace.blocks.push_back(block);
    }
    seg.block_count = static_cast<uint32_t>(trace.blocks.size()) - seg.first_block;
    trace.segments.push_back(seg);
  }
  std::sort(trace.segments.begin(), trace.segments.end(),
            [](const model::Segment& a, const model::Segment& b) { return a.address < b.address; });
  // Blocks must stay grouped by segment in segment order: rebuild them in the sorted order.
  {
    std::vector<model::Block> blocks;
    blocks.reserve(trace.blocks.size());
    for (uint32_t s = 0; s < trace.segments.size(); ++s) {
      model::Segment& seg = trace.segments[s];
      const uint32_t first = static_cast<uint32_t>(blocks.size());
      for (uint32_t k = 0; k < seg.block_count; ++k) {
        model::Block b = trace.blocks[seg.first_block + k];
        b.segment = s;
        blocks.push_back(b);
      }
      seg.first_block = first;
    }
    trace.blocks = std::move(blocks);
  }

  trace.devices = {dev};
  trace.device_event_ranges = {{0, ev.count()}};
  trace.allocator_settings = SnapshotSettings(options.settings);
  trace.facts.has_allocator_state = true;
  trace.facts.reserved_known = true;
  trace.facts.has_trace = ev.count() > 0;
  trace.facts.has_segment_events = true;
  trace.facts.predicted = true;
  trace.source.format = "vramscope prediction";
  trace.source.generation = "predicted";
  model::BuildAllocations(trace);
  for (model::Allocation& a : trace.allocations) {
    if (a.alloc_event == model::kNoEvent) continue;
    const auto it = block_size_of_event.find(static_cast<uint32_t>(a.alloc_event));
    if (it == block_size_of_event.end()) continue;
    a.size = it->second;
    a.size_exact = true;
  }
  out.peak_allocated = alloc.stats().peak_allocated;
  out.peak_reserved = alloc.stats().peak_reserved;
  return out;
}

Result<PeakOnly> SimulatePeaks(const TensorStream& stream,
                               const allocator::AllocatorSettings& settings) {
  SyntheticAddresses addresses(kAddressBase);
  CachingAllocator alloc(settings, &addresses);
  std::unordered_map<uint64_t, BlockId> live;
  live.reserve(1024);
  PeakOnly out;
  for (size_t i = 0; i < stream.events.size(); ++i) {
    const StreamEvent& e = stream.events[i];
    if (e.kind == StreamEvent::Kind::kAlloc) {
      if (e.bytes == 0) continue;
      const allocator::MallocResult r = alloc.Malloc(e.bytes, e.cuda_stream);
      alloc.segment_events().clear();
      if (!r.ok()) {
        out.oom = true;
        break;
      }
      live[e.id] = r.block;
    } else if (e.kind == StreamEvent::Kind::kFree) {
      auto it = live.find(e.id);
      if (it == live.end()) continue;
      alloc.Free(it->second);
      alloc.segment_events().clear();
      live.erase(it);
    } else if (e.kind == StreamEvent::Kind::kEmptyCache) {
      alloc.EmptyCache();
      alloc.segment_events().clear();
    }
  }
  out.peak_allocated = alloc.stats().peak_allocated;
  out.peak_reserved = alloc.stats().peak_reserved;
  return out;
}

}  // namespace vramscope::predict
