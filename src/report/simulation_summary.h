// Renders the allocator model's runs (analysis::Simulations): the replay against the recording and
// the what-if runs, as terminal text and as JSON. No analysis here; see analysis/simulation.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "analysis/simulation.h"
#include "model/trace.h"

namespace vramscope::report {

std::string RenderSimulationText(const model::Trace& trace, const analysis::Simulations& sims);
nlohmann::json RenderSimulationJson(const model::Trace& trace, const analysis::Simulations& sims);

}  // namespace vramscope::report
