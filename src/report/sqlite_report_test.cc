#include "report/sqlite_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "analysis/analyze.h"
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

class ExampleReport : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string example =
        std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle";
    auto file = MappedFile::Open(example);
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto trace = snapshot::LoadSnapshot(**file);
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    trace_ = std::make_unique<model::Trace>(std::move(trace).value());
    root_ = std::make_unique<analysis::ProjectRoot>("/home/user/mlp_example");
    analysis_ = std::make_unique<analysis::Analysis>(analysis::Analyze(*trace_, *root_));
    path_ = (std::filesystem::temp_directory_path() /
             ("vramscope_report_test_" + std::to_string(getpid()) + ".sqlite"))
                .string();
    std::filesystem::remove(path_);
    // The replay against the recording and one what-if run under a capacity too small for the
    // example's peak, so every vramscope_sim_* table has rows.
    analysis::SimulationRequest request;
    request.what_if.emplace_back("");
    request.capacity = 64ull << 20;
    auto sims = analysis::Simulate(*trace_, *analysis_->sites, request);
    ASSERT_TRUE(sims.ok()) << sims.status().message();
    sims_ = std::make_unique<analysis::Simulations>(std::move(sims).value());
    const ReportInput input{*trace_,
                            analysis_->timelines,
                            analysis_->attribution,
                            analysis_->summary,
                            analysis_->entries,
                            *analysis_->sites,
                            *root_,
                            sims_.get(),
                            &analysis_->category_timelines,
                            analysis_->owners.get()};
    const Status status = WriteSqliteReport(path_, input, &info_);
    ASSERT_TRUE(status.ok()) << status.message();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  std::unique_ptr<model::Trace> trace_;
  std::unique_ptr<analysis::ProjectRoot> root_;
  std::unique_ptr<analysis::Analysis> analysis_;
  std::unique_ptr<analysis::Simulations> sims_;
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
  EXPECT_EQ(info_.vramscope_tables, 26);
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

}  // namespace
}  // namespace vramscope::report
