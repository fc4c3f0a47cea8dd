#include "predict/parallel_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/units.h"
#include "model/bounding.h"
#include "predict/parallel_terms.h"

namespace vramscope::predict {

using parallel_terms::ActivationElementSize;
using parallel_terms::CeilDiv;
using parallel_terms::Communication;
using parallel_terms::Held;
using parallel_terms::LargestCommunicationBuffer;
using parallel_terms::LayerActivationBytes;
using parallel_terms::LayerParameters;
using parallel_terms::LogitsElements;
using parallel_terms::OptimizerBytesPerElement;
using parallel_terms::StageBoundaryBytes;
using parallel_terms::StageLayers;
using parallel_terms::VocabShard;
using parallel_terms::ZeroStage;

namespace {

Status CheckLayout(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l) {
  if (m.family != Family::kGpt2 && m.family != Family::kLlama) {
    return UsageError(fmt::format(
        "--tp/--pp/--cp/--ep model decoders of the GPT-2 and LLaMA families (MoE included); {} "
        "is a {}",
        m.label, FamilyName(m.family)));
  }
  for (const auto& [value, flag] : {std::pair{l.tp, "--tp"},
                                    {l.pp, "--pp"},
                                    {l.dp, "--dp"},
                                    {l.cp, "--cp"},
                                    {l.ep, "--ep"},
                                    {l.micro_batches, "--micro-batches"},
                                    {l.virtual_stages, "--virtual-stages"}}) {
    if (value == 0) return UsageError(fmt::format("{} must be at least 1", flag));
  }
  if (m.heads % l.tp != 0) {
    return UsageError(
        fmt::format("--tp {} does not divide the model's {} attention heads", l.tp, m.heads));
  }
  if (m.kv_heads % l.tp != 0 && l.tp % m.kv_heads != 0) {
    return UsageError(fmt::format("--tp {} and the model's {} KV heads: one must divide the other",
                                  l.tp, m.kv_heads));
  }
  if ((m.experts == 0 || m.first_dense_layers > 0) && m.intermediate % l.tp != 0) {
    return UsageError(
        fmt::format("--tp {} does not divide the MLP's width {}", l.tp, m.intermediate));
  }
  if (m.experts == 0 && (l.ep > 1 || l.etp > 0)) {
    return UsageError(
        fmt::format("--ep/--etp need a mixture-of-experts model; {} has none", m.label));
  }
  if (m.experts > 0) {
    if (m.experts % l.ep != 0) {
      return UsageError(
          fmt::format("--ep {} does not divide the model's {} experts", l.ep, m.experts));
    }
    if (m.expert_intermediate % l.Etp() != 0 || m.shared_expert_intermediate % l.tp != 0) {
      return UsageError(fmt::format("--etp {} does not divide the experts' width {}", l.Etp(),
                                    m.expert_intermediate));
    }
    if ((l.dp * l.cp * l.tp) % (l.ep * l.Etp()) != 0) {
      return UsageError(fmt::format(
          "--ep {} x --etp {} must divide --dp x --cp x --tp = {} (the ranks of a stage)", l.ep,
          l.Etp(), l.dp * l.cp * l.tp));
    }
    if ((l.DpShard() * l.cp * l.tp) % (l.ep * l.Etp()) != 0) {
      return UsageError(fmt::format(
          "--ep {} x --etp {} must divide --dp-shard x --cp x --tp = {} (the ranks one shard "
          "group spans)",
          l.ep, l.Etp(), l.DpShard() * l.cp * l.tp));
    }
  }
  if (l.dp_shard > 0 && l.dp % l.dp_shard != 0) {
    return UsageError(
        fmt::format("--dp-shard {} does not divide --dp {}: HSDP shards over groups of that many "
                    "data-parallel ranks, replicated --dp / --dp-shard times",
                    l.dp_shard, l.dp));
  }
  if (m.layers < l.pp) {
    return UsageError(
        fmt::format("--pp {}: more stages than the model's {} layers", l.pp, m.layers));
  }
  const uint64_t chunks = l.pp * l.virtual_stages;
  if (l.schedule == PipelineSchedule::kInterleaved && m.layers % chunks != 0) {
    return UsageError(
        fmt::format("--pp {}{} needs the model's {} layers to split evenly into {} chunks", l.pp,
                    l.schedule == PipelineSchedule::kInterleaved
                        ? fmt::format(" x --virtual-stages {}", l.virtual_stages)
                        : "",
                    m.layers, chunks));
  }
  if (l.schedule == PipelineSchedule::kInterleaved && l.pp < 2) {
    return UsageError("--schedule interleaved needs --pp 2 or more");
  }
  if (l.schedule == PipelineSchedule::kInterleaved && l.TorchPipeline() &&
      l.micro_batches % std::max<uint64_t>(1, l.micro_batches / l.pp) != 0) {
    const uint64_t rounds = l.micro_batches / l.pp;
    return UsageError(fmt::format(
        "--micro-batches {}: torch's ScheduleInterleaved1F1B runs them in {} rounds of --pp {} "
        "and refuses a number that is not a multiple of {}: give {} or {}",
        l.micro_batches, rounds, l.pp, rounds, rounds * (l.micro_batches / rounds),
        rounds * (l.micro_batches / rounds + 1)));
  }
  const uint64_t seq = s.seq ? s.seq : m.default_seq;
  if (seq % l.cp != 0) {
    return UsageError(fmt::format("--cp {} does not divide the sequence {}", l.cp, seq));
  }
  if (l.sequence_parallel && l.tp < 2) return UsageError("--sp needs --tp 2 or more");
  if (s.checkpoint_ops) {
    // torchtitan's op-level policy (parallel_terms' AddOpPolicyOutputs) counts a dense layer's
    // mm calls; its MoE layers run grouped GEMMs and latent attention other projections.
    if (m.experts > 0 || m.Mla()) {
      return UsageError(fmt::format(
          "--checkpointing-ops: the per-rank estimate keeps the op-level policy's outputs of "
          "dense decoder layers; {} has {} layers: use --checkpointing or --checkpointing-every",
          m.label, m.experts > 0 ? "mixture-of-experts" : "latent-attention"));
    }
    if (l.tp > 1 && l.tensor_parallel_impl != model::TensorParallelImpl::kTorch) {
      return UsageError(
          "--checkpointing-ops is torchtitan's policy over DTensor's tensor parallelism: add "
          "--tp-impl torch (Megatron's TP recomputes with --selective-recompute)");
    }
  }
  const int zero = ZeroStage(s);
  if (l.data_parallel_impl == model::DataParallelImpl::kTorch && zero != 0 && zero != 3) {
    return UsageError(fmt::format(
        "--dp-impl torch with --zero {}: PyTorch's DistributedDataParallel does not shard; use "
        "--zero 3 for FSDP2 (as --dp-impl megatron models it) or --dp-impl deepspeed for ZeRO-1/2",
        zero));
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed && zero == 0) {
    return UsageError(
        "--dp-impl deepspeed models DeepSpeed's ZeRO optimizers; give --zero 1, 2 or 3");
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed && zero >= 2 && l.pp > 1) {
    return UsageError(fmt::format(
        "--dp-impl deepspeed --zero {} with --pp {}: DeepSpeed's pipeline engine takes ZeRO-1 "
        "only (ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism)",
        zero, l.pp));
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed &&
      l.reshard_after_forward.has_value()) {
    return UsageError(
        "--reshard-after-forward is FSDP2's choice; DeepSpeed's ZeRO-3 releases each module's "
        "parameters after its use");
  }
  if (l.fsdp_mixed_precision &&
      (zero != 3 || l.data_parallel_impl != model::DataParallelImpl::kMegatron)) {
    return UsageError(
        "--fsdp-mp is FSDP2's mixed-precision policy: give --zero 3 (and no --dp-impl) with it");
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed &&
      l.reduce_bucket_elements == 0) {
    return UsageError("--reduce-bucket-size must be at least 1 element");
  }
  if (l.capacity_factor > 0 && m.experts == 0) {
    return UsageError(
        fmt::format("--capacity-factor sizes experts; {} is not a mixture of experts", m.label));
  }
  return Status::Ok();
}

}  // namespace

uint64_t ModelParameters(const ModelSpec& m) {
  ParallelLayout one;
  const Held dense = LayerParameters(m, one, false), moe = LayerParameters(m, one, true);
  const uint64_t moe_layers =
      m.experts == 0 ? 0 : m.layers - std::min(m.layers, m.first_dense_layers);
  uint64_t total = (m.layers - moe_layers) * (dense.dense + dense.experts) +
                   moe_layers * (moe.dense + moe.experts) + m.vocab * m.hidden;
  if (m.family == Family::kGpt2) total += m.max_positions * m.hidden + 2 * m.hidden;
  if (m.family == Family::kLlama) total += m.hidden;
  if (!m.tie_embeddings) total += m.vocab * m.hidden;
  return total;
}

Result<ParallelPrediction> PredictParallel(const ModelSpec& m, const TrainingSetup& s,
                                           const ParallelLayout& l) {
  RETURN_IF_ERROR(CheckLayout(m, s, l));
  ParallelPrediction out;
  out.layout = l;
  out.world = l.World();
  out.parameters = ModelParameters(m);
  const uint64_t seq = (s.seq ? s.seq : m.default_seq) / l.cp;
  const uint64_t e = ElementSize(s.precision.param);
  const uint64_t opt_per_element = OptimizerBytesPerElement(s);
  const parallel_terms::ZeroGroups groups = parallel_terms::ZeroGroupsOf(l);
  const uint64_t zero_group = groups.dense, expert_group = groups.experts;
  const Held dense_layer = LayerParameters(m, l, false), moe_layer = LayerParameters(m, l, true);
  const bool interleaved = l.schedule == PipelineSchedule::kInterleaved;
  const uint64_t v = interleaved ? l.virtual_stages : 1;
  const std::vector<uint64_t> stage_layers = StageLayers(m, l);
  const uint64_t vocab = VocabShard(m, l.tp);
  const int zero = ZeroStage(s);
  auto sharded = [&](uint64_t elements, uint64_t group, int from_stage) {
    return parallel_terms::Sharded(elements, group, zero, from_stage);
  };
  std::vector<RankRole> stages;
  uint64_t first_layer = 0;  // of the stage
  for (uint64_t stage = 0; stage < l.pp; ++stage) {
    RankRole r;
    r.stages = {stage};
    r.layers = stage_layers[stage];
    r.embedding = stage == 0;
    r.head = stage == l.pp - 1;
    uint64_t moe_layers = 0;  // of the stage's layers (DeepSeek-V3's first are dense)
    for (uint64_t i = first_layer; i < first_layer + r.layers; ++i) moe_layers += m.MoeLayer(i);
    const uint64_t dense_layers = r.layers - moe_layers;
    first_layer += r.layers;
    Held held{dense_layer.dense * dense_layers + moe_layer.dense * moe_layers,
              dense_layer.experts * dense_layers + moe_layer.experts * moe_layers};
    // The stage's mean per layer (dense and MoE layers, checkpointed ones or not).
    double stage_activation = 0;
    for (uint64_t i = first_layer - r.layers; i < first_layer; ++i) {
      stage_activation += LayerActivationBytes(m, s, l, seq, i);
    }
    const double layer_activation =
        r.layers == 0 ? 0 : stage_activation / static_cast<double>(r.layers);
    if (r.embedding) held.dense += parallel_terms::EmbeddingElements(m, l);
    if (r.head) held.dense += parallel_terms::HeadElements(m, l);
    r.parameters = held.dense + held.experts;
    r.expert_parameters = held.experts;
    r.weight_bytes =
        e * (sharded(held.dense, zero_group, 3) + sharded(held.experts, expert_group, 3));
    r.gradient_bytes =
        e * (sharded(held.dense, zero_group, 2) + sharded(held.experts, expert_group, 2));
    r.optimizer_bytes = opt_per_element * (sharded(held.dense, zero_group, 1) +
                                           sharded(held.experts, expert_group, 1));
    if (s.optimizer.states != StateFormat::kNative) {
      // Quantised states: blocks and thresholds per tensor, so counted tensor by tensor.
      std::vector<parallel_terms::LayerTensor> tensors;
      const auto add = [&](const std::vector<parallel_terms::LayerTensor>& more) {
        tensors.insert(tensors.end(), more.begin(), more.end());
      };
      if (r.embedding) add(parallel_terms::EmbeddingTensors(m, l));
      for (uint64_t i = first_layer - r.layers; i < first_layer; ++i) {
        add(parallel_terms::LayerTensors(m, l, m.MoeLayer(i)));
      }
      if (r.head) add(parallel_terms::HeadTensors(m, l));
      r.optimizer_bytes = parallel_terms::QuantisedOptimizerBytes(s, tensors, groups, zero);
    }
    if (s.optimizer.offload) {
      // The optimizer on the host, as the step simulator counts it for one GPU: per element
      // of the rank's optimizer shard an fp32 copy of the weight, of its gradient, and the
      // fp32 states (Adam two, momentum one); nothing of it on the GPU.
      const uint64_t states = s.optimizer.kind == OptimizerKind::kMomentum ? 1 : 2;
      r.host_bytes = 4 * (2 + states) *
                     (sharded(held.dense, zero_group, 1) + sharded(held.experts, expert_group, 1));
      r.optimizer_bytes = 0;
    }
    // In flight: whole micro-batches of the stage's layers (1F1B), or model chunks of
    // L / (p v) layers (interleaved), never more than the step runs.
    double per_unit = layer_activation * static_cast<double>(r.layers);
    if (interleaved) {
      const uint64_t chunks = (l.pp - stage - 1) * 2 + (v - 1) * l.InterleavedRound() + 1;
      r.in_flight = std::min(chunks, l.micro_batches * v);
      per_unit = layer_activation * static_cast<double>(m.layers / (l.pp * v));
    } else if (l.schedule == PipelineSchedule::kGPipe) {
      r.in_flight = l.micro_batches;  // every forward before the first backward
    } else {
      r.in_flight = std::min(l.micro_batches, l.pp - stage);
    }
    r.activation_bytes_per_micro_batch =
        static_cast<uint64_t>(std::llround(layer_activation * static_cast<double>(r.layers)));
    r.activation_bytes =
        static_cast<uint64_t>(std::llround(per_unit * static_cast<double>(r.in_flight)));
    const uint64_t logits = LogitsElements(m, s, l, seq);
    if (r.head && (l.TorchPipeline() || l.GatheredLogits())) {
      // Every micro-batch's output (the head's, in the activations' dtype) to the step's end
      // (return_outputs=False: each in flight to its backward), the loss's fp32 log-softmax of
      // each micro-batch in flight, and its two fp32 gradients at once in backward. In flight
      // on the last stage: every micro-batch under GPipe, else one (its backward follows its
      // forward).
      // Under autocast (torch 2.11's, measured) the log-softmax runs in the autocast dtype and
      // nll_loss saves an fp32 copy of it; backward makes the fp32 gradient of that copy (the
      // copy then goes), and two in the autocast dtype after it.
      // Without a torch pipeline (DTensor's gathered logits): the one output, alive to the
      // step's end of backward, and its loss.
      const bool pipeline = l.TorchPipeline();
      const uint64_t head_in_flight =
          pipeline && l.schedule == PipelineSchedule::kGPipe ? l.micro_batches : 1;
      const uint64_t outputs = !pipeline                   ? 1
                               : l.pipeline_return_outputs ? l.micro_batches
                                                           : head_in_flight;
      const uint64_t act = ActivationElementSize(s);
      r.logits_bytes = outputs * logits * act +
                       (s.precision.autocast ? head_in_flight * (act + 4) * logits + logits * 4
                                             : (head_in_flight + 2) * logits * 4);
    } else if (r.head) {
      r.logits_bytes = 2 * logits * 4;
    }
    if (l.TorchPipeline()) {
      // The receive buffers, one per micro-batch and direction for each of the rank's stages
      // (model chunk c is global stage c x PP + stage): an input unless it is the first stage,
      // an output's gradient unless it is the last. And each in-flight pass's output kept to
      // its backward, but the last stage's (its output is the logits): under 1F1B the last rank
      // keeps none, interleaved as many as it has passes in flight (after its warm-up, a pass of
      // its first chunk comes before the oldest backward of a later one ends).
      const uint64_t boundary = StageBoundaryBytes(m, s, l, seq);
      uint64_t receives = 0;
      for (uint64_t c = 0; c < v; ++c) {
        const uint64_t global = c * l.pp + stage;
        receives += (global > 0 ? 1 : 0) + (global + 1 < l.pp * v ? 1 : 0);
      }
      r.pipeline_buffer_bytes = l.micro_batches * boundary * receives;
      const uint64_t kept = r.head && v == 1 ? 0 : r.in_flight;
      r.activation_bytes_per_micro_batch += boundary * (r.head ? v - 1 : v);
      r.activation_bytes += boundary * kept;
    }
    const Communication comm = LargestCommunicationBuffer(m, s, l, seq, moe_layers > 0);
    r.communication_bytes = comm.bytes;
    r.communication = comm.what;
    const parallel_terms::DataParallelBuffers dp_buffers = parallel_terms::DataParallelBuffersOf(
        s, l,
        parallel_terms::StageUnits(m, l, first_layer - r.layers, r.layers, r.embedding, r.head),
        zero_group);
    r.data_parallel_bytes = dp_buffers.bytes;
    r.data_parallel = dp_buffers.what;
    r.total_bytes = r.weight_bytes + r.gradient_bytes + r.optimizer_bytes + r.activation_bytes +
                    r.logits_bytes + r.communication_bytes + r.data_parallel_bytes +
                    r.pipeline_buffer_bytes;
    stages.push_back(std::move(r));
  }
  // Stages with the same figures are one role.
  for (RankRole& r : stages) {
    auto same = [&](const RankRole& o) {
      return o.parameters == r.parameters && o.total_bytes == r.total_bytes &&
             o.embedding == r.embedding && o.head == r.head && o.in_flight == r.in_flight;
    };
    auto it = std::find_if(out.roles.begin(), out.roles.end(), same);
    if (it != out.roles.end()) {
      it->stages.push_back(r.stages.front());
    } else {
      out.roles.push_back(std::move(r));
    }
  }
  for (RankRole& r : out.roles) {
    r.ranks = r.stages.size() * l.tp * l.cp * l.dp;
    if (l.pp == 1) {
      r.name = "every rank";
    } else if (r.stages.size() == 1) {
      r.name = r.embedding ? "first stage"
               : r.head    ? "last stage"
                           : fmt::format("stage {}", r.stages.front());
    } else if (r.stages.back() - r.stages.front() + 1 == r.stages.size()) {
      r.name = fmt::format("stages {}-{}", r.stages.front(), r.stages.back());
    } else if (r.stages.size() <= 3) {
      r.name = fmt::format("stages {}", fmt::join(r.stages, ", "));
    } else {
      r.name = fmt::format("{} stages", r.stages.size());
    }
  }
  // Before the allocator places them, a role's estimate stands for both of its peaks.
  out.bounding = model::BoundingIndex(out.roles, [](const RankRole& r) {
    const auto total = static_cast<int64_t>(r.total_bytes);
    return model::RankPeaks{total, total};
  });
  out.assumptions.push_back(
      m.family == Family::kGpt2
          ? "activations by Korthikanti et al.'s per-layer formulas (16-bit; doubled in fp32), "
            "one tensor per term, with a fused GELU (Hugging Face's gelu_new keeps 3 more "
            "ffn-wide tensors per layer: the single-GPU prediction counts them)"
          : "activations by Korthikanti et al.'s per-layer count for a LLaMA-style layer (16-bit; "
            "doubled in fp32): the norms' and projections' inputs, q, k, v (grouped KV heads as "
            "wide as they are) and the attention output, SwiGLU's four ffn-wide tensors, no "
            "dropout; one tensor per term (Hugging Face's LlamaRMSNorm keeps an fp32 copy of "
            "each norm's input too, 8 s b h per layer: the single-GPU prediction counts it)");
  if (s.optimizer.offload) {
    out.assumptions.push_back(
        "the optimizer on the host (--offload-optimizer, as DeepSpeed's offload_optimizer and "
        "Megatron-Core's --optimizer-cpu-offload run it): each rank's optimizer shard (sharded "
        "over data parallelism from ZeRO-1) as fp32 copies of its weights and gradients and "
        "fp32 states in pinned host memory (the host column, not in the total); no optimizer "
        "state or step temporaries on the GPU, whose gradients stay as the ZeRO stage holds "
        "them (DeepSpeed's ZeRO-Offload drops each reduced partition once copied: not "
        "modelled)");
  }
  if (s.checkpointing) {
    out.assumptions.push_back(fmt::format(
        "activation checkpointing: {}; when backward reaches a checkpointed layer its forward "
        "runs again and the layer's whole saved set, less what was kept, is alive through that "
        "layer's backward (in peak alloc and reserved; the activations column is what is kept "
        "from forward to backward)",
        s.checkpoint_ops
            ? "op-level selective, as torchtitan's policy runs it: each layer keeps its input, "
              "the outputs of its 1st, 3rd, ... aten.mm (a linear with a bias is an addmm, not "
              "counted), the attention kernel's output, log-sum-exp and RNG state, and under "
              "--sp the reduce-scatters' outputs"
            : "each checkpointed layer keeps its input"));
  }
  const bool torch_ddp =
      l.data_parallel_impl == model::DataParallelImpl::kTorch && zero == 0 && l.dp * l.cp >= 2;
  out.assumptions.push_back(fmt::format(
      "each role's step placed by the allocator model: weights and optimizer state per "
      "parameter, {}, the state from the first step and the step's temporaries as torch.optim "
      "makes them ({}), the schedule's micro-batches in order; not modelled: backward's "
      "temporaries, NCCL's streams",
      torch_ddp ? "PyTorch DDP's gradient buckets from construction (gradient_as_bucket_view "
                  "false) and each layer's .grad from its first backward of a step to the next "
                  "step's zero_grad(set_to_none=True)"
      : (l.TorchPipeline() ||
         (l.tensor_parallel_impl == model::TensorParallelImpl::kTorch && l.tp > 1)) &&
              zero == 0 && l.dp * l.cp == 1
          ? "each layer's .grad from its first backward of a step to the next step's "
            "zero_grad(set_to_none=True) (torch's pipeline stages or DTensor's TP without data "
            "parallelism: no gradient buffer)"
          : "gradients in one contiguous buffer per model chunk (Megatron-Core's)",
      s.optimizer.states != StateFormat::kNative
          ? "quantised states, codes and scales per tensor as bitsandbytes or torchao make them, "
            "small tensors' states unquantised; one fused kernel per parameter: none"
      : s.optimizer.impl == OptimizerImpl::kFused   ? "fused: none"
      : s.optimizer.impl == OptimizerImpl::kForeach ? "foreach: every exp_avg_sq's root at once"
                                                    : "for-loop: one parameter's at a time"));
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed && zero < 3) {
    out.assumptions.push_back(fmt::format(
        "DeepSpeed ZeRO-{}: contiguous_gradients (its default): {} of reduce_bucket_size = {} "
        "elements in the weights' dtype, {}; the gradients and optimizer state as ZeRO-{} "
        "shards them; its per-parameter .grad copies before they reach the bucket are not "
        "modelled",
        zero, l.overlap_comm && l.pp < 2 ? "two flat buffers (overlap_comm)" : "one flat buffer",
        l.reduce_bucket_elements,
        l.pp < 2 ? "allocated as each backward starts and freed as its reduction ends"
                 : "allocated once per step for the reduction after the last backward "
                   "(reduce_gradients(pipeline_parallel=True))",
        zero));
  } else if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed) {
    out.assumptions.push_back(fmt::format(
        "DeepSpeed ZeRO-3 (stage3.py, contiguous_gradients): a reduce bucket of "
        "reduce_bucket_size = {} elements allocated with the optimizer and kept; each unit (a "
        "layer, the embedding, the head) gathered for its forward and again for its backward and "
        "released after, with up to stage3_prefetch_bucket_size = {} elements of the next "
        "gathered ahead; stage3_max_live_parameters and max_reuse_distance (which may keep more "
        "gathered) are not modelled",
        l.reduce_bucket_elements, l.prefetch_bucket_elements));
  }
  if (l.tensor_parallel_impl == model::TensorParallelImpl::kTorch && l.tp > 1) {
    out.assumptions.push_back(fmt::format(
        "tensor parallelism as DTensor's plans run it (parallelize_module, torchtitan's): {}{}",
        l.sequence_parallel ? "under sequence parallelism each column-parallel projection "
                              "saves its all-gathered (full-sequence) input; "
                            : "",
        l.loss_parallel ? "the logits kept sharded by vocabulary (Shard(-1)) under loss_parallel()"
                        : "the head's logits gathered whole to every TP rank "
                          "(output_layouts=Replicate()) and torch's cross-entropy on them"));
  }
  if (l.TorchPipeline()) {
    out.assumptions.push_back(fmt::format(
        "pipeline as torch.distributed.pipelining runs {}: one receive buffer per "
        "micro-batch and direction kept for the whole run (p2p buffers), each micro-batch's "
        "stage output kept to its backward, and the last stage's outputs (the logits) kept {}; "
        "the loss as F.cross_entropy ({})",
        interleaved ? fmt::format("ScheduleInterleaved1F1B ({} stages per rank, rank r holding "
                                  "stages r, r + {}, ...; rounds of {} micro-batches)",
                                  v, l.pp, l.InterleavedRound())
        : l.schedule == PipelineSchedule::kGPipe
            ? std::string("ScheduleGPipe (every forward, then every backward)")
            : std::string("Schedule1F1B"),
        l.pipeline_return_outputs
            ? "to the step's end (schedule.step(return_outputs=True), the default)"
            : "to their backward only (schedule.step(return_outputs=False))",
        s.precision.autocast
            ? "under autocast: the log-softmax in the autocast dtype and nll_loss's fp32 copy of "
              "it, in backward that copy's fp32 gradient, then two in the autocast dtype"
            : "fp32 log-softmax, two fp32 gradients in backward"));
  }
  if (m.experts > 0) {
    out.assumptions.push_back(fmt::format(
        "experts' activations: every token's top-k experts at {}, and the router's fp32 logits",
        l.capacity_factor > 0 ? fmt::format("capacity factor {:g}", l.capacity_factor)
                              : std::string("the average load (dropless)")));
  }
  if (zero >= 2 && zero_group >= 2 && l.data_parallel_impl != model::DataParallelImpl::kDeepSpeed) {
    out.assumptions.push_back(
        zero == 2 ? "ZeRO-2: each unit's gradients unsharded for its reduce-scatter in backward "
                    "(a layer, the embedding or the head, as FSDP2 wraps them)"
        : l.ReshardAfterForward()
            ? "ZeRO-3 as FSDP2: each unit (a layer, the embedding, the head) all-gathered in "
              "forward and again in backward with the next one prefetched, its gradients "
              "unsharded for the reduce-scatter"
            : "ZeRO-3 as FSDP2 without resharding after forward (torchtitan's choice under "
              "pipeline parallelism): each unit gathered at its first forward of the step and "
              "kept to the step's last backward, its gradients unsharded for the "
              "reduce-scatter");
  }
  if (l.sequence_parallel || l.cp > 1 || (m.experts > 0 && l.ep > 1)) {
    out.assumptions.push_back(
        "communication: the largest buffer of a layer (SP's all-gathered input, CP's K/V chunks "
        "in flight, MoE's all-to-all tokens sent and received), once; TP's all-reduces run in "
        "place; NCCL's own buffers are outside the allocator (--nccl-memory)");
  }
  if (m.vocab % l.tp != 0) {
    out.assumptions.push_back(
        fmt::format("the vocabulary of {} padded to {} for --tp {}", m.vocab, vocab * l.tp, l.tp));
  }
  return out;
}

LayoutFit FitLayout(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& base,
                    uint64_t capacity, uint64_t world) {
  LayoutFit fit;
  uint64_t best_size = 0, best_bytes = 0;
  for (uint64_t tp = 1; tp <= 64 && tp <= m.heads; tp *= 2) {
    for (uint64_t pp = 1; pp <= std::min<uint64_t>(m.layers, 256); ++pp) {
      ParallelLayout l = base;
      l.tp = tp;
      l.pp = pp;
      if (world > 0) {
        if (world % (tp * pp * l.cp) != 0) continue;
        l.dp = world / (tp * pp * l.cp);
      }
      if (l.sequence_parallel && tp < 2) l.sequence_parallel = false;
      auto p = PredictParallel(m, s, l);
      if (!p.ok()) continue;
      ++fit.tried;
      const uint64_t need = p->roles[p->bounding].total_bytes;
      const uint64_t size = tp * pp;
      const bool fits = need <= capacity;
      if (fits && (!fit.found || size < best_size)) {
        fit.found = true;
        best_size = size;
        fit.best = std::move(*p);
      } else if (!fit.found && (fit.tried == 1 || need < best_bytes)) {
        best_bytes = need;
        fit.best = std::move(*p);
      }
      if (fits) break;  // a larger PP at this TP only makes the layout larger
    }
  }
  return fit;
}

}  // namespace vramscope::predict
