#include "model/vocabulary.h"

#include <fmt/format.h>

namespace vramscope::model {

std::optional<Phase> PhaseSpelledBy(PhaseProducer producer, std::string_view name) {
  for (const PhaseSpelling& s : kPhaseSpellings) {
    if (s.producer == producer && s.name == name) return s.phase;
  }
  return std::nullopt;
}

std::string_view PhaseNameFor(PhaseProducer producer, Phase phase) {
  for (const PhaseSpelling& s : kPhaseSpellings) {
    if (s.producer == producer && s.phase == phase) return s.name;
  }
  return {};
}

namespace {

std::string PhasesOf(PhaseProducer producer) {
  std::string out;
  for (const PhaseSpelling& s : kPhaseSpellings) {
    if (s.producer != producer) continue;
    out +=
        fmt::format("{}\n    \"{}\": \"{}\"", out.empty() ? "" : ",", s.name, PhaseName(s.phase));
  }
  return out;
}

}  // namespace

std::string VocabularyJson() {
  std::string pools;
  for (const PoolSpelling& p : kPoolSpellings) {
    pools += fmt::format("{}\n    \"{}\": {}", pools.empty() ? "" : ",", p.name,
                         static_cast<int>(p.pool));
  }
  const CaptureLimits& l = kCaptureLimits;
  return fmt::format(
      "{{\n"
      "  \"comment\": \"generated from src/model/vocabulary.h; vocabulary_test fails on any "
      "difference\",\n"
      "  \"phases\": {{\n"
      "   \"report\": {{{}\n   }},\n"
      "   \"capture\": {{{}\n   }},\n"
      "   \"tracer\": {{{}\n   }}\n"
      "  }},\n"
      "  \"pools\": {{{}\n  }},\n"
      "  \"capture_limits\": {{\n"
      "    \"max_phases\": {},\n"
      "    \"max_nvml_samples\": {},\n"
      "    \"max_nvml_processes\": {},\n"
      "    \"default_max_entries\": {}\n"
      "  }}\n"
      "}}\n",
      PhasesOf(PhaseProducer::kReport), PhasesOf(PhaseProducer::kCapture),
      PhasesOf(PhaseProducer::kTracer), pools, l.max_phases, l.max_nvml_samples,
      l.max_nvml_processes, l.default_max_entries);
}

}  // namespace vramscope::model
