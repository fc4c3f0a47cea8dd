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

// One parameter tensor of a unit on one rank: its name (as Hugging Face's module names it), its
// elements, and whether it is the experts' (sharded over the expert-data-parallel group).
struct LayerTensor {
  const char* name;
  uint64_t elements;
  bool expert;
};
// One decoder layer's parameters on one TP rank (experts on one EP x ETP rank), tensor by tensor
// in the order the module registers them; `moe`: a mixture-of-experts layer (DeepSeek-V3's first
// layers keep a dense MLP). The rank's experts are grouped weights, one tensor per projection.
std::vector<LayerTensor> LayerTensors(const ModelSpec& m, const ParallelLayout& l, bool moe);
// Their sums.
Held LayerParameters(const ModelSpec& m, const ParallelLayout& l, bool moe);
// The embedding unit (and GPT-2's position embedding), and the head unit (the final norm and,
// unless tied on the same stage, the output projection), on one TP rank.
std::vector<LayerTensor> EmbeddingTensors(const ModelSpec& m, const ParallelLayout& l);
std::vector<LayerTensor> HeadTensors(const ModelSpec& m, const ParallelLayout& l);

// The vocabulary rows of one TP rank (padded up to a multiple of TP).
inline uint64_t VocabShard(const ModelSpec& m, uint64_t tp) { return CeilDiv(m.vocab, tp); }

// What layer `layer` (of the whole model, from 0) saves for backward per micro-batch, tensor by
// tensor as Korthikanti et al. count them (the layer norms' inputs, q/k/v, the scores, the MLP's
// intermediates, ...): the terms of the formula in parallel_layout.h, in bytes, in the order the
// forward makes them. A layer the setup checkpoints (every layer with --checkpointing, every K-th
// with --checkpointing-every K: TrainingSetup::Checkpointed) saves its input alone.
struct ActivationTerm {
  const char* what;
  double bytes;
};
std::vector<ActivationTerm> LayerActivationTerms(const ModelSpec& m, const TrainingSetup& s,
                                                 const ParallelLayout& l, uint64_t seq,
                                                 uint64_t layer);
double LayerActivationBytes(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                            uint64_t seq, uint64_t layer);

// The largest communication buffer of a layer (parallel_layout.h says which); bytes 0: none.
struct Communication {
  uint64_t bytes = 0;
  std::string what;
};
Communication LargestCommunicationBuffer(const ModelSpec& m, const TrainingSetup& s,
                                         const ParallelLayout& l, uint64_t seq, bool moe);

// Bytes of optimizer state per parameter element (moments, and fp32 master weights), for
// torch.optim's states (s.optimizer.states kNative).
uint64_t OptimizerBytesPerElement(const TrainingSetup& s);

// 0 (none) to 3.
int ZeroStage(const TrainingSetup& s);

// ZeRO's groups: the data-parallel ranks it shards over (all of DP, or HSDP's shard group) times
// CP, and the experts' group, the ranks of that group holding the same experts.
struct ZeroGroups {
  uint64_t dense = 1, experts = 1;
};
ZeroGroups ZeroGroupsOf(const ParallelLayout& l);
// `elements` as one rank holds them: sharded over `group` once ZeRO's stage `zero` reaches
// `from_stage` (1: optimizer state, 2: gradients, 3: weights).
inline uint64_t Sharded(uint64_t elements, uint64_t group, int zero, int from_stage) {
  return zero >= from_stage ? CeilDiv(elements, group) : elements;
}

// The optimizer state one rank holds under a quantised format (bitsandbytes', torchao's; not the
// paged one, whose codes live outside the GPU's allocator): each of `tensors` (one rank's
// model-parallel shards) sharded by ZeRO as `groups` and `zero` say, then its states tensor by
// tensor (quantised_states.h), and the optimizer's shared maps once.
uint64_t QuantisedOptimizerBytes(const TrainingSetup& s, const std::vector<LayerTensor>& tensors,
                                 const ZeroGroups& groups, int zero);

// The units ZeRO-2/3 reduce-scatter (and ZeRO-3 all-gathers) one at a time, in forward order,
// as FSDP2 wraps a model: the embedding, each decoder layer [first_layer, first_layer + layers),
// the head with the final norm. Elements of one rank's model-parallel shard, before ZeRO.
std::vector<uint64_t> StageUnits(const ModelSpec& m, const ParallelLayout& l, uint64_t first_layer,
                                 uint64_t layers, bool embedding, bool head);
// Elements of the embedding (and GPT-2's position embedding) on one TP rank, and of the head
// with the final norm (the tied embedding again when it is on another stage).
uint64_t EmbeddingElements(const ModelSpec& m, const ParallelLayout& l);
uint64_t HeadElements(const ModelSpec& m, const ParallelLayout& l);

// The most a rank holds at once of data parallelism's buffers beside its model states, as the
// role's step (role_stream.h) allocates them: ZeRO-2's reduce-scatter input (a unit's unsharded
// gradients, in its backward); ZeRO-3's all-gathered weights of the unit in use and of the next
// one, prefetched (FSDP2's default, in forward and backward order), with that reduce-scatter
// input in backward. None without ZeRO-2/3: DDP and ZeRO-1 reduce in the gradients' own buffer
// (Megatron-Core's contiguous one). With ParallelLayout::data_parallel_impl kTorch (PyTorch's
// DDP), the buckets: a second copy of the role's gradients; kDeepSpeed (ZeRO-1/2), the reduce
// bucket(s) each backward allocates, reduce_bucket_size elements each, two with overlap_comm
// (one under pipeline parallelism, where DeepSpeed reduces once at the step's end).
struct DataParallelBuffers {
  uint64_t bytes = 0;
  std::string what;
};
// Without resharding after forward (ParallelLayout::reshard_after_forward false), every unit of
// the stage stays gathered through the step, and a unit's gradients are unsharded in its
// backward beside them.
DataParallelBuffers DataParallelBuffersOf(const TrainingSetup& s, const ParallelLayout& l,
                                          const std::vector<uint64_t>& units, uint64_t zero_group);

// The decoder layers of each pipeline stage: ceil(L / p), what that overshoots taken one layer
// at a time from the outermost stages, first then last.
std::vector<uint64_t> StageLayers(const ModelSpec& m, const ParallelLayout& l);

// Whether activations are 16-bit (autocast or 16-bit weights); else fp32, twice the bytes.
bool SixteenBitActivations(const TrainingSetup& s);
// The bytes of one activation element: 2 when SixteenBitActivations, else 4.
inline uint64_t ActivationElementSize(const TrainingSetup& s) {
  return SixteenBitActivations(s) ? 2 : 4;
}

// The elements of one micro-batch's logits on the last stage: micro-batch x sequence (over CP)
// x the rank's vocabulary shard (the whole vocabulary when DTensor gathers them).
inline uint64_t LogitsElements(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                               uint64_t seq) {
  return s.batch * seq * (l.GatheredLogits() ? m.vocab : VocabShard(m, l.tp));
}

// The bytes of one element of the residual stream (the layers' inputs and outputs): under
// torch.autocast with fp32 weights it stays fp32 (the embedding's output is, and each residual
// add promotes the autocast-dtype branch to it), unless FSDP2 gathers the weights in bf16 under
// its MixedPrecisionPolicy; else the activations' dtype.
inline uint64_t ResidualElementSize(const TrainingSetup& s, const ParallelLayout& l) {
  const bool fp32_weights =
      ElementSize(s.precision.param) == 4 && !(l.fsdp_mixed_precision && ZeroStage(s) >= 3);
  return s.precision.autocast && fp32_weights ? 4 : ActivationElementSize(s);
}

// One micro-batch's tensor at a pipeline stage's boundary (what a stage sends on and the
// gradient that comes back): micro-batch x sequence (over CP; over TP too under sequence
// parallelism) x hidden, in the residual stream's dtype.
inline uint64_t StageBoundaryBytes(const ModelSpec& m, const TrainingSetup& s,
                                   const ParallelLayout& l, uint64_t seq) {
  return s.batch * (l.sequence_parallel ? CeilDiv(seq, l.tp) : seq) * m.hidden *
         ResidualElementSize(s, l);
}

}  // namespace vramscope::predict::parallel_terms
