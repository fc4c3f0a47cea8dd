// The figures `vramscope diff` compares (analysis/diff.h), read from a report database of any
// schema version through ReportDb: the peaks, the categories, owners and sites at the peak, and
// each step's peak and what was live at its end, by owner.
#pragma once

#include <string>

#include "analysis/diff.h"
#include "common/progress.h"
#include "common/status.h"

namespace vramscope::report {

// `name`: the input as the user named it (the report may be a temporary one made from it).
Result<analysis::DiffSide> ReadDiffSide(const std::string& database, const std::string& name,
                                        const Control& control);

}  // namespace vramscope::report
