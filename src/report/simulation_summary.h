// Renders the allocator model's runs (analysis::Simulations): the replay against the recording and
// the what-if runs, beside the recording's own peaks (the same figures `report` gives), as
// terminal text and as JSON. No analysis here; see analysis/simulation.h.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/report_input.h"

namespace vramscope::report {

// `device`: only that device (simulate --device); nullopt: every device the model ran on.
std::string RenderSimulationText(const ReportInput& in, std::optional<int32_t> device);
nlohmann::json RenderSimulationJson(const ReportInput& in, std::optional<int32_t> device);

}  // namespace vramscope::report
