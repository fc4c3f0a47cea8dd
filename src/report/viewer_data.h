// What the HTML viewer embeds: one report database read back into columns (viewer_data.cc,
// viewer_device_reader.cc), its timeline aggregated into level-of-detail pyramids (viewer_lod.cc),
// and the whole encoded as the blob the page decodes (viewer_blob.cc). The blob's format is the
// contract with the page's scripts: docs/design/viewer.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace vramscope::report {

// The categories in the order the page colours them (model::Category's names).
inline constexpr int kViewerCategories = 8;
inline constexpr const char* kViewerCategoryNames[kViewerCategories] = {
    "weight", "gradient",  "optimizer_state", "activation",
    "input",  "workspace", "temporary",       "unknown"};
// Region bands: rows of nested annotation ranges drawn (deeper ones share the last row), and the
// most bands one device carries (a long run records a range per step and per optimizer call).
inline constexpr int kViewerRangeRows = 4;
inline constexpr size_t kViewerMaxRegionBands = 100000;
// Owners drawn as their own series in the "owner" grouping; the rest share one more series.
inline constexpr int kViewerOwnerSeries = 15;

// A step curve: from event[i] on, the value is value[i].
struct StepCurve {
  std::vector<int32_t> event;
  std::vector<double> value;
};

struct ViewerAllocations {
  std::vector<int32_t> start, end, free_completed;  // device-local events; -1 / E as in the doc
  std::vector<double> size, requested, address;
  std::vector<uint8_t> category, phase, owner_group;
  std::vector<uint32_t> owner, op, stack;
  std::vector<int32_t> step, segment;
  size_t count() const { return start.size(); }
};

struct ViewerSegments {
  std::string source = "none";  // "recorded" | "model" | "none"
  std::vector<double> address, size, stream;
  std::vector<int32_t> start, end;
  std::vector<uint8_t> pool;  // 0 large, 1 small
  // 0: the default pools; k > 0: the private pool private_pools[k - 1] (a CUDA graph's or a
  // MemPool's, by segment_pool_id). Empty when no segment is in a private pool.
  std::vector<int32_t> private_pool;
  std::vector<std::string> private_pools;  // "(1, 0)", in order of first appearance
  size_t count() const { return address.size(); }
};

struct ViewerLevel {
  int64_t bucket = 1;
  std::vector<int32_t> peak_event;
  std::vector<double> allocated, reserved;
  std::vector<double> category, owner;              // bucket-major, kViewerCategories / G wide
  std::vector<double> category_start, owner_start;  // finest level only
  size_t count() const { return peak_event.size(); }
};

struct ViewerDevice {
  int32_t device = 0;
  int64_t first_event_id = 0;  // vramscope_events.id of local event 0
  int32_t events = 0;
  bool has_time = false;
  int64_t time0_us = 0;
  std::vector<uint32_t> time_delta_us;  // per event, from the previous one
  std::vector<int32_t> ev_alloc;
  std::vector<int8_t> ev_sign;
  StepCurve reserved;
  bool has_predicted = false;
  StepCurve predicted_allocated, predicted_reserved;
  ViewerAllocations allocations;
  ViewerSegments segments;
  std::vector<std::string> owner_series;  // names of the owner grouping's series
  std::vector<ViewerLevel> levels;        // finest first
  nlohmann::json phases = nlohmann::json::array();
  // {name, kind, first_event, last_event (local, inclusive), allocated_bytes, live_at_peak_bytes,
  // peak_bytes, unmatched, row}: the bands under the axis (docs/design/viewer.md).
  nlohmann::json regions = nlohmann::json::array();
  size_t regions_left_out = 0;  // bands past kViewerMaxRegionBands
  nlohmann::json summary = nlohmann::json::object();
  int64_t event_conflicts = 0;  // events claimed by two allocations (0 on every known input)
};

struct ViewerFrame {
  std::string file, function;
  int64_t line = 0;
  bool project = false;
};

struct ViewerReport {
  std::string title, kind = "measured", source;
  std::string device_type = "cuda";  // what the devices' ordinals number ("cpu": host memory)
  // Made by `vramscope predict`: kind is "predicted", and `prediction` holds what it assumed
  // (vramscope_prediction read back; null when the report has no such table).
  bool predicted = false;
  nlohmann::json prediction;
  // The ranks of a capture folder, as `report --json` gives them: {"table": its "ranks",
  // "compared": its "ranks_compared" (null for one rank)}. Null when the report has no ranks.
  nlohmann::json ranks;
  std::vector<std::string> phases{"unknown"};
  std::vector<std::string> strings{""};
  std::vector<std::string> owners{""};
  std::vector<ViewerFrame> frames{ViewerFrame{}};
  std::vector<uint32_t> stack_parent{0}, stack_frame{0};
  std::vector<std::string> notes;
  std::vector<ViewerDevice> devices;
};

// Reads a report database written by `vramscope report`. Fails with one line when `path` is not
// one (or is damaged). `title` names it in the page (empty: the input recorded in the report).
Result<ViewerReport> LoadViewerReport(const std::string& path, const std::string& title = "");

// Fills every device's `levels` (docs/design/viewer.md, "The level-of-detail pyramid").
void BuildViewerLod(ViewerReport& report);

// The gzip-compressed blob: magic, header JSON, aligned little-endian columns.
std::string EncodeViewerBlob(const std::vector<const ViewerReport*>& reports);

}  // namespace vramscope::report
