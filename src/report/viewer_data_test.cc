#include "report/viewer_data.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "analysis/analyze.h"
#include "analysis/simulation.h"
#include "common/gzip.h"
#include "common/mapped_file.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/sqlite_report.h"
#include "sources/load_source.h"

namespace vramscope::report {
namespace {

// A report database written by the real pipeline (src/pipeline) from `input`, and the analysis it
// came from, so the viewer's columns can be checked against the pipeline's own curves.
class Reported {
 public:
  explicit Reported(const std::string& input) {
    pipeline::LoadRequest load;
    load.input = pipeline::ClassifyInput(input);
    auto loaded = pipeline::Load(load);
    if (!loaded.ok()) {
      error_ = loaded.status().message();
      return;
    }
    auto analyzed = pipeline::Analyze(
        std::move(loaded).value(),
        {.project_root = "/nonexistent/project", .what_if = std::nullopt, .control = {}});
    if (!analyzed.ok()) {
      error_ = analyzed.status().message();
      return;
    }
    analyzed_ = std::move(analyzed).value();
    trace_ = &analyzed_->trace();
    analysis_ = analyzed_->analysis.get();
    path_ = (std::filesystem::temp_directory_path() /
             ("vramscope_viewer_test_" + std::to_string(getpid()) + "_" +
              std::to_string(counter_++) + ".sqlite"))
                .string();
    std::filesystem::remove(path_);
    SqliteReportInfo info;
    const Status status = WriteSqliteReport(path_, ReportInput::From(*analyzed_), &info);
    if (!status.ok()) error_ = status.message();
  }
  ~Reported() { std::filesystem::remove(path_); }

  std::string error_;
  std::unique_ptr<const pipeline::Analyzed> analyzed_;
  const model::Trace* trace_ = nullptr;
  const analysis::Analysis* analysis_ = nullptr;
  std::string path_;
  static inline int counter_ = 0;
};

// The exact per-category values after event `e`, from the allocation columns alone.
std::vector<double> ExactAt(const ViewerDevice& d, int32_t e) {
  std::vector<double> values(kViewerCategories, 0);
  const ViewerAllocations& a = d.allocations;
  for (size_t i = 0; i < a.count(); ++i) {
    if (a.start[i] <= e && e < a.end[i]) values[a.category[i]] += a.size[i];
  }
  return values;
}

void CheckDevice(const ViewerDevice& d, const analysis::DeviceTimeline& tl) {
  ASSERT_EQ(static_cast<size_t>(d.events), tl.end - tl.begin);
  EXPECT_EQ(d.event_conflicts, 0);
  const ViewerAllocations& a = d.allocations;
  // Replaying ev_alloc/ev_sign from the allocations live before the trace gives the pipeline's
  // own allocated curve at every event.
  double total = 0;
  for (size_t i = 0; i < a.count(); ++i) {
    if (a.start[i] < 0) total += a.size[i];
  }
  for (int32_t e = 0; e < d.events; ++e) {
    if (d.ev_alloc[e] >= 0) total += d.ev_sign[e] * a.size[d.ev_alloc[e]];
    ASSERT_EQ(total, static_cast<double>(tl.allocated[e])) << "event " << e;
  }
  // Every level: each bucket's allocated is the highest value of the exact curve in it, its
  // categories add up to it, and reserved is the highest reserved level in it.
  ASSERT_FALSE(d.levels.empty());
  EXPECT_LE(d.levels.back().count(), 1024u);
  for (size_t l = 0; l < d.levels.size(); ++l) {
    const ViewerLevel& v = d.levels[l];
    if (l > 0) {
      EXPECT_EQ(v.bucket, d.levels[l - 1].bucket * 4);
    }
    for (size_t b = 0; b < v.count(); ++b) {
      const int64_t first = static_cast<int64_t>(b) * v.bucket;
      const int64_t last = std::min<int64_t>(d.events, first + v.bucket);
      double best = 0;
      int64_t reserved = 0;
      for (int64_t e = first; e < last; ++e) {
        best = std::max(best, static_cast<double>(tl.allocated[e]));
        reserved = std::max(reserved, tl.ReservedAfter(tl.begin + e));
      }
      ASSERT_EQ(v.allocated[b], best) << "level " << l << " bucket " << b;
      ASSERT_EQ(v.reserved[b], static_cast<double>(reserved)) << "level " << l << " bucket " << b;
      ASSERT_GE(v.peak_event[b], first);
      ASSERT_LT(v.peak_event[b], last);
      ASSERT_EQ(static_cast<double>(tl.allocated[v.peak_event[b]]), best);
      double sum = 0;
      for (int c = 0; c < kViewerCategories; ++c) sum += v.category[b * kViewerCategories + c];
      ASSERT_EQ(sum, best);
    }
  }
  // The finest level's start values are the exact values before the bucket (spot checks).
  const ViewerLevel& fine = d.levels.front();
  for (size_t b = 0; b < fine.count(); b += std::max<size_t>(1, fine.count() / 7)) {
    const auto exact = ExactAt(d, static_cast<int32_t>(b * fine.bucket) - 1);
    for (int c = 0; c < kViewerCategories; ++c) {
      ASSERT_EQ(fine.category_start[b * kViewerCategories + c], exact[c]) << "bucket " << b;
    }
    const auto at_peak = ExactAt(d, fine.peak_event[b]);
    for (int c = 0; c < kViewerCategories; ++c) {
      ASSERT_EQ(fine.category[b * kViewerCategories + c], at_peak[c]) << "bucket " << b;
    }
  }
  // The owner grouping partitions the same bytes.
  const size_t G = d.owner_series.size();
  for (size_t b = 0; b < fine.count(); ++b) {
    double sum = 0;
    for (size_t g = 0; g < G; ++g) sum += fine.owner[b * G + g];
    ASSERT_EQ(sum, fine.allocated[b]);
  }
}

TEST(ViewerData, BuiltInExampleMatchesThePipeline) {
  Reported r(std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle");
  ASSERT_EQ(r.error_, "");
  auto v = LoadViewerReport(r.path_);
  ASSERT_TRUE(v.ok()) << v.status().message();
  BuildViewerLod(*v);
  ASSERT_EQ(v->devices.size(), 1u);
  const ViewerDevice& d = v->devices[0];
  EXPECT_EQ(d.allocations.count(), r.trace_->allocations.size());
  CheckDevice(d, r.analysis_->timelines.devices[0]);
  // Every block sits in a recorded segment that is live with it.
  EXPECT_EQ(d.segments.source, "recorded");
  for (size_t i = 0; i < d.allocations.count(); ++i) {
    const int32_t s = d.allocations.segment[i];
    ASSERT_GE(s, 0) << "allocation " << i;
    EXPECT_GE(d.allocations.address[i], d.segments.address[s]);
    EXPECT_LE(d.allocations.address[i] + d.allocations.size[i],
              d.segments.address[s] + d.segments.size[s]);
  }
  EXPECT_TRUE(d.has_time);
  EXPECT_TRUE(d.has_predicted);
  EXPECT_EQ(d.summary["peak_allocated"], 185700864);
}

TEST(ViewerData, BlobIsTheDocumentedLayout) {
  Reported r(std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle");
  ASSERT_EQ(r.error_, "");
  auto v = LoadViewerReport(r.path_);
  ASSERT_TRUE(v.ok());
  BuildViewerLod(*v);
  const std::string blob = EncodeViewerBlob({&*v, &*v});
  auto raw = Gunzip({reinterpret_cast<const uint8_t*>(blob.data()), blob.size()}, "blob");
  ASSERT_TRUE(raw.ok());
  ASSERT_GE(raw->size(), 8u);
  EXPECT_EQ(raw->substr(0, 4), "VSV1");
  uint32_t length = 0;
  std::memcpy(&length, raw->data() + 4, 4);
  const auto header = nlohmann::json::parse(raw->substr(8, length));
  EXPECT_EQ(header["format"], 1);
  ASSERT_EQ(header["reports"].size(), 2u);
  const size_t binary = (8 + length + 7) / 8 * 8;
  for (const auto& c : header["columns"]) {
    const size_t offset = c["offset"];
    EXPECT_EQ(offset % 8, 0u);
    const std::string type = c["type"];
    const size_t width = type == "f64" ? 8 : (type == "u8" || type == "i8") ? 1 : 4;
    EXPECT_LE(binary + offset + width * static_cast<size_t>(c["length"]), raw->size());
  }
  const auto& dev = header["reports"][0]["devices"][0];
  const size_t n = dev["allocations"]["count"];
  const size_t size_col = dev["allocations"]["size"]["col"];
  EXPECT_EQ(header["columns"][size_col]["length"], n);
  EXPECT_EQ(header["columns"][size_col]["type"], "f64");
  // The first allocation's size, read back from the bytes.
  double first = 0;
  std::memcpy(&first,
              raw->data() + binary + static_cast<size_t>(header["columns"][size_col]["offset"]), 8);
  EXPECT_EQ(first, v->devices[0].allocations.size[0]);
}

TEST(ViewerData, RefusesWhatIsNotAReport) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("vramscope_viewer_not_" + std::to_string(getpid()) + ".sqlite"))
                               .string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto v = LoadViewerReport(path);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("not a vramscope report"), std::string::npos)
      << v.status().message();
  std::filesystem::remove(path);
  auto missing = LoadViewerReport(path);
  EXPECT_FALSE(missing.ok());
}

// Damaged reports are refused with one line naming the file, instead of sizing the columns by
// the ids they hold: each of these once made `vramscope view` take gigabytes (the event range,
// 23 GB before it was killed; a frame id of 50 million, 17 GB). Their databases are also the
// fuzzer's regression inputs (fuzz/viewer_report/corpus/damaged_*.sqlite).
TEST(ViewerData, DamagedIdsAreRefusedWithoutAllocatingByThem) {
  const struct {
    const char* name;
    std::vector<std::string> sql;
    const char* message;
  } cases[] = {
      {"event range",
       {"UPDATE vramscope_events SET id = 2000000000 WHERE id = (SELECT max(id) FROM "
        "vramscope_events)"},
       "its event ids span 0..2000000000, 2000000001 events, but its rows name only"},
      {"frame id",
       {"UPDATE vramscope_frames SET id = 49999999 WHERE id = (SELECT max(id) FROM "
        "vramscope_frames)"},
       "vramscope_frames has an id 49999999 in"},
      {"stack id",
       {"UPDATE vramscope_stacks SET id = 99999999 WHERE id = (SELECT max(id) FROM "
        "vramscope_stacks)"},
       "vramscope_stacks has an id 99999999 in"},
      {"owner id",
       {"UPDATE vramscope_owners SET id = 99999999 WHERE id = (SELECT max(id) FROM "
        "vramscope_owners)"},
       "vramscope_owners has an id 99999999 in"},
      {"segment source",
       {"UPDATE vramscope_segment_timeline SET source = 'rec' || char(10) || 'orded' WHERE id = "
        "(SELECT min(id) FROM vramscope_segment_timeline)"},
       "vramscope_segment_timeline has a segment of source 'rec orded'"},
      // SQLite quotes a malformed schema's own text, line breaks and all (a fuzzer's find):
      // the error stays one line.
      {"malformed schema",
       {"PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = 'CREATE TABLE vramscope_owners(id,' || char(10) || "
        "' peak_rese' WHERE name = 'vramscope_owners'"},
       "malformed database schema (vramscope_owners) "},
      {"phase names",
       {"CREATE TEMP TABLE t AS SELECT * FROM vramscope_allocations",
        "UPDATE t SET alloc_event = NULL, free_requested_event = NULL, free_completed_event = NULL",
        // 300 copies of the first allocation, each with a phase of its own.
        "DELETE FROM t WHERE id <> (SELECT min(id) FROM t)",
        "WITH RECURSIVE n(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM n WHERE k < 300) "
        "INSERT INTO t SELECT t.id + n.k, device, address, requested_bytes, size_bytes, "
        "size_exact, stream, alive_at_end, alloc_event, alloc_time_us, alloc_stack_id, "
        "free_requested_event, free_requested_time_us, free_stack_id, free_completed_event, "
        "free_completed_time_us, category, confidence, rule_id, operation, site_id, "
        "user_metadata, compile_context, 'phase ' || n.k, step, owner_id, size_evidence, "
        "segment_id FROM t, n",
        "UPDATE t SET id = id + 1000000", "INSERT INTO vramscope_allocations SELECT * FROM t"},
       "vramscope_allocations names more than 256 distinct phases"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Reported r(std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle");
    ASSERT_EQ(r.error_, "");
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(r.path_.c_str(), &db), SQLITE_OK);
    for (const std::string& sql : c.sql) {
      char* error = nullptr;
      ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
    }
    sqlite3_close(db);
    auto v = LoadViewerReport(r.path_);
    ASSERT_FALSE(v.ok());
    const std::string& message = v.status().message();
    EXPECT_EQ(message.rfind(r.path_ + ": cannot read the report (", 0), 0u) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message;
    EXPECT_NE(message.find("write it again with 'vramscope report'"), std::string::npos);
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

// The real fixtures, when present: every source kind goes through the same checks.
TEST(ViewerData, RealFixturesMatchThePipeline) {
  const std::filesystem::path dir = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent";
  int checked = 0;
  for (const char* name : {"snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
                           "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle",
                           "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz",
                           "memory_timeline_raw_oct2023.json.gz"}) {
    const std::filesystem::path file = dir / name;
    if (!std::filesystem::exists(file)) continue;
    SCOPED_TRACE(name);
    Reported r(file.string());
    ASSERT_EQ(r.error_, "");
    auto v = LoadViewerReport(r.path_);
    ASSERT_TRUE(v.ok()) << v.status().message();
    BuildViewerLod(*v);
    ASSERT_EQ(v->devices.size(), r.analysis_->timelines.devices.size());
    for (size_t i = 0; i < v->devices.size(); ++i) {
      CheckDevice(v->devices[i], r.analysis_->timelines.devices[i]);
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace vramscope::report
