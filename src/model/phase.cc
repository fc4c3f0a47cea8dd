#include "model/phase.h"

namespace vramscope::model {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kUnknown:
      return "unknown";
    case Phase::kSetup:
      return "setup";
    case Phase::kBeforeForward:
      return "before_forward";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
  }
  return "unknown";
}

std::optional<Phase> ParsePhase(std::string_view name) {
  for (int i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    if (name == PhaseName(phase)) return phase;
  }
  if (name == "between") return Phase::kBeforeForward;
  return std::nullopt;
}

}  // namespace vramscope::model
