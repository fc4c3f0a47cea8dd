// What every verb that reports writes, the same way (`report`, `run`, `predict`; the Python API):
// the report database, the viewer page, and the summary as terminal text or as the versioned JSON
// document. Each renders a pipeline result (pipeline::Analyzed) and nothing else.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/atomic_output.h"
#include "common/progress.h"
#include "common/status.h"
#include "pipeline/analyze.h"
#include "pipeline/input.h"
#include "report/sqlite_report.h"
#include "report/terminal_summary.h"

namespace vramscope::report {

// The version of `report --json` (and `run --json`, `predict --json`): raised with every change
// to the document's keys or their meaning (docs/design/architecture.md, "JSON").
// 2: `oom_message.verdict`, the dominant holder of PyTorch's out-of-memory message
// (explain_output.h's OomVerdictJson).
// 3: `facts.partial` and `facts.cut_at_byte` (an input cut off before its end, read up to the
// cut) and `facts.skipped_actions` (entries _record_memory_history(skip_actions=...) left out).
inline constexpr int kReportJsonVersion = 3;

struct ReportFiles {
  // The database; empty: DefaultOutputName of the input, unless !database_by_default or only a
  // summary was asked for (`summary_only`, `json`): then none.
  std::string output;
  bool database_by_default = true;  // predict writes a database only when `output` names one
  bool summary_only = false;
  bool json = false;
  std::string html;  // also the viewer page, always named by the user
  bool force = false;
};

// The outputs, checked before any heavy work so that "already exists" comes at once. The
// database: the one `output` names (an existing file replaced only with `force`); without it, the
// input's default name, unless only a summary was asked for or the verb writes none by default; a
// default-named database replaces an earlier vramscope report there and nothing else
// (report/output_target.h).
struct PreparedOutputs {
  std::optional<AtomicOutput> database;
  bool database_replaces_earlier = false;  // default-named, over vramscope's own earlier report
  std::optional<AtomicOutput> viewer_database;  // the viewer page without a database: a temporary
  std::string html;
  bool force = false;
};
Result<PreparedOutputs> PrepareReportOutputs(const pipeline::Input& input,
                                             const ReportFiles& files);

// What WriteReportOutputs wrote.
struct WrittenOutputs {
  std::optional<std::string> database;  // its path
  bool database_replaces_earlier = false;
  SqliteReportInfo database_info;
  std::optional<std::string> html;
};

// Writes the database and the viewer page (stages on control.progress; control.cancel stops the
// writing, and nothing is left behind).
Result<WrittenOutputs> WriteReportOutputs(const pipeline::Analyzed& analyzed,
                                          PreparedOutputs& outputs, const Control& control = {});

// How long the stages took (`--timings`).
struct ReportTimings {
  double load_s = 0, analyze_s = 0, write_s = 0, total_s = 0;
  uint64_t peak_rss_bytes = 0;
};

// The JSON document: the summary (json_summary.h), the database written, the ranks of a capture
// folder and their comparison, the timings when given, and `schema_version`.
nlohmann::json ReportJson(const pipeline::Analyzed& analyzed, int top,
                          const WrittenOutputs& written,
                          const std::optional<ReportTimings>& timings = std::nullopt);

// The terminal text, in two parts so that the summary is printed before the database is written
// (it needs nothing of it): the ranks' table, the summary and the allocator replay's agreement;
// then what was written and the timings when given.
std::string SummaryText(const pipeline::Analyzed& analyzed, const TerminalOptions& terminal);
std::string WrittenText(const pipeline::Analyzed& analyzed, const WrittenOutputs& written,
                        const std::optional<ReportTimings>& timings = std::nullopt);

// A usage error when `device` names no device the input holds memory on (--device N).
Status CheckDevice(const pipeline::Analyzed& analyzed, std::optional<int32_t> device);

}  // namespace vramscope::report
