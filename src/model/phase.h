// The phases of a training step: the one vocabulary for them. Sources that know their own phases
// (a prediction, a capture's marks, NVTX ranges of a native trace) record them as PhaseMarks;
// attribution detects them from stacks where no source said; reports print PhaseName.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace vramscope::model {

enum class Phase : uint8_t {
  kUnknown,        // no evidence at all (no stacks, no annotations, nothing recorded)
  kSetup,          // before the first forward of the trace (model creation, loading)
  kBeforeForward,  // inside an iteration, before its forward (zero_grad, moving the batch)
  kForward,
  kBackward,
  kOptimizer,
};
inline constexpr int kPhaseCount = 6;

// "unknown", "setup", "before_forward", "forward", "backward", "optimizer": stable, used in JSON
// and in the report database (model/vocabulary.h holds them, with every producer's spellings).
const char* PhaseName(Phase phase);
// The inverse of PhaseName; also accepts the capture bootstrap's spellings ("between").
std::optional<Phase> ParsePhase(std::string_view name);

}  // namespace vramscope::model
