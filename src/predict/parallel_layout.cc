#include "predict/parallel_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/units.h"

namespace vramscope::predict {

namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The parameters of one rank, split into what ZeRO shards over DP x CP and what it shards over
// the expert-data-parallel group.
struct Held {
  uint64_t dense = 0, experts = 0;
};

// Multi-head latent attention on one TP rank, as Megatron-Core's MLASelfAttention splits it:
// the down projections (q's, and k/v's with the shared rotary key) and their RMSNorms
// duplicated on every rank, the up projections column-parallel by heads, the output projection
// row-parallel.
uint64_t MlaParameters(const ModelSpec& m, uint64_t t) {
  const uint64_t h = m.hidden, heads = m.heads / t;
  const uint64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  uint64_t n = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank +    // kv down, its norm
               m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim) +  // kv up
               heads * m.v_head_dim * h;                                       // output
  n += m.q_lora_rank > 0 ? h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * heads * qk
                         : h * heads * qk;
  return n;
}

// One decoder layer on one TP rank (experts on one EP x ETP rank); `moe`: a mixture-of-experts
// layer (DeepSeek-V3's first layers keep a dense MLP).
Held LayerParameters(const ModelSpec& m, const ParallelLayout& l, bool moe) {
  const uint64_t t = l.tp, h = m.hidden;
  Held held;
  if (m.family == Family::kGpt2) {
    // ln_1, ln_2 (weight and bias, replicated); c_attn [h, 3h] and c_fc [h, ffn] column-parallel
    // with their biases; the two c_proj row-parallel, their biases replicated.
    const uint64_t ffn = m.intermediate;
    held.dense =
        4 * h + (h * 3 * h + 3 * h) / t + (h * h) / t + h + (h * ffn + ffn) / t + (ffn * h) / t + h;
    return held;
  }
  if (m.Mla()) {
    held.dense = MlaParameters(m, t) + 2 * h;  // and the two RMSNorms
  } else {
    const uint64_t d = h / m.heads;
    const uint64_t q = m.heads / t * d;
    // KV heads split by TP; when TP exceeds them each rank keeps one (Megatron replicates them).
    const uint64_t kv = std::max<uint64_t>(1, m.kv_heads / t) * d;
    held.dense = h * q + 2 * h * kv + q * h + 2 * h;  // q, k, v, o and the two RMSNorms
    if (m.qkv_bias) held.dense += q + 2 * kv;
  }
  if (!moe) {
    const uint64_t ffn = m.intermediate / t;
    held.dense += 3 * h * ffn;
    if (m.mlp_bias) held.dense += 2 * ffn + h;
    return held;
  }
  held.dense += h * m.experts;  // the router, replicated
  if (m.shared_expert_intermediate > 0) {
    held.dense += 3 * h * (m.shared_expert_intermediate / t);
    if (m.shared_expert_gate) held.dense += h;
  }
  held.experts = m.experts / l.ep * 3 * h * (m.expert_intermediate / l.Etp());
  return held;
}

uint64_t VocabShard(const ModelSpec& m, uint64_t tp) { return CeilDiv(m.vocab, tp); }

// Activation bytes of one layer and micro-batch (Korthikanti et al.; see the header); `moe`: a
// mixture-of-experts layer.
double LayerActivationBytes(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                            uint64_t seq, bool moe) {
  const double t = static_cast<double>(l.tp), h = static_cast<double>(m.hidden);
  const double sbh = static_cast<double>(seq) * static_cast<double>(s.batch) * h;
  double bytes;
  if (s.checkpointing) {
    bytes = 2 * sbh / (l.sequence_parallel ? t : 1);
  } else {
    const bool fused = m.attention != "eager";
    const double attention = fused || l.selective_recompute ? 0
                                                            : 5.0 * static_cast<double>(m.heads) *
                                                                  static_cast<double>(seq) / h;
    double mlp;  // the MLP's part, already divided as its shards are
    if (!moe) {
      mlp = 4.0 * static_cast<double>(m.intermediate) / h / t;
    } else {
      const double k = static_cast<double>(m.experts_per_token) *
                       (l.capacity_factor > 0 ? l.capacity_factor : 1.0);
      mlp =
          4.0 * k * static_cast<double>(m.expert_intermediate) / h / static_cast<double>(l.Etp()) +
          4.0 * static_cast<double>(m.shared_expert_intermediate) / h / t +
          // The router's fp32 logits, s x b x experts: 2 E / h in units of 16-bit s b h.
          2.0 * static_cast<double>(m.experts) / h / (l.sequence_parallel ? t : 1);
    }
    // What attention saves of its own, split by TP: q and k for the scores, v, and the output
    // projection's input: 8 s b h for multi-head attention. With latent attention, q and k of
    // heads x (nope + rope) and v and the output of heads x v, and what is not split: the
    // RMSNorms' inputs and the up projections' inputs of the two low-rank latents, and the
    // shared rotary key.
    double split = 8.0, latent = 0;
    if (m.Mla()) {
      const double heads = static_cast<double>(m.heads);
      split = (4.0 * heads * static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim) +
               4.0 * heads * static_cast<double>(m.v_head_dim)) /
              h;
      latent = (4.0 * static_cast<double>(m.q_lora_rank + m.kv_lora_rank) +
                2.0 * static_cast<double>(m.qk_rope_head_dim)) /
               h;
    }
    bytes = l.sequence_parallel ? sbh * ((10.0 + split) / t + latent + mlp + attention / t)
                                : sbh * (10.0 + split / t + latent + mlp + attention / t);
  }
  const bool sixteen_bit = s.precision.autocast.has_value() || ElementSize(s.precision.param) == 2;
  return sixteen_bit ? bytes : 2 * bytes;
}

// The communication buffers of one layer, in the activations' dtype (s: the sequence on this
// rank before SP, i.e. over CP). They follow one another within a layer, so the largest is what
// a rank holds at once beside its activations:
// - SP: the all-gathered input of the column-parallel linears, s b h (Megatron gathers into one
//   global buffer, again in backward);
// - CP: ring attention's K and V chunks, the one in use and the one arriving: 2 x 2 s b x the
//   rank's K/V width;
// - MoE with EP > 1: the all-to-all's dispatched tokens sent and received, 2 x s b k c h (/ t
//   with SP: each rank routes its share of the sequence), c the capacity factor (1 dropless).
struct Communication {
  uint64_t bytes = 0;
  std::string what;
};
Communication LargestCommunicationBuffer(const ModelSpec& m, const TrainingSetup& s,
                                         const ParallelLayout& l, uint64_t seq, bool moe) {
  const bool sixteen_bit = s.precision.autocast.has_value() || ElementSize(s.precision.param) == 2;
  const uint64_t a = sixteen_bit ? 2 : 4, sb = seq * s.batch, t = l.tp;
  Communication best;
  auto consider = [&](uint64_t bytes, const char* what) {
    if (bytes > best.bytes) best = {bytes, what};
  };
  if (l.sequence_parallel) consider(sb * m.hidden * a, "SP all-gather");
  if (l.cp > 1) {
    uint64_t k_width, v_width;
    if (m.Mla()) {
      k_width = m.heads / t * (m.qk_nope_head_dim + m.qk_rope_head_dim);
      v_width = m.heads / t * m.v_head_dim;
    } else {
      k_width = v_width = std::max<uint64_t>(1, m.kv_heads / t) * (m.hidden / m.heads);
    }
    consider(2 * sb * (k_width + v_width) * a, "CP K/V chunks");
  }
  if (moe && l.ep > 1) {
    const double c = l.capacity_factor > 0 ? l.capacity_factor : 1.0;
    const double tokens = static_cast<double>(sb / (l.sequence_parallel ? t : 1)) *
                          static_cast<double>(m.experts_per_token) * c;
    consider(static_cast<uint64_t>(std::llround(2.0 * tokens * static_cast<double>(m.hidden) *
                                                static_cast<double>(a))),
             "MoE all-to-all");
  }
  return best;
}

uint64_t OptimizerBytesPerElement(const TrainingSetup& s) {
  const uint64_t e = ElementSize(s.precision.param);
  const uint64_t state = s.optimizer.master_weights ? 4 : e;
  uint64_t moments = 0;
  switch (s.optimizer.kind) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      moments = 2;
      break;
    case OptimizerKind::kMomentum:
      moments = 1;
      break;
    case OptimizerKind::kSgd:
    case OptimizerKind::kNone:
      break;
  }
  return moments * state + (s.optimizer.master_weights ? 4 : 0);
}

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
  const uint64_t seq = s.seq ? s.seq : m.default_seq;
  if (seq % l.cp != 0) {
    return UsageError(fmt::format("--cp {} does not divide the sequence {}", l.cp, seq));
  }
  if (l.sequence_parallel && l.tp < 2) return UsageError("--sp needs --tp 2 or more");
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
  // ZeRO's group: the data-parallel ranks it shards over (all of DP, or HSDP's shard group),
  // times CP; the experts' is the ranks of that group holding the same experts.
  const uint64_t zero_group = l.DpShard() * l.cp;
  const uint64_t expert_group = l.DpShard() * l.cp * l.tp / (l.ep * l.Etp());
  const Held dense_layer = LayerParameters(m, l, false), moe_layer = LayerParameters(m, l, true);
  const double dense_activation = LayerActivationBytes(m, s, l, seq, false);
  const double moe_activation = m.experts > 0 ? LayerActivationBytes(m, s, l, seq, true) : 0;
  const bool interleaved = l.schedule == PipelineSchedule::kInterleaved;
  const uint64_t v = interleaved ? l.virtual_stages : 1;
  // Stages of ceil(L / p) layers; what that overshoots is taken one layer at a time from the
  // outermost stages, first then last (the embedding's and the head's), as Llama 3 trained its
  // 126 layers on 16 stages (7 on the first and last, 8 on the others).
  std::vector<uint64_t> stage_layers(l.pp, CeilDiv(m.layers, l.pp));
  for (uint64_t excess = l.pp * stage_layers[0] - m.layers, k = 0; excess > 0; --excess, ++k) {
    const uint64_t stage = k % 2 == 0 ? k / 2 : l.pp - 1 - k / 2;
    --stage_layers[stage];
  }
  const uint64_t vocab = VocabShard(m, l.tp);
  const int zero = s.zero == ZeroMode::kNone    ? 0
                   : s.zero == ZeroMode::kZero1 ? 1
                   : s.zero == ZeroMode::kZero2 ? 2
                                                : 3;
  auto sharded = [&](uint64_t elements, uint64_t group, int from_stage) {
    return zero >= from_stage ? CeilDiv(elements, group) : elements;
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
    const double layer_activation =
        r.layers == 0 ? 0
                      : (dense_activation * static_cast<double>(dense_layers) +
                         moe_activation * static_cast<double>(moe_layers)) /
                            static_cast<double>(r.layers);  // the stage's mean per layer
    if (r.embedding) {
      held.dense += vocab * m.hidden;
      if (m.family == Family::kGpt2) held.dense += m.max_positions * m.hidden;
    }
    if (r.head) {
      held.dense += m.family == Family::kGpt2 ? 2 * m.hidden : m.hidden;  // the final norm
      // The head: its own weight, or the tied embedding held again when it is on another stage.
      if (!m.tie_embeddings || l.pp > 1) held.dense += vocab * m.hidden;
    }
    r.parameters = held.dense + held.experts;
    r.expert_parameters = held.experts;
    r.weight_bytes =
        e * (sharded(held.dense, zero_group, 3) + sharded(held.experts, expert_group, 3));
    r.gradient_bytes =
        e * (sharded(held.dense, zero_group, 2) + sharded(held.experts, expert_group, 2));
    r.optimizer_bytes = opt_per_element * (sharded(held.dense, zero_group, 1) +
                                           sharded(held.experts, expert_group, 1));
    // In flight: whole micro-batches of the stage's layers (1F1B), or model chunks of
    // L / (p v) layers (interleaved), never more than the step runs.
    double per_unit = layer_activation * static_cast<double>(r.layers);
    if (interleaved) {
      const uint64_t chunks = (l.pp - stage - 1) * 2 + (v - 1) * l.pp + 1;
      r.in_flight = std::min(chunks, l.micro_batches * v);
      per_unit = layer_activation * static_cast<double>(m.layers / (l.pp * v));
    } else {
      r.in_flight = std::min(l.micro_batches, l.pp - stage);
    }
    r.activation_bytes_per_micro_batch =
        static_cast<uint64_t>(std::llround(layer_activation * static_cast<double>(r.layers)));
    r.activation_bytes =
        static_cast<uint64_t>(std::llround(per_unit * static_cast<double>(r.in_flight)));
    if (r.head) r.logits_bytes = 2 * seq * s.batch * vocab * 4;
    const Communication comm = LargestCommunicationBuffer(m, s, l, seq, moe_layers > 0);
    r.communication_bytes = comm.bytes;
    r.communication = comm.what;
    r.total_bytes = r.weight_bytes + r.gradient_bytes + r.optimizer_bytes + r.activation_bytes +
                    r.logits_bytes + r.communication_bytes;
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
  for (size_t i = 1; i < out.roles.size(); ++i) {
    if (out.roles[i].total_bytes > out.roles[out.bounding].total_bytes) out.bounding = i;
  }
  out.assumptions.push_back(
      "activations by Korthikanti et al.'s per-layer formulas (16-bit; doubled in fp32), "
      "generalised to the MLP's width as Megatron's theoretical memory does; the allocator "
      "model is not run per role yet (no fragmentation, no reserved memory)");
  if (m.experts > 0) {
    out.assumptions.push_back(fmt::format(
        "experts' activations: every token's top-k experts at {}, and the router's fp32 logits",
        l.capacity_factor > 0 ? fmt::format("capacity factor {:g}", l.capacity_factor)
                              : std::string("the average load (dropless)")));
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
