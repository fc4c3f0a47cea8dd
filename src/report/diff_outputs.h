// `vramscope diff A B` (and the Python API's diff): two reports, recordings, predictions or
// capture folders, any mix, compared by category, owner, site and step at their peaks, with the
// memory that grows step over step on each side, and the --fail-if gates (analysis/diff_gate.h)
// evaluated. Inputs that are not report databases are reported first, as `report` would, into
// temporary databases (report/input_reports.h); both sides are then read the same way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analysis/diff.h"
#include "analysis/diff_gate.h"
#include "common/progress.h"
#include "common/status.h"
#include "pipeline/input.h"

namespace vramscope::report {

// The version of `diff --json`: raised with every change to its keys or their meaning.
inline constexpr int kDiffJsonVersion = 1;

struct DiffRequest {
  std::string a, b;                // as the user named them
  std::optional<int32_t> device;   // only this ordinal
  std::vector<std::string> gates;  // --fail-if, parsed before anything is read
  std::string project_root;        // absolute
  pipeline::InputLimits limits;
  Control control;
};

struct DiffResult {
  analysis::Diff diff;
  std::vector<analysis::GateOutcome> gates;
  bool Failed() const;  // any gate crossed
};

// The gates are checked first (a usage error before any reading).
Result<DiffResult> RunDiff(const DiffRequest& request);

std::string DiffText(const DiffResult& result, size_t top);
nlohmann::json DiffJson(const DiffResult& result);

}  // namespace vramscope::report
