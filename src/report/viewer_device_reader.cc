#include "report/viewer_device_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "model/vocabulary.h"

namespace vramscope::report {

namespace {

// A segment's pool as the viewer's column holds it: model::Pool's code (model/vocabulary.h); the
// page reads the names from "pool_names", indexed by code.
uint8_t PoolCode(std::string_view name) {
  for (const model::PoolSpelling& p : model::kPoolSpellings) {
    if (p.name == name) return static_cast<uint8_t>(p.pool);
  }
  return static_cast<uint8_t>(model::Pool::kLarge);
}

int CategoryIndex(std::string_view name) {
  for (int i = 0; i < kViewerCategories; ++i) {
    if (name == kViewerCategoryNames[i]) return i;
  }
  return kViewerCategories - 1;  // "unknown"
}

bool IsSegmentGrow(std::string_view action) {
  return action == "segment_alloc" || action == "segment_map";
}
bool IsSegmentShrink(std::string_view action) {
  return action == "segment_free" || action == "segment_unmap";
}

// Turns a per-event value into a step curve over local events.
void PushStep(StepCurve& curve, int32_t event, double value) {
  if (!curve.value.empty() && curve.value.back() == value) return;
  if (!curve.event.empty() && curve.event.back() == event) {
    curve.value.back() = value;
    return;
  }
  curve.event.push_back(event);
  curve.value.push_back(value);
}

}  // namespace

Status LoadViewerDevice(ReportDb& db, ViewerReport& r, ViewerDevice& d, ViewerIds& ids) {
  std::unordered_map<std::string, uint32_t>& string_ids = ids.strings;
  std::unordered_map<std::string, uint8_t>& phase_ids = ids.phases;
  const std::vector<int64_t>& owner_remap = ids.owner_remap;
  const std::string of_device = "WHERE device = " + std::to_string(d.device);
  // The device's events are one contiguous range of trace indices: the alloc/free ends of the
  // allocations (vramscope_allocations) and every other event (vramscope_events).
  struct RawAllocation {
    int64_t alloc = -1, free_requested = -1, free_completed = -1;
  };
  std::vector<RawAllocation> raw;
  std::vector<std::pair<int64_t, int64_t>> times;  // (event, time_us)
  int64_t first = INT64_MAX, last = -1;
  int64_t references = 0;  // rows' event ids: a report names each of a device's events once
  auto see = [&](const ReportRow& s, int event_col, int time_col) -> int64_t {
    if (s.IsNull(event_col)) return -1;
    const int64_t e = s.Int(event_col);
    if (e < 0) return -1;
    ++references;
    first = std::min(first, e);
    last = std::max(last, e);
    if (!s.IsNull(time_col)) times.push_back({e, s.Int(time_col)});
    return e;
  };
  ViewerAllocations& a = d.allocations;
  std::vector<int64_t> segment_ids;  // vramscope_segment_timeline.id per allocation, -1: none
  bool too_many_phases = false;
  RETURN_IF_ERROR(db.Select(
      "vramscope_allocations",
      {"alloc_event", "alloc_time_us", "free_requested_event", "free_requested_time_us",
       "free_completed_event", "free_completed_time_us", "size_bytes", "requested_bytes", "address",
       "category", "owner_id", "operation", "alloc_stack_id", "phase", "step", "segment_id"},
      of_device + " ORDER BY COALESCE(alloc_event, -1), id", [&](const ReportRow& s) {
        raw.push_back({see(s, 0, 1), see(s, 2, 3), see(s, 4, 5)});
        a.size.push_back(static_cast<double>(s.Int(6)));
        a.requested.push_back(static_cast<double>(s.Int(7)));
        a.address.push_back(static_cast<double>(s.Int(8)));
        a.category.push_back(static_cast<uint8_t>(CategoryIndex(s.Text(9))));
        const int64_t owner = s.Int(10);
        a.owner.push_back(owner >= 0 && owner < static_cast<int64_t>(owner_remap.size())
                              ? static_cast<uint32_t>(owner_remap[owner])
                              : 0);
        const std::string op = s.Text(11);
        auto [op_it, new_op] = string_ids.emplace(op, r.strings.size());
        if (new_op) r.strings.push_back(op);
        a.op.push_back(op_it->second);
        const int64_t stack = s.Int(12);
        a.stack.push_back(stack >= 0 && stack < static_cast<int64_t>(r.stack_parent.size())
                              ? static_cast<uint32_t>(stack)
                              : 0);
        const std::string phase = s.Text(13);
        auto ph_it = phase_ids.find(phase);
        if (ph_it == phase_ids.end()) {
          if (r.phases.size() > UINT8_MAX) {
            too_many_phases = true;  // the page's phase column is one byte
            ph_it = phase_ids.find("unknown");
          } else {
            ph_it = phase_ids.emplace(phase, static_cast<uint8_t>(r.phases.size())).first;
            r.phases.push_back(phase);
          }
        }
        a.phase.push_back(ph_it->second);
        a.step.push_back(static_cast<int32_t>(s.Int(14)));
        segment_ids.push_back(s.IsNull(15) ? -1 : s.Int(15));
      }));
  if (too_many_phases) {
    return db.Damaged(
        fmt::format("vramscope_allocations names more than {} distinct phases", UINT8_MAX + 1));
  }
  struct OtherEvent {
    int64_t id;
    bool grow, shrink;
    double size, reserved;
  };
  std::vector<OtherEvent> others;
  RETURN_IF_ERROR(
      db.Select("vramscope_events", {"id", "time_us", "action", "size", "reserved_bytes"},
                of_device + " ORDER BY id", [&](const ReportRow& s) {
                  const int64_t id = see(s, 0, 1);
                  if (id < 0) return;
                  const std::string action = s.Text(2);
                  others.push_back({id, IsSegmentGrow(action), IsSegmentShrink(action),
                                    static_cast<double>(s.Int(3)), static_cast<double>(s.Int(4))});
                }));
  // The device's events are the ids first..last, each named by one row: a wider range is damage,
  // and would have the columns below sized by it rather than by the file.
  if (last >= 0 && (last - first >= INT32_MAX || last - first >= references)) {
    return db.Damaged(
        fmt::format("device {}: its event ids span {}..{}, {} events, but its rows name only {}",
                    d.device, first, last, last - first + 1, references));
  }
  d.first_event_id = last < 0 ? 0 : first;
  const int32_t num_events = last < 0 ? 0 : static_cast<int32_t>(last - first + 1);
  d.events = num_events;
  auto local = [&](int64_t e) { return static_cast<int32_t>(e - d.first_event_id); };

  // Times: an event without one (rare) takes the time of the event before it.
  d.has_time = !times.empty();
  if (d.has_time) {
    std::vector<int64_t> at(num_events, INT64_MIN);
    for (const auto& [e, t] : times) at[local(e)] = t;
    int64_t previous = INT64_MIN;
    for (int64_t& t : at) {
      if (t == INT64_MIN) t = previous;
      previous = t;
    }
    int64_t first_time = INT64_MIN;
    for (int64_t t : at) {
      if (t != INT64_MIN) {
        first_time = t;
        break;
      }
    }
    d.time0_us = first_time;
    d.time_delta_us.resize(num_events);
    previous = first_time;
    for (int32_t e = 0; e < num_events; ++e) {
      const int64_t t = at[e] == INT64_MIN ? first_time : at[e];
      d.time_delta_us[e] = static_cast<uint32_t>(std::clamp<int64_t>(t - previous, 0, UINT32_MAX));
      previous = std::max(previous, t);
    }
  }

  // Reserved memory moves only at segment events, which are all in vramscope_events with the
  // level after them; the level before the first one is that minus its own change.
  for (const OtherEvent& o : others) {
    if (d.reserved.event.empty()) {
      const double before = o.reserved - (o.grow ? o.size : 0) + (o.shrink ? o.size : 0);
      PushStep(d.reserved, 0, before);
    }
    PushStep(d.reserved, local(o.id), o.reserved);
  }
  if (d.reserved.event.empty()) {
    // No segment or other event: reserved stayed at its level at the dump.
    RETURN_IF_ERROR(db.Select(
        "vramscope_devices", {"reserved_at_dump_bytes"}, of_device,
        [&](const ReportRow& s) { PushStep(d.reserved, 0, static_cast<double>(s.Int(0))); }));
  }

  // Lifetimes in local events: live from start (inclusive) to end (exclusive).
  for (const RawAllocation& x : raw) {
    const int32_t start = x.alloc >= 0 ? local(x.alloc) : -1;
    const int32_t requested = x.free_requested >= 0 ? local(x.free_requested) : -1;
    const int32_t completed = x.free_completed >= 0 ? local(x.free_completed) : -1;
    const int32_t end =
        std::max(requested >= 0 ? requested : (completed >= 0 ? completed : num_events), start);
    a.start.push_back(start);
    a.end.push_back(end);
    a.free_completed.push_back(completed >= 0 ? std::max(completed, end)
                                              : (requested >= 0 ? num_events : end));
  }
  auto local_event = [&](const ReportRow& s, int col, int32_t if_null) -> int32_t {
    if (s.IsNull(col)) return if_null;
    const int64_t e = s.Int(col) - d.first_event_id;
    return e < 0 || e >= num_events ? if_null : static_cast<int32_t>(e);
  };

  // Segments, as the analysis computed them (analysis/segment_timeline.h): recorded ones, else
  // the allocator model's; each allocation's segment too. A report written before that table
  // existed has none.
  ViewerSegments& segs = d.segments;
  std::unordered_map<int64_t, int32_t> segment_index;  // table id -> index in d.segments
  if (db.HasTable("vramscope_segment_timeline")) {
    std::map<std::pair<int64_t, int64_t>, int32_t> pool_numbers;
    std::vector<int32_t> private_pool;
    // What the analysis writes (analysis::SegmentSourceName): "recorded" (the snapshot's
    // segments), "model" (the allocator model's) or "none"; anything else is damage.
    std::string bad_source;
    // Pool ids read as NULL (0: the default pools) in reports written before they were.
    RETURN_IF_ERROR(
        db.Select("vramscope_segment_timeline",
                  {"id", "address", "size_bytes", "stream", "pool", "first_event", "end_event",
                   "source", "pool_id_0", "pool_id_1"},
                  of_device + " ORDER BY id", [&](const ReportRow& s) {
                    segment_index[s.Int(0)] = static_cast<int32_t>(segs.count());
                    segs.address.push_back(static_cast<double>(s.Int(1)));
                    segs.size.push_back(static_cast<double>(s.Int(2)));
                    segs.stream.push_back(static_cast<double>(s.Int(3)));
                    segs.pool.push_back(PoolCode(s.Text(4)));
                    segs.start.push_back(local_event(s, 5, -1));
                    segs.end.push_back(local_event(s, 6, num_events));
                    segs.source = s.Text(7);
                    if (segs.source != "recorded" && segs.source != "model" &&
                        segs.source != "none" && bad_source.empty()) {
                      bad_source = segs.source.empty() ? "(empty)" : segs.source.substr(0, 40);
                    }
                    const std::pair<int64_t, int64_t> id{s.Int(8), s.Int(9)};
                    int32_t number = 0;
                    if (id.first != 0 || id.second != 0) {
                      auto [it, added] =
                          pool_numbers.emplace(id, static_cast<int32_t>(pool_numbers.size() + 1));
                      if (added)
                        segs.private_pools.push_back(fmt::format("({}, {})", id.first, id.second));
                      number = it->second;
                    }
                    private_pool.push_back(number);
                  }));
    if (!bad_source.empty()) {
      return db.Damaged(fmt::format(
          "vramscope_segment_timeline has a segment of source '{}'; a segment is 'recorded', "
          "'model' or 'none'",
          bad_source));
    }
    if (!pool_numbers.empty()) segs.private_pool = std::move(private_pool);
  } else {
    r.notes.push_back(fmt::format(
        "device {}: this report has no segment timeline (written by an older vramscope); write "
        "it again with 'vramscope report' to see the allocator's segments",
        d.device));
  }
  a.segment.assign(a.count(), -1);
  for (size_t i = 0; i < a.count(); ++i) {
    if (const auto it = segment_index.find(segment_ids[i]); it != segment_index.end()) {
      a.segment[i] = it->second;
    }
  }

  // Which allocation each event makes live or frees.
  d.ev_alloc.assign(num_events, -1);
  d.ev_sign.assign(num_events, 0);
  auto claim = [&](int32_t e, size_t alloc, int8_t sign) {
    if (e < 0 || e >= num_events) return;
    if (d.ev_alloc[e] != -1) {
      ++d.event_conflicts;
      return;
    }
    d.ev_alloc[e] = static_cast<int32_t>(alloc);
    d.ev_sign[e] = sign;
  };
  for (size_t i = 0; i < a.count(); ++i) {
    if (a.start[i] >= 0 && a.end[i] > a.start[i]) claim(a.start[i], i, +1);
    if (a.end[i] < num_events && a.end[i] > a.start[i]) claim(a.end[i], i, -1);
  }

  // The allocator model's curves (vramscope simulate's replay: the device's first run), when
  // the report has them.
  if (db.HasTable("vramscope_sim_runs") && db.HasTable("vramscope_sim_timeline")) {
    std::optional<int64_t> run;
    RETURN_IF_ERROR(db.Select("vramscope_sim_runs", {"id"}, of_device + " ORDER BY id LIMIT 1",
                              [&](const ReportRow& s) { run = s.Int(0); }));
    if (run.has_value()) {
      RETURN_IF_ERROR(
          db.Select("vramscope_sim_timeline", {"event", "allocated_bytes", "reserved_bytes"},
                    fmt::format("WHERE run = {} ORDER BY event", *run), [&](const ReportRow& s) {
                      const int32_t e = local_event(s, 0, -2);
                      if (e == -2) return;
                      PushStep(d.predicted_allocated, e, static_cast<double>(s.Int(1)));
                      PushStep(d.predicted_reserved, e, static_cast<double>(s.Int(2)));
                    }));
    }
    d.has_predicted = !d.predicted_reserved.event.empty();
  }

  // Phases and the summary the page shows as it is.
  RETURN_IF_ERROR(db.Select("vramscope_phases", {"step", "phase", "first_event", "last_event"},
                            of_device + " ORDER BY first_event", [&](const ReportRow& s) {
                              d.phases.push_back(
                                  {{"step", s.Int(0)},
                                   {"phase", s.Text(1)},
                                   {"first_event", local_event(s, 2, 0)},
                                   {"last_event", local_event(s, 3, num_events - 1)}});
                            }));
  // Region bands under the axis (vramscope_region_ranges, and the compiled graphs of
  // vramscope_regions on the row below them): absent from reports written before those tables.
  // Ranges without an event inside have nothing to cover on the event axis and are left out.
  if (db.HasTable("vramscope_regions") && db.HasTable("vramscope_region_ranges")) {
    struct Region {
      std::string kind;
      int64_t allocated = 0, live_at_peak = 0, peak = 0;
    };
    std::unordered_map<int64_t, Region> regions;  // by id: what a range's region_id names
    RETURN_IF_ERROR(db.Select("vramscope_regions",
                              {"id", "kind", "allocated_bytes", "live_at_peak_bytes", "peak_bytes"},
                              "", [&](const ReportRow& s) {
                                regions[s.Int(0)] = {s.Text(1), s.Int(2), s.Int(3), s.Int(4)};
                              }));
    int32_t rows = 0;
    auto band = [&](std::string name, const Region& g, int32_t first, int32_t last, bool unmatched,
                    int32_t row) {
      if (d.regions.size() >= kViewerMaxRegionBands) {
        ++d.regions_left_out;
        return;
      }
      if (first < 0 || last < first) return;
      d.regions.push_back({{"name", std::move(name)},
                           {"kind", g.kind},
                           {"first_event", first},
                           {"last_event", last},
                           {"allocated_bytes", static_cast<double>(g.allocated)},
                           {"live_at_peak_bytes", static_cast<double>(g.live_at_peak)},
                           {"peak_bytes", static_cast<double>(g.peak)},
                           {"unmatched", unmatched},
                           {"row", row}});
    };
    RETURN_IF_ERROR(db.Select("vramscope_region_ranges",
                              {"name", "region_id", "first_event", "last_event", "unmatched_start",
                               "unmatched_end", "depth"},
                              of_device + " ORDER BY id", [&](const ReportRow& s) {
                                const auto region = regions.find(s.Int(1));
                                if (region == regions.end())
                                  return;  // a range of no region: nothing to draw
                                const auto row = static_cast<int32_t>(
                                    std::min<int64_t>(s.Int(6), kViewerRangeRows - 1));
                                rows = std::max(rows, row + 1);
                                band(s.Text(0), region->second, local_event(s, 2, -1),
                                     local_event(s, 3, -1), s.Int(4) != 0 || s.Int(5) != 0, row);
                              }));
    RETURN_IF_ERROR(db.Select(
        "vramscope_regions",
        {"name", "kind", "first_event", "last_event", "allocated_bytes", "live_at_peak_bytes",
         "peak_bytes"},
        of_device + " AND kind = 'compile_context' AND remainder = 0 ORDER BY first_event",
        [&](const ReportRow& s) {
          band(s.Text(0), {s.Text(1), s.Int(4), s.Int(5), s.Int(6)}, local_event(s, 2, -1),
               local_event(s, 3, -1), false, rows);
        }));
  }
  nlohmann::json& sum = d.summary;
  RETURN_IF_ERROR(
      db.Select("vramscope_devices",
                {"peak_allocated_bytes", "peak_allocated_event", "peak_reserved_bytes",
                 "peak_reserved_event", "allocated_at_dump_bytes", "reserved_at_dump_bytes"},
                of_device, [&](const ReportRow& s) {
                  sum["peak_allocated"] = s.Int(0);
                  sum["peak_event"] = local_event(s, 1, -1);
                  sum["peak_reserved"] = s.Int(2);
                  sum["peak_reserved_event"] = local_event(s, 3, -1);
                  sum["allocated_at_end"] = s.Int(4);
                  sum["reserved_at_end"] = s.Int(5);
                }));
  double start_allocated = 0;
  for (size_t i = 0; i < a.count(); ++i) {
    if (a.start[i] < 0) start_allocated += a.size[i];
  }
  sum["start_allocated"] = start_allocated;
  sum["categories_at_peak"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Select("vramscope_categories_at_peak", {"category", "bytes", "count"},
                            of_device + " ORDER BY bytes DESC", [&](const ReportRow& s) {
                              sum["categories_at_peak"].push_back({{"category", s.Text(0)},
                                                                   {"bytes", s.Int(1)},
                                                                   {"count", s.Int(2)}});
                            }));
  sum["owners_at_peak"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Select("vramscope_owners_at_peak", {"category", "owner", "bytes", "count"},
                            of_device + " ORDER BY bytes DESC LIMIT 200", [&](const ReportRow& s) {
                              sum["owners_at_peak"].push_back({{"category", s.Text(0)},
                                                               {"owner", s.Text(1)},
                                                               {"bytes", s.Int(2)},
                                                               {"count", s.Int(3)}});
                            }));
  sum["iterations"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Select("vramscope_iterations",
                            {"step", "peak_allocated_bytes", "peak_event", "peak_phase"},
                            of_device + " ORDER BY step", [&](const ReportRow& s) {
                              sum["iterations"].push_back({{"step", s.Int(0)},
                                                           {"peak_allocated", s.Int(1)},
                                                           {"peak_event", local_event(s, 2, -1)},
                                                           {"peak_phase", s.Text(3)}});
                            }));
  return Status::Ok();
}

void ChooseOwnerSeries(ViewerReport& r, ViewerDevice& d) {
  ViewerAllocations& a = d.allocations;
  std::unordered_map<uint32_t, double> area;
  for (size_t i = 0; i < a.count(); ++i) {
    area[a.owner[i]] += a.size[i] * static_cast<double>(std::max(1, a.end[i] - a.start[i]));
  }
  std::vector<std::pair<double, uint32_t>> ranked;
  for (const auto& [owner, bytes] : area) ranked.push_back({bytes, owner});
  std::sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  std::unordered_map<uint32_t, uint8_t> series;
  const size_t own = std::min<size_t>(ranked.size(), kViewerOwnerSeries);
  for (size_t k = 0; k < own; ++k) {
    series[ranked[k].second] = static_cast<uint8_t>(k);
    const std::string& label = r.owners[ranked[k].second];
    d.owner_series.push_back(label.empty() ? "(no owner)" : label);
  }
  const auto other = static_cast<uint8_t>(own);
  if (ranked.size() > own) d.owner_series.push_back("other owners");
  a.owner_group.resize(a.count());
  for (size_t i = 0; i < a.count(); ++i) {
    const auto it = series.find(a.owner[i]);
    a.owner_group[i] = it == series.end() ? other : it->second;
  }
}

}  // namespace vramscope::report
