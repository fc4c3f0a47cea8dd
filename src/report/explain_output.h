// `vramscope explain`'s renderings of explained out-of-memory messages: the terminal text (one
// block per distinct message: its figures, what the GPU held, the cause with its arithmetic, what
// to change) and the JSON (the same, with exact byte ranges).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/oom_message_explain.h"

namespace vramscope::report {

// A message and the places the same text appeared again (several ranks, a logger repeating it).
struct ExplainedMessage {
  analysis::OomMessageExplanation explanation;
  std::vector<size_t> lines;  // where it appears, first included
  std::vector<int> ranks;     // the "[rankN]:" prefixes seen on it
};

struct ExplainReport {
  std::string source;  // "train.log", "standard input", "the argument"
  std::vector<ExplainedMessage> messages;
  size_t left_out = 0;  // messages beyond the limit
  // `--model`: the largest batch predict --fit finds for the memory the message leaves, or why
  // there is none; empty without --model.
  std::vector<std::string> fit_lines;
  nlohmann::json fit;  // null without --model
};

std::string RenderExplainText(const ExplainReport& report);
// The findings (cause, decisive, arithmetic, meaning) as `explain --json` and `report --json`
// give them.
nlohmann::json OomFindingsJson(const std::vector<analysis::OomFinding>& findings);
// The non-PyTorch memory model's figures (item, bytes, evidence, source, flag).
nlohmann::json OutsideMemoryJson(const device::OutsideMemory& outside);
nlohmann::json RenderExplainJson(const ExplainReport& report);

}  // namespace vramscope::report
