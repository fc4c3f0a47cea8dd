#include "model/trace.h"

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "model/allocator_constants.h"
#include "model/vocabulary.h"

namespace vramscope::model {

namespace {
struct ActionNameEntry {
  Action action;
  const char* name;
};
constexpr ActionNameEntry kActionNames[] = {
    {Action::kAlloc, "alloc"},
    {Action::kFreeRequested, "free_requested"},
    {Action::kFreeCompleted, "free_completed"},
    {Action::kSegmentAlloc, "segment_alloc"},
    {Action::kSegmentFree, "segment_free"},
    {Action::kSegmentMap, "segment_map"},
    {Action::kSegmentUnmap, "segment_unmap"},
    {Action::kOom, "oom"},
    {Action::kSnapshot, "snapshot"},
    {Action::kUserDefined, "user_defined"},
    {Action::kAnnotate, "annotate"},
};
}  // namespace

const char* ActionName(Action action) {
  for (const auto& entry : kActionNames) {
    if (entry.action == action) return entry.name;
  }
  return "other";
}

std::optional<Action> ParseAction(std::string_view name) {
  for (const auto& entry : kActionNames) {
    if (name == entry.name) return entry.action;
  }
  return std::nullopt;
}

const char* BlockStateName(BlockState state) {
  switch (state) {
    case BlockState::kActiveAllocated:
      return "active_allocated";
    case BlockState::kActivePendingFree:
      return "active_pending_free";
    case BlockState::kInactive:
      return "inactive";
  }
  return "?";
}

const char* PoolName(Pool pool) {
  for (const PoolSpelling& p : kPoolSpellings) {
    if (p.pool == pool) return p.name.data();
  }
  return "large";
}

void Events::Reserve(size_t n) {
  action.reserve(n);
  device.reserve(n);
  addr.reserve(n);
  size.reserve(n);
  stream.reserve(n);
  time_us.reserve(n);
  stack.reserve(n);
}

void Events::Push(Action a, int32_t dev, uint64_t address, uint64_t bytes, uint64_t strm, int64_t t,
                  StackId s) {
  action.push_back(a);
  device.push_back(dev);
  addr.push_back(address);
  size.push_back(bytes);
  stream.push_back(strm);
  time_us.push_back(t);
  stack.push_back(s);
}

std::pair<size_t, size_t> Trace::EventRange(int32_t dev) const {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] == dev && i < device_event_ranges.size()) return device_event_ranges[i];
  }
  return {0, 0};
}

std::pair<size_t, size_t> DeviceEventRange(const Events& events, int32_t device) {
  // The first event whose device is not below `bound` (with `after`: above it).
  auto partition = [&](int32_t bound, bool after) {
    size_t lo = 0, hi = events.count();
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      const int32_t d = events.device[mid];
      if (d < bound || (after && d == bound)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  };
  return {partition(device, false), partition(device, true)};
}

void StableSortEventsByDevice(Events& e) {
  std::vector<uint32_t> order(e.count());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return e.device[x] < e.device[y]; });
  std::vector<uint32_t> new_index(order.size());
  for (uint32_t i = 0; i < order.size(); ++i) new_index[order[i]] = i;
  auto permute = [&](auto& column) {
    auto copy = column;
    for (size_t i = 0; i < order.size(); ++i) column[i] = copy[order[i]];
  };
  permute(e.action);
  e.device.Permute(order);
  permute(e.addr);
  permute(e.size);
  e.stream.Permute(order);
  permute(e.time_us);
  permute(e.stack);
  auto rekey = [&](auto& sparse) {
    std::remove_reference_t<decltype(sparse)> out;
    for (const auto& [index, value] : sparse) out.emplace(new_index[index], value);
    sparse = std::move(out);
  };
  rekey(e.oom_device_free);
  rekey(e.compile_context);
  rekey(e.user_metadata);
  rekey(e.other_action);
  rekey(e.category);
  rekey(e.tensor_name);
  rekey(e.operation);
}

uint64_t RoundedRequestSize(uint64_t requested) {
  if (requested < kMinBlockSize) return kMinBlockSize;
  return (requested + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

void BuildAllocations(Trace& trace) {
  std::vector<Allocation>& out = trace.allocations;
  out.clear();
  const Events& ev = trace.events;
  TraceFacts& facts = trace.facts;
  facts.frees_without_alloc = 0;
  uint64_t reused_live_address = 0;
  // Recorded with skip_actions=["free_completed"]: a block's free request is all there is.
  const bool skipped_completion = facts.Skipped("free_completed");

  // Every alloc event starts an allocation; a free without one starts one too, rarely. Reserved
  // up front: growing by doubling copied the table twice and peaked at 1.5 times its size.
  out.reserve(static_cast<size_t>(std::count(ev.action.begin(), ev.action.end(), Action::kAlloc)) +
              trace.blocks.size());
  // The live allocations of one device by address. An open-addressing table: a node-based one
  // spent most of this function in malloc and free (one node an alloc event).
  absl::flat_hash_map<uint64_t, size_t> open;
  std::vector<std::pair<int32_t, size_t>> open_at_end;  // (device, allocation)
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const int32_t device = trace.devices[d];
    const auto [begin, end] = trace.device_event_ranges[d];
    open.clear();
    // A lifetime that starts with event i (its alloc, or a free whose alloc the trace lacks).
    auto start = [&](size_t i) {
      Allocation a;
      a.device = device;
      a.addr = ev.addr[i];
      a.requested_size = ev.size[i];
      a.size = facts.sizes_are_block_sizes ? ev.size[i] : RoundedRequestSize(ev.size[i]);
      a.size_exact = facts.sizes_are_block_sizes;
      a.stream = ev.stream[i];
      out.push_back(a);
      return out.size() - 1;
    };
    for (size_t i = begin; i < end; ++i) {
      const uint64_t addr = ev.addr[i];
      switch (ev.action[i]) {
        case Action::kAlloc: {
          if (const auto it = open.find(addr); it != open.end()) {
            // The trace lost this block's free (it should not happen); close the old lifetime.
            out[it->second].free_completed_event = static_cast<int64_t>(i);
            ++reused_live_address;
          }
          const size_t index = start(i);
          out[index].alloc_event = static_cast<int32_t>(i);
          out[index].alloc_stack = ev.stack[i];
          open[addr] = index;
          break;
        }
        case Action::kFreeRequested:
        case Action::kFreeCompleted: {
          const bool completed = ev.action[i] == Action::kFreeCompleted;
          auto it = open.find(addr);
          if (it == open.end()) {
            // A free whose alloc fell off the ring buffer (or happened before recording).
            ++facts.frees_without_alloc;
            it = open.emplace(addr, start(i)).first;
          }
          Allocation& a = out[it->second];
          if (a.free_stack == kEmptyStack) a.free_stack = ev.stack[i];
          if (!completed && a.free_requested_event == kNoEvent) {
            a.free_requested_event = static_cast<int64_t>(i);
          }
          if (completed || skipped_completion) {
            a.free_completed_event = static_cast<int64_t>(i);
            open.erase(it);
          }
          break;
        }
        default:
          break;
      }
    }
    for (const auto& [addr, index] : open) open_at_end.emplace_back(device, index);
  }

  // Match what is still live with the snapshot's active blocks: their sizes are exact.
  std::unordered_map<uint64_t, std::vector<size_t>> active_blocks;  // addr -> blocks (any device)
  for (size_t b = 0; b < trace.blocks.size(); ++b) {
    if (IsActive(trace.blocks[b].state)) active_blocks[trace.blocks[b].address].push_back(b);
  }
  std::vector<bool> block_matched(trace.blocks.size(), false);
  auto find_block = [&](int32_t device, uint64_t addr) -> int32_t {
    const auto it = active_blocks.find(addr);
    if (it == active_blocks.end()) return -1;
    for (size_t b : it->second) {
      if (!block_matched[b] && trace.segments[trace.blocks[b].segment].device == device) {
        return static_cast<int32_t>(b);
      }
    }
    return -1;
  };
  std::sort(open_at_end.begin(), open_at_end.end(),
            [](const auto& x, const auto& y) { return x.second < y.second; });
  uint64_t live_without_block = 0;
  for (const auto& [device, index] : open_at_end) {
    Allocation& a = out[index];
    a.alive_at_end = true;
    const int32_t b = find_block(device, a.addr);
    if (b < 0) {
      ++live_without_block;
      continue;
    }
    block_matched[b] = true;
    a.block = b;
    a.size = trace.blocks[b].size;
    a.size_exact = true;
  }
  // Blocks alive at the dump that the trace never allocated: alive before the trace began.
  for (size_t b = 0; b < trace.blocks.size(); ++b) {
    const Block& block = trace.blocks[b];
    if (!IsActive(block.state) || block_matched[b]) continue;
    Allocation a;
    a.device = trace.segments[block.segment].device;
    a.addr = block.address;
    a.requested_size = block.requested_size != 0 ? block.requested_size : block.size;
    a.size = block.size;
    a.size_exact = true;
    a.alive_at_end = true;
    a.stream = trace.segments[block.segment].stream;
    a.alloc_stack = block.stack;
    a.block = static_cast<int32_t>(b);
    out.push_back(a);
  }

  // Sources without an allocator state: memory allocated before recording began that no event
  // explains is one allocation alive throughout, so that every byte has a lifetime (and a
  // category) like the rest.
  if (!facts.has_allocator_state) {
    for (const StartLevels& level : trace.start_levels) {
      int64_t rest = level.untracked_allocated;
      for (const StartLevels::Known& k : level.known) {
        Allocation a;
        a.device = level.device;
        a.addr = k.addr;
        a.size = k.size;
        a.requested_size = k.requested_size != 0 ? k.requested_size : k.size;
        a.size_exact = true;
        a.alive_at_end = true;
        a.stream = k.stream;
        a.alloc_stack = k.stack;
        out.push_back(a);
        rest -= static_cast<int64_t>(k.size);
      }
      if (rest <= 0) continue;
      Allocation a;
      a.device = level.device;
      a.requested_size = a.size = static_cast<uint64_t>(rest);
      a.size_exact = true;
      a.alive_at_end = true;
      out.push_back(a);
    }
  }
  facts.allocations_alive_before_trace = static_cast<uint64_t>(std::count_if(
      out.begin(), out.end(), [](const Allocation& a) { return a.alloc_event == kNoEvent; }));
  facts.starts_mid_run = facts.frees_without_alloc > 0;
  if (facts.has_trace && facts.frees_without_alloc > 0) {
    facts.notes.push_back(fmt::format(
        "the trace starts mid-run: {} frees have no matching alloc in it (ring buffer, or "
        "recording began late); those allocations count from the start of the trace",
        facts.frees_without_alloc));
  }
  if (reused_live_address > 0) {
    facts.notes.push_back(fmt::format(
        "{} allocs reuse an address that was still live in the trace (a lost free event)",
        reused_live_address));
  }
  if (live_without_block > 0 && facts.has_allocator_state) {
    facts.notes.push_back(fmt::format(
        "{} allocations live at the end of the trace have no active block in the snapshot",
        live_without_block));
  }
}

std::vector<std::string> CheckStateInvariants(const Trace& trace) {
  std::vector<std::string> problems;
  for (size_t s = 0; s < trace.segments.size(); ++s) {
    const Segment& seg = trace.segments[s];
    uint64_t expect = seg.address, total = 0, allocated = 0, active = 0, requested = 0;
    for (uint32_t b = seg.first_block; b < seg.first_block + seg.block_count; ++b) {
      const Block& block = trace.blocks[b];
      if (block.address != expect) {
        problems.push_back(fmt::format(
            "segment {} (device {}, 0x{:x}): block {} starts at 0x{:x}, expected 0x{:x}", s,
            seg.device, seg.address, b - seg.first_block, block.address, expect));
      }
      expect = block.address + block.size;
      total += block.size;
      if (block.state == BlockState::kActiveAllocated) allocated += block.size;
      if (IsActive(block.state)) {
        active += block.size;
        requested += block.requested_size;
      }
    }
    auto check = [&](const char* what, uint64_t recorded, uint64_t summed) {
      if (recorded != summed) {
        problems.push_back(
            fmt::format("segment {} (device {}, 0x{:x}): {} is {} but its blocks "
                        "sum to {}",
                        s, seg.device, seg.address, what, recorded, summed));
      }
    };
    check("total_size", seg.total_size, total);
    check("allocated_size", seg.allocated_size, allocated);
    check("active_size", seg.active_size, active);
    check("requested_size", seg.requested_size, requested);
  }
  return problems;
}

std::optional<TracebackEntry> LastTracebackEntry(std::string_view text) {
  // Python writes `  File "PATH", line N, in FUNCTION`, outermost entry first. Entries whose
  // line does not parse are skipped, so a truncated or damaged text still names what it can.
  constexpr std::string_view kFile = "File \"";
  constexpr std::string_view kLine = "\", line ";
  constexpr std::string_view kIn = ", in ";
  size_t from = text.size();
  while (from > 0) {
    const size_t at = text.rfind(kFile, from - 1);
    if (at == std::string_view::npos) return std::nullopt;
    from = at;
    const size_t path_begin = at + kFile.size();
    const size_t eol = std::min(text.find('\n', path_begin), text.size());
    const std::string_view entry = text.substr(path_begin, eol - path_begin);
    const size_t line_at = entry.rfind(kLine);
    if (line_at == std::string_view::npos || line_at == 0) continue;
    size_t i = line_at + kLine.size();
    int64_t line = 0;
    const size_t digits_begin = i;
    while (i < entry.size() && entry[i] >= '0' && entry[i] <= '9' && line <= INT32_MAX) {
      line = line * 10 + (entry[i] - '0');
      ++i;
    }
    if (i == digits_begin || line > INT32_MAX) continue;
    TracebackEntry out;
    out.file = entry.substr(0, line_at);
    out.line = static_cast<int32_t>(line);
    if (entry.substr(i, kIn.size()) == kIn) {
      std::string_view function = entry.substr(i + kIn.size());
      while (!function.empty() && (function.back() == '\r' || function.back() == ' ')) {
        function.remove_suffix(1);
      }
      out.function = function;
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace vramscope::model
