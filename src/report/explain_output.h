// `vramscope explain`'s renderings of explained out-of-memory messages: the terminal text (one
// block per distinct message: its figures, what the GPU held, the cause with its arithmetic, what
// to change) and the JSON (the same, with exact byte ranges).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/oom_message_explain.h"
#include "pipeline/explain.h"

namespace vramscope::report {

// The version of `explain --json`: raised with every change to its keys or their meaning.
inline constexpr int kExplainJsonVersion = 1;

using ExplainReport = pipeline::ExplainResult;
using ExplainedMessage = pipeline::ExplainedMessage;

std::string RenderExplainText(const ExplainReport& report);
// The findings (cause, decisive, arithmetic, meaning) as `explain --json` and `report --json`
// give them.
nlohmann::json OomFindingsJson(const std::vector<analysis::OomFinding>& findings);
// The non-PyTorch memory model's figures (item, bytes, evidence, source, flag).
nlohmann::json OutsideMemoryJson(const device::OutsideMemory& outside);
nlohmann::json RenderExplainJson(const ExplainReport& report);

}  // namespace vramscope::report
