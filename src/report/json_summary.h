// The summary as JSON for scripts: the same figures as the terminal summary, exact bytes, every
// site (not only the top ones), and the source's facts.
#pragma once

#include <nlohmann/json.hpp>

#include "report/report_input.h"

namespace vramscope::report {

nlohmann::json RenderJsonSummary(const ReportInput& input, int top_sites);

}  // namespace vramscope::report
