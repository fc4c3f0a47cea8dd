// A report database opened for reading, through the schema (report/report_schema.h): the one way
// the library reads a report back (the viewer's data, and any table as rows). It knows the file's
// schema version (vramscope_metadata.schema_version; version 1 before that key existed) and its
// columns, so readers name the columns they need and never probe:
// - a column the reader names must be in the schema (else an internal error: reader and data
//   disagree, which the tests catch);
// - a table or column the file lacks reads as absent (HasTable) or NULL when the file is of an
//   earlier version that lacked it (version 1 covers every layout before the key, so there any
//   may be absent); a file of this version or later that lacks one is damaged;
// - a file of a later version (a newer vramscope) is read by the columns this one knows.
// Errors name the file and what to do (write the report again).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "report/report_schema.h"

namespace vramscope::report {

// One result row, read by the position of the columns selected.
class ReportRow {
 public:
  explicit ReportRow(sqlite3_stmt* stmt) : stmt_(stmt) {}
  std::string Text(int col) const;  // "" for NULL
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

 private:
  sqlite3_stmt* stmt_;
};

class ReportDb {
 public:
  using RowFn = std::function<void(const ReportRow&)>;

  // Opens `path` read-only and reads its version and columns. Fails with one line when it is not
  // a SQLite database. `schema` is the data the reader follows (tests pass a changed copy).
  static Result<std::unique_ptr<ReportDb>> Open(
      const std::string& path, const schema::Schema& schema = schema::ReportSchema());
  ~ReportDb();
  ReportDb(const ReportDb&) = delete;
  ReportDb& operator=(const ReportDb&) = delete;

  const std::string& path() const { return path_; }
  int version() const { return version_; }
  const schema::Schema& schema() const { return schema_; }

  // Whether the file has the table (one of the schema's).
  bool HasTable(std::string_view table) const;
  // SELECT `columns` FROM `table` `tail` (WHERE, ORDER BY, LIMIT), calling `row` for each row.
  // Columns are names of the schema's table; one the file lacks reads as NULL where its version
  // allows (above). `tail` may name only columns the file has.
  Status Select(std::string_view table, std::initializer_list<std::string_view> columns,
                std::string_view tail, const RowFn& row);
  // Every row of `table`, as objects of every schema column the file has (NULL as null): the
  // generic reader, where a column added to the schema appears without code. An empty array
  // when the file lacks the table.
  Result<nlohmann::json> ReadTable(std::string_view table, std::string_view tail = "");
  // A report numbers the rows of `table` from 0 or 1 without gaps; readers size their columns by
  // the highest id, so an id beyond the row count is damage that would make them allocate without
  // bound (a frame id of 50 million is 4 GB of frames).
  Status CheckDenseIds(std::string_view table);
  // "<path>: cannot read the report (<message>); write it again with 'vramscope report'".
  Status Damaged(const std::string& message) const;

 private:
  ReportDb(std::string path, const schema::Schema& schema)
      : path_(std::move(path)), schema_(schema) {}
  Status ReadLayout();
  Status Query(const std::string& sql, const RowFn& row);
  // The SELECT list for `columns` of `table`, NULL for what the file may lack.
  Result<std::string> SelectList(const schema::Table& table,
                                 const std::vector<std::string_view>& columns) const;
  Status SelectColumns(std::string_view table, const std::vector<std::string_view>& columns,
                       std::string_view tail, const RowFn& row);

  sqlite3* db_ = nullptr;
  std::string path_;
  const schema::Schema& schema_;
  int version_ = schema::kVersionBeforeKey;
  std::map<std::string, std::set<std::string>, std::less<>> columns_;  // the file's, by table
};

}  // namespace vramscope::report
