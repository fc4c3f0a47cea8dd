#include "allocator/pool_inference.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace vramscope::allocator {

namespace {

using model::Action;

struct LiveSegment {
  uint64_t size = 0;
  int32_t pool = 0;  // 0: default (or unknown), else 1 + index into RecordedPools::pools
};

}  // namespace

RecordedPools InferRecordedPools(const model::Trace& trace, int32_t device, size_t begin,
                                 size_t end) {
  RecordedPools out;
  std::map<MemPoolId, int32_t> number;  // pool id -> 1 + index
  auto pool_number = [&](MemPoolId id) {
    auto [it, added] = number.emplace(id, static_cast<int32_t>(number.size() + 1));
    return it->second;
  };
  // The segments alive at the dump, with their pools.
  std::map<uint64_t, LiveSegment> live;
  for (const model::Segment& s : trace.segments) {
    if (s.device != device) continue;
    const MemPoolId id{s.pool_id[0], s.pool_id[1]};
    live[s.address] = {s.total_size, id.IsDefault() ? 0 : pool_number(id)};
    if (!id.IsDefault()) ++out.private_segments;
  }
  if (number.empty()) return out;  // no private pool at the dump: nothing to infer

  auto holder = [&](uint64_t addr) -> const LiveSegment* {
    auto it = live.upper_bound(addr);
    if (it == live.begin()) return nullptr;
    --it;
    return addr - it->first < it->second.size ? &it->second : nullptr;
  };
  const model::Events& ev = trace.events;
  for (size_t i = end; i-- > begin;) {
    switch (ev.action[i]) {
      case Action::kAlloc: {
        const LiveSegment* s = holder(ev.addr[i]);
        if (s != nullptr && s->pool != 0) {
          out.event_pool[static_cast<uint32_t>(i)] = s->pool;
          ++out.private_allocs;
        }
        break;
      }
      case Action::kSegmentAlloc: {
        auto it = live.find(ev.addr[i]);
        if (it != live.end()) {
          if (it->second.pool != 0) out.event_pool[static_cast<uint32_t>(i)] = it->second.pool;
          live.erase(it);  // before this event the segment did not exist
        }
        break;
      }
      case Action::kSegmentFree: {
        // Before this event the segment existed; its pool is not recorded.
        live[ev.addr[i]] = {ev.size[i], 0};
        ++out.segments_without_pool;
        break;
      }
      default:
        break;
    }
  }
  // Renumber in order of first use in the trace (pools only at the dump come last), so that
  // the model creates them in the order the program did.
  std::vector<std::pair<int64_t, int32_t>> first_use(number.size(), {static_cast<int64_t>(end), 0});
  for (const auto& [id, n] : number) first_use[n - 1].second = n;
  for (const auto& [event, n] : out.event_pool) {
    auto& f = first_use[n - 1];
    f.first = std::min<int64_t>(f.first, event);
  }
  std::stable_sort(first_use.begin(), first_use.end());
  std::vector<int32_t> renumber(number.size() + 1, 0);
  std::vector<MemPoolId> by_number(number.size());
  for (const auto& [id, n] : number) by_number[n - 1] = id;
  for (size_t k = 0; k < first_use.size(); ++k) {
    renumber[first_use[k].second] = static_cast<int32_t>(k + 1);
    out.pools.push_back(by_number[first_use[k].second - 1]);
  }
  for (auto& [event, n] : out.event_pool) n = renumber[n];
  out.notes.push_back(fmt::format(
      "private pools: {} (segment_pool_id of the segments at the dump); {} allocation(s) lie in "
      "their segments and are replayed in them",
      out.pools.size(), out.private_allocs));
  if (out.segments_without_pool > 0) {
    out.notes.push_back(fmt::format(
        "{} segment(s) released during the trace have no recorded pool (PyTorch's trace entries "
        "do not name one); they are taken as the default pools'",
        out.segments_without_pool));
  }
  return out;
}

}  // namespace vramscope::allocator
