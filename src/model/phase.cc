#include "model/phase.h"

#include "model/vocabulary.h"

namespace vramscope::model {

const char* PhaseName(Phase phase) {
  // The report's spelling (model/vocabulary.h); every phase has one.
  return PhaseNameFor(PhaseProducer::kReport, phase).data();
}

std::optional<Phase> ParsePhase(std::string_view name) {
  if (auto phase = PhaseSpelledBy(PhaseProducer::kReport, name)) return phase;
  return PhaseSpelledBy(PhaseProducer::kCapture, name);
}

}  // namespace vramscope::model
