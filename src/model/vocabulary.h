// The vocabulary every producer and consumer of vramscope's data shares, in one table: the phases
// of a training step with each producer's spellings of them, the allocator's pools with their
// codes, and the limits of what a capture records. C++ uses the tables below; the Python tracer
// and the capture bootstrap read their export, python/vramscope/vocabulary.json (VocabularyJson(),
// checked against the file by vocabulary_test); the viewer's page carries the same JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "model/phase.h"
#include "model/trace.h"

namespace vramscope::model {

// Who writes a phase's name: the report (the database, JSON; PhaseName), the capture bootstrap
// (`vramscope run`'s sidecar and its per-event marks), the tracer (its stream, whose phases are
// finer: zero_grad and inputs before the forward, step_end after the optimizer).
enum class PhaseProducer : uint8_t { kReport, kCapture, kTracer };

struct PhaseSpelling {
  std::string_view name;
  Phase phase;
  PhaseProducer producer;
};

// Every spelling, each producer's in the order of a step. A producer's first spelling of a phase
// is the one it writes.
inline constexpr PhaseSpelling kPhaseSpellings[] = {
    {"unknown", Phase::kUnknown, PhaseProducer::kReport},
    {"setup", Phase::kSetup, PhaseProducer::kReport},
    {"before_forward", Phase::kBeforeForward, PhaseProducer::kReport},
    {"forward", Phase::kForward, PhaseProducer::kReport},
    {"backward", Phase::kBackward, PhaseProducer::kReport},
    {"optimizer", Phase::kOptimizer, PhaseProducer::kReport},
    {"setup", Phase::kSetup, PhaseProducer::kCapture},
    {"forward", Phase::kForward, PhaseProducer::kCapture},
    {"backward", Phase::kBackward, PhaseProducer::kCapture},
    {"optimizer", Phase::kOptimizer, PhaseProducer::kCapture},
    {"between", Phase::kBeforeForward, PhaseProducer::kCapture},  // after a step, before the next
    {"setup", Phase::kSetup, PhaseProducer::kTracer},
    {"inputs", Phase::kBeforeForward, PhaseProducer::kTracer},
    {"zero_grad", Phase::kBeforeForward, PhaseProducer::kTracer},
    {"forward", Phase::kForward, PhaseProducer::kTracer},
    {"backward", Phase::kBackward, PhaseProducer::kTracer},
    {"optimizer", Phase::kOptimizer, PhaseProducer::kTracer},
    {"step_end", Phase::kOptimizer, PhaseProducer::kTracer},
};

// The phase `producer` means by `name`; nullopt when it has no such spelling.
std::optional<Phase> PhaseSpelledBy(PhaseProducer producer, std::string_view name);
// The name `producer` writes for `phase` (its first spelling); empty when it writes none.
std::string_view PhaseNameFor(PhaseProducer producer, Phase phase);

// The allocator's pools: the code is Pool's value, in the report database's text (PoolName) and
// in the viewer's columns alike.
struct PoolSpelling {
  std::string_view name;
  Pool pool;
};
inline constexpr PoolSpelling kPoolSpellings[] = {{"small", Pool::kSmall}, {"large", Pool::kLarge}};

// What `vramscope run` records at most, written by the bootstrap and read back by the sidecar's
// reader (sources/run_output): one set of numbers for both.
struct CaptureLimits {
  size_t max_phases = 200000;             // the latest phase records kept
  size_t max_nvml_samples = 20000;        // the latest NVML samples kept (one per phase boundary)
  size_t max_nvml_processes = 64;         // other processes listed per sample (the largest)
  int64_t default_max_entries = 1000000;  // PyTorch's ring buffer of allocator events
};
inline constexpr CaptureLimits kCaptureLimits{};

// The tables above as JSON, byte for byte python/vramscope/vocabulary.json.
std::string VocabularyJson();

}  // namespace vramscope::model
