#include "report/diff_side_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "model/trace.h"
#include "report/report_db.h"

namespace vramscope::report {

namespace {

using analysis::DiffDevice;
using analysis::DiffStep;

DiffDevice* DeviceOf(analysis::DiffSide& side, int64_t ordinal) {
  for (DiffDevice& d : side.devices) {
    if (d.device == ordinal) return &d;
  }
  return nullptr;
}

struct StepRange {
  int64_t first_event = 0, last_event = 0;
};

// Adds `delta` to `into` unless the sum overflows (a damaged file's sizes can be anything).
bool Add(int64_t& into, int64_t delta) { return !__builtin_add_overflow(into, delta, &into); }

// A size the report holds: no allocation, category or peak is negative or beyond what any device
// could hold; else the file is damaged. Sums of such sizes are added with Add.
bool PlausibleBytes(int64_t bytes) {
  return bytes >= 0 && static_cast<uint64_t>(bytes) <= model::kMaxPlausibleLiveBytes;
}

// Bytes live as each step begins (right before its first event), in all and by owner, in one
// pass over the allocations: an allocation adds its bytes to every step start inside its
// lifetime (made before the start: its alloc event earlier, or before the trace; freed at the
// start or later, or never), by difference arrays, so the cost is the allocations plus the
// owners that outlive a step, whatever the number of steps.
Status ReadLiveAtStepStarts(ReportDb& db, DiffDevice& d, const std::vector<StepRange>& ranges,
                            const std::vector<std::string>& owner_labels) {
  const size_t n = ranges.size();
  if (n == 0) return Status::Ok();
  std::vector<int64_t> starts;
  for (const StepRange& r : ranges) starts.push_back(r.first_event);
  std::vector<int64_t> total(n + 1, 0);
  std::unordered_map<int64_t, std::vector<int64_t>> by_owner;
  bool damaged = false;
  RETURN_IF_ERROR(db.Select(
      "vramscope_allocations", {"alloc_event", "free_requested_event", "size_bytes", "owner_id"},
      "WHERE device = " + std::to_string(d.device), [&](const ReportRow& row) {
        // Step starts s with alloc < s <= free: [first, last) as indices into `starts`.
        const auto first = row.IsNull(0)
                               ? starts.begin()
                               : std::upper_bound(starts.begin(), starts.end(), row.Int(0));
        const auto last = row.IsNull(1)
                              ? starts.end()
                              : std::upper_bound(starts.begin(), starts.end(), row.Int(1));
        const int64_t bytes = row.Int(2);
        if (!PlausibleBytes(bytes)) damaged = true;
        if (first >= last || damaged) return;
        const size_t i0 = static_cast<size_t>(first - starts.begin());
        const size_t i1 = static_cast<size_t>(last - starts.begin());
        auto& owner = by_owner[row.IsNull(3) ? -1 : row.Int(3)];
        owner.resize(n + 1, 0);
        if (!Add(total[i0], bytes) || !Add(total[i1], -bytes) || !Add(owner[i0], bytes) ||
            !Add(owner[i1], -bytes)) {
          damaged = true;
        }
      }));
  int64_t running = 0;
  for (size_t i = 0; i < n && !damaged; ++i) {
    damaged = !Add(running, total[i]);
    d.steps[i].live_at_start = running;
  }
  for (auto& [id, diffs] : by_owner) {
    const std::string label =
        id >= 0 && static_cast<size_t>(id) < owner_labels.size() ? owner_labels[id] : "(unnamed)";
    int64_t live = 0;
    for (size_t i = 0; i < n && !damaged; ++i) {
      damaged = !Add(live, diffs[i]) || !Add(d.steps[i].owners_at_start[label], live);
      if (d.steps[i].owners_at_start[label] == 0) d.steps[i].owners_at_start.erase(label);
    }
  }
  if (damaged) return db.Damaged("vramscope_allocations holds sizes no device could hold");
  return Status::Ok();
}

}  // namespace

Result<analysis::DiffSide> ReadDiffSide(const std::string& database, const std::string& name,
                                        const Control& control) {
  ASSIGN_OR_RETURN(std::unique_ptr<ReportDb> db, ReportDb::Open(database));
  analysis::DiffSide side;
  side.name = name;
  RETURN_IF_ERROR(db->Select(
      "vramscope_metadata", {"key", "value"}, "WHERE key IN ('predicted', 'device_type')",
      [&](const ReportRow& row) {
        if (row.Text(0) == "predicted") side.predicted = row.Text(1) == "true";
        // Absent in reports written before it was recorded: those are all "cuda".
        if (row.Text(0) == "device_type" && (row.Text(1) == "cpu" || row.Text(1) == "cuda")) {
          side.device_type = row.Text(1);
        }
      }));
  std::map<int64_t, int64_t> peak_events;
  // A size no device could hold anywhere below: the file is damaged (checked once all is read).
  bool damaged = false;
  std::optional<int32_t> repeated_device;  // a device's rows are keyed by its ordinal: one row
  RETURN_IF_ERROR(
      db->Select("vramscope_devices",
                 {"device", "peak_allocated_bytes", "peak_reserved_bytes", "peak_allocated_event"},
                 "ORDER BY device", [&](const ReportRow& row) {
                   DiffDevice d;
                   d.device = static_cast<int32_t>(row.Int(0));
                   if (!side.devices.empty() && side.devices.back().device == d.device) {
                     repeated_device = d.device;
                   }
                   d.peak_allocated = row.Int(1);
                   d.peak_reserved = row.Int(2);
                   damaged |= !PlausibleBytes(d.peak_allocated) || !PlausibleBytes(d.peak_reserved);
                   peak_events[d.device] = row.IsNull(3) ? model::kNoEvent : row.Int(3);
                   side.devices.push_back(std::move(d));
                 }));
  if (repeated_device) {
    return db->Damaged(fmt::format("vramscope_devices holds device {} twice", *repeated_device));
  }
  RETURN_IF_ERROR(control.CheckCancelled("reading the reports"));
  RETURN_IF_ERROR(db->Select("vramscope_categories_at_peak", {"device", "category", "bytes"}, "",
                             [&](const ReportRow& row) {
                               if (DiffDevice* d = DeviceOf(side, row.Int(0))) {
                                 damaged |= !PlausibleBytes(row.Int(2)) ||
                                            !Add(d->categories[row.Text(1)], row.Int(2));
                               }
                             }));
  RETURN_IF_ERROR(db->Select("vramscope_owners_at_peak", {"device", "category", "owner", "bytes"},
                             "", [&](const ReportRow& row) {
                               if (DiffDevice* d = DeviceOf(side, row.Int(0))) {
                                 damaged |= !PlausibleBytes(row.Int(3)) ||
                                            !Add(d->owners[{row.Text(1), row.Text(2)}], row.Int(3));
                               }
                             }));
  RETURN_IF_ERROR(db->Select(
      "vramscope_live_at_peak", {"device", "site", "bytes"}, "", [&](const ReportRow& row) {
        if (DiffDevice* d = DeviceOf(side, row.Int(0))) {
          damaged |= !PlausibleBytes(row.Int(2)) || !Add(d->sites[row.Text(1)], row.Int(2));
        }
      }));
  if (damaged) return db->Damaged("it holds sizes no device could hold");
  std::vector<std::string> owner_labels;
  RETURN_IF_ERROR(db->CheckDenseIds("vramscope_owners"));
  RETURN_IF_ERROR(
      db->Select("vramscope_owners", {"id", "label"}, "ORDER BY id", [&](const ReportRow& row) {
        if (row.Int(0) < 0) return;  // no allocation can name it
        const auto id = static_cast<size_t>(row.Int(0));
        if (owner_labels.size() <= id) owner_labels.resize(id + 1);
        owner_labels[id] = row.Text(1);
      }));
  for (DiffDevice& d : side.devices) {
    std::vector<StepRange> ranges;
    RETURN_IF_ERROR(db->Select(
        "vramscope_iterations",
        {"step", "first_event", "last_event", "peak_allocated_bytes", "peak_phase"},
        "WHERE device = " + std::to_string(d.device) + " ORDER BY step", [&](const ReportRow& row) {
          DiffStep s;
          s.step = static_cast<int32_t>(row.Int(0));
          s.peak_allocated = row.Int(3);
          damaged |= !PlausibleBytes(s.peak_allocated);
          s.peak_phase = row.Text(4);
          const int64_t peak = peak_events[d.device];
          if (peak != model::kNoEvent && row.Int(1) <= peak && peak <= row.Int(2)) {
            d.peak_step = s.step;
            d.peak_phase = s.peak_phase;
          }
          ranges.push_back({row.Int(1), row.Int(2)});
          d.steps.push_back(std::move(s));
        }));
    RETURN_IF_ERROR(control.CheckCancelled("reading the reports"));
    if (damaged) return db->Damaged("vramscope_iterations holds peaks no device could hold");
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i].first_event <= ranges[i - 1].first_event) {
        return db->Damaged("vramscope_iterations' steps do not begin in the order of their events");
      }
    }
    RETURN_IF_ERROR(ReadLiveAtStepStarts(*db, d, ranges, owner_labels));
  }
  return side;
}

}  // namespace vramscope::report
