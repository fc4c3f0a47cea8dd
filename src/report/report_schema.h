// The report database's own tables (vramscope_*), as data: src/report/report_schema.json, compiled
// into the library. From it come the tables' DDL and the writer's INSERT statements (a column
// added to the data alone makes the writer fail until it writes the column: report/sqlite_writer.h
// checks every row binds one value per column), the reader's columns (report/report_db.h: each
// checked against the data, and every column of a table read generically), the tables of
// docs/report-database.md (scripts/report_schema_docs.py) and the tests' checks of every report.
// Skyline's six tables are not in it: they stay verbatim (report/sqlite_report.cc's
// kSkylineSchema). PRAGMA user_version stays 1, as in Skyline's reports; vramscope's own version
// is vramscope_metadata.schema_version (version 1: every report written before it existed).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace vramscope::report::schema {

// The metadata key that holds a report's schema version, and the version of reports without it.
inline constexpr std::string_view kVersionKey = "schema_version";
inline constexpr int kVersionBeforeKey = 1;

struct Column {
  std::string name;
  std::string type;  // INTEGER, TEXT, REAL
  bool not_null = false;
  bool primary_key = false;  // the table's one-column key
  int since = 1;             // the schema version that added it
};

struct Table {
  std::string name;
  // "report": in every report; "ranks": a report of several processes; "prediction": predict's.
  std::string group;
  std::string row;  // what one row is, for the docs
  std::string doc;  // what its columns hold, for the docs
  std::vector<Column> columns;
  std::vector<std::string> primary_key;  // a key of several columns
  bool without_rowid = false;
  int since = 1;
  // The column of that name; null when the table has none.
  const Column* Find(std::string_view column) const;
};

struct Schema {
  int version = 0;  // written as vramscope_metadata.schema_version
  std::vector<Table> tables;
  // The table of that name; null when the schema has none.
  const Table* Find(std::string_view name) const;
};

// Parses schema data in report_schema.json's format (tests parse a changed copy of it). Fails on
// a missing field, an unknown type or group, a repeated name or a `since` past the version.
Result<Schema> ParseSchema(std::string_view json);
// report_schema.json as compiled in, and the schema parsed from it once.
std::string_view ReportSchemaText();
const Schema& ReportSchema();

// CREATE TABLE for one table; for every table of `group`, in the data's order, one per line.
std::string CreateTableSql(const Table& table);
std::string CreateTablesSql(std::string_view group, const Schema& schema = ReportSchema());
// "INSERT INTO <table> VALUES (?,...)" with one placeholder per column of the data. The table is
// the writer's own name for it: one the data lacks is a defect (std::logic_error).
std::string InsertSql(std::string_view table, const Schema& schema = ReportSchema());

}  // namespace vramscope::report::schema
