// The report schema as data (report/report_schema.h) and the reader that follows it
// (report/report_db.h): a column added to the data alone reaches the DDL, the writer's INSERT
// (which then refuses a row that does not write it) and the generic reader; reports of every
// earlier schema version (tests/data/report_db/v<N>.sqlite.gz, each made by the code of its time)
// open in the viewer's reader and through the library.
#include "report/report_schema.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/gzip.h"
#include "common/mapped_file.h"
#include "report/report_db.h"
#include "report/sqlite_writer.h"
#include "report/viewer_data.h"

namespace vramscope::report {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/report_db";

// A scratch file removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("vramscope_schema_test_" + std::to_string(getpid()) + "_" + name)) {
    fs::remove(path_);
  }
  ~TempFile() { fs::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message << " in " << sql;
}

// A fixture report, decompressed into `out`.
void Unpack(const fs::path& gz, const std::string& out) {
  auto mapped = MappedFile::Open(gz.string());
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  auto bytes = Gunzip(mapped.value()->bytes(), gz.string(), uint64_t{1} << 30);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  std::ofstream(out, std::ios::binary) << bytes.value();
}

// The schema data with one more column on vramscope_devices, in a new version.
schema::Schema WithAddedColumn() {
  nlohmann::json j = nlohmann::json::parse(schema::ReportSchemaText());
  const int version = j["schema_version"].get<int>() + 1;
  j["schema_version"] = version;
  j["versions"][std::to_string(version)] = "vramscope_devices.added_column";
  for (nlohmann::json& t : j["tables"]) {
    if (t["name"] == "vramscope_devices") {
      t["columns"].push_back({{"name", "added_column"}, {"type", "INTEGER"}, {"since", version}});
    }
  }
  auto parsed = schema::ParseSchema(j.dump());
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? std::move(parsed).value() : schema::Schema{};
}

TEST(ReportSchema, TheDataIsWellFormed) {
  const schema::Schema& s = schema::ReportSchema();
  const nlohmann::json j = nlohmann::json::parse(schema::ReportSchemaText());
  EXPECT_EQ(s.version, j["schema_version"].get<int>());
  EXPECT_GE(s.version, 2);  // version 1 is the reports before the key
  // Every version up to the current one says what it changed.
  for (int v = 1; v <= s.version; ++v) EXPECT_TRUE(j["versions"].contains(std::to_string(v))) << v;
  std::set<std::string> groups;
  for (const schema::Table& t : s.tables) {
    EXPECT_EQ(t.name.rfind("vramscope_", 0), 0u) << t.name;
    EXPECT_FALSE(t.row.empty()) << t.name;
    groups.insert(t.group);
    // The DDL SQLite accepts, with one placeholder per column in the INSERT.
    TempFile file(t.name + ".sqlite");
    Exec(file.path(), schema::CreateTableSql(t));
    const std::string insert = schema::InsertSql(t.name);
    EXPECT_EQ(static_cast<size_t>(std::count(insert.begin(), insert.end(), '?')), t.columns.size());
  }
  EXPECT_EQ(groups, (std::set<std::string>{"report", "ranks", "prediction"}));
}

TEST(ReportSchema, RefusesMalformedData) {
  const std::string good = std::string(schema::ReportSchemaText());
  EXPECT_TRUE(schema::ParseSchema(good).ok());
  auto changed = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  for (const std::string& bad :
       {std::string("{"), std::string("[]"), changed("\"INTEGER\"", "\"BLOB\""),
        changed("\"group\": \"report\"", "\"group\": \"elsewhere\""),
        changed("{\"name\": \"value\", \"type\": \"TEXT\"",
                "{\"name\": \"key\", \"type\": \"TEXT\""),
        changed("\"type\": \"TEXT\", \"primary_key\": true}",
                "\"type\": \"TEXT\", \"since\": 99}")}) {
    const auto parsed = schema::ParseSchema(bad);
    EXPECT_FALSE(parsed.ok()) << bad.substr(0, 80);
  }
}

// "A column added to the schema data alone appears in the DDL, the docs and the reader" (the docs:
// tests/e2e/test_report_schema.py); the writer refuses to leave it unwritten.
TEST(ReportSchema, AnAddedColumnReachesTheDdlTheWriterAndTheReader) {
  const schema::Schema added = WithAddedColumn();
  const schema::Table* devices = added.Find("vramscope_devices");
  ASSERT_NE(devices, nullptr);
  EXPECT_NE(schema::CreateTableSql(*devices).find("added_column INTEGER"), std::string::npos);
  EXPECT_NE(schema::CreateTablesSql("report", added).find("added_column INTEGER"),
            std::string::npos);

  // The writer: a row of the old width no longer goes in.
  TempFile file("added.sqlite");
  Db db;
  ASSERT_TRUE(db.Open(file.path()).ok());
  ASSERT_TRUE(db.Exec(schema::CreateTablesSql("report", added).c_str()).ok());
  Insert insert(db, schema::InsertSql("vramscope_devices", added));
  const Status short_row = insert.Row(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  EXPECT_FALSE(short_row.ok());
  EXPECT_NE(short_row.message().find("binds 16 values to 17 columns"), std::string::npos)
      << short_row.message();
  EXPECT_TRUE(insert.Row(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 42).ok());
  Insert meta(db, schema::InsertSql("vramscope_metadata", added));
  ASSERT_TRUE(meta.Row(schema::kVersionKey, std::to_string(added.version)).ok());

  // The reader: the generic one returns it, a named select reads it.
  auto opened = ReportDb::Open(file.path(), added);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  ReportDb& reader = *opened.value();
  EXPECT_EQ(reader.version(), added.version);
  auto rows = reader.ReadTable("vramscope_devices");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows.value().size(), 1u);
  EXPECT_EQ(rows.value()[0]["added_column"], 42);
  EXPECT_EQ(rows.value()[0]["events"], 1);
  int64_t read = -1;
  ASSERT_TRUE(reader
                  .Select("vramscope_devices", {"added_column"}, "",
                          [&](const ReportRow& r) { read = r.Int(0); })
                  .ok());
  EXPECT_EQ(read, 42);
}

TEST(ReportDb, ColumnsAFileLacksReadAsNullOnlyWhereItsVersionAllows) {
  const schema::Schema added = WithAddedColumn();
  TempFile file("current.sqlite");
  Exec(file.path(), schema::CreateTablesSql("report") +
                        "INSERT INTO vramscope_metadata VALUES ('schema_version', '" +
                        std::to_string(schema::ReportSchema().version) +
                        "');"
                        "INSERT INTO vramscope_devices VALUES "
                        "(0, 5, 1, 1, 0, 0, 0, 0, 7, 3, NULL, 9, 4, NULL, 9, 0);");
  {
    // A file of the current version read by a newer reader: the newer column is NULL.
    auto opened = ReportDb::Open(file.path(), added);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    bool null = false;
    ASSERT_TRUE(opened.value()
                    ->Select("vramscope_devices", {"peak_allocated_bytes", "added_column"}, "",
                             [&](const ReportRow& r) { null = r.IsNull(1) && r.Int(0) == 7; })
                    .ok());
    EXPECT_TRUE(null);
    // A column the schema lacks is the reader's defect, said as such.
    const Status unknown = opened.value()->Select("vramscope_devices", {"no_such_column"}, "",
                                                  [](const ReportRow&) {});
    EXPECT_EQ(unknown.code(), StatusCode::kInternal) << unknown.message();
  }
  // The same file claiming the newer version lacks a column that version has: damaged.
  Exec(file.path(), "UPDATE vramscope_metadata SET value = '" + std::to_string(added.version) +
                        "' WHERE key = 'schema_version'");
  auto claimed = ReportDb::Open(file.path(), added);
  ASSERT_TRUE(claimed.ok()) << claimed.status().message();
  const Status damaged =
      claimed.value()->Select("vramscope_devices", {"added_column"}, "", [](const ReportRow&) {});
  EXPECT_FALSE(damaged.ok());
  EXPECT_NE(damaged.message().find("has no column added_column"), std::string::npos)
      << damaged.message();
  EXPECT_NE(damaged.message().find("write it again with 'vramscope report'"), std::string::npos);
  // A version that is not one, and a current-version file without one of its tables.
  Exec(file.path(), "UPDATE vramscope_metadata SET value = 'two' WHERE key = 'schema_version'");
  auto garbled = ReportDb::Open(file.path());
  ASSERT_FALSE(garbled.ok());
  EXPECT_NE(garbled.status().message().find("schema_version is 'two'"), std::string::npos)
      << garbled.status().message();
  Exec(file.path(),
       "UPDATE vramscope_metadata SET value = '2' WHERE key = 'schema_version';"
       "DROP TABLE vramscope_phases");
  auto missing = ReportDb::Open(file.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("has no table vramscope_phases"), std::string::npos)
      << missing.status().message();
}

TEST(ReportDb, RefusesWhatIsNotADatabase) {
  TempFile file("text.sqlite");
  std::ofstream(file.path()) << "not a database, only text that is long enough to be read\n";
  auto opened = ReportDb::Open(file.path());
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("not a SQLite database"), std::string::npos)
      << opened.status().message();
}

// One committed report per earlier schema version, named v<N>.sqlite.gz.
TEST(ReportDb, EveryEarlierVersionHasAFixtureThatReads) {
  std::set<int> versions;
  for (const fs::directory_entry& e : fs::directory_iterator(kFixtures)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, std::regex(R"(v(\d+)\.sqlite\.gz)"))) {
      versions.insert(std::stoi(m[1]));
    }
  }
  const int current = schema::ReportSchema().version;
  for (int v = 1; v < current; ++v) {
    EXPECT_TRUE(versions.count(v)) << "no " << kFixtures.string() << "/v" << v
                                   << ".sqlite.gz: make one with the code of version " << v
                                   << " (tests/data/report_db/README.md)";
  }
  for (const int v : versions) {
    SCOPED_TRACE("v" + std::to_string(v));
    TempFile file("v" + std::to_string(v) + ".sqlite");
    Unpack(kFixtures / ("v" + std::to_string(v) + ".sqlite.gz"), file.path());
    auto opened = ReportDb::Open(file.path());
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    EXPECT_EQ(opened.value()->version(), v);
    // Every table of the schema reads through the library; those the version had are not empty.
    for (const schema::Table& t : schema::ReportSchema().tables) {
      auto rows = opened.value()->ReadTable(t.name);
      ASSERT_TRUE(rows.ok()) << t.name << ": " << rows.status().message();
      if (t.since <= v && (t.name == "vramscope_allocations" || t.name == "vramscope_ranks" ||
                           t.name == "vramscope_prediction" || t.name == "vramscope_sim_runs")) {
        EXPECT_FALSE(rows.value().empty()) << t.name;
      }
    }
    // And in the viewer's reader, whole: a prediction of two pipeline ranks.
    auto viewer = LoadViewerReport(file.path());
    ASSERT_TRUE(viewer.ok()) << viewer.status().message();
    const ViewerReport& r = viewer.value();
    EXPECT_EQ(r.kind, "predicted");
    ASSERT_TRUE(r.prediction.is_object());
    EXPECT_GT(r.prediction["parameters"].get<int64_t>(), 0);
    ASSERT_TRUE(r.ranks.is_object());
    EXPECT_EQ(r.ranks["table"].size(), 2u);
    ASSERT_EQ(r.devices.size(), 1u);
    EXPECT_GT(r.devices[0].allocations.count(), 100u);
    EXPECT_GT(r.devices[0].summary["peak_allocated"].get<int64_t>(), 0);
    EXPECT_TRUE(r.devices[0].has_predicted);
  }
}

}  // namespace
}  // namespace vramscope::report
