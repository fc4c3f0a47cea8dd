// The terms the per-rank estimate (parallel_layout.h) and each role's step (role_stream.h) are
// made of: what one rank holds of a layer, what a layer saves for backward per micro-batch, the
// communication buffers of a layer, and how ZeRO shards model states. One definition for both,
// so the table's figures and the allocator model's stream add up to the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/parallel_prediction.h"
#include "predict/model_spec.h"

namespace vramscope::predict::parallel_terms {

using model::ParallelLayout;

inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The parameters of one rank of a layer, split into what ZeRO shards over DP x CP and what it
// shards over the expert-data-parallel group.
struct Held {
  uint64_t dense = 0, experts = 0;
};

// One decoder layer on one TP rank (experts on one EP x ETP rank); `moe`: a mixture-of-experts
// layer (DeepSeek-V3's first layers keep a dense MLP).
Held LayerParameters(const ModelSpec& m, const ParallelLayout& l, bool moe);

// The vocabulary rows of one TP rank (padded up to a multiple of TP).
inline uint64_t VocabShard(const ModelSpec& m, uint64_t tp) { return CeilDiv(m.vocab, tp); }

// What one layer saves for backward per micro-batch, tensor by tensor as Korthikanti et al.
// count them (the layer norms' inputs, q/k/v, the scores, the MLP's intermediates, ...): the
// terms of the formula in parallel_layout.h, in bytes, in the order the forward makes them.
struct ActivationTerm {
  const char* what;
  double bytes;
};
std::vector<ActivationTerm> LayerActivationTerms(const ModelSpec& m, const TrainingSetup& s,
                                                 const ParallelLayout& l, uint64_t seq, bool moe);
double LayerActivationBytes(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                            uint64_t seq, bool moe);

// The largest communication buffer of a layer (parallel_layout.h says which); bytes 0: none.
struct Communication {
  uint64_t bytes = 0;
  std::string what;
};
Communication LargestCommunicationBuffer(const ModelSpec& m, const TrainingSetup& s,
                                         const ParallelLayout& l, uint64_t seq, bool moe);

// Bytes of optimizer state per parameter element (moments, and fp32 master weights).
uint64_t OptimizerBytesPerElement(const TrainingSetup& s);

// 0 (none) to 3.
int ZeroStage(const TrainingSetup& s);

// The decoder layers of each pipeline stage: ceil(L / p), what that overshoots taken one layer
// at a time from the outermost stages, first then last.
std::vector<uint64_t> StageLayers(const ModelSpec& m, const ParallelLayout& l);

// Whether activations are 16-bit (autocast or 16-bit weights); else fp32, twice the bytes.
bool SixteenBitActivations(const TrainingSetup& s);

}  // namespace vramscope::predict::parallel_terms
