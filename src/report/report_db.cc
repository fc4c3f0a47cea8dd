#include "report/report_db.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "report/sqlite_writer.h"

namespace vramscope::report {

std::string ReportRow::Text(int col) const {
  const unsigned char* t = sqlite3_column_text(stmt_, col);
  return t == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char*>(t),
                                    static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

namespace {

// An error is one line: SQLite's messages quote the file's own text (a malformed schema's SQL,
// a metadata value), which may hold line breaks or control characters, and any length of it.
std::string OneLine(std::string_view text) {
  constexpr size_t kMaxQuoted = 200;
  std::string out;
  for (const char c : text.substr(0, kMaxQuoted)) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u == 0x7f ? ' ' : c);
  }
  if (text.size() > kMaxQuoted) out += "...";
  return out;
}

}  // namespace

Result<std::unique_ptr<ReportDb>> ReportDb::Open(const std::string& path,
                                                 const schema::Schema& schema) {
  std::unique_ptr<ReportDb> db(new ReportDb(path, schema));
  DisableSqliteMemoryStatistics();
  if (sqlite3_open_v2(path.c_str(), &db->db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return InvalidInput(
        fmt::format("{}: cannot open it as a SQLite database: {}", path,
                    db->db_ != nullptr ? OneLine(sqlite3_errmsg(db->db_)) : "out of memory"));
  }
  if (Status layout = db->ReadLayout(); !layout.ok()) {
    if (sqlite3_errcode(db->db_) == SQLITE_NOTADB) {
      return InvalidInput(fmt::format(
          "{}: not a SQLite database, so not a vramscope report; make one with 'vramscope "
          "report INPUT -o REPORT.sqlite'",
          path));
    }
    return layout;
  }
  return db;
}

ReportDb::~ReportDb() {
  if (db_ != nullptr) sqlite3_close(db_);
}

// The file's tables and columns (the schema's tables only), then its version.
Status ReportDb::ReadLayout() {
  RETURN_IF_ERROR(
      Query("SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p "
            "WHERE m.type = 'table' AND m.name LIKE 'vramscope\\_%' ESCAPE '\\'",
            [&](const ReportRow& r) {
              const std::string table = r.Text(0);
              if (schema_.Find(table) != nullptr) columns_[table].insert(r.Text(1));
            }));
  if (!HasTable("vramscope_metadata")) return Status::Ok();
  std::string written;
  bool found = false;
  RETURN_IF_ERROR(Query(
      fmt::format("SELECT value FROM vramscope_metadata WHERE key = '{}'", schema::kVersionKey),
      [&](const ReportRow& r) {
        written = r.Text(0);
        found = true;
      }));
  if (!found) return Status::Ok();  // written before the key existed
  char* end = nullptr;
  const long version = std::strtol(written.c_str(), &end, 10);
  if (written.empty() || *end != '\0' || version < 2 || version > 1'000'000) {
    return Damaged(fmt::format("vramscope_metadata.{} is '{}', not a version of 2 or more",
                               schema::kVersionKey, written));
  }
  version_ = static_cast<int>(version);
  // A file of this version or later has every table of the "report" group that its version has.
  for (const schema::Table& t : schema_.tables) {
    if (t.group == "report" && t.since <= version_ && !HasTable(t.name)) {
      return Damaged(
          fmt::format("it is of schema version {} and has no table {}", version_, t.name));
    }
  }
  return Status::Ok();
}

bool ReportDb::HasTable(std::string_view table) const {
  return columns_.find(table) != columns_.end();
}

Result<std::string> ReportDb::SelectList(const schema::Table& table,
                                         const std::vector<std::string_view>& columns) const {
  const auto file = columns_.find(table.name);
  std::vector<std::string> list;
  for (const std::string_view name : columns) {
    const schema::Column* c = table.Find(name);
    if (c == nullptr) {
      return InternalError(
          fmt::format("the report schema's {} has no column {}", table.name, name));
    }
    if (file != columns_.end() && file->second.count(c->name) != 0) {
      list.push_back(c->name);
    } else if (version_ == schema::kVersionBeforeKey || c->since > version_) {
      list.push_back(fmt::format("NULL AS {}", c->name));  // the file's version lacked it
    } else {
      return Damaged(fmt::format("it is of schema version {} and its {} has no column {}", version_,
                                 table.name, c->name));
    }
  }
  return fmt::format("{}", fmt::join(list, ", "));
}

Status ReportDb::SelectColumns(std::string_view table, const std::vector<std::string_view>& columns,
                               std::string_view tail, const RowFn& row) {
  const schema::Table* t = schema_.Find(table);
  if (t == nullptr) return InternalError(fmt::format("the report schema has no table {}", table));
  if (!HasTable(table)) return Damaged(fmt::format("it has no table {}", table));
  ASSIGN_OR_RETURN(const std::string list, SelectList(*t, columns));
  std::string sql = fmt::format("SELECT {} FROM {}", list, table);
  if (!tail.empty()) sql += fmt::format(" {}", tail);
  return Query(sql, row);
}

Status ReportDb::Select(std::string_view table, std::initializer_list<std::string_view> columns,
                        std::string_view tail, const RowFn& row) {
  return SelectColumns(table, std::vector<std::string_view>(columns), tail, row);
}

Result<nlohmann::json> ReportDb::ReadTable(std::string_view table, std::string_view tail) {
  nlohmann::json rows = nlohmann::json::array();
  const schema::Table* t = schema_.Find(table);
  if (t == nullptr) return InternalError(fmt::format("the report schema has no table {}", table));
  if (!HasTable(table)) return rows;
  std::vector<const schema::Column*> present;
  std::vector<std::string_view> names;
  const std::set<std::string>& file = columns_.find(table)->second;
  for (const schema::Column& c : t->columns) {
    if (file.count(c.name) == 0) continue;
    present.push_back(&c);
    names.push_back(c.name);
  }
  RETURN_IF_ERROR(SelectColumns(table, names, tail, [&](const ReportRow& r) {
    nlohmann::json object = nlohmann::json::object();
    for (size_t i = 0; i < present.size(); ++i) {
      const int col = static_cast<int>(i);
      const std::string& type = present[i]->type;
      if (r.IsNull(col)) {
        object[present[i]->name] = nullptr;
      } else if (type == "INTEGER") {
        object[present[i]->name] = r.Int(col);
      } else if (type == "REAL") {
        object[present[i]->name] = r.Real(col);
      } else {
        object[present[i]->name] = r.Text(col);
      }
    }
    rows.push_back(std::move(object));
  }));
  return rows;
}

Status ReportDb::CheckDenseIds(std::string_view table) {
  if (schema_.Find(table) == nullptr || schema_.Find(table)->Find("id") == nullptr) {
    return InternalError(fmt::format("the report schema's {} has no id", table));
  }
  int64_t rows = 0, highest = -1;
  RETURN_IF_ERROR(Query(fmt::format("SELECT count(*), COALESCE(max(id), -1) FROM {}", table),
                        [&](const ReportRow& r) {
                          rows = r.Int(0);
                          highest = r.Int(1);
                        }));
  if (highest > rows) {
    return Damaged(fmt::format("{} has an id {} in {} rows; its ids run from 0 or 1 without gaps",
                               table, highest, rows));
  }
  return Status::Ok();
}

Status ReportDb::Query(const std::string& sql, const RowFn& row) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return Damaged(sqlite3_errmsg(db_));
  }
  int rc;
  const ReportRow r(stmt);
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) row(r);
  const std::string message = sqlite3_errmsg(db_);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) return Damaged(message);
  return Status::Ok();
}

Status ReportDb::Damaged(const std::string& message) const {
  return InvalidInput(
      fmt::format("{}: cannot read the report ({}); write it again with 'vramscope report'", path_,
                  OneLine(message)));
}

}  // namespace vramscope::report
