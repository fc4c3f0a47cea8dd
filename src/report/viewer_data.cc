#include "report/viewer_data.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "analysis/sites.h"
#include "report/rank_table.h"
#include "report/report_db.h"
#include "report/viewer_device_reader.h"

// LoadViewerReport: the report database read back through the schema (report/report_db.h) into
// the viewer's columns; each device by report/viewer_device_reader.h.
namespace vramscope::report {

namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of("/\\");
  return slash == std::string::npos ? path : path.substr(slash + 1);
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
  RETURN_IF_ERROR(db.Select("vramscope_prediction", {"key", "value"}, "ORDER BY rowid",
                            [&](const ReportRow& s) {
                              const std::string key = s.Text(0);
                              const std::string value = s.Text(1);
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
  RETURN_IF_ERROR(db.Select("vramscope_ranks",
                            {"label", "rank", "local_rank", "host", "device", "device_name", "file",
                             "peak_allocated_bytes", "peak_reserved_bytes", "peak_step",
                             "peak_phase", "steps", "end_reason", "oom", "reported"},
                            "ORDER BY rowid", [&](const ReportRow& s) {
                              analysis::RankRow row;
                              row.label = s.Text(0);
                              if (!s.IsNull(1)) row.rank = s.Int(1);
                              if (!s.IsNull(2)) row.local_rank = s.Int(2);
                              row.host = s.Text(3);
                              row.device = static_cast<int32_t>(s.Int(4));
                              row.device_name = s.Text(5);
                              row.file = s.Text(6);
                              row.peak_allocated = s.Int(7);
                              row.peak_reserved = s.Int(8);
                              row.peak_step = static_cast<int32_t>(s.Int(9));
                              row.peak_phase = s.Text(10);
                              row.steps = s.Int(11);
                              row.end_reason = s.Text(12);
                              row.oom = s.Int(13) != 0;
                              row.reported = s.Int(14) != 0;
                              if (index.emplace(row.label, rows.size()).second)
                                rows.push_back(std::move(row));
                            }));
  if (rows.empty()) return Status::Ok();
  // Rows of the other tables name their rank by label; a label no rank has is ignored.
  const auto rank_of = [&](const ReportRow& s) -> analysis::RankRow* {
    const auto it = index.find(s.Text(0));
    return it == index.end() ? nullptr : &rows[it->second];
  };
  if (db.HasTable("vramscope_rank_steps")) {
    RETURN_IF_ERROR(db.Select(
        "vramscope_rank_steps", {"label", "step", "peak_allocated_bytes", "peak_phase"},
        "ORDER BY label, step", [&](const ReportRow& s) {
          if (analysis::RankRow* row = rank_of(s)) {
            row->step_peaks.push_back({static_cast<int32_t>(s.Int(1)), s.Int(2), s.Text(3)});
          }
        }));
  }
  if (db.HasTable("vramscope_rank_phases")) {
    RETURN_IF_ERROR(db.Select(
        "vramscope_rank_phases", {"label", "step", "phase", "peak_allocated_bytes"},
        "ORDER BY rowid", [&](const ReportRow& s) {
          if (analysis::RankRow* row = rank_of(s)) {
            row->phase_peaks.push_back({static_cast<int32_t>(s.Int(1)), s.Text(2), s.Int(3)});
          }
        }));
  }
  if (db.HasTable("vramscope_rank_categories")) {
    RETURN_IF_ERROR(db.Select("vramscope_rank_categories", {"label", "category", "bytes"},
                              "ORDER BY rowid", [&](const ReportRow& s) {
                                if (analysis::RankRow* row = rank_of(s))
                                  row->at_peak.emplace_back(s.Text(1), s.Int(2));
                              }));
  }
  if (db.HasTable("vramscope_rank_owners")) {
    RETURN_IF_ERROR(db.Select("vramscope_rank_owners", {"label", "category", "owner", "bytes"},
                              "ORDER BY label, position", [&](const ReportRow& s) {
                                if (analysis::RankRow* row = rank_of(s)) {
                                  row->owners_at_peak.push_back({s.Text(1), s.Text(2), s.Int(3)});
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
  ASSIGN_OR_RETURN(const std::unique_ptr<ReportDb> opened, ReportDb::Open(path));
  ReportDb& db = *opened;
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
  RETURN_IF_ERROR(db.Select("vramscope_metadata", {"key", "value"}, "",
                            [&](const ReportRow& s) { meta[s.Text(0)] = s.Text(1); }));
  r.source = meta["source_format"];
  r.device_type = meta["device_type"] == "cpu" ? "cpu" : "cuda";
  if (meta.count("kind") != 0) r.kind = meta["kind"];
  if (db.version() > db.schema().version) {
    r.notes.push_back(fmt::format(
        "this report was written by a newer vramscope (report schema version {}; this one reads "
        "up to {}): what was added since is not shown",
        db.version(), db.schema().version));
  }
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
  RETURN_IF_ERROR(db.Select("vramscope_frames", {"id", "file_path", "line_number", "function"},
                            "ORDER BY id", [&](const ReportRow& s) {
                              // The page's frame 0 is "none": database frame k is k + 1.
                              const int64_t id = s.Int(0) + 1;
                              if (id < 1 || id > 50'000'000) return;
                              if (static_cast<size_t>(id) >= r.frames.size()) {
                                r.frames.resize(id + 1);
                              }
                              ViewerFrame& f = r.frames[id];
                              f.file = s.Text(1);
                              f.line = s.Int(2);
                              f.function = s.Text(3);
                              f.project = !meta["project_root"].empty() &&
                                          root.Relative(f.file).has_value();
                            }));
  RETURN_IF_ERROR(db.Select(
      "vramscope_stacks", {"id", "parent_id", "frame_id"}, "ORDER BY id", [&](const ReportRow& s) {
        const int64_t id = s.Int(0);
        if (id < 1 || id > 100'000'000) return;
        if (static_cast<size_t>(id) >= r.stack_parent.size()) {
          r.stack_parent.resize(id + 1, 0);
          r.stack_frame.resize(id + 1, 0);
        }
        const int64_t parent = s.Int(1);
        const int64_t frame = s.Int(2) + 1;
        // A parent always precedes its child; anything else is damage, cut at the root.
        r.stack_parent[id] = parent >= 0 && parent < id ? static_cast<uint32_t>(parent) : 0;
        r.stack_frame[id] = frame >= 0 && frame < static_cast<int64_t>(r.frames.size())
                                ? static_cast<uint32_t>(frame)
                                : 0;
      }));
  ViewerIds ids;
  std::vector<int64_t>& owner_remap = ids.owner_remap;
  RETURN_IF_ERROR(
      db.Select("vramscope_owners", {"id", "label"}, "ORDER BY id", [&](const ReportRow& s) {
        const int64_t id = s.Int(0);
        if (id < 0 || id > 100'000'000) return;
        if (static_cast<size_t>(id) >= owner_remap.size()) owner_remap.resize(id + 1, 0);
        owner_remap[id] = static_cast<int64_t>(r.owners.size());
        r.owners.push_back(s.Text(1));
      }));
  RETURN_IF_ERROR(db.Select("vramscope_notes", {"text"}, "ORDER BY id",
                            [&](const ReportRow& s) { r.notes.push_back(s.Text(0)); }));
  std::vector<int32_t> devices;
  RETURN_IF_ERROR(
      db.Select("vramscope_devices", {"device"}, "ORDER BY device",
                [&](const ReportRow& s) { devices.push_back(static_cast<int32_t>(s.Int(0))); }));
  for (int32_t device : devices) {
    ViewerDevice& d = r.devices.emplace_back();
    d.device = device;
    RETURN_IF_ERROR(LoadViewerDevice(db, r, d, ids));
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

}  // namespace vramscope::report
