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
// 2: each message's `verdict` (the dominant holder, its sentence, the ranked holders),
// `proximate` (the cause and findings, also still at the top level), `not_available` and
// `expected_outside_pytorch_range`. 3: XLA's and TensorFlow's messages (kinds "xla",
// "tensorflow"): each message's `device`, `allocator` and `tensor`, and the BFC pool's and the
// compiled program's figures.
inline constexpr int kExplainJsonVersion = 3;

using ExplainReport = pipeline::ExplainResult;
using ExplainedMessage = pipeline::ExplainedMessage;

std::string RenderExplainText(const ExplainReport& report);
// The findings (cause, decisive, arithmetic, meaning) as `explain --json` and `report --json`
// give them.
nlohmann::json OomFindingsJson(const std::vector<analysis::OomFinding>& findings);
// The verdict: {holder, sentence, close, holders: [{holder, what, bytes, arithmetic, assumed}]}.
nlohmann::json OomVerdictJson(const analysis::OomVerdict& verdict);
// The non-PyTorch memory model's figures (item, bytes, evidence, source, flag).
nlohmann::json OutsideMemoryJson(const device::OutsideMemory& outside);
nlohmann::json RenderExplainJson(const ExplainReport& report);

}  // namespace vramscope::report
