#include "report/sqlite_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "analysis/analyze.h"
#include "common/gzip.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "report/earlier_output.h"
#include "report/html_viewer.h"
#include "report/json_summary.h"
#include "report/terminal_summary.h"
#include "report/viewer_data.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::report {
namespace {

// Splits a schema text into its CREATE statements, whitespace as written.
std::vector<std::string> Statements(const std::string& sql) {
  std::vector<std::string> out;
  std::string current;
  for (char c : sql) {
    current.push_back(c);
    if (c == ';') {
      const size_t start = current.find("CREATE");
      if (start != std::string::npos)
        out.push_back(current.substr(start, current.size() - start - 1));
      current.clear();
    }
  }
  return out;
}

class Database {
 public:
  explicit Database(const std::string& path) {
    sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr);
  }
  ~Database() { sqlite3_close(db_); }
  std::vector<std::vector<std::string>> Query(const std::string& sql) {
    std::vector<std::vector<std::string>> rows;
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    while (stmt != nullptr && sqlite3_step(stmt) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(stmt); ++i) {
        const unsigned char* text = sqlite3_column_text(stmt, i);
        row.push_back(text != nullptr ? reinterpret_cast<const char*>(text) : "NULL");
      }
      rows.push_back(std::move(row));
    }
    sqlite3_finalize(stmt);
    return rows;
  }
  std::string One(const std::string& sql) {
    const auto rows = Query(sql);
    return rows.empty() || rows[0].empty() ? "" : rows[0][0];
  }

 private:
  sqlite3* db_ = nullptr;
};

// The real pipeline over the example snapshot, as `vramscope simulate -o` runs it.
class ExampleReport : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string example =
        std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle";
    pipeline::LoadRequest load;
    load.input = pipeline::ClassifyInput(example);
    auto loaded = pipeline::Load(load);
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    // The replay against the recording and one what-if run under a capacity too small for the
    // example's peak, so every vramscope_sim_* table has rows.
    analysis::WhatIfRequest what_if;
    what_if.what_if.emplace_back("");
    what_if.capacity = 64ull << 20;
    auto analyzed = pipeline::Analyze(
        std::move(loaded).value(),
        {.project_root = "/home/user/mlp_example", .what_if = what_if, .control = {}});
    ASSERT_TRUE(analyzed.ok()) << analyzed.status().message();
    analyzed_ = std::move(analyzed).value();
    path_ = (std::filesystem::temp_directory_path() /
             ("vramscope_report_test_" + std::to_string(getpid()) + ".sqlite"))
                .string();
    std::filesystem::remove(path_);
    const Status status = WriteSqliteReport(path_, ReportInput::From(*analyzed_), &info_);
    ASSERT_TRUE(status.ok()) << status.message();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::unique_ptr<const pipeline::Analyzed> analyzed_;
  std::string path_;
  SqliteReportInfo info_;
};

TEST_F(ExampleReport, SkylineSchemaIsVerbatim) {
  Database db(path_);
  const auto expected = Statements(kSkylineSchema);
  ASSERT_EQ(expected.size(), 7u);  // six tables and one index
  for (const std::string& statement : expected) {
    const auto rows = db.Query("SELECT sql FROM sqlite_master WHERE sql = '" + statement + "'");
    EXPECT_EQ(rows.size(), 1u) << "missing or altered: " << statement;
  }
  EXPECT_EQ(db.One("PRAGMA user_version"), "1");
  // Nothing else but our own prefixed tables (and SQLite's autoindexes).
  for (const auto& row : db.Query("SELECT name FROM sqlite_master WHERE type = 'table'")) {
    const std::string& name = row[0];
    const bool skyline = name == "weight_entries" || name == "activation_entries" ||
                         name == "entry_types" || name == "stack_correlation" ||
                         name == "stack_frames" || name == "misc_sizes";
    EXPECT_TRUE(skyline || name.rfind("vramscope_", 0) == 0) << name;
  }
  EXPECT_EQ(info_.vramscope_tables, 32);
}

// A default-named output may replace only what vramscope wrote (report/earlier_output.h): its
// report and its page are recognised; another SQLite database, an HTML page of someone else's, a
// text file, a truncated report and a folder are not.
TEST_F(ExampleReport, OnlyVramscopesOwnOutputsAreRecognisedAsEarlierOutputs) {
  EXPECT_TRUE(IsEarlierOutput(path_, OutputKind::kReportDatabase));
  EXPECT_FALSE(IsEarlierOutput(path_, OutputKind::kViewerPage));
  const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
  const std::string page = path_ + ".html";
  ASSERT_TRUE(WriteViewerPage({path_}, page, /*overwrite=*/true, "").ok());
  EXPECT_TRUE(IsEarlierOutput(page, OutputKind::kViewerPage));
  EXPECT_FALSE(IsEarlierOutput(page, OutputKind::kReportDatabase));

  const std::string other_db = path_ + ".other.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other_db.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE weight_entries (name TEXT)", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  EXPECT_FALSE(IsEarlierOutput(other_db, OutputKind::kReportDatabase));

  const std::string other_page = path_ + ".other.html";
  std::ofstream(other_page) << "<!doctype html><html><head><meta name=\"generator\" "
                               "content=\"Hugo\"></head></html>";
  EXPECT_FALSE(IsEarlierOutput(other_page, OutputKind::kViewerPage));

  // The first 4 KiB of a real report: the header says SQLite, the schema cannot be read.
  const std::string truncated = path_ + ".truncated.sqlite";
  {
    std::ifstream in(path_, std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary) << head;
  }
  EXPECT_FALSE(IsEarlierOutput(truncated, OutputKind::kReportDatabase));
  EXPECT_FALSE(IsEarlierOutput(other_page, OutputKind::kReportDatabase));
  EXPECT_FALSE(IsEarlierOutput(dir.string(), OutputKind::kReportDatabase));
  EXPECT_FALSE(IsEarlierOutput(path_ + ".absent", OutputKind::kReportDatabase));
  for (const std::string& p : {page, other_db, other_page, truncated}) std::filesystem::remove(p);
}

TEST_F(ExampleReport, SegmentTimelineHoldsEverySegmentAndEveryAllocationsSegment) {
  Database db(path_);
  // The trace begins before the first cudaMalloc: its 14 segment_allocs are the 14 segments at
  // the dump, each with its pool as the dump records it, and every allocation lies in one.
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_segment_timeline"), "14");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_segment_timeline WHERE first_event IS NULL OR "
                   "end_event IS NOT NULL OR pool_evidence != 'dump' OR source != 'recorded'"),
            "0");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_segment_timeline t JOIN vramscope_segments s "
                   "ON s.address = t.address AND s.total_size = t.size_bytes AND s.pool = t.pool"),
            "14");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_allocations WHERE segment_id IS NULL"), "0");
  // An allocation's block lies inside its segment.
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_allocations a JOIN vramscope_segment_timeline "
                   "t ON t.id = a.segment_id WHERE a.address < t.address OR a.address + "
                   "a.size_bytes > t.address + t.size_bytes"),
            "0");
}

// The allocation rows are written on two threads (the first eighth with the other tables, the rest
// into a file beside the report, then moved in): every allocation is there once, with its rule,
// site and owner, the rows are counted, and nothing of the second file is left.
TEST_F(ExampleReport, AllocationTablesWrittenBesideAreMovedInWhole) {
  EXPECT_FALSE(std::filesystem::exists(path_ + "-allocations"));
  Database db(path_);
  const std::string allocations = std::to_string(analyzed_->trace().allocations.size());
  EXPECT_EQ(allocations, "71");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_allocations"), allocations);
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_allocations a JOIN vramscope_rules r ON r.id = "
                   "a.rule_id JOIN vramscope_sites s ON s.id = a.site_id JOIN vramscope_owners o "
                   "ON o.id = a.owner_id"),
            allocations);
  EXPECT_EQ(db.One("SELECT min(id) || ' ' || max(id) FROM vramscope_allocations"), "0 70");
  uint64_t rows = 0;
  for (const auto& table : db.Query("SELECT name FROM sqlite_master WHERE type = 'table'")) {
    rows += std::stoull(db.One("SELECT count(*) FROM " + table[0]));
  }
  EXPECT_EQ(info_.rows, rows);
}

// When the second writer cannot make its file, the report fails with the reason, and what stood in
// its way is left alone.
TEST_F(ExampleReport, ASecondWriterThatCannotWriteFailsTheReport) {
  const std::string other = path_ + ".second";
  std::filesystem::create_directory(other + "-allocations");
  const Status status = WriteSqliteReport(other, ReportInput::From(*analyzed_), nullptr);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), ::testing::HasSubstr("-allocations: cannot create the database"));
  EXPECT_TRUE(std::filesystem::is_directory(other + "-allocations"));
  std::filesystem::remove(other + "-allocations");
  std::filesystem::remove(other);
}

TEST_F(ExampleReport, SimulationTablesHoldTheReplayAndTheWhatIf) {
  Database db(path_);
  // The example follows the allocator's rules: the replay reproduces every address.
  EXPECT_EQ(
      db.Query("SELECT kind, allocs_compared, allocs_at_recorded_address, "
               "segment_allocs_recorded, segment_allocs_matched, final_blocks_recorded, "
               "final_blocks_matched, divergences FROM vramscope_sim_runs WHERE id = 0"),
      (std::vector<std::vector<std::string>>{{"replay", "71", "71", "14", "14", "25", "25", "0"}}));
  // 64 MiB cannot hold the example's 177 MiB peak: the what-if run stops at an OOM.
  EXPECT_EQ(db.One("SELECT kind || ' ' || capacity_bytes || ' ' || (oom_event IS NOT NULL) "
                   "FROM vramscope_sim_runs WHERE id = 1"),
            "what-if 67108864 1");
  EXPECT_EQ(db.One("SELECT max(reserved_bytes) FROM vramscope_sim_timeline WHERE run = 0"),
            "195035136");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_sim_segment_events WHERE run = 0 AND "
                   "action = 'segment_alloc'"),
            "14");
  // The final layout of the replay is the snapshot's: same blocks, same states.
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_sim_final_blocks f JOIN vramscope_blocks b "
                   "ON b.address = f.address AND b.size = f.size_bytes AND b.state = f.state WHERE "
                   "f.run = 0"),
            "25");
}

TEST_F(ExampleReport, SkylineSchemaMatchesTheSpecText) {
  const std::string spec = std::string(VRAMSCOPE_SHARED_DIR) + "/spec/report-schema.md";
  std::ifstream in(spec);
  if (!in) GTEST_SKIP() << spec << " absent";
  std::stringstream text;
  text << in.rdbuf();
  const std::string md = text.str();
  const size_t start = md.find("```sql\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = md.find("```", start + 7);
  const std::string block = md.substr(start + 7, end - start - 7);
  EXPECT_EQ(Statements(block), Statements(kSkylineSchema));
  EXPECT_EQ(block, std::string(kSkylineSchema));
}

TEST_F(ExampleReport, EntriesStacksAndSizes) {
  Database db(path_);
  EXPECT_EQ(db.Query("SELECT entry_type, name FROM entry_types ORDER BY 1"),
            (std::vector<std::vector<std::string>>{{"1", "weight"}, {"2", "activation"}}));
  EXPECT_EQ(db.One("SELECT size_bytes FROM misc_sizes WHERE key = 'peak_usage_bytes'"),
            "185700864");
  // 4 parameters (2 weights, 2 biases), each with a gradient of its own size.
  EXPECT_EQ(db.One("SELECT count(*) FROM weight_entries"), "4");
  EXPECT_EQ(db.One("SELECT count(*) FROM weight_entries WHERE grad_size_bytes = size_bytes"), "4");
  // Every entry has one correlation; frames are project-relative, innermost first.
  EXPECT_EQ(db.One("SELECT count(*) FROM stack_correlation"),
            db.One("SELECT (SELECT count(*) FROM weight_entries) + "
                   "(SELECT count(*) FROM activation_entries)"));
  EXPECT_EQ(db.One("SELECT count(*) FROM stack_frames WHERE file_path LIKE '/%'"), "0");
  EXPECT_EQ(db.One("SELECT file_path FROM stack_frames WHERE ordering = 0 LIMIT 1"), "train.py");
  // The per-category figures at the peak add up to the peak.
  EXPECT_EQ(db.One("SELECT sum(size_bytes) FROM misc_sizes WHERE key LIKE 'peak\\_%\\_bytes' "
                   "ESCAPE '\\' AND key NOT IN ('peak_usage_bytes', 'peak_reserved_bytes')"),
            "185700864");
  // The event table's curve ends at the dump's allocated bytes.
  EXPECT_EQ(db.One("SELECT allocated_bytes FROM vramscope_timeline ORDER BY event DESC LIMIT 1"),
            "151339008");
  // Every trace event is in the database once: alloc/free as allocation ends, the rest as events.
  EXPECT_EQ(db.One("SELECT (SELECT count(alloc_event) + count(free_requested_event) + "
                   "count(free_completed_event) FROM vramscope_allocations) + "
                   "(SELECT count(*) FROM vramscope_events)"),
            "191");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_timeline"), "191");  // small: all kept
  EXPECT_EQ(db.One("SELECT value FROM vramscope_metadata WHERE key = 'source_generation'"),
            "torch 2.5+");
  EXPECT_EQ(db.One("SELECT count(*) FROM vramscope_allocations WHERE category = ''"), "0");
}

TEST_F(ExampleReport, MeasuredReportsSayTheyAreNotPredicted) {
  Database db(path_);
  EXPECT_EQ(db.One("SELECT value FROM vramscope_metadata WHERE key = 'predicted'"), "false");
  EXPECT_EQ(db.One("SELECT count(*) FROM sqlite_master WHERE name = 'vramscope_prediction'"), "0");
  const ReportInput input = ReportInput::From(*analyzed_);
  const nlohmann::json json = RenderJsonSummary(input, 10);
  EXPECT_EQ(json["predicted"], false);
  EXPECT_TRUE(json["prediction"].is_null());
  const std::string text = RenderTerminalSummary(input, {});
  EXPECT_EQ(text.rfind("vramscope report: ", 0), 0u) << text;
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("PREDICTED")));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("predicted peak")));
  EXPECT_THAT(text, ::testing::HasSubstr("  peak allocated  "));
  auto viewer = LoadViewerReport(path_);
  ASSERT_TRUE(viewer.ok()) << viewer.status().message();
  EXPECT_FALSE(viewer->predicted);
  EXPECT_EQ(viewer->kind, "measured");
  EXPECT_TRUE(viewer->prediction.is_null());
}

constexpr uint64_t kMiB = 1 << 20;

// A prediction made by hand, the way `vramscope predict` lays one out: one 20 MiB segment,
// allocations of 4 MiB (freed) and 8 MiB (alive at the end), so the peaks are 12 MiB allocated
// and 20 MiB reserved; `capacity` is what the GPU has for the allocator.
class PredictedReport {
 public:
  // `oom`: the prediction ends with a request of 8 MiB the allocator could not place.
  explicit PredictedReport(uint64_t capacity, bool oom = false) {
    model::Trace& t = trace_;
    t.devices = {0};
    model::Segment seg;
    seg.address = 0x7f0000000000;
    seg.total_size = 20 * kMiB;
    seg.allocated_size = 8 * kMiB;
    seg.active_size = 8 * kMiB;
    seg.requested_size = 8 * kMiB;
    seg.block_count = 3;
    t.segments.push_back(seg);
    auto block = [&](uint64_t addr, uint64_t size, model::BlockState state) {
      model::Block b;
      b.address = addr;
      b.size = size;
      b.requested_size = state == model::BlockState::kInactive ? 0 : size;
      b.state = state;
      t.blocks.push_back(b);
    };
    block(seg.address, 4 * kMiB, model::BlockState::kInactive);
    block(seg.address + 4 * kMiB, 8 * kMiB, model::BlockState::kActiveAllocated);
    block(seg.address + 12 * kMiB, 8 * kMiB, model::BlockState::kInactive);
    model::Events& e = t.events;
    e.Push(model::Action::kSegmentAlloc, 0, seg.address, 20 * kMiB, 0, model::kNoTime, 0);
    e.Push(model::Action::kAlloc, 0, seg.address, 4 * kMiB, 0, model::kNoTime, 0);
    e.Push(model::Action::kAlloc, 0, seg.address + 4 * kMiB, 8 * kMiB, 0, model::kNoTime, 0);
    e.Push(model::Action::kFreeRequested, 0, seg.address, 4 * kMiB, 0, model::kNoTime, 0);
    e.Push(model::Action::kFreeCompleted, 0, seg.address, 4 * kMiB, 0, model::kNoTime, 0);
    if (oom) e.Push(model::Action::kOom, 0, 0, 8 * kMiB, 0, model::kNoTime, 0);
    t.device_event_ranges = {{0, e.count()}};
    t.facts.has_allocator_state = true;
    t.facts.reserved_known = true;
    t.facts.has_trace = true;
    t.facts.has_segment_events = true;
    t.facts.predicted = true;
    t.source.format = "vramscope prediction";
    t.source.generation = "predicted";
    model::PredictionInfo p;
    p.model = "gpt2 (built-in family: GPT-2)";
    p.setup = "batch 8, seq 1024, bf16 autocast, AdamW (foreach), 3 steps";
    p.gpu = "test GPU";
    p.torch_version = "2.5";
    p.parameters = 124439808;
    p.trainable_parameters = 124439808;
    p.parameter_bytes = 497759232;
    p.buffer_bytes = 4194304;
    p.capacity = capacity;
    p.facts = {{"optimizer state", "2 fp32 tensors per parameter"}, {"model", "taken key"}};
    p.assumptions = {"no activation checkpointing", "cuBLAS workspace 8 MiB"};
    t.prediction = std::move(p);
    model::BuildAllocations(t);
    root_ = std::make_unique<analysis::ProjectRoot>("");
    analysis_ = analysis::Analyze(model::Uninterpreted(t), *root_).value();
    input_ = std::make_unique<ReportInput>(
        ReportInput{t, model::Uninterpreted(t), analysis_->timelines, analysis_->attribution,
                    analysis_->summary, analysis_->entries, *analysis_->sites, *root_, nullptr,
                    &analysis_->category_timelines, analysis_->owners.get()});
    path_ = (std::filesystem::temp_directory_path() /
             ("vramscope_prediction_test_" + std::to_string(getpid()) + ".sqlite"))
                .string();
    std::filesystem::remove(path_);
    status_ = WriteSqliteReport(path_, *input_, &info_);
  }
  ~PredictedReport() { std::filesystem::remove(path_); }

  model::Trace trace_;
  std::unique_ptr<analysis::ProjectRoot> root_;
  std::unique_ptr<const analysis::Analysis> analysis_;
  std::unique_ptr<ReportInput> input_;
  std::string path_;
  Status status_ = Status::Ok();
  SqliteReportInfo info_;
};

TEST(PredictedReport, DatabaseHoldsThePrediction) {
  PredictedReport r(80 * kMiB);
  ASSERT_TRUE(r.status_.ok()) << r.status_.message();
  ASSERT_EQ(r.analysis_->summary.devices.size(), 1u);
  EXPECT_EQ(r.analysis_->summary.devices[0].peak_allocated, static_cast<int64_t>(12 * kMiB));
  EXPECT_EQ(r.analysis_->summary.devices[0].peak_reserved, static_cast<int64_t>(20 * kMiB));
  Database db(r.path_);
  EXPECT_EQ(db.One("SELECT value FROM vramscope_metadata WHERE key = 'predicted'"), "true");
  EXPECT_EQ(r.info_.vramscope_tables, 33);  // the 32 of every report and vramscope_prediction
  EXPECT_EQ(db.Query("SELECT key, value FROM vramscope_prediction ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{
                {"model", "gpt2 (built-in family: GPT-2)"},
                {"setup", "batch 8, seq 1024, bf16 autocast, AdamW (foreach), 3 steps"},
                {"gpu", "test GPU"},
                {"torch_version", "2.5"},
                {"parameters", "124439808"},
                {"trainable_parameters", "124439808"},
                {"parameter_bytes", "497759232"},
                {"buffer_bytes", "4194304"},
                {"capacity_bytes", "83886080"},
                {"peak_reserved_bytes", "20971520"},
                {"needed_bytes", "20971520"},
                {"fits", "true"},
                {"headroom_bytes", "62914560"},
                {"assumption.1", "no activation checkpointing"},
                {"assumption.2", "cuBLAS workspace 8 MiB"},
                {"optimizer state", "2 fp32 tensors per parameter"},
                {"fact.model", "taken key"},
            }));
  // The Skyline tables are the same as for a measured report.
  EXPECT_EQ(db.One("SELECT size_bytes FROM misc_sizes WHERE key = 'peak_usage_bytes'"),
            std::to_string(12 * kMiB));
}

TEST(PredictedReport, JsonSummaryHoldsThePrediction) {
  PredictedReport r(16 * kMiB);  // less than the 20 MiB peak reserved
  ASSERT_TRUE(r.status_.ok()) << r.status_.message();
  const nlohmann::json json = RenderJsonSummary(*r.input_, 10);
  EXPECT_EQ(json["predicted"], true);
  const nlohmann::json& p = json["prediction"];
  ASSERT_TRUE(p.is_object()) << json.dump(2);
  EXPECT_EQ(p["model"], "gpt2 (built-in family: GPT-2)");
  EXPECT_EQ(p["setup"], "batch 8, seq 1024, bf16 autocast, AdamW (foreach), 3 steps");
  EXPECT_EQ(p["gpu"], "test GPU");
  EXPECT_EQ(p["torch_version"], "2.5");
  EXPECT_EQ(p["parameters"], 124439808);
  EXPECT_EQ(p["trainable_parameters"], 124439808);
  EXPECT_EQ(p["parameter_bytes"], 497759232);
  EXPECT_EQ(p["buffer_bytes"], 4194304);
  EXPECT_EQ(p["capacity_bytes"], 16 * kMiB);
  EXPECT_EQ(p["fits"], false);
  EXPECT_EQ(p["headroom_bytes"], -static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(p["peak_reserved_bytes"], 20 * kMiB);
  EXPECT_EQ(p["needed_bytes"], 20 * kMiB);
  EXPECT_TRUE(p["oom"].is_null());
  EXPECT_EQ(p["facts"]["optimizer state"], "2 fp32 tensors per parameter");
  EXPECT_EQ(p["assumptions"],
            nlohmann::json::array({"no activation checkpointing", "cuBLAS workspace 8 MiB"}));
  // Without a capacity there is nothing to fit into.
  r.trace_.prediction->capacity = 0;
  const nlohmann::json unlimited = RenderJsonSummary(*r.input_, 10);
  EXPECT_EQ(unlimited["prediction"]["capacity_bytes"], 0);
  EXPECT_FALSE(unlimited["prediction"].contains("fits"));
  EXPECT_FALSE(unlimited["prediction"].contains("headroom_bytes"));
}

TEST(PredictedReport, TerminalSummaryOpensWithWhatWasAssumed) {
  PredictedReport r(80 * kMiB);
  ASSERT_TRUE(r.status_.ok()) << r.status_.message();
  const std::string text = RenderTerminalSummary(*r.input_, {});
  std::cout << text;
  EXPECT_EQ(text.rfind("PREDICTED (vramscope predict, no GPU measured)\n", 0), 0u) << text;
  using ::testing::HasSubstr;
  using ::testing::Not;
  EXPECT_THAT(text, HasSubstr("  model             gpt2 (built-in family: GPT-2)\n"));
  EXPECT_THAT(text, HasSubstr("  GPU               test GPU, 80.00 MiB for the allocator\n"));
  EXPECT_THAT(text, HasSubstr("  torch             2.5\n"));
  EXPECT_THAT(text, HasSubstr("  parameters        124,439,808 (124.4 M), 124,439,808 (124.4 M) "
                              "trainable\n"));
  EXPECT_THAT(text, HasSubstr("  parameter bytes   474.70 MiB (497,759,232 B)\n"));
  EXPECT_THAT(text, HasSubstr("  optimizer state   2 fp32 tensors per parameter\n"));
  EXPECT_THAT(text, HasSubstr("  fits: yes, peak reserved 20.00 MiB of 80.00 MiB (75.0% "
                              "headroom)\n"));
  EXPECT_THAT(text, HasSubstr("  assumptions:\n    no activation checkpointing\n    cuBLAS "
                              "workspace 8 MiB\n"));
  EXPECT_THAT(text, HasSubstr("  predicted peak allocated  12.00 MiB (12,582,912 B)"));
  EXPECT_THAT(text, HasSubstr("  predicted peak reserved   20.00 MiB (20,971,520 B)"));
  EXPECT_THAT(text, HasSubstr("  at the end                allocated 8.00 MiB"));
  // Nothing in it claims to have been measured or read from a snapshot.
  EXPECT_THAT(text, Not(HasSubstr("at the dump")));
  EXPECT_THAT(text, Not(HasSubstr("snapshot")));
  EXPECT_THAT(text, Not(HasSubstr("  peak allocated")));
  EXPECT_THAT(text, Not(HasSubstr("pickle")));

  r.trace_.prediction->capacity = 16 * kMiB;
  EXPECT_THAT(RenderTerminalSummary(*r.input_, {}),
              HasSubstr("  fits: NO — needs 20.00 MiB, the GPU has 16.00 MiB for the allocator\n"));
}

TEST(PredictedReport, AnOutOfMemoryDoesNotFit) {
  // 20 MiB reserved fits in 24 MiB, but the 8 MiB request after it did not: the prediction
  // stopped there, so it does not fit whatever its peak.
  PredictedReport r(24 * kMiB, /*oom=*/true);
  ASSERT_TRUE(r.status_.ok()) << r.status_.message();
  EXPECT_THAT(RenderTerminalSummary(*r.input_, {}),
              ::testing::HasSubstr(
                  "  fits: NO — needs more than the 24.00 MiB the GPU has for the allocator\n"
                  "        out of memory at event 6 of 6: a request of 8.00 MiB with 20.00 MiB "
                  "reserved (the prediction stops there)\n"));
  const nlohmann::json p = RenderJsonSummary(*r.input_, 10)["prediction"];
  EXPECT_EQ(p["fits"], false);
  EXPECT_EQ(p["needed_bytes"], 28 * kMiB);
  EXPECT_EQ(p["headroom_bytes"], -static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(p["oom"]["event"], 5);
  EXPECT_EQ(p["oom"]["requested_bytes"], 8 * kMiB);
  EXPECT_EQ(p["oom"]["reserved_bytes"], 20 * kMiB);
  Database db(r.path_);
  EXPECT_EQ(db.Query("SELECT key, value FROM vramscope_prediction WHERE key IN ('fits', "
                     "'headroom_bytes', 'oom_event', 'oom_requested_bytes') ORDER BY rowid"),
            (std::vector<std::vector<std::string>>{{"fits", "false"},
                                                   {"headroom_bytes", "-4194304"},
                                                   {"oom_event", "5"},
                                                   {"oom_requested_bytes", "8388608"}}));
}

TEST(PredictedReport, ViewerReadsThePredictionBack) {
  PredictedReport r(80 * kMiB);
  ASSERT_TRUE(r.status_.ok()) << r.status_.message();
  auto v = LoadViewerReport(r.path_);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->predicted);
  EXPECT_EQ(v->kind, "predicted");
  EXPECT_EQ(v->title, "gpt2 (built-in family: GPT-2)");  // a prediction has no input file
  BuildViewerLod(*v);
  const std::string blob = EncodeViewerBlob({&*v});
  auto raw = Gunzip({reinterpret_cast<const uint8_t*>(blob.data()), blob.size()}, "blob");
  ASSERT_TRUE(raw.ok());
  uint32_t length = 0;
  std::memcpy(&length, raw->data() + 4, 4);
  const auto header = nlohmann::json::parse(raw->substr(8, length));
  const nlohmann::json& report = header["reports"][0];
  EXPECT_EQ(report["kind"], "predicted");
  EXPECT_EQ(report["predicted"], true);
  const nlohmann::json& p = report["prediction"];
  EXPECT_EQ(p["model"], "gpt2 (built-in family: GPT-2)");
  EXPECT_EQ(p["setup"], "batch 8, seq 1024, bf16 autocast, AdamW (foreach), 3 steps");
  EXPECT_EQ(p["gpu"], "test GPU");
  EXPECT_EQ(p["torch_version"], "2.5");
  EXPECT_EQ(p["parameters"], 124439808);
  EXPECT_EQ(p["capacity_bytes"], 80 * kMiB);
  EXPECT_EQ(p["fits"], true);
  EXPECT_EQ(p["headroom_bytes"], 60 * kMiB);
  EXPECT_EQ(p["assumptions"],
            nlohmann::json::array({"no activation checkpointing", "cuBLAS workspace 8 MiB"}));
  const nlohmann::json facts = nlohmann::json::array(
      {nlohmann::json::array({"optimizer state", "2 fp32 tensors per parameter"}),
       nlohmann::json::array({"fact.model", "taken key"})});
  EXPECT_EQ(p["facts"], facts);
}

}  // namespace
}  // namespace vramscope::report
