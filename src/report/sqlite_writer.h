// The SQLite plumbing the report's writers share: one connection and prepared inserts bound by
// position. Internal to the report library.
#pragma once

#include <fmt/format.h>
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "model/trace.h"

namespace vramscope::report {

// SQLite counts every allocation it makes under one global mutex, for sqlite3_memory_used(), which
// nothing here reads: off, a report's inserts take a third less time, and the two threads that
// write a report (sqlite_report.cc) no longer take turns at that mutex. It can only be set before
// SQLite initialises, so every connection the report library opens calls this first; once
// SQLite runs, the call changes nothing.
inline void DisableSqliteMemoryStatistics() {
  static const int done = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  (void)done;
}

class Db {
 public:
  ~Db() {
    if (db_ != nullptr) sqlite3_close(db_);
  }
  Status Open(const std::string& path) {
    path_ = path;
    DisableSqliteMemoryStatistics();
    // One connection on one thread: no need for SQLite's per-call mutexes.
    if (sqlite3_open_v2(path.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
      return Error("cannot create the database");
    }
    return Status::Ok();
  }
  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string message = err != nullptr ? err : "unknown error";
      sqlite3_free(err);
      return InvalidInput(fmt::format("{}: writing the report failed: {}", path_, message));
    }
    return Status::Ok();
  }
  Status Error(const char* what) const {
    return InvalidInput(fmt::format("{}: {}: {}", path_, what,
                                    db_ != nullptr ? sqlite3_errmsg(db_) : "out of memory"));
  }
  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// A prepared INSERT bound by position; Row() binds values in order and steps.
class Insert {
 public:
  Insert(Db& db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db.get(), sql, -1, &stmt_, nullptr) != SQLITE_OK) stmt_ = nullptr;
  }
  Insert(Db& db, const std::string& sql) : Insert(db, sql.c_str()) {}
  ~Insert() { sqlite3_finalize(stmt_); }
  bool ok() const { return stmt_ != nullptr; }

  struct MaybeInt {
    int64_t value;
    bool present;
  };
  struct MaybeText {
    std::string_view value;
    bool present;
  };

  template <typename... Args>
  Status Row(const Args&... args) {
    if (stmt_ == nullptr) return db_.Error("cannot prepare an insert");
    // A column added to the schema (report/report_schema.json) and not written here would be
    // left NULL without a word: a row binds exactly one value per column.
    if (static_cast<int>(sizeof...(args)) != sqlite3_bind_parameter_count(stmt_)) {
      return InternalError(fmt::format("{} binds {} values to {} columns", sqlite3_sql(stmt_),
                                       sizeof...(args), sqlite3_bind_parameter_count(stmt_)));
    }
    int index = 0;
    (Bind(++index, args), ...);
    const int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    if (rc != SQLITE_DONE) return db_.Error("cannot insert a row");
    ++rows_;
    return Status::Ok();
  }
  uint64_t rows() const { return rows_; }

 private:
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, uint64_t v) { sqlite3_bind_int64(stmt_, i, static_cast<int64_t>(v)); }
  void Bind(int i, int32_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, uint32_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, bool v) { sqlite3_bind_int(stmt_, i, v ? 1 : 0); }
  void Bind(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_STATIC);  // valid until step()
  }
  void Bind(int i, const std::string& v) { Bind(i, std::string_view(v)); }
  void Bind(int i, const char* v) { Bind(i, std::string_view(v)); }
  void Bind(int i, std::nullptr_t) { sqlite3_bind_null(stmt_, i); }
  // Optional integers: events and times that may be absent are NULL.
  void Bind(int i, MaybeText v) {
    if (v.present) {
      Bind(i, v.value);
    } else {
      sqlite3_bind_null(stmt_, i);
    }
  }
  void Bind(int i, MaybeInt v) {
    if (v.present) {
      sqlite3_bind_int64(stmt_, i, v.value);
    } else {
      sqlite3_bind_null(stmt_, i);
    }
  }

 public:
  static MaybeInt Event(int64_t e) { return {e, e != model::kNoEvent}; }
  static MaybeInt Time(int64_t t) { return {t, t != model::kNoTime}; }

 private:
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  uint64_t rows_ = 0;
};

}  // namespace vramscope::report
