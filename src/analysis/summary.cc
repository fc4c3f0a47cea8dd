#include "analysis/summary.h"

#include <algorithm>
#include <array>
#include <set>
#include <unordered_map>

namespace vramscope::analysis {

using attribution::Category;

Summary Summarize(const model::TraceView& view, const Timelines& timelines,
                  const attribution::Attribution& attribution, SiteNamer& sites,
                  OwnerNamer& owners) {
  const model::Trace& trace = view.trace;
  Summary out;
  out.allocations = trace.allocations.size();
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const DeviceTimeline& t = timelines.devices[d];
    DeviceSummary s;
    s.device = t.device;
    std::set<std::pair<int32_t, std::pair<int64_t, int64_t>>> pool_ids;
    s.events = t.end - t.begin;
    for (const model::Segment& seg : trace.segments) {
      if (seg.device != s.device) continue;
      ++s.segments;
      if (seg.pool == model::Pool::kSmall) ++s.small_segments;
      s.blocks += seg.block_count;
      const bool private_pool = seg.pool_id[0] != 0 || seg.pool_id[1] != 0;
      if (private_pool) {
        ++s.private_pool_segments;
        s.reserved_in_private_pools += static_cast<int64_t>(seg.total_size);
        pool_ids.emplace(s.device, std::pair(seg.pool_id[0], seg.pool_id[1]));
      }
      for (uint32_t b = seg.first_block; b < seg.first_block + seg.block_count; ++b) {
        const model::Block& block = trace.blocks[b];
        if (private_pool && block.state == model::BlockState::kInactive) {
          s.cached_in_private_pools += static_cast<int64_t>(block.size);
        }
        if (model::IsActive(block.state)) {
          ++s.active_blocks;
        } else {
          s.largest_cached_free_block =
              std::max(s.largest_cached_free_block, static_cast<int64_t>(block.size));
        }
      }
    }
    s.private_pools = pool_ids.size();
    // A device with neither segments nor memory events (e.g. a lone snapshot marker) has
    // nothing to report.
    bool memory_events = false;
    for (size_t i = t.begin; i < t.end && !memory_events; ++i) {
      memory_events = trace.events.action[i] != model::Action::kSnapshot &&
                      trace.events.action[i] != model::Action::kUserDefined &&
                      trace.events.action[i] != model::Action::kAnnotate;
    }
    if (s.segments == 0 && !memory_events) continue;

    s.allocated_at_dump = t.allocated_at_dump;
    s.reserved_at_dump = t.reserved_at_dump;
    s.active_at_dump = t.active_at_dump;
    s.requested_at_dump = t.requested_at_dump;
    s.estimated_sizes = t.estimated_sizes;
    s.peak_from_trace = trace.facts.has_trace && t.end > t.begin;
    s.peak_allocated = t.peak_allocated;
    s.peak_allocated_event = t.peak_allocated_event;
    s.peak_reserved = t.peak_reserved;
    s.peak_reserved_event = t.peak_reserved_event;
    // A trace-less snapshot: the dump is all we know.
    if (!s.peak_from_trace) {
      s.peak_allocated = std::max(s.peak_allocated, s.allocated_at_dump);
      s.peak_reserved = std::max(s.peak_reserved, s.reserved_at_dump);
    }
    const auto time_of = [&](int64_t event) {
      return event == model::kNoEvent ? model::kNoTime : trace.events.time_us[event];
    };
    s.peak_allocated_time_us = time_of(s.peak_allocated_event);
    s.peak_reserved_time_us = time_of(s.peak_reserved_event);
    s.reserved_at_peak_allocated =
        s.peak_allocated_event == model::kNoEvent
            ? (s.peak_from_trace ? t.reserved_at_start : s.reserved_at_dump)
            : t.ReservedAfter(static_cast<size_t>(s.peak_allocated_event));
    for (size_t i = t.begin; i < t.end; ++i) {
      if (trace.events.time_us[i] == model::kNoTime) continue;
      if (s.first_time_us == model::kNoTime) s.first_time_us = trace.events.time_us[i];
      s.last_time_us = trace.events.time_us[i];
    }

    // What was live at the peak, by site, by category and by owner.
    LiveBreakdown live =
        BreakdownAfter(view, attribution, sites, owners, s.device, s.peak_allocated_event);
    s.live_at_peak_bytes = live.bytes;
    s.live_at_peak_count = live.count;
    s.live_at_peak_by_site = std::move(live.by_site);
    s.live_at_peak_by_category = std::move(live.by_category);
    s.live_at_peak_by_owner = std::move(live.by_owner);
    s.live_at_peak_by_confidence = live.by_confidence;
    s.peak_step = attribution.phases.StepAt(s.peak_allocated_event);
    s.peak_phase = attribution.phases.At(s.peak_allocated_event);
    s.iterations = SummarizeIterations(view, t, attribution);
    out.peak_usage_bytes = std::max(out.peak_usage_bytes, s.peak_allocated);
    out.devices.push_back(std::move(s));
  }
  return out;
}

}  // namespace vramscope::analysis
