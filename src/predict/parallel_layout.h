// Memory per rank of a decoder (the GPT-2 and LLaMA families, MoE included) trained with
// tensor (TP), sequence (SP), pipeline (PP), context (CP), expert (EP, ETP) and data parallelism
// (DP with ZeRO 0-3), one entry per distinct rank role: the pipeline stages, which differ by
// the layers they hold, the embedding on the first, the head and loss on the last, and the
// micro-batches in flight under the schedule.
//
// The contract, and what it is not yet (docs/design/parallel.md):
// - Model states (weights, gradients, optimizer state) are counted exactly, tensor by tensor, as
//   Megatron-Core shards them: column-parallel q/k/v (KV heads replicated when TP exceeds them),
//   gate/up and c_attn/c_fc split by TP along their outputs, row-parallel o/down and c_proj along
//   their inputs (their biases replicated), the vocabulary-parallel embedding and head (the
//   vocabulary padded up to a multiple of TP), norms and GPT-2's position embedding replicated, a
//   tied head held again by the last stage when PP > 1; experts split E/EP per rank and each
//   expert's matrices by ETP, the router replicated, a shared expert split by TP. ZeRO shards the
//   optimizer state (1), the gradients (2) and the weights (3) over DP x CP, experts' over the
//   expert-data-parallel group (DP x CP x TP / (EP x ETP)).
// - Activations follow Korthikanti et al. (2022), "Reducing Activation Recomputation in Large
//   Transformer Models", per layer and micro-batch with 16-bit activations: s b h (10 + 24/t +
//   5 a s / (h t)) without SP, s b h (34/t + 5 a s / (h t)) with SP, the 5 a s / h attention term
//   gone with fused attention (SDPA, flash) or selective recomputation, 2 s b h (/t with SP) per
//   layer under full recomputation; generalised as Megatron's theoretical memory does to an MLP of
//   any width (18 + 4 ffn / h in place of 34) and here to experts. s is the sequence over CP.
//   fp32 training doubles them. The last stage adds the fp32 logits of its vocabulary shard and
//   their gradient. In flight: stage i of p holds min(m, p - i) micro-batches under 1F1B; with v
//   virtual stages (interleaved), (p - i - 1) x 2 + (v - 1) x p + 1 chunks of L / (p v) layers.
// - DeepSeek-V2/V3: latent attention (MLA) split as Megatron-Core's MLASelfAttention does (down
//   projections and their norms duplicated, up projections column-parallel, the output
//   row-parallel), the first layers' dense MLPs, then routed and shared experts.
// - Communication: the largest buffer of a layer (SP, CP, MoE all-to-all); data parallelism's
//   buffers under ZeRO-2/3 (parallel_terms.h's DataParallelBuffersOf). The sum of every term is
//   `total_bytes`; role_stream.h places each role's step with the allocator model for its
//   reserved memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/parallel_prediction.h"
#include "predict/model_spec.h"

namespace vramscope::predict {

using model::ParallelLayout;
using model::ParallelPrediction;
using model::PipelineSchedule;
using model::RankRole;

// Refused (UsageError) when the layout does not divide the model: heads, KV heads, the MLP's
// width and experts must split evenly, and the layers too under the interleaved schedule (1F1B
// takes uneven stages: the outermost get fewer); more stages than layers; a family other than
// GPT-2 and LLaMA.
Result<ParallelPrediction> PredictParallel(const ModelSpec& model, const TrainingSetup& setup,
                                           const ParallelLayout& layout);

// The smallest TP x PP (ties: the smaller TP) whose every role fits `capacity` bytes per rank,
// the other dimensions as `base` gives them. TP runs over the powers of two up to 64 that the
// model's heads allow, PP over 1 to the layers (at most 256). With `world` > 0 the data-parallel
// size follows (world / (TP x PP x CP), which must divide); else it is base.dp.
struct LayoutFit {
  bool found = false;
  ParallelPrediction best;  // the fitting layout; without one, the one needing the least
  uint64_t tried = 0;       // layouts predicted
};
LayoutFit FitLayout(const ModelSpec& model, const TrainingSetup& setup, const ParallelLayout& base,
                    uint64_t capacity, uint64_t world);

// Every parameter of the model, unsharded: what a preset's published count is checked against.
uint64_t ModelParameters(const ModelSpec& model);

}  // namespace vramscope::predict
