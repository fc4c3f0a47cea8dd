#include "analysis/oom.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "allocator/allocator_settings.h"
#include "allocator/caching_allocator.h"
#include "common/units.h"

namespace vramscope::analysis {

using attribution::Category;
using model::Action;
using model::kNoEvent;

const char* OomLimitName(OomLimit limit) {
  switch (limit) {
    case OomLimit::kDevice:
      return "device";
    case OomLimit::kAllocatorCap:
      return "allocator_cap";
    case OomLimit::kUnknown:
      break;
  }
  return "unknown";
}

namespace {

struct RebuiltSegment {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  bool small = false;
  bool default_pool = true;  // not a CUDA graph / MemPool private pool
};

struct FreeState {
  bool known = false;
  std::string note;
  uint64_t largest_usable = 0, usable_bytes = 0, usable_blocks = 0;
  uint64_t largest_any = 0, free_bytes = 0;
};

// The end of an allocation's block occupancy: when its free completed (a block whose free waits
// for other streams is not free yet). kNoEvent: still occupied at the end of the trace.
int64_t BlockReleaseEvent(const model::Allocation& a) {
  if (a.free_completed_event != kNoEvent) return a.free_completed_event;
  if (a.alive_at_end) return kNoEvent;
  return a.free_requested_event;
}

// The free blocks of `device` right after `event`, rebuilt from the recording: the segments alive
// then (the segment timeline), minus the blocks of the allocations that occupied them. Free
// neighbours are always merged by the allocator, so each gap between occupied blocks is one free
// block.
FreeState RebuildFreeBlocks(const model::TraceView& view, const SegmentTimeline& segments,
                            const DeviceTimeline& timeline, int64_t event, uint64_t stream,
                            bool small_request) {
  const model::Trace& trace = view.trace;
  FreeState out;
  if (!trace.facts.has_allocator_state) {
    out.note = "the source records no allocator state (segments and blocks)";
    return out;
  }
  if (trace.facts.synthetic_segment_addresses) {
    out.note = "the source records reserved totals, not segments";
    return out;
  }
  std::map<uint64_t, RebuiltSegment> segs;
  for (const SegmentSpan& s : segments.segments) {
    if (s.device != timeline.device) continue;
    if (s.expandable) {
      out.note = "expandable segments map pages on demand: their free space is not blocks";
      return out;
    }
    const bool alive = s.first_event <= event && (s.end_event == kNoEvent || s.end_event > event);
    if (!alive) continue;
    segs[s.address] = {s.address, s.size, s.stream, s.pool == model::Pool::kSmall, !s.private_pool};
  }
  uint64_t total = 0;
  for (const auto& [addr, s] : segs) total += s.size;
  const int64_t reserved = timeline.ReservedAfter(static_cast<size_t>(event));
  if (static_cast<int64_t>(total) != reserved) {
    out.note = fmt::format(
        "the segments rebuilt at the event hold {} bytes, but {} bytes were reserved then", total,
        reserved);
    return out;
  }
  // Occupied blocks per segment: (address, size).
  std::map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> occupied;
  uint64_t outside = 0;
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (a.device != timeline.device) continue;
    const bool born = a.alloc_event == kNoEvent || a.alloc_event <= event;
    const int64_t release = BlockReleaseEvent(a);
    const bool gone = release != kNoEvent && release <= event;
    if (!born || gone) continue;
    auto it = segs.upper_bound(a.addr);
    if (it == segs.begin()) {
      ++outside;
      continue;
    }
    --it;
    if (a.addr >= it->second.addr + it->second.size) {
      ++outside;
      continue;
    }
    occupied[it->first].emplace_back(a.addr, view.BlockSize(i));
  }
  if (outside > 0) {
    out.note = fmt::format(
        "{} allocation(s) live at the event lie outside the segments rebuilt for it", outside);
    return out;
  }
  const bool large_request = !small_request;
  for (const auto& entry : segs) {
    // Not a structured binding: C++20 lambdas may not capture those before clang 16.
    const auto& s = entry.second;
    std::vector<std::pair<uint64_t, uint64_t>>& blocks = occupied[entry.first];
    std::sort(blocks.begin(), blocks.end());
    uint64_t cursor = s.addr;
    const uint64_t end = s.addr + s.size;
    auto gap = [&](uint64_t from, uint64_t to) {
      if (to <= from) return;
      const uint64_t bytes = to - from;
      // Every large-pool block is larger than 1 MiB (the allocator never splits off less), so a
      // smaller gap there is the unsplit tail of the block before it, whose size the trace left
      // as the rounded request.
      if (!s.small && bytes <= allocator::kSmallSize) return;
      out.free_bytes += bytes;
      out.largest_any = std::max(out.largest_any, bytes);
      if (s.small == !large_request && s.stream == stream && s.default_pool) {
        out.usable_bytes += bytes;
        ++out.usable_blocks;
        out.largest_usable = std::max(out.largest_usable, bytes);
      }
    };
    for (const auto& [block_addr, block_size] : blocks) {
      gap(cursor, std::min(block_addr, end));
      cursor = std::max(cursor, std::min(block_addr + block_size, end));
    }
    gap(cursor, end);
  }
  out.known = true;
  return out;
}

// What to try against the bytes of `category` held at an out-of-memory.
const char* Remedy(Category category) {
  switch (category) {
    case Category::kActivation:
      return "a smaller batch, or activation checkpointing (torch.utils.checkpoint)";
    case Category::kTemporary:
      return "a smaller batch or sequence length, activation checkpointing, or fused kernels "
             "(e.g. F.scaled_dot_product_attention)";
    case Category::kWeight:
      return "lower-precision weights (bf16) or sharding them (FSDP)";
    case Category::kGradient:
      return "lower-precision gradients or sharding them (FSDP, ZeRO-2)";
    case Category::kOptimizerState:
      return "a lighter optimizer state (8-bit Adam, Adafactor) or sharding it (ZeRO, FSDP)";
    case Category::kInput:
      return "a smaller batch";
    case Category::kWorkspace:
      return "a smaller cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG=:4096:8)";
    case Category::kUnknown:
      break;
  }
  return "freeing or shrinking the largest owners live then";
}

// "cut the temporary tensors (2.76 GiB, 98.1% of the 2.81 GiB live; the largest owner aten::addmm
// @ model.py:219 forward holds 768.00 MiB): try a smaller batch ..."; empty when nothing was live.
std::string LargestHolder(const LiveBreakdown& live) {
  const CategoryShare* top = nullptr;
  for (const CategoryShare& c : live.by_category) {
    if (c.bytes == 0) continue;
    if (top == nullptr || c.bytes > top->bytes) top = &c;
  }
  if (top == nullptr) return {};
  std::string owner;
  for (const OwnerGroup& o : live.by_owner) {
    if (o.category != top->category) continue;
    owner = fmt::format("; the largest owner, {}, holds {}", o.label,
                        FormatBytes(static_cast<int64_t>(o.bytes)));
    break;
  }
  return fmt::format("cut the {} tensors ({}, {:.1f}% of the {} live{}): try {}",
                     attribution::CategoryName(top->category),
                     FormatBytes(static_cast<int64_t>(top->bytes)),
                     100.0 * static_cast<double>(top->bytes) / static_cast<double>(live.bytes),
                     FormatBytes(static_cast<int64_t>(live.bytes)), owner, Remedy(top->category));
}

void Judge(OomExplanation& o) {
  const auto b = [](uint64_t v) { return FormatBytes(static_cast<int64_t>(v)); };
  // Reserved but unallocated memory also counts blocks whose free waits for other streams; the
  // rebuilt state knows which bytes really were free.
  const uint64_t unallocated = static_cast<uint64_t>(std::max<int64_t>(o.reserved_free_bytes, 0));
  const uint64_t cached_free = o.state_known ? o.free_block_bytes : unallocated;
  o.fragmentation = cached_free >= o.block_bytes;
  if (o.device_free_known) {
    o.limit = o.device_free_bytes >= o.segment_bytes ? OomLimit::kAllocatorCap : OomLimit::kDevice;
  }
  const std::string where =
      o.small_pool ? std::string("small pool") : fmt::format("large pool, stream {}", o.stream);
  if (o.fragmentation) {
    o.verdict = fmt::format(
        "fragmentation: {} was reserved but unallocated{}, more than the {} needed, but {}",
        b(unallocated),
        o.state_known && cached_free != unallocated
            ? fmt::format(" ({} of it in free blocks)", b(cached_free))
            : std::string(),
        b(o.block_bytes),
        o.state_known ? fmt::format("the largest free block that could serve it ({}) was {}", where,
                                    b(o.largest_free_block_bytes))
                      : std::string("no free block was large enough"));
  } else {
    o.verdict = fmt::format(
        "memory used up: only {} of the reserved memory was unallocated, less than the {} "
        "needed",
        b(unallocated), b(o.block_bytes));
  }
  switch (o.limit) {
    case OomLimit::kAllocatorCap:
      o.verdict += fmt::format(
          "; the device had {} free, so the limit was the process's cap "
          "(torch.cuda.set_per_process_memory_fraction), {}: reserving a {} segment would have "
          "passed it",
          b(o.device_free_bytes),
          o.cap_at_least_bytes > 0
              ? fmt::format("between {} and {}", b(o.cap_at_least_bytes), b(o.cap_below_bytes - 1))
              : fmt::format("below {}", b(o.cap_below_bytes)),
          b(o.segment_bytes));
      break;
    case OomLimit::kDevice:
      o.verdict += fmt::format("; the device had only {} free, less than the {} segment it needed",
                               b(o.device_free_bytes), b(o.segment_bytes));
      break;
    case OomLimit::kUnknown:
      o.verdict += "; the trace does not record the device's free memory";
      break;
  }

  const std::string holder = LargestHolder(o.live);
  if (o.fragmentation && !o.expandable_segments) {
    o.hint = fmt::format(
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so that the {} reserved but "
        "unallocated can serve a {} request instead of staying split into smaller blocks",
        b(unallocated), b(o.block_bytes));
  } else if (o.fragmentation) {
    o.hint = fmt::format(
        "expandable segments are on, yet the free memory could not serve the request (it lies "
        "in the other pool or on other streams){}",
        holder.empty() ? "" : "; " + holder);
  } else if (o.limit == OomLimit::kAllocatorCap) {
    o.hint = fmt::format(
        "raise the memory cap (torch.cuda.set_per_process_memory_fraction) to at least {} for "
        "this request to pass{}",
        b(static_cast<uint64_t>(o.reserved_bytes) + o.segment_bytes),
        holder.empty() ? "" : ", or " + holder);
  } else {
    o.hint = holder.empty() ? std::string(
                                  "nothing the trace knows of was live: the device's memory was "
                                  "held outside PyTorch's allocator (other processes, the CUDA "
                                  "context, NCCL)")
                            : holder;
  }
}

}  // namespace

std::vector<OomExplanation> ExplainOoms(const model::TraceView& view,
                                        const SegmentTimeline& segments,
                                        const DeviceTimeline& timeline,
                                        const attribution::Attribution& attribution,
                                        SiteNamer& sites, OwnerNamer& owners,
                                        attribution::StackFactsCache& facts) {
  const model::Trace& trace = view.trace;
  std::vector<OomExplanation> out;
  const model::Events& ev = trace.events;
  allocator::AllocatorSettings settings;
  if (auto recorded = allocator::SettingsFromSnapshot(trace.allocator_settings); recorded.ok()) {
    settings = *recorded;
  }
  for (size_t i = timeline.begin; i < timeline.end; ++i) {
    if (ev.action[i] != Action::kOom) continue;
    const auto event = static_cast<int64_t>(i);
    OomExplanation o;
    o.device = timeline.device;
    o.event = event;
    o.time_us = ev.time_us[i];
    o.step = attribution.phases.StepAt(event);
    o.phase = attribution.phases.At(event);
    o.requested_bytes = ev.size[i];
    o.block_bytes = allocator::RoundSize(ev.size[i], settings);
    o.small_pool = o.block_bytes <= allocator::kSmallSize;
    o.expandable_segments = settings.expandable_segments;
    o.segment_bytes =
        settings.expandable_segments ? o.block_bytes : allocator::SegmentSizeFor(o.block_bytes);
    o.stream = ev.stream[i];
    o.stack = ev.stack[i];
    if (const uint32_t site = sites.Site(o.stack); site != SiteNamer::kNoSite) {
      o.site = sites.Label(site);
    }
    if (const auto op = ev.operation.find(static_cast<uint32_t>(i)); op != ev.operation.end()) {
      o.operation = trace.strings.Get(op->second);
    } else if (const model::StringId name = facts.Get(o.stack).operation;
               name != model::kEmptyString) {
      o.operation = facts.Name(name);
    }
    if (const auto free = ev.oom_device_free.find(static_cast<uint32_t>(i));
        free != ev.oom_device_free.end()) {
      o.device_free_known = true;
      o.device_free_bytes = free->second;
    }
    o.allocated_bytes = timeline.allocated[i - timeline.begin];
    o.reserved_bytes = timeline.ReservedAfter(i);
    o.reserved_free_bytes = o.reserved_bytes - o.allocated_bytes;
    // The most the run had reserved before: the cap is at least that.
    int64_t peak_reserved = timeline.reserved_at_start;
    for (const auto& [step_event, level] : timeline.reserved_steps) {
      if (static_cast<int64_t>(step_event) > event) break;
      peak_reserved = std::max(peak_reserved, level);
    }
    o.cap_below_bytes = static_cast<uint64_t>(o.reserved_bytes) + o.segment_bytes;
    // Reserved memory released since (empty_cache) can leave the earlier peak above the bound;
    // then only the upper bound is known (0).
    o.cap_at_least_bytes = static_cast<uint64_t>(std::max<int64_t>(peak_reserved, 0));
    if (o.cap_at_least_bytes >= o.cap_below_bytes) o.cap_at_least_bytes = 0;

    const FreeState state =
        RebuildFreeBlocks(view, segments, timeline, event, o.stream, o.small_pool);
    o.state_known = state.known;
    o.state_note = state.note;
    o.largest_free_block_bytes = state.largest_usable;
    o.usable_free_bytes = state.usable_bytes;
    o.usable_free_blocks = state.usable_blocks;
    o.largest_free_block_any_bytes = state.largest_any;
    o.free_block_bytes = state.free_bytes;

    o.live = BreakdownAfter(view, attribution, sites, owners, timeline.device, event);
    Judge(o);
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace vramscope::analysis
