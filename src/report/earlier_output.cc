#include "report/earlier_output.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>

#include "report/sqlite_writer.h"

namespace vramscope::report {

namespace {

// The first bytes of a file, at most `size`.
std::string ReadHead(const std::string& path, size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  std::string head(size, '\0');
  head.resize(std::fread(head.data(), 1, size, f));
  std::fclose(f);
  return head;
}

bool IsReportDatabase(const std::string& path) {
  constexpr std::string_view kMagic("SQLite format 3\0", 16);
  if (ReadHead(path, kMagic.size()) != kMagic) return false;
  sqlite3* db = nullptr;
  // Read-only, no URI, no creation: looking must never change the file.
  DisableSqliteMemoryStatistics();
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return false;
  }
  bool found = false;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                         "'vramscope_metadata'",
                         -1, &stmt, nullptr) == SQLITE_OK) {
    found = sqlite3_step(stmt) == SQLITE_ROW;
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return found;
}

bool IsViewerPage(const std::string& path) {
  // The template's marker sits in its <head>, within the first few hundred bytes.
  return ReadHead(path, 4096).find(R"(<meta name="generator" content="vramscope">)") !=
         std::string::npos;
}

}  // namespace

std::string_view OutputKindName(OutputKind kind) {
  switch (kind) {
    case OutputKind::kReportDatabase:
      return "report database";
    case OutputKind::kViewerPage:
      return "viewer page";
  }
  return "output";
}

bool IsEarlierOutput(const std::string& path, OutputKind kind) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  switch (kind) {
    case OutputKind::kReportDatabase:
      return IsReportDatabase(path);
    case OutputKind::kViewerPage:
      return IsViewerPage(path);
  }
  return false;
}

}  // namespace vramscope::report
