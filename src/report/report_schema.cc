#include "report/report_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <stdexcept>

namespace vramscope::report::schema {

// cmake/EmbedFile.cmake's table of src/report/report_schema.json.
std::span<const uint8_t> ReportSchemaJson();

namespace {

constexpr std::string_view kTypes[] = {"INTEGER", "TEXT", "REAL"};
constexpr std::string_view kGroups[] = {"report", "ranks", "prediction"};

template <typename List>
bool OneOf(const List& list, std::string_view value) {
  for (const std::string_view v : list) {
    if (v == value) return true;
  }
  return false;
}

Result<Schema> Build(const nlohmann::json& j) {
  Schema s;
  s.version = j.at("schema_version").get<int>();
  std::set<std::string> table_names;
  for (const nlohmann::json& t : j.at("tables")) {
    Table table;
    table.name = t.at("name").get<std::string>();
    table.group = t.at("group").get<std::string>();
    table.row = t.value("row", "");
    table.doc = t.value("doc", "");
    table.since = t.value("since", 1);
    table.without_rowid = t.value("without_rowid", false);
    table.primary_key = t.value("primary_key", std::vector<std::string>{});
    if (!table_names.insert(table.name).second || !OneOf(kGroups, table.group) || table.since < 1 ||
        table.since > s.version) {
      return InvalidInput(
          fmt::format("table {}: a repeated name, an unknown group ({}) or a "
                      "since ({}) outside 1..schema_version",
                      table.name, table.group, table.since));
    }
    for (const nlohmann::json& c : t.at("columns")) {
      Column column{c.at("name").get<std::string>(), c.at("type").get<std::string>(),
                    c.value("not_null", false), c.value("primary_key", false),
                    c.value("since", table.since)};
      if (table.Find(column.name) != nullptr || !OneOf(kTypes, column.type) ||
          column.since < table.since || column.since > s.version) {
        return InvalidInput(
            fmt::format("{}.{}: a repeated name, an unknown type ({}) or a since "
                        "({}) outside the table's since..schema_version",
                        table.name, column.name, column.type, column.since));
      }
      table.columns.push_back(std::move(column));
    }
    for (const std::string& key : table.primary_key) {
      if (table.Find(key) == nullptr) {
        return InvalidInput(fmt::format("{}: its primary key names no column {}", table.name, key));
      }
    }
    if (table.columns.empty()) return InvalidInput(fmt::format("{} has no columns", table.name));
    s.tables.push_back(std::move(table));
  }
  return s;
}

}  // namespace

const Column* Table::Find(std::string_view column) const {
  for (const Column& c : columns) {
    if (c.name == column) return &c;
  }
  return nullptr;
}

const Table* Schema::Find(std::string_view name) const {
  for (const Table& t : tables) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<Schema> ParseSchema(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidInput("the report schema is not JSON");
  try {
    return Build(j);
  } catch (const nlohmann::json::exception& e) {
    return InvalidInput(
        fmt::format("the report schema lacks a field or has a wrong type: {}", e.what()));
  }
}

std::string_view ReportSchemaText() {
  const std::span<const uint8_t> bytes = ReportSchemaJson();
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

const Schema& ReportSchema() {
  // The data is the repository's own and the tests parse it: a failure here is a build defect.
  static const Schema schema = [] {
    Result<Schema> parsed = ParseSchema(ReportSchemaText());
    if (!parsed.ok()) {
      throw std::logic_error("src/report/report_schema.json: " + parsed.status().message());
    }
    return std::move(parsed).value();
  }();
  return schema;
}

std::string CreateTableSql(const Table& table) {
  std::vector<std::string> parts;
  for (const Column& c : table.columns) {
    std::string part = c.name + " " + c.type;
    if (c.primary_key) part += " PRIMARY KEY";
    if (c.not_null) part += " NOT NULL";
    parts.push_back(std::move(part));
  }
  if (!table.primary_key.empty()) {
    parts.push_back(fmt::format("PRIMARY KEY ({})", fmt::join(table.primary_key, ", ")));
  }
  return fmt::format("CREATE TABLE {} ({}){};", table.name, fmt::join(parts, ", "),
                     table.without_rowid ? " WITHOUT ROWID" : "");
}

std::string CreateTablesSql(std::string_view group, const Schema& schema) {
  std::string out;
  for (const Table& t : schema.tables) {
    if (t.group == group) out += CreateTableSql(t) + "\n";
  }
  return out;
}

std::string InsertSql(std::string_view table, const Schema& schema) {
  const Table* t = schema.Find(table);
  if (t == nullptr) throw std::logic_error(fmt::format("report_schema.json has no {}", table));
  std::vector<std::string_view> marks(t->columns.size(), "?");
  return fmt::format("INSERT INTO {} VALUES ({})", table, fmt::join(marks, ","));
}

}  // namespace vramscope::report::schema
