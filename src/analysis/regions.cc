#include "analysis/regions.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace vramscope::analysis {

namespace {

using model::kNoEvent;
using model::kNoTime;

// One kind's partition of a device's allocations while it is built: region names in order of
// first appearance, and each allocation's region.
struct Partition {
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> index;
  std::vector<int32_t> of;  // parallel to the device's allocations
  // Span per region (filled by the caller where the kind has its own notion of span).
  std::vector<int64_t> first_event, last_event, start_time, end_time;
  std::vector<uint32_t> ranges;

  int32_t Id(const std::string& name) {
    const auto [it, added] = index.emplace(name, static_cast<int32_t>(names.size()));
    if (added) {
      names.push_back(name);
      first_event.push_back(kNoEvent);
      last_event.push_back(kNoEvent);
      start_time.push_back(kNoTime);
      end_time.push_back(kNoTime);
      ranges.push_back(0);
    }
    return it->second;
  }
  // Widens region `r`'s span to event `e` at time `t`.
  void Touch(int32_t r, int64_t e, int64_t t) {
    if (e != kNoEvent) {
      if (first_event[r] == kNoEvent || e < first_event[r]) first_event[r] = e;
      if (last_event[r] == kNoEvent || e > last_event[r]) last_event[r] = e;
    }
    if (t != kNoTime) {
      if (start_time[r] == kNoTime || t < start_time[r]) start_time[r] = t;
      if (end_time[r] == kNoTime || t > end_time[r]) end_time[r] = t;
    }
  }
};

struct DeviceContext {
  const model::TraceView& view;
  const model::Trace& trace;
  int32_t device;
  size_t begin, end;           // the device's events
  std::vector<size_t> allocs;  // its allocations (indices into Trace::allocations)
  std::vector<size_t> live_at_peak;
  int64_t peak_event;
};

// Turns a partition into Region rows: sizes, live at the peak, the region's own peak.
void Emit(const DeviceContext& c, RegionKind kind, Partition& p, RegionBreakdowns& out,
          std::vector<uint32_t>* region_index) {
  const model::Trace& trace = c.trace;
  const size_t n = p.names.size();
  std::vector<Region> rows(n);
  for (size_t r = 0; r < n; ++r) {
    rows[r].device = c.device;
    rows[r].kind = kind;
    rows[r].name = p.names[r];
    rows[r].remainder = p.names[r] == kRegionNone || p.names[r] == kRegionBeforeTrace;
    rows[r].first_event = p.first_event[r];
    rows[r].last_event = p.last_event[r];
    rows[r].start_time_us = p.start_time[r];
    rows[r].end_time_us = p.end_time[r];
    rows[r].ranges = p.ranges[r];
  }
  // (event, region, delta) for every alloc and release, swept in event order for each region's
  // own peak; allocations alive before the trace count from its start.
  struct Change {
    int64_t event;
    int32_t region;
    int64_t delta;
  };
  std::vector<Change> changes;
  std::vector<int64_t> running(n, 0);
  std::unordered_map<size_t, int32_t> region_of_allocation;
  region_of_allocation.reserve(c.allocs.size());
  for (size_t k = 0; k < c.allocs.size(); ++k) {
    const size_t i = c.allocs[k];
    const model::Allocation& a = trace.allocations[i];
    const int32_t r = p.of[k];
    region_of_allocation.emplace(i, r);
    const auto size = static_cast<int64_t>(c.view.BlockSize(i));
    ++rows[r].allocations;
    rows[r].allocated_bytes += static_cast<uint64_t>(size);
    if (a.alloc_event == kNoEvent) {
      running[r] += size;
    } else {
      changes.push_back({a.alloc_event, r, size});
    }
    if (a.ReleaseEvent() != kNoEvent) changes.push_back({a.ReleaseEvent(), r, -size});
  }
  // A release never precedes its alloc, and at one event a release and an alloc may meet (the
  // block handed out again): releases first, so a peak never counts both.
  std::stable_sort(changes.begin(), changes.end(), [](const Change& x, const Change& y) {
    return x.event != y.event ? x.event < y.event : x.delta < y.delta;
  });
  for (size_t r = 0; r < n; ++r) rows[r].peak_bytes = running[r];
  for (size_t k = 0; k < changes.size();) {
    const int64_t event = changes[k].event;
    for (; k < changes.size() && changes[k].event == event; ++k) {
      running[changes[k].region] += changes[k].delta;
    }
    // Only the regions that changed at this event can reach a new peak here.
    for (size_t j = k; j-- > 0 && changes[j].event == event;) {
      const int32_t r = changes[j].region;
      if (running[r] > rows[r].peak_bytes) {
        rows[r].peak_bytes = running[r];
        rows[r].peak_event = event;
      }
    }
  }
  for (const size_t i : c.live_at_peak) {
    const auto it = region_of_allocation.find(i);
    if (it == region_of_allocation.end()) continue;
    rows[it->second].live_at_peak_bytes += c.view.BlockSize(i);
    ++rows[it->second].live_at_peak_count;
  }
  // Largest at the peak first, then by bytes allocated, then by name; remainders last.
  std::vector<uint32_t> order(n);
  for (uint32_t r = 0; r < n; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const Region& a = rows[x];
    const Region& b = rows[y];
    if (a.remainder != b.remainder) return b.remainder;
    if (a.live_at_peak_bytes != b.live_at_peak_bytes) {
      return a.live_at_peak_bytes > b.live_at_peak_bytes;
    }
    if (a.allocated_bytes != b.allocated_bytes) return a.allocated_bytes > b.allocated_bytes;
    return a.name < b.name;
  });
  if (region_index != nullptr) region_index->assign(n, 0);
  for (const uint32_t r : order) {
    if (region_index != nullptr) (*region_index)[r] = static_cast<uint32_t>(out.regions.size());
    out.regions.push_back(std::move(rows[r]));
  }
}

// The region name of an event's text field (compile_context, user_metadata).
const std::unordered_map<uint32_t, model::StringId>& FieldOf(const model::Events& ev,
                                                             RegionKind kind) {
  return kind == RegionKind::kCompileContext ? ev.compile_context : ev.user_metadata;
}

void ByEventField(const DeviceContext& c, RegionKind kind, RegionBreakdowns& out) {
  const model::Trace& trace = c.trace;
  const auto& field = FieldOf(trace.events, kind);
  // An annotate entry's user_metadata is its label for another allocation (ByTensorAnnotations),
  // not metadata in effect for the entry.
  const auto counts = [&](size_t e) { return trace.events.action[e] != model::Action::kAnnotate; };
  bool any = false;
  for (const auto& [event, id] : field) {
    if (event >= c.begin && event < c.end && counts(event)) {
      any = true;
      break;
    }
  }
  if (!any) return;
  Partition p;
  // Region ids by interned value: a million events carry a handful of distinct values.
  std::unordered_map<model::StringId, int32_t> by_value;
  auto region_of = [&](model::StringId value) {
    const auto [it, added] = by_value.emplace(value, 0);
    if (added) it->second = p.Id(std::string(trace.strings.Get(value)));
    return it->second;
  };
  p.of.resize(c.allocs.size());
  for (size_t k = 0; k < c.allocs.size(); ++k) {
    const model::Allocation& a = trace.allocations[c.allocs[k]];
    if (a.alloc_event == kNoEvent) {
      p.of[k] = p.Id(kRegionBeforeTrace);
      continue;
    }
    const auto it = field.find(static_cast<uint32_t>(a.alloc_event));
    p.of[k] = it == field.end() ? p.Id(kRegionNone) : region_of(it->second);
  }
  // Spans: every event carrying the value (segment events too), in event order.
  for (size_t e = c.begin; e < c.end; ++e) {
    const auto it = field.find(static_cast<uint32_t>(e));
    if (it == field.end() || !counts(e)) continue;
    p.Touch(region_of(it->second), static_cast<int64_t>(e), trace.events.time_us[e]);
  }
  Emit(c, kind, p, out, nullptr);
}

// external_annotations of one device paired into ranges: a START opens a range, the END of the
// same name closes the latest open one of that name (ranges nest, and one name may recur).
struct OpenRange {
  std::string name;
  int64_t start;
  int32_t depth;
};

void ByRanges(const DeviceContext& c, RegionBreakdowns& out) {
  const model::Trace& trace = c.trace;
  // (time, order in the file, name, start?) of this device's START/END annotations.
  struct Mark {
    int64_t time;
    size_t order;
    std::string name;
    bool start;
  };
  std::vector<Mark> marks;
  uint64_t unusable = 0;
  for (size_t k = 0; k < trace.annotations.size(); ++k) {
    const model::Annotation& a = trace.annotations[k];
    if (a.device != c.device) continue;
    const std::string* name = nullptr;
    const std::string* stage = nullptr;
    for (const auto& [key, value] : a.fields) {
      if (key == "name") name = &value;
      if (key == "stage") stage = &value;
    }
    if (name == nullptr && stage == nullptr) continue;  // not a range annotation
    if (name == nullptr || stage == nullptr || a.time_us == kNoTime ||
        (*stage != "START" && *stage != "END")) {
      ++unusable;
      continue;
    }
    marks.push_back({a.time_us, k, *name, *stage == "START"});
  }
  if (unusable > 0) {
    out.notes.push_back(fmt::format(
        "cuda:{}: {} external annotation(s) lack a name, a START/END stage or a time and were "
        "left out of the ranges",
        c.device, unusable));
  }
  if (marks.empty()) return;
  std::stable_sort(marks.begin(), marks.end(),
                   [](const Mark& x, const Mark& y) { return x.time < y.time; });

  // The device's events by time (their recorded order when times are equal), for spans.
  std::vector<std::pair<int64_t, size_t>> timed;
  for (size_t e = c.begin; e < c.end; ++e) {
    if (trace.events.time_us[e] != kNoTime) timed.emplace_back(trace.events.time_us[e], e);
  }
  std::stable_sort(timed.begin(), timed.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  const int64_t trace_start = timed.empty() ? marks.front().time : timed.front().first;
  const int64_t trace_end = timed.empty() ? marks.back().time : timed.back().first;

  // Open ranges by name (the latest open START of a name on top), so that pairing stays linear
  // however many STARTs a file leaves open; `open_count` is the depth of the next START.
  std::vector<RegionRange> ranges;
  std::vector<OpenRange> opened;  // every START, in order
  std::vector<bool> closed;
  std::unordered_map<std::string, std::vector<size_t>> open_by_name;
  int32_t open_count = 0;
  uint64_t unmatched_start = 0, unmatched_end = 0;
  for (const Mark& m : marks) {
    if (m.start) {
      open_by_name[m.name].push_back(opened.size());
      opened.push_back({m.name, m.time, open_count++});
      closed.push_back(false);
      continue;
    }
    RegionRange r;
    r.device = c.device;
    r.name = m.name;
    r.end_time_us = m.time;
    const auto it = open_by_name.find(m.name);
    if (it == open_by_name.end() || it->second.empty()) {
      // An END whose START the trace does not hold (recorded before it began).
      r.start_time_us = std::min(trace_start, m.time);
      r.unmatched_start = true;
      r.depth = 0;
      ++unmatched_end;
    } else {
      const size_t k = it->second.back();
      it->second.pop_back();
      closed[k] = true;
      --open_count;
      r.start_time_us = opened[k].start;
      r.depth = opened[k].depth;
    }
    ranges.push_back(std::move(r));
  }
  for (size_t k = 0; k < opened.size(); ++k) {
    if (closed[k]) continue;
    const OpenRange& o = opened[k];
    RegionRange r;
    r.device = c.device;
    r.name = o.name;
    r.start_time_us = o.start;
    r.end_time_us = std::max(trace_end, o.start);
    r.depth = o.depth;
    r.unmatched_end = true;
    ++unmatched_start;
    ranges.push_back(std::move(r));
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const RegionRange& x, const RegionRange& y) {
    return x.start_time_us != y.start_time_us ? x.start_time_us < y.start_time_us
                                              : x.depth < y.depth;
  });
  if (unmatched_start > 0 || unmatched_end > 0) {
    out.notes.push_back(fmt::format(
        "cuda:{}: external annotation ranges: {} START(s) without an END (taken to run to the "
        "end of the trace), {} END(s) without a START (taken to run from its beginning)",
        c.device, unmatched_start, unmatched_end));
  }

  Partition p;
  for (RegionRange& r : ranges) {
    const int32_t id = p.Id(r.name);
    ++p.ranges[id];
    const auto lo = std::lower_bound(timed.begin(), timed.end(), r.start_time_us,
                                     [](const auto& x, int64_t t) { return x.first < t; });
    const auto hi = std::upper_bound(timed.begin(), timed.end(), r.end_time_us,
                                     [](int64_t t, const auto& x) { return t < x.first; });
    if (lo < hi) {
      r.first_event = static_cast<int64_t>(lo->second);
      r.last_event = static_cast<int64_t>((hi - 1)->second);
      p.Touch(id, r.first_event, kNoTime);
      p.Touch(id, r.last_event, kNoTime);
    }
    p.Touch(id, kNoEvent, r.start_time_us);
    p.Touch(id, kNoEvent, r.end_time_us);
  }

  // Each allocation: the innermost range open at its alloc event's time (the latest START, the
  // deepest on a tie), swept over allocations in time order.
  p.of.assign(c.allocs.size(), -1);
  std::vector<std::pair<int64_t, size_t>> by_time;  // (alloc time, position in c.allocs)
  for (size_t k = 0; k < c.allocs.size(); ++k) {
    const model::Allocation& a = trace.allocations[c.allocs[k]];
    if (a.alloc_event == kNoEvent) {
      p.of[k] = p.Id(kRegionBeforeTrace);
    } else if (trace.events.time_us[a.alloc_event] == kNoTime) {
      p.of[k] = p.Id(kRegionNone);
    } else {
      by_time.emplace_back(trace.events.time_us[a.alloc_event], k);
    }
  }
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<size_t> by_end(ranges.size());
  for (size_t k = 0; k < ranges.size(); ++k) by_end[k] = k;
  std::stable_sort(by_end.begin(), by_end.end(), [&](size_t x, size_t y) {
    return ranges[x].end_time_us < ranges[y].end_time_us;
  });
  std::set<std::tuple<int64_t, int32_t, size_t>> active;  // (start, depth, range)
  size_t next_start = 0, next_end = 0;
  for (const auto& [time, k] : by_time) {
    for (; next_start < ranges.size() && ranges[next_start].start_time_us <= time; ++next_start) {
      active.emplace(ranges[next_start].start_time_us, ranges[next_start].depth, next_start);
    }
    for (; next_end < by_end.size() && ranges[by_end[next_end]].end_time_us < time; ++next_end) {
      const RegionRange& r = ranges[by_end[next_end]];
      active.erase({r.start_time_us, r.depth, by_end[next_end]});
    }
    p.of[k] = active.empty() ? p.Id(kRegionNone) : p.Id(ranges[std::get<2>(*active.rbegin())].name);
  }
  std::vector<uint32_t> index;
  Emit(c, RegionKind::kRange, p, out, &index);
  for (RegionRange& r : ranges) {
    r.region = index[static_cast<size_t>(p.index.at(r.name))];
    out.ranges.push_back(std::move(r));
  }
}

// `annotate` entries (torch.cuda.memory._annotate_tensor): the entry's address names a live
// allocation, its user_metadata the label. Several labels of one allocation accumulate.
void ByTensorAnnotations(const DeviceContext& c, RegionBreakdowns& out) {
  const model::Trace& trace = c.trace;
  const model::Events& ev = trace.events;
  std::vector<size_t> annotate;
  for (size_t e = c.begin; e < c.end; ++e) {
    if (ev.action[e] == model::Action::kAnnotate) annotate.push_back(e);
  }
  if (annotate.empty()) return;
  // The device's allocations by address, in alloc order (those from before the trace first).
  std::unordered_map<uint64_t, std::vector<size_t>> at_address;  // positions in c.allocs
  for (size_t k = 0; k < c.allocs.size(); ++k) {
    at_address[trace.allocations[c.allocs[k]].addr].push_back(k);
  }
  for (auto& [addr, list] : at_address) {
    std::stable_sort(list.begin(), list.end(), [&](size_t x, size_t y) {
      return trace.allocations[c.allocs[x]].alloc_event <
             trace.allocations[c.allocs[y]].alloc_event;
    });
  }
  std::vector<std::string> labels(c.allocs.size());
  Partition p;
  uint64_t unmatched = 0;
  std::vector<std::pair<size_t, size_t>> label_events;  // (position in c.allocs, event)
  for (const size_t e : annotate) {
    const auto meta = ev.user_metadata.find(static_cast<uint32_t>(e));
    const std::string label = meta != ev.user_metadata.end()
                                  ? std::string(trace.strings.Get(meta->second))
                                  : std::string("(annotated without metadata)");
    // Lifetimes at one address do not overlap and are in alloc order (those from before the
    // trace first): the candidate is the last one allocated before the entry.
    const auto it = at_address.find(ev.addr[e]);
    size_t match = SIZE_MAX;
    if (it != at_address.end()) {
      const auto& list = it->second;
      const auto after = std::upper_bound(
          list.begin(), list.end(), static_cast<int64_t>(e), [&](int64_t event, size_t k) {
            return event <= static_cast<int64_t>(trace.allocations[c.allocs[k]].alloc_event);
          });
      if (after != list.begin()) {
        const size_t k = *std::prev(after);
        const model::Allocation& a = trace.allocations[c.allocs[k]];
        if (a.ReleaseEvent() == kNoEvent || a.ReleaseEvent() >= static_cast<int64_t>(e)) match = k;
      }
    }
    if (match == SIZE_MAX) {
      ++unmatched;
      continue;
    }
    std::string& l = labels[match];
    l += l.empty() ? label : " + " + label;
    label_events.emplace_back(match, e);
  }
  if (unmatched > 0) {
    out.notes.push_back(fmt::format(
        "cuda:{}: {} annotate entr{} name an address no live allocation holds; left out", c.device,
        unmatched, unmatched == 1 ? "y" : "ies"));
  }
  p.of.resize(c.allocs.size());
  for (size_t k = 0; k < c.allocs.size(); ++k) {
    p.of[k] = p.Id(labels[k].empty() ? (trace.allocations[c.allocs[k]].alloc_event == kNoEvent
                                            ? std::string(kRegionBeforeTrace)
                                            : std::string(kRegionNone))
                                     : labels[k]);
  }
  // Spans: the annotate entries that labelled the region's allocations.
  for (const auto& [k, e] : label_events) {
    p.Touch(p.of[k], static_cast<int64_t>(e), ev.time_us[e]);
  }
  Emit(c, RegionKind::kTensorAnnotation, p, out, nullptr);
}

}  // namespace

const char* RegionKindName(RegionKind kind) {
  switch (kind) {
    case RegionKind::kCompileContext:
      return "compile_context";
    case RegionKind::kUserMetadata:
      return "user_metadata";
    case RegionKind::kRange:
      return "annotation_range";
    case RegionKind::kTensorAnnotation:
      return "tensor_annotation";
  }
  return "?";
}

RegionBreakdowns ComputeRegions(const model::TraceView& view, const Timelines& timelines,
                                const Summary& summary) {
  const model::Trace& trace = view.trace;
  RegionBreakdowns out;
  for (size_t d = 0; d < trace.devices.size() && d < timelines.devices.size(); ++d) {
    const DeviceTimeline& t = timelines.devices[d];
    const DeviceSummary* s = nullptr;
    for (const DeviceSummary& candidate : summary.devices) {
      if (candidate.device == t.device) s = &candidate;
    }
    if (s == nullptr) continue;  // nothing reported for this device
    DeviceContext c{view, trace, t.device, t.begin, t.end, {}, {}, s->peak_allocated_event};
    for (size_t i = 0; i < trace.allocations.size(); ++i) {
      if (trace.allocations[i].device == t.device) c.allocs.push_back(i);
    }
    // The same allocations the summary's live-at-peak figures count.
    c.live_at_peak = LiveAfter(trace, t.device, s->peak_allocated_event);
    ByEventField(c, RegionKind::kCompileContext, out);
    ByEventField(c, RegionKind::kUserMetadata, out);
    ByRanges(c, out);
    ByTensorAnnotations(c, out);
  }
  return out;
}

}  // namespace vramscope::analysis
