// The report database: Skyline / DeepView.Profile's six tables exactly as they defined them
// (readers written for Skyline keep working), plus vramscope_* tables with everything else we
// know. Written to a temporary file and renamed into place, so a failure leaves nothing behind.
#pragma once

#include <string>

#include "common/progress.h"
#include "common/status.h"
#include "report/report_input.h"

namespace vramscope::report {

// The six Skyline tables, verbatim. Exposed so a test can compare them with the published text.
extern const char* const kSkylineSchema;

struct SqliteReportInfo {
  int skyline_tables = 6;
  int vramscope_tables = 0;
  uint64_t rows = 0;
};

// Writes the database to `path` (the caller makes it atomic). control.cancel stops it between
// statements and inside one (SQLite's progress handler), with Interrupted.
Status WriteSqliteReport(const std::string& path, const ReportInput& input,
                         SqliteReportInfo* info = nullptr, const Control& control = {});

}  // namespace vramscope::report
