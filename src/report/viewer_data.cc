#include "report/viewer_data.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "analysis/sites.h"
#include "common/gzip.h"
#include "model/vocabulary.h"
#include "report/rank_table.h"
#include "report/report_input.h"

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
static_assert(model::kPoolSpellings[0].pool == model::Pool::kSmall &&
                  model::kPoolSpellings[1].pool == model::Pool::kLarge,
              "pool_names is indexed by code");
nlohmann::json PoolNames() {
  nlohmann::json names = nlohmann::json::array();
  for (const model::PoolSpelling& p : model::kPoolSpellings) names.push_back(p.name);
  return names;
}

const char* const kCategoryNames[kViewerCategories] = {"weight",     "gradient", "optimizer_state",
                                                       "activation", "input",    "workspace",
                                                       "temporary",  "unknown"};

int CategoryIndex(std::string_view name) {
  for (int i = 0; i < kViewerCategories; ++i) {
    if (name == kCategoryNames[i]) return i;
  }
  return kViewerCategories - 1;  // "unknown"
}

// A read-only connection and a row-by-row query; errors name the file and what to do.
class ReportDb {
 public:
  ~ReportDb() {
    if (db_ != nullptr) sqlite3_close(db_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK) {
      return InvalidInput(fmt::format("{}: cannot open it as a SQLite database: {}", path,
                                      db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory"));
    }
    return Status::Ok();
  }
  // Reports from before a column existed lack it; the reader then does without.
  bool HasColumn(const char* table, const char* column) {
    bool found = false;
    (void)Query(fmt::format("SELECT 1 FROM pragma_table_info('{}') WHERE name='{}'", table, column),
                [&](sqlite3_stmt*) { found = true; });
    return found;
  }
  bool HasTable(const char* name) {
    bool found = false;
    const std::string sql =
        fmt::format("SELECT 1 FROM sqlite_master WHERE type='table' AND name='{}'", name);
    (void)Query(sql, [&](sqlite3_stmt*) { found = true; });
    return found;
  }
  // Runs `sql`, calling `row` for each result row.
  Status Query(const std::string& sql, const std::function<void(sqlite3_stmt*)>& row) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
      return Damaged(sqlite3_errmsg(db_));
    }
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) row(stmt);
    const std::string message = sqlite3_errmsg(db_);
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) return Damaged(message);
    return Status::Ok();
  }
  // A report numbers the rows of `table` from 0 or 1 without gaps; the reader sizes its columns
  // by the highest id, so an id beyond the row count is damage that would make it allocate
  // without bound (a frame id of 50 million is 4 GB of frames).
  Status CheckDenseIds(const char* table) {
    int64_t rows = 0, highest = -1;
    RETURN_IF_ERROR(Query(fmt::format("SELECT count(*), COALESCE(max(id), -1) FROM {}", table),
                          [&](sqlite3_stmt* s) {
                            rows = sqlite3_column_int64(s, 0);
                            highest = sqlite3_column_int64(s, 1);
                          }));
    if (highest > rows) {
      return Damaged(fmt::format("{} has an id {} in {} rows; its ids run from 0 or 1 without gaps",
                                 table, highest, rows));
    }
    return Status::Ok();
  }
  Status Damaged(const std::string& message) const {
    return InvalidInput(fmt::format(
        "{}: cannot read the report ({}); write it again with 'vramscope report'", path_, message));
  }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

std::string Text(sqlite3_stmt* s, int col) {
  const unsigned char* t = sqlite3_column_text(s, col);
  return t == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(t));
}
int64_t Int(sqlite3_stmt* s, int col) { return sqlite3_column_int64(s, col); }
bool IsNull(sqlite3_stmt* s, int col) { return sqlite3_column_type(s, col) == SQLITE_NULL; }

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of("/\\");
  return slash == std::string::npos ? path : path.substr(slash + 1);
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

Status LoadDevice(ReportDb& db, ViewerReport& r, ViewerDevice& d,
                  std::unordered_map<std::string, uint32_t>& string_ids,
                  std::unordered_map<std::string, uint8_t>& phase_ids,
                  const std::vector<int64_t>& owner_remap, bool has_sim, bool has_segments,
                  bool has_regions) {
  const std::string dev = std::to_string(d.device);
  // The device's events are one contiguous range of trace indices: the alloc/free ends of the
  // allocations (vramscope_allocations) and every other event (vramscope_events).
  struct RawAllocation {
    int64_t alloc = -1, free_requested = -1, free_completed = -1;
  };
  std::vector<RawAllocation> raw;
  std::vector<std::pair<int64_t, int64_t>> times;  // (event, time_us)
  int64_t first = INT64_MAX, last = -1;
  int64_t references = 0;  // rows' event ids: a report names each of a device's events once
  auto see = [&](sqlite3_stmt* s, int event_col, int time_col) -> int64_t {
    if (IsNull(s, event_col)) return -1;
    const int64_t e = Int(s, event_col);
    if (e < 0) return -1;
    ++references;
    first = std::min(first, e);
    last = std::max(last, e);
    if (!IsNull(s, time_col)) times.push_back({e, Int(s, time_col)});
    return e;
  };
  ViewerAllocations& a = d.allocations;
  std::vector<int64_t> segment_ids;  // vramscope_segment_timeline.id per allocation, -1: none
  bool too_many_phases = false;
  RETURN_IF_ERROR(db.Query(
      "SELECT alloc_event, alloc_time_us, free_requested_event, free_requested_time_us, "
      "free_completed_event, free_completed_time_us, size_bytes, requested_bytes, address, "
      "category, owner_id, operation, alloc_stack_id, phase, step, " +
          std::string(has_segments ? "segment_id" : "NULL") +
          " FROM vramscope_allocations WHERE device = " + dev +
          " ORDER BY COALESCE(alloc_event, -1), id",
      [&](sqlite3_stmt* s) {
        raw.push_back({see(s, 0, 1), see(s, 2, 3), see(s, 4, 5)});
        a.size.push_back(static_cast<double>(Int(s, 6)));
        a.requested.push_back(static_cast<double>(Int(s, 7)));
        a.address.push_back(static_cast<double>(Int(s, 8)));
        a.category.push_back(static_cast<uint8_t>(CategoryIndex(Text(s, 9))));
        const int64_t owner = Int(s, 10);
        a.owner.push_back(owner >= 0 && owner < static_cast<int64_t>(owner_remap.size())
                              ? static_cast<uint32_t>(owner_remap[owner])
                              : 0);
        const std::string op = Text(s, 11);
        auto [op_it, new_op] = string_ids.emplace(op, r.strings.size());
        if (new_op) r.strings.push_back(op);
        a.op.push_back(op_it->second);
        const int64_t stack = Int(s, 12);
        a.stack.push_back(stack >= 0 && stack < static_cast<int64_t>(r.stack_parent.size())
                              ? static_cast<uint32_t>(stack)
                              : 0);
        const std::string phase = Text(s, 13);
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
        a.step.push_back(static_cast<int32_t>(Int(s, 14)));
        segment_ids.push_back(IsNull(s, 15) ? -1 : Int(s, 15));
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
  RETURN_IF_ERROR(db.Query(
      "SELECT id, time_us, action, size, reserved_bytes FROM vramscope_events WHERE device = " +
          dev + " ORDER BY id",
      [&](sqlite3_stmt* s) {
        const int64_t id = see(s, 0, 1);
        if (id < 0) return;
        const std::string action = Text(s, 2);
        others.push_back({id, IsSegmentGrow(action), IsSegmentShrink(action),
                          static_cast<double>(Int(s, 3)), static_cast<double>(Int(s, 4))});
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
    RETURN_IF_ERROR(db.Query(
        "SELECT reserved_at_dump_bytes FROM vramscope_devices WHERE device = " + dev,
        [&](sqlite3_stmt* s) { PushStep(d.reserved, 0, static_cast<double>(Int(s, 0))); }));
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
  auto local_event = [&](sqlite3_stmt* s, int col, int32_t if_null) -> int32_t {
    if (IsNull(s, col)) return if_null;
    const int64_t e = Int(s, col) - d.first_event_id;
    return e < 0 || e >= num_events ? if_null : static_cast<int32_t>(e);
  };

  // Segments, as the analysis computed them (analysis/segment_timeline.h): recorded ones, else
  // the allocator model's; each allocation's segment too. A report written before that table
  // existed has none.
  ViewerSegments& segs = d.segments;
  std::unordered_map<int64_t, int32_t> segment_index;  // table id -> index in d.segments
  if (has_segments) {
    const bool has_pool_ids = db.HasColumn("vramscope_segment_timeline", "pool_id_0");
    std::map<std::pair<int64_t, int64_t>, int32_t> pool_numbers;
    std::vector<int32_t> private_pool;
    RETURN_IF_ERROR(db.Query(
        std::string("SELECT id, address, size_bytes, stream, pool, first_event, end_event, "
                    "source, ") +
            (has_pool_ids ? "pool_id_0, pool_id_1" : "0, 0") +
            " FROM vramscope_segment_timeline WHERE device = " + dev + " ORDER BY id",
        [&](sqlite3_stmt* s) {
          segment_index[Int(s, 0)] = static_cast<int32_t>(segs.count());
          segs.address.push_back(static_cast<double>(Int(s, 1)));
          segs.size.push_back(static_cast<double>(Int(s, 2)));
          segs.stream.push_back(static_cast<double>(Int(s, 3)));
          segs.pool.push_back(PoolCode(Text(s, 4)));
          segs.start.push_back(local_event(s, 5, -1));
          segs.end.push_back(local_event(s, 6, num_events));
          segs.source = Text(s, 7);
          const std::pair<int64_t, int64_t> id{Int(s, 8), Int(s, 9)};
          int32_t number = 0;
          if (id.first != 0 || id.second != 0) {
            auto [it, added] =
                pool_numbers.emplace(id, static_cast<int32_t>(pool_numbers.size() + 1));
            if (added) segs.private_pools.push_back(fmt::format("({}, {})", id.first, id.second));
            number = it->second;
          }
          private_pool.push_back(number);
        }));
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

  // The allocator model's curves (vramscope simulate's replay), when the report has them.
  if (has_sim) {
    RETURN_IF_ERROR(db.Query(
        "SELECT t.event, t.allocated_bytes, t.reserved_bytes FROM vramscope_sim_timeline t "
        "WHERE t.run = (SELECT MIN(id) FROM vramscope_sim_runs WHERE device = " +
            dev + ") ORDER BY t.event",
        [&](sqlite3_stmt* s) {
          const int32_t e = local_event(s, 0, -2);
          if (e == -2) return;
          PushStep(d.predicted_allocated, e, static_cast<double>(Int(s, 1)));
          PushStep(d.predicted_reserved, e, static_cast<double>(Int(s, 2)));
        }));
    d.has_predicted = !d.predicted_reserved.event.empty();
  }

  // Phases and the summary the page shows as it is.
  RETURN_IF_ERROR(db.Query(
      "SELECT step, phase, first_event, last_event FROM vramscope_phases WHERE device = " + dev +
          " ORDER BY first_event",
      [&](sqlite3_stmt* s) {
        d.phases.push_back({{"step", Int(s, 0)},
                            {"phase", Text(s, 1)},
                            {"first_event", local_event(s, 2, 0)},
                            {"last_event", local_event(s, 3, num_events - 1)}});
      }));
  // Region bands under the axis (vramscope_region_ranges, and the compiled graphs of
  // vramscope_regions on the row below them): absent from reports written before those tables.
  // Ranges without an event inside have nothing to cover on the event axis and are left out.
  if (has_regions) {
    int32_t rows = 0;
    auto band = [&](sqlite3_stmt* s, int32_t row) {
      if (d.regions.size() >= kViewerMaxRegionBands) {
        ++d.regions_left_out;
        return;
      }
      const int32_t first = local_event(s, 2, -1), last = local_event(s, 3, -1);
      if (first < 0 || last < first) return;
      d.regions.push_back({{"name", Text(s, 0)},
                           {"kind", Text(s, 1)},
                           {"first_event", first},
                           {"last_event", last},
                           {"allocated_bytes", static_cast<double>(Int(s, 4))},
                           {"live_at_peak_bytes", static_cast<double>(Int(s, 5))},
                           {"peak_bytes", static_cast<double>(Int(s, 6))},
                           {"unmatched", Int(s, 7) != 0},
                           {"row", row}});
    };
    RETURN_IF_ERROR(db.Query(
        "SELECT r.name, g.kind, r.first_event, r.last_event, g.allocated_bytes, "
        "g.live_at_peak_bytes, g.peak_bytes, r.unmatched_start OR r.unmatched_end, r.depth FROM "
        "vramscope_region_ranges r JOIN vramscope_regions g ON g.id = r.region_id WHERE "
        "r.device = " +
            dev + " ORDER BY r.id",
        [&](sqlite3_stmt* s) {
          const auto row = static_cast<int32_t>(std::min<int64_t>(Int(s, 8), kViewerRangeRows - 1));
          rows = std::max(rows, row + 1);
          band(s, row);
        }));
    RETURN_IF_ERROR(
        db.Query("SELECT name, kind, first_event, last_event, allocated_bytes, live_at_peak_bytes, "
                 "peak_bytes, 0 FROM vramscope_regions WHERE device = " +
                     dev + " AND kind = 'compile_context' AND remainder = 0 ORDER BY first_event",
                 [&](sqlite3_stmt* s) { band(s, rows); }));
  }
  nlohmann::json& sum = d.summary;
  RETURN_IF_ERROR(
      db.Query("SELECT peak_allocated_bytes, peak_allocated_event, peak_reserved_bytes, "
               "peak_reserved_event, allocated_at_dump_bytes, reserved_at_dump_bytes FROM "
               "vramscope_devices WHERE device = " +
                   dev,
               [&](sqlite3_stmt* s) {
                 sum["peak_allocated"] = Int(s, 0);
                 sum["peak_event"] = local_event(s, 1, -1);
                 sum["peak_reserved"] = Int(s, 2);
                 sum["peak_reserved_event"] = local_event(s, 3, -1);
                 sum["allocated_at_end"] = Int(s, 4);
                 sum["reserved_at_end"] = Int(s, 5);
               }));
  double start_allocated = 0;
  for (size_t i = 0; i < a.count(); ++i) {
    if (a.start[i] < 0) start_allocated += a.size[i];
  }
  sum["start_allocated"] = start_allocated;
  sum["categories_at_peak"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Query(
      "SELECT category, bytes, count FROM vramscope_categories_at_peak WHERE device = " + dev +
          " ORDER BY bytes DESC",
      [&](sqlite3_stmt* s) {
        sum["categories_at_peak"].push_back(
            {{"category", Text(s, 0)}, {"bytes", Int(s, 1)}, {"count", Int(s, 2)}});
      }));
  sum["owners_at_peak"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Query(
      "SELECT category, owner, bytes, count FROM vramscope_owners_at_peak WHERE device = " + dev +
          " ORDER BY bytes DESC LIMIT 200",
      [&](sqlite3_stmt* s) {
        sum["owners_at_peak"].push_back({{"category", Text(s, 0)},
                                         {"owner", Text(s, 1)},
                                         {"bytes", Int(s, 2)},
                                         {"count", Int(s, 3)}});
      }));
  sum["iterations"] = nlohmann::json::array();
  RETURN_IF_ERROR(db.Query(
      "SELECT step, peak_allocated_bytes, peak_event, peak_phase FROM vramscope_iterations "
      "WHERE device = " +
          dev + " ORDER BY step",
      [&](sqlite3_stmt* s) {
        sum["iterations"].push_back({{"step", Int(s, 0)},
                                     {"peak_allocated", Int(s, 1)},
                                     {"peak_event", local_event(s, 2, -1)},
                                     {"peak_phase", Text(s, 3)}});
      }));
  return Status::Ok();
}

// The owner grouping: the owners covering the most bytes x events get their own series.
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

// Whether the report is a prediction (vramscope_metadata.predicted) and what it assumed
// (vramscope_prediction, docs/report-database.md): the text fields as they are, the counts and
// byte figures as numbers, `fits` as a boolean, assumption.N as the list `assumptions`, and
// every other key as a [key, value] pair of `facts`, in the order written.
Status LoadPrediction(ReportDb& db, const std::map<std::string, std::string>& meta,
                      ViewerReport& r) {
  const auto predicted = meta.find("predicted");
  r.predicted = predicted != meta.end() && predicted->second == "true";
  if (!db.HasTable("vramscope_prediction")) {
    if (r.predicted) r.kind = "predicted";
    return Status::Ok();
  }
  r.predicted = true;
  r.kind = "predicted";
  static const char* const kText[] = {"model", "setup", "gpu", "torch_version"};
  static const char* const kNumbers[] = {
      "parameters",     "trainable_parameters", "parameter_bytes",   "buffer_bytes",
      "capacity_bytes", "peak_reserved_bytes",  "needed_bytes",      "headroom_bytes",
      "oom_event",      "oom_requested_bytes",  "oom_reserved_bytes"};
  nlohmann::json p = nlohmann::json::object();
  for (const char* key : kText) p[key] = "";
  std::map<int64_t, std::string> assumptions;
  nlohmann::json facts = nlohmann::json::array();
  RETURN_IF_ERROR(
      db.Query("SELECT key, value FROM vramscope_prediction ORDER BY rowid", [&](sqlite3_stmt* s) {
        const std::string key = Text(s, 0);
        const std::string value = Text(s, 1);
        for (const char* name : kText) {
          if (key == name) {
            p[key] = value;
            return;
          }
        }
        for (const char* name : kNumbers) {
          if (key != name) continue;
          char* end = nullptr;
          const long long n = std::strtoll(value.c_str(), &end, 10);
          if (!value.empty() && end != nullptr && *end == '\0') {
            p[key] = static_cast<int64_t>(n);
          } else {
            p[key] = value;  // not a number: kept as written
          }
          return;
        }
        if (key == "fits") {
          p[key] = value == "true";
          return;
        }
        if (key.rfind("assumption.", 0) == 0) {
          char* end = nullptr;
          const char* digits = key.c_str() + std::strlen("assumption.");
          const long long n = std::strtoll(digits, &end, 10);
          if (*digits != '\0' && end != nullptr && *end == '\0') {
            assumptions.emplace(static_cast<int64_t>(n), value);
            return;
          }
        }
        facts.push_back({key, value});
      }));
  p["assumptions"] = nlohmann::json::array();
  for (const auto& [n, text] : assumptions) p["assumptions"].push_back(text);
  p["facts"] = std::move(facts);
  r.prediction = std::move(p);
  return Status::Ok();
}

// The ranks of a capture folder (vramscope_ranks and the tables beside it), read back into the
// rows `report FOLDER` compared, so that the page shows the same table and the same contrast as
// the terminal and --json (RankTableJson, RankComparisonJson). Null when the report has no ranks.
Status LoadRanks(ReportDb& db, ViewerReport& r) {
  if (!db.HasTable("vramscope_ranks")) return Status::Ok();
  std::vector<analysis::RankRow> rows;
  std::map<std::string, size_t> index;
  RETURN_IF_ERROR(db.Query(
      "SELECT label, rank, local_rank, host, device, device_name, file, peak_allocated_bytes, "
      "peak_reserved_bytes, peak_step, peak_phase, steps, end_reason, oom, reported FROM "
      "vramscope_ranks ORDER BY rowid",
      [&](sqlite3_stmt* s) {
        analysis::RankRow row;
        row.label = Text(s, 0);
        if (!IsNull(s, 1)) row.rank = Int(s, 1);
        if (!IsNull(s, 2)) row.local_rank = Int(s, 2);
        row.host = Text(s, 3);
        row.device = static_cast<int32_t>(Int(s, 4));
        row.device_name = Text(s, 5);
        row.file = Text(s, 6);
        row.peak_allocated = Int(s, 7);
        row.peak_reserved = Int(s, 8);
        row.peak_step = static_cast<int32_t>(Int(s, 9));
        row.peak_phase = Text(s, 10);
        row.steps = Int(s, 11);
        row.end_reason = Text(s, 12);
        row.oom = Int(s, 13) != 0;
        row.reported = Int(s, 14) != 0;
        if (index.emplace(row.label, rows.size()).second) rows.push_back(std::move(row));
      }));
  if (rows.empty()) return Status::Ok();
  // Rows of the other tables name their rank by label; a label no rank has is ignored.
  const auto rank_of = [&](sqlite3_stmt* s) -> analysis::RankRow* {
    const auto it = index.find(Text(s, 0));
    return it == index.end() ? nullptr : &rows[it->second];
  };
  if (db.HasTable("vramscope_rank_steps")) {
    RETURN_IF_ERROR(db.Query(
        "SELECT label, step, peak_allocated_bytes, peak_phase FROM vramscope_rank_steps ORDER BY "
        "label, step",
        [&](sqlite3_stmt* s) {
          if (analysis::RankRow* row = rank_of(s)) {
            row->step_peaks.push_back({static_cast<int32_t>(Int(s, 1)), Int(s, 2), Text(s, 3)});
          }
        }));
  }
  if (db.HasTable("vramscope_rank_phases")) {
    RETURN_IF_ERROR(db.Query(
        "SELECT label, step, phase, peak_allocated_bytes FROM vramscope_rank_phases ORDER BY "
        "rowid",
        [&](sqlite3_stmt* s) {
          if (analysis::RankRow* row = rank_of(s)) {
            row->phase_peaks.push_back({static_cast<int32_t>(Int(s, 1)), Text(s, 2), Int(s, 3)});
          }
        }));
  }
  if (db.HasTable("vramscope_rank_categories")) {
    RETURN_IF_ERROR(
        db.Query("SELECT label, category, bytes FROM vramscope_rank_categories ORDER BY rowid",
                 [&](sqlite3_stmt* s) {
                   if (analysis::RankRow* row = rank_of(s))
                     row->at_peak.emplace_back(Text(s, 1), Int(s, 2));
                 }));
  }
  if (db.HasTable("vramscope_rank_owners")) {
    RETURN_IF_ERROR(db.Query(
        "SELECT label, category, owner, bytes FROM vramscope_rank_owners ORDER BY label, position",
        [&](sqlite3_stmt* s) {
          if (analysis::RankRow* row = rank_of(s)) {
            row->owners_at_peak.push_back({Text(s, 1), Text(s, 2), Int(s, 3)});
          }
        }));
  }
  r.ranks = {{"table", RankTableJson(rows)},
             {"compared", rows.size() > 1 ? RankComparisonJson(analysis::CompareRanks(rows))
                                          : nlohmann::json(nullptr)}};
  return Status::Ok();
}

}  // namespace

Result<ViewerReport> LoadViewerReport(const std::string& path, const std::string& title) {
  ReportDb db;
  RETURN_IF_ERROR(db.Open(path));
  for (const char* table :
       {"vramscope_metadata", "vramscope_events", "vramscope_allocations", "vramscope_devices",
        "vramscope_stacks", "vramscope_frames", "vramscope_owners", "vramscope_phases"}) {
    if (!db.HasTable(table)) {
      return InvalidInput(fmt::format(
          "{}: not a vramscope report (it has no table {}); make one with 'vramscope report "
          "INPUT -o {}'",
          path, table, BaseName(path)));
    }
  }
  ViewerReport r;
  std::map<std::string, std::string> meta;
  RETURN_IF_ERROR(db.Query("SELECT key, value FROM vramscope_metadata",
                           [&](sqlite3_stmt* s) { meta[Text(s, 0)] = Text(s, 1); }));
  r.source = meta["source_format"];
  if (meta.count("kind") != 0) r.kind = meta["kind"];
  RETURN_IF_ERROR(LoadPrediction(db, meta, r));
  RETURN_IF_ERROR(LoadRanks(db, r));
  const std::string model =
      r.prediction.is_object() ? r.prediction.value("model", std::string()) : std::string();
  if (!title.empty()) {
    r.title = title;
  } else if (meta["built_in_example"] == "1") {
    r.title = "built-in example";
  } else if (meta["source_path"].empty() && !model.empty()) {
    r.title = model;  // a prediction has no input file
  } else {
    r.title = BaseName(meta["source_path"].empty() ? path : meta["source_path"]);
  }
  const analysis::ProjectRoot root(meta["project_root"]);

  for (const char* table : {"vramscope_frames", "vramscope_stacks", "vramscope_owners"}) {
    RETURN_IF_ERROR(db.CheckDenseIds(table));
  }
  RETURN_IF_ERROR(
      db.Query("SELECT id, file_path, line_number, function FROM vramscope_frames "
               "ORDER BY id",
               [&](sqlite3_stmt* s) {
                 // The page's frame 0 is "none": database frame k is k + 1.
                 const int64_t id = Int(s, 0) + 1;
                 if (id < 1 || id > 50'000'000) return;
                 if (static_cast<size_t>(id) >= r.frames.size()) {
                   r.frames.resize(id + 1);
                 }
                 ViewerFrame& f = r.frames[id];
                 f.file = Text(s, 1);
                 f.line = Int(s, 2);
                 f.function = Text(s, 3);
                 f.project = !meta["project_root"].empty() && root.Relative(f.file).has_value();
               }));
  RETURN_IF_ERROR(db.Query(
      "SELECT id, parent_id, frame_id FROM vramscope_stacks ORDER BY id", [&](sqlite3_stmt* s) {
        const int64_t id = Int(s, 0);
        if (id < 1 || id > 100'000'000) return;
        if (static_cast<size_t>(id) >= r.stack_parent.size()) {
          r.stack_parent.resize(id + 1, 0);
          r.stack_frame.resize(id + 1, 0);
        }
        const int64_t parent = Int(s, 1);
        const int64_t frame = Int(s, 2) + 1;
        // A parent always precedes its child; anything else is damage, cut at the root.
        r.stack_parent[id] = parent >= 0 && parent < id ? static_cast<uint32_t>(parent) : 0;
        r.stack_frame[id] = frame >= 0 && frame < static_cast<int64_t>(r.frames.size())
                                ? static_cast<uint32_t>(frame)
                                : 0;
      }));
  std::vector<int64_t> owner_remap;
  RETURN_IF_ERROR(
      db.Query("SELECT id, label FROM vramscope_owners ORDER BY id", [&](sqlite3_stmt* s) {
        const int64_t id = Int(s, 0);
        if (id < 0 || id > 100'000'000) return;
        if (static_cast<size_t>(id) >= owner_remap.size()) owner_remap.resize(id + 1, 0);
        owner_remap[id] = static_cast<int64_t>(r.owners.size());
        r.owners.push_back(Text(s, 1));
      }));
  RETURN_IF_ERROR(db.Query("SELECT text FROM vramscope_notes ORDER BY id",
                           [&](sqlite3_stmt* s) { r.notes.push_back(Text(s, 0)); }));
  const bool has_sim = db.HasTable("vramscope_sim_runs");
  const bool has_segments = db.HasTable("vramscope_segment_timeline");
  const bool has_regions =
      db.HasTable("vramscope_regions") && db.HasTable("vramscope_region_ranges");

  std::vector<int32_t> devices;
  RETURN_IF_ERROR(
      db.Query("SELECT device FROM vramscope_devices ORDER BY device",
               [&](sqlite3_stmt* s) { devices.push_back(static_cast<int32_t>(Int(s, 0))); }));
  std::unordered_map<std::string, uint32_t> string_ids{{"", 0}};
  std::unordered_map<std::string, uint8_t> phase_ids{{"unknown", 0}};
  for (int32_t device : devices) {
    ViewerDevice& d = r.devices.emplace_back();
    d.device = device;
    RETURN_IF_ERROR(LoadDevice(db, r, d, string_ids, phase_ids, owner_remap, has_sim, has_segments,
                               has_regions));
    if (d.regions_left_out > 0) {
      r.notes.push_back(
          fmt::format("cuda:{}: the viewer draws the first {} region bands; {} more "
                      "are in the report database (vramscope_region_ranges)",
                      device, kViewerMaxRegionBands, d.regions_left_out));
    }
    ChooseOwnerSeries(r, d);
  }
  return r;
}

void BuildViewerLod(ViewerReport& report) {
  for (ViewerDevice& d : report.devices) {
    d.levels.clear();
    const int64_t num_events = d.events;
    const size_t num_series = d.owner_series.size();
    const ViewerAllocations& a = d.allocations;
    // Finest level: buckets of one event up to 16,384 events, else the smallest power of 4
    // that keeps 16,384 buckets or fewer (the page replays the exact curve within a bucket).
    int64_t bucket = 1;
    while ((num_events + bucket - 1) / bucket > 16384) bucket *= 4;
    ViewerLevel& fine = d.levels.emplace_back();
    fine.bucket = bucket;
    const size_t num_buckets =
        static_cast<size_t>(std::max<int64_t>(1, (num_events + bucket - 1) / bucket));
    fine.peak_event.assign(num_buckets, 0);
    fine.allocated.assign(num_buckets, 0);
    fine.reserved.assign(num_buckets, 0);
    fine.category.assign(num_buckets * kViewerCategories, 0);
    fine.owner.assign(num_buckets * num_series, 0);
    fine.category_start.assign(num_buckets * kViewerCategories, 0);
    fine.owner_start.assign(num_buckets * num_series, 0);
    // Running values; allocations live before the first event start them.
    std::vector<double> cat(kViewerCategories, 0), own(num_series, 0);
    double total = 0;
    for (size_t i = 0; i < a.count(); ++i) {
      if (a.start[i] < 0) {
        cat[a.category[i]] += a.size[i];
        if (num_series > 0) own[a.owner_group[i]] += a.size[i];
        total += a.size[i];
      }
    }
    size_t reserved_step = 0;
    double reserved = 0;
    for (size_t b = 0; b < num_buckets; ++b) {
      const int64_t first = static_cast<int64_t>(b) * bucket;
      const int64_t last = std::min<int64_t>(num_events, first + bucket);
      std::copy(cat.begin(), cat.end(), fine.category_start.begin() + b * kViewerCategories);
      std::copy(own.begin(), own.end(), fine.owner_start.begin() + b * num_series);
      double best = -1;
      double best_reserved = 0;
      for (int64_t e = first; e < last; ++e) {
        const int32_t alloc = d.ev_alloc[e];
        if (alloc >= 0) {
          const double delta = d.ev_sign[e] * a.size[alloc];
          cat[a.category[alloc]] += delta;
          if (num_series > 0) own[a.owner_group[alloc]] += delta;
          total += delta;
        }
        while (reserved_step < d.reserved.event.size() && d.reserved.event[reserved_step] <= e) {
          reserved = d.reserved.value[reserved_step++];
        }
        best_reserved = std::max(best_reserved, reserved);
        if (total > best) {
          best = total;
          fine.peak_event[b] = static_cast<int32_t>(e);
          std::copy(cat.begin(), cat.end(), fine.category.begin() + b * kViewerCategories);
          std::copy(own.begin(), own.end(), fine.owner.begin() + b * num_series);
        }
      }
      fine.allocated[b] = std::max(best, 0.0);
      fine.reserved[b] = best_reserved;
    }
    // Coarser levels: each bucket is four of the level below; keep the child with the highest
    // allocated total (its values are the values at that moment).
    while (d.levels.back().count() > 1024) {
      const ViewerLevel& below = d.levels.back();
      ViewerLevel up;
      up.bucket = below.bucket * 4;
      const size_t n = (below.count() + 3) / 4;
      up.peak_event.resize(n);
      up.allocated.resize(n);
      up.reserved.resize(n);
      up.category.resize(n * kViewerCategories);
      up.owner.resize(n * num_series);
      for (size_t b = 0; b < n; ++b) {
        size_t pick = 4 * b;
        double res = 0;
        for (size_t c = 4 * b; c < std::min(below.count(), 4 * b + 4); ++c) {
          if (below.allocated[c] > below.allocated[pick]) pick = c;
          res = std::max(res, below.reserved[c]);
        }
        up.peak_event[b] = below.peak_event[pick];
        up.allocated[b] = below.allocated[pick];
        up.reserved[b] = res;
        std::copy_n(below.category.begin() + pick * kViewerCategories, kViewerCategories,
                    up.category.begin() + b * kViewerCategories);
        std::copy_n(below.owner.begin() + pick * num_series, num_series,
                    up.owner.begin() + b * num_series);
      }
      d.levels.push_back(std::move(up));
    }
  }
}

namespace {

// Collects columns into the binary section, each 8-byte aligned, and names them in the header.
class ColumnWriter {
 public:
  template <typename T>
  nlohmann::json Add(const std::string& name, const std::vector<T>& values) {
    static_assert(std::is_arithmetic_v<T>);
    const char* type = std::is_same_v<T, double>     ? "f64"
                       : std::is_same_v<T, int32_t>  ? "i32"
                       : std::is_same_v<T, uint32_t> ? "u32"
                       : std::is_same_v<T, uint8_t>  ? "u8"
                       : std::is_same_v<T, int8_t>   ? "i8"
                                                     : nullptr;
    static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8);
    while (binary_.size() % 8 != 0) binary_.push_back('\0');
    const size_t offset = binary_.size();
    // Little-endian hosts only (x86-64, arm64): the bytes are the column.
    binary_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    columns_.push_back(
        {{"name", name}, {"type", type}, {"offset", offset}, {"length", values.size()}});
    return {{"col", columns_.size() - 1}};
  }
  const nlohmann::json& columns() const { return columns_; }
  const std::string& binary() const { return binary_; }

 private:
  nlohmann::json columns_ = nlohmann::json::array();
  std::string binary_;
};

nlohmann::json EncodeDevice(ColumnWriter& w, const ViewerDevice& d, const std::string& p) {
  nlohmann::json j;
  j["device"] = d.device;
  j["events"] = d.events;
  j["has_time"] = d.has_time;
  if (d.has_time) {
    j["time_us"] = w.Add(p + "time_us", d.time_delta_us);
    j["time0_us"] = d.time0_us;
  }
  j["ev_alloc"] = w.Add(p + "ev_alloc", d.ev_alloc);
  j["ev_sign"] = w.Add(p + "ev_sign", d.ev_sign);
  j["reserved"] = {{"event", w.Add(p + "reserved.event", d.reserved.event)},
                   {"bytes", w.Add(p + "reserved.bytes", d.reserved.value)}};
  if (d.has_predicted) {
    // Both model curves on one event axis: the reserved curve's change points, with the
    // allocated value at each.
    j["predicted"] = {
        {"label", "allocator model"},
        {"event", w.Add(p + "predicted.event", d.predicted_reserved.event)},
        {"reserved", w.Add(p + "predicted.reserved", d.predicted_reserved.value)},
        {"allocated_event", w.Add(p + "predicted.allocated_event", d.predicted_allocated.event)},
        {"allocated", w.Add(p + "predicted.allocated", d.predicted_allocated.value)}};
  } else {
    j["predicted"] = nullptr;
  }
  const ViewerAllocations& a = d.allocations;
  const std::string q = p + "alloc.";
  j["allocations"] = {{"count", a.count()},
                      {"start", w.Add(q + "start", a.start)},
                      {"end", w.Add(q + "end", a.end)},
                      {"free_completed", w.Add(q + "free_completed", a.free_completed)},
                      {"size", w.Add(q + "size", a.size)},
                      {"requested", w.Add(q + "requested", a.requested)},
                      {"address", w.Add(q + "address", a.address)},
                      {"category", w.Add(q + "category", a.category)},
                      {"owner", w.Add(q + "owner", a.owner)},
                      {"op", w.Add(q + "op", a.op)},
                      {"stack", w.Add(q + "stack", a.stack)},
                      {"phase", w.Add(q + "phase", a.phase)},
                      {"step", w.Add(q + "step", a.step)},
                      {"segment", w.Add(q + "segment", a.segment)},
                      {"owner_group", w.Add(q + "owner_group", a.owner_group)}};
  const ViewerSegments& s = d.segments;
  const std::string g = p + "seg.";
  j["segments"] = {{"source", s.source},
                   {"count", s.count()},
                   {"address", w.Add(g + "address", s.address)},
                   {"size", w.Add(g + "size", s.size)},
                   {"start", w.Add(g + "start", s.start)},
                   {"end", w.Add(g + "end", s.end)},
                   {"stream", w.Add(g + "stream", s.stream)},
                   {"pool", w.Add(g + "pool", s.pool)},
                   {"pool_names", PoolNames()}};
  if (!s.private_pools.empty()) {
    j["segments"]["private_pool"] = w.Add(g + "private_pool", s.private_pool);
    j["segments"]["private_pools"] = s.private_pools;
  }
  j["phases"] = d.phases;
  j["regions"] = d.regions;
  j["summary"] = d.summary;
  nlohmann::json categories = nlohmann::json::array();
  for (const char* name : kCategoryNames) categories.push_back(name);
  j["lod"]["groups"] = {{"category", {{"series", categories}}},
                        {"owner", {{"series", d.owner_series}}}};
  j["lod"]["levels"] = nlohmann::json::array();
  for (size_t l = 0; l < d.levels.size(); ++l) {
    const ViewerLevel& v = d.levels[l];
    const std::string k = fmt::format("{}lod{}.", p, l);
    nlohmann::json level = {{"bucket", v.bucket},
                            {"count", v.count()},
                            {"peak_event", w.Add(k + "peak_event", v.peak_event)},
                            {"allocated", w.Add(k + "allocated", v.allocated)},
                            {"reserved", w.Add(k + "reserved", v.reserved)},
                            {"category", w.Add(k + "category", v.category)},
                            {"owner", w.Add(k + "owner", v.owner)}};
    if (l == 0) {
      level["category_start"] = w.Add(k + "category_start", v.category_start);
      level["owner_start"] = w.Add(k + "owner_start", v.owner_start);
    }
    j["lod"]["levels"].push_back(std::move(level));
  }
  return j;
}

}  // namespace

std::string EncodeViewerBlob(const std::vector<const ViewerReport*>& reports) {
  ColumnWriter w;
  nlohmann::json header;
  header["format"] = 1;
  header["generator"] = std::string("vramscope ") + kToolVersion;
  header["reports"] = nlohmann::json::array();
  for (size_t ri = 0; ri < reports.size(); ++ri) {
    const ViewerReport& r = *reports[ri];
    nlohmann::json j;
    j["title"] = r.title;
    j["kind"] = r.kind;
    j["source"] = r.source;
    j["predicted"] = r.predicted;
    j["prediction"] = r.prediction;  // null unless the report holds vramscope_prediction
    j["ranks"] = r.ranks;            // null unless the report is of a capture folder's ranks
    nlohmann::json categories = nlohmann::json::array();
    for (const char* name : kCategoryNames) categories.push_back(name);
    j["categories"] = categories;
    j["phases"] = r.phases;
    j["strings"] = r.strings;
    j["owners"] = r.owners;
    j["frames"] = nlohmann::json::array();
    for (const ViewerFrame& f : r.frames) {
      j["frames"].push_back({f.file, f.line, f.function, f.project});
    }
    const std::string p = fmt::format("r{}.", ri);
    j["stacks"] = {{"parent", w.Add(p + "stack.parent", r.stack_parent)},
                   {"frame", w.Add(p + "stack.frame", r.stack_frame)}};
    j["notes"] = r.notes;
    j["devices"] = nlohmann::json::array();
    for (const ViewerDevice& d : r.devices) {
      j["devices"].push_back(EncodeDevice(w, d, fmt::format("{}d{}.", p, d.device)));
    }
    header["reports"].push_back(std::move(j));
  }
  header["columns"] = w.columns();
  const std::string head = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string raw = "VSV1";
  const auto length = static_cast<uint32_t>(head.size());
  raw.append(reinterpret_cast<const char*>(&length), 4);
  raw += head;
  while (raw.size() % 8 != 0) raw.push_back('\0');
  raw += w.binary();
  return Gzip(raw, 6);
}

}  // namespace vramscope::report
