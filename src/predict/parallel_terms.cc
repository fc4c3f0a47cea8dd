#include "predict/parallel_terms.h"

#include <algorithm>
#include <cmath>

#include "predict/quantised_states.h"

namespace vramscope::predict::parallel_terms {

namespace {

// Multi-head latent attention on one TP rank, as Megatron-Core's MLASelfAttention splits it:
// the down projections (q's, and k/v's with the shared rotary key) and their RMSNorms
// duplicated on every rank, the up projections column-parallel by heads, the output projection
// row-parallel.
// DeepSeek's latent attention on one TP rank (Megatron-Core's MLASelfAttention): the down
// projections and their norms duplicated, the up projections column-parallel, the output
// row-parallel.
void AddMlaTensors(const ModelSpec& m, uint64_t t, std::vector<LayerTensor>& out) {
  const uint64_t h = m.hidden, heads = m.heads / t;
  const uint64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.q_lora_rank > 0) {
    out.push_back({"self_attn.q_a_proj.weight", h * m.q_lora_rank, false});
    out.push_back({"self_attn.q_a_layernorm.weight", m.q_lora_rank, false});
    out.push_back({"self_attn.q_b_proj.weight", m.q_lora_rank * heads * qk, false});
  } else {
    out.push_back({"self_attn.q_proj.weight", h * heads * qk, false});
  }
  out.push_back(
      {"self_attn.kv_a_proj_with_mqa.weight", h * (m.kv_lora_rank + m.qk_rope_head_dim), false});
  out.push_back({"self_attn.kv_a_layernorm.weight", m.kv_lora_rank, false});
  out.push_back({"self_attn.kv_b_proj.weight",
                 m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim), false});
  out.push_back({"self_attn.o_proj.weight", heads * m.v_head_dim * h, false});
}

}  // namespace

std::vector<LayerTensor> LayerTensors(const ModelSpec& m, const ParallelLayout& l, bool moe) {
  const uint64_t t = l.tp, h = m.hidden;
  std::vector<LayerTensor> out;
  if (m.family == Family::kGpt2) {
    // ln_1, ln_2 (weight and bias, replicated); c_attn [h, 3h] and c_fc [h, ffn] column-parallel
    // with their biases; the two c_proj row-parallel, their biases replicated.
    const uint64_t ffn = m.intermediate / t;
    out = {{"ln_1.weight", h, false},
           {"ln_1.bias", h, false},
           {"attn.c_attn.weight", h * 3 * h / t, false},
           {"attn.c_attn.bias", 3 * h / t, false},
           {"attn.c_proj.weight", h * h / t, false},
           {"attn.c_proj.bias", h, false},
           {"ln_2.weight", h, false},
           {"ln_2.bias", h, false},
           {"mlp.c_fc.weight", h * ffn, false},
           {"mlp.c_fc.bias", ffn, false},
           {"mlp.c_proj.weight", ffn * h, false},
           {"mlp.c_proj.bias", h, false}};
    return out;
  }
  out.push_back({"input_layernorm.weight", h, false});
  if (m.Mla()) {
    AddMlaTensors(m, t, out);
  } else {
    const uint64_t d = h / m.heads;
    const uint64_t q = m.heads / t * d;
    // KV heads split by TP; when TP exceeds them each rank keeps one (Megatron replicates them).
    const uint64_t kv = std::max<uint64_t>(1, m.kv_heads / t) * d;
    out.push_back({"self_attn.q_proj.weight", h * q, false});
    if (m.qkv_bias) out.push_back({"self_attn.q_proj.bias", q, false});
    out.push_back({"self_attn.k_proj.weight", h * kv, false});
    if (m.qkv_bias) out.push_back({"self_attn.k_proj.bias", kv, false});
    out.push_back({"self_attn.v_proj.weight", h * kv, false});
    if (m.qkv_bias) out.push_back({"self_attn.v_proj.bias", kv, false});
    out.push_back({"self_attn.o_proj.weight", q * h, false});
  }
  out.push_back({"post_attention_layernorm.weight", h, false});
  if (!moe) {
    const uint64_t ffn = m.intermediate / t;
    out.push_back({"mlp.gate_proj.weight", h * ffn, false});
    if (m.mlp_bias) out.push_back({"mlp.gate_proj.bias", ffn, false});
    out.push_back({"mlp.up_proj.weight", h * ffn, false});
    if (m.mlp_bias) out.push_back({"mlp.up_proj.bias", ffn, false});
    out.push_back({"mlp.down_proj.weight", ffn * h, false});
    if (m.mlp_bias) out.push_back({"mlp.down_proj.bias", h, false});
    return out;
  }
  out.push_back({"mlp.gate.weight", h * m.experts, false});  // the router, replicated
  if (m.shared_expert_intermediate > 0) {
    const uint64_t shared = m.shared_expert_intermediate / t;
    out.push_back({"mlp.shared_expert.gate_proj.weight", h * shared, false});
    out.push_back({"mlp.shared_expert.up_proj.weight", h * shared, false});
    out.push_back({"mlp.shared_expert.down_proj.weight", shared * h, false});
    if (m.shared_expert_gate) out.push_back({"mlp.shared_expert_gate.weight", h, false});
  }
  // The rank's experts as grouped weights, one tensor per projection (torchtitan's
  // GroupedExperts, Megatron-Core's grouped GEMM).
  const uint64_t local = m.experts / l.ep * h * (m.expert_intermediate / l.Etp());
  out.push_back({"mlp.experts.w1", local, true});
  out.push_back({"mlp.experts.w3", local, true});
  out.push_back({"mlp.experts.w2", local, true});
  return out;
}

Held LayerParameters(const ModelSpec& m, const ParallelLayout& l, bool moe) {
  Held held;
  for (const LayerTensor& t : LayerTensors(m, l, moe))
    (t.expert ? held.experts : held.dense) += t.elements;
  return held;
}

std::vector<LayerTensor> EmbeddingTensors(const ModelSpec& m, const ParallelLayout& l) {
  std::vector<LayerTensor> out = {{"embed_tokens.weight", VocabShard(m, l.tp) * m.hidden, false}};
  if (m.family == Family::kGpt2) out.push_back({"wpe.weight", m.max_positions * m.hidden, false});
  return out;
}

std::vector<LayerTensor> HeadTensors(const ModelSpec& m, const ParallelLayout& l) {
  std::vector<LayerTensor> out = {{"norm.weight", m.hidden, false}};
  if (m.family == Family::kGpt2) out.push_back({"norm.bias", m.hidden, false});
  if (!m.tie_embeddings || l.pp > 1) {
    out.push_back({"lm_head.weight", VocabShard(m, l.tp) * m.hidden, false});
  }
  return out;
}

// Activation bytes of one layer and micro-batch (Korthikanti et al.; see the header); `moe`: a
// mixture-of-experts layer.
double LayerActivationBytes(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                            uint64_t seq, uint64_t layer) {
  double bytes = 0;
  for (const ActivationTerm& t : LayerActivationTerms(m, s, l, seq, layer)) bytes += t.bytes;
  return bytes;
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
Communication LargestCommunicationBuffer(const ModelSpec& m, const TrainingSetup& s,
                                         const ParallelLayout& l, uint64_t seq, bool moe) {
  const uint64_t a = SixteenBitActivations(s) ? 2 : 4, sb = seq * s.batch, t = l.tp;
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

uint64_t QuantisedOptimizerBytes(const TrainingSetup& s, const std::vector<LayerTensor>& tensors,
                                 const ZeroGroups& groups, int zero) {
  const StateFormat format = s.optimizer.states;
  uint64_t bytes = 0;
  for (const QuantisedState& q : SharedQuantisationMaps(format)) bytes += q.bytes;
  const uint64_t e = ElementSize(s.precision.param);
  for (const LayerTensor& t : tensors) {
    const uint64_t n = Sharded(t.elements, t.expert ? groups.experts : groups.dense, zero, 1);
    for (const QuantisedState& q : QuantisedAdamStates(format, n, n * e)) bytes += q.bytes;
  }
  return bytes;
}

bool SixteenBitActivations(const TrainingSetup& s) {
  return s.precision.autocast.has_value() || ElementSize(s.precision.param) == 2;
}

namespace {

// What torchtitan's op-level selective checkpointing (selective_ac_option "op") keeps of a
// checkpointed dense layer beside its input, per rank: the outputs of the ops on its save list,
// as create_selective_checkpoint_contexts' policy decides for each call. aten.mm: every other
// call, counting from the first (the 1st, 3rd, ... of the layer); a linear with a bias runs
// aten.addmm, which is not on the list, and is not counted. The fused attention kernel's
// outputs: the output, the fp32 log-sum-exp (padded to 32 queries by the memory-efficient
// kernel, the one fp32 gets) and, for 16-bit inputs, the RNG state (cuDNN's seed and offset,
// 8 B each, when K and V have every head; flash's 16 B state and an 8 B offset otherwise).
// Under sequence parallelism, the functional reduce-scatter's outputs (the attention's and the
// MLP's output projections, a sequence shard each). DTensor's TP (--tp-impl torch, torchtitan's)
// runs the projections on the all-gathered sequence, so each mm output is the whole sequence by
// this rank's columns; the row-parallel projections' (o_proj, down_proj) are whole-width partial
// sums. `unit`: 16-bit s b h in bytes (doubled for fp32 activations), as in
// LayerActivationTerms. The layout check refuses the rest (MoE and latent-attention layers,
// Megatron's TP).
void AddOpPolicyOutputs(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                        uint64_t seq, double unit, std::vector<ActivationTerm>& terms) {
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(l.tp);
  const uint64_t d = m.hidden / m.heads;
  const uint64_t heads = m.heads / l.tp, kv_heads = std::max<uint64_t>(1, m.kv_heads / l.tp);
  const double q_width = static_cast<double>(heads * d);
  const double kv_width = static_cast<double>(kv_heads * d);
  const double ffn = static_cast<double>(m.intermediate) / t;
  const bool gpt2 = m.family == Family::kGpt2;  // Conv1D: every projection is an addmm
  struct Projection {
    double width;
    bool bias;
  };
  const Projection projections[] = {{q_width, gpt2 || m.qkv_bias},  {kv_width, gpt2 || m.qkv_bias},
                                    {kv_width, gpt2 || m.qkv_bias}, {h, gpt2},
                                    {ffn, gpt2 || m.mlp_bias},      {ffn, gpt2 || m.mlp_bias},
                                    {h, gpt2 || m.mlp_bias}};
  double kept_mm = 0;
  int mm_calls = 0;
  for (const Projection& p : projections) {
    if (!p.bias && ++mm_calls % 2 == 1) kept_mm += 2 * p.width / h;
  }
  if (kept_mm > 0)
    terms.push_back({"outputs of the 1st, 3rd, ... mm (op-level policy)", kept_mm * unit});
  if (m.attention != "eager") {
    const bool fp32 = ActivationElementSize(s) == 4;
    const double batch_heads = static_cast<double>(s.batch * heads);
    const double lse_seq = static_cast<double>(fp32 ? (seq + 31) / 32 * 32 : seq);
    const bool cudnn = kv_heads == heads && d <= 128 && d % 8 == 0;
    const double rng = fp32 ? 0 : cudnn ? 16 : 24;
    terms.push_back({"attention's output (op-level policy)", 2 * q_width / h * unit});
    terms.push_back({"attention's log-sum-exp and RNG state (op-level policy)",
                     batch_heads * lse_seq * 4 + rng});
  }
  if (l.sequence_parallel && l.tp > 1) {
    terms.push_back({"reduce-scatter outputs (op-level policy)", 2 * 2 / t * unit});
  }
}

}  // namespace

std::vector<ActivationTerm> LayerActivationTerms(const ModelSpec& m, const TrainingSetup& s,
                                                 const ParallelLayout& l, uint64_t seq,
                                                 uint64_t layer) {
  const bool moe = m.MoeLayer(layer);
  // Units of 16-bit s b h (fp32 activations double them); s is the sequence over CP.
  const double t = static_cast<double>(l.tp), h = static_cast<double>(m.hidden);
  const double unit = static_cast<double>(seq) * static_cast<double>(s.batch) * h *
                      (SixteenBitActivations(s) ? 1.0 : 2.0);
  const double q = l.sequence_parallel ? 1.0 / t : 1.0;  // what SP splits of the replicated part
  // What the column-parallel projections save of their input: under SP, Megatron's the
  // sequence shard (it gathers again in backward), DTensor's the all-gathered whole.
  const double gathered = l.tensor_parallel_impl == model::TensorParallelImpl::kTorch ? 1.0 : q;
  std::vector<ActivationTerm> terms;
  auto add = [&](const char* what, double coefficient) {
    if (coefficient > 0) terms.push_back({what, coefficient * unit});
  };
  if (s.Checkpointed(layer)) {
    add("layer input (checkpointed)", 2 * q);
    if (s.checkpoint_ops) AddOpPolicyOutputs(m, s, l, seq, unit, terms);
    return terms;
  }
  const bool gpt2 = m.family == Family::kGpt2;
  // GPT-2 keeps a dropout mask after attention and after the MLP (1 byte each) when its
  // resid_pdrop is above 0 (F.dropout with p = 0 returns its input: no mask); LLaMA-style
  // decoders train without dropout.
  const double dropout_mask = gpt2 && m.dropout > 0 ? q : 0;
  const bool fused = m.attention != "eager";
  const double heads = static_cast<double>(m.heads);
  // The scores' 5 a s / h (softmax output 2, its dropout mask 1, the dropped-out probabilities
  // 2; the softmax output alone without attention dropout), a = this rank's heads; gone with
  // fused attention (SDPA, flash) or selective recomputation.
  const double attention =
      fused || l.selective_recompute ? 0 : 5.0 * heads / t * static_cast<double>(seq) / h;
  const double attention_dropout = m.attention_dropout > 0 ? 1.0 : 0.0;
  // What attention saves of its own, per rank: q and k for the scores (after the rotary
  // embedding), v, and the output projection's input. Multi-head attention: 2 x 4 h / t. With
  // grouped KV heads, k and v are the rank's KV heads wide (one each when TP exceeds them). With
  // latent attention, q and k of heads x (nope + rope) and v and the output of heads x v, and
  // what is not split: the RMSNorms' inputs and the up projections' inputs of the two low-rank
  // latents, and the shared rotary key.
  double qk, vo, latent_q = 0, latent_kv = 0;
  if (m.Mla()) {
    qk = 4.0 * heads * static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim) / h / t;
    vo = 4.0 * heads * static_cast<double>(m.v_head_dim) / h / t;
    latent_q = 4.0 * static_cast<double>(m.q_lora_rank) / h;
    latent_kv = (4.0 * static_cast<double>(m.kv_lora_rank) +
                 2.0 * static_cast<double>(m.qk_rope_head_dim)) /
                h;
  } else {
    const double d = h / heads;
    const double q_width = heads / t * d;
    const double kv_width = static_cast<double>(std::max<uint64_t>(1, m.kv_heads / l.tp)) * d;
    qk = 2.0 * (q_width + kv_width) / h;
    vo = 2.0 * (kv_width + q_width) / h;
  }
  // The MLP's saved tensors, per rank. GPT-2's GELU MLP (Korthikanti's count): the activation's
  // input and the second linear's input, 2 x 2 ffn / h. A SwiGLU MLP (LLaMA, the experts):
  // the gate's and the up projection's outputs, the activation's output and its product with
  // the up projection (the down projection's input), 4 x 2 ffn / h, as PyTorch's eager autograd
  // saves them.
  const double mlp_tensors = gpt2 ? 2.0 : 4.0;
  // The norms' inputs are the residual stream's (fp32 under autocast with fp32 weights); what
  // the projections save is autocast's cast of the norms' outputs.
  const double residual = static_cast<double>(ResidualElementSize(s, l)) /
                          static_cast<double>(ActivationElementSize(s));
  add("input norm's input", 2 * q * residual);
  add("attention's input (q/k/v projections)", 2 * gathered);
  add("latent q (its norm and up projection's inputs)", latent_q);
  add("latent k/v and the shared rotary key", latent_kv);
  add("q and k", qk);
  add("attention scores (softmax output)", attention * 2 / 5);
  add("attention dropout mask", attention_dropout * attention / 5);
  add("attention probabilities after dropout", attention_dropout * attention * 2 / 5);
  add("v and the output projection's input", vo);
  add("attention output's dropout mask", dropout_mask);
  add("post-attention norm's input", 2 * q * residual);
  add("MLP's input", 2 * gathered);
  if (!moe) {
    const double mlp = mlp_tensors * 2.0 * static_cast<double>(m.intermediate) / h / t;
    if (gpt2) {
      add("MLP's up projection output", mlp / 2);
      add("MLP's activation output", mlp / 2);
    } else {  // SwiGLU's four tensors, each its own allocation (as the allocator sees them)
      add("MLP's gate output", mlp / 4);
      add("MLP's up output", mlp / 4);
      add("MLP's activation output", mlp / 4);
      add("MLP's activation output times the up output", mlp / 4);
    }
  } else {
    const double k = static_cast<double>(m.experts_per_token) *
                     (l.capacity_factor > 0 ? l.capacity_factor : 1.0);
    // The router's fp32 logits, s x b x experts: 2 E / h in units of 16-bit s b h.
    add("router logits (fp32)", 2.0 * static_cast<double>(m.experts) / h * q);
    const double experts = mlp_tensors * 2.0 * k * static_cast<double>(m.expert_intermediate) / h /
                           static_cast<double>(l.Etp());
    add("experts' gate and up outputs", experts / 2);
    add("experts' activation outputs and products", experts / 2);
    const double shared =
        mlp_tensors * 2.0 * static_cast<double>(m.shared_expert_intermediate) / h / t;
    add("shared expert's gate and up outputs", shared / 2);
    add("shared expert's activation output and product", shared / 2);
  }
  add("MLP output's dropout mask", dropout_mask);
  return terms;
}

int ZeroStage(const TrainingSetup& s) {
  switch (s.zero) {
    case ZeroMode::kNone:
      return 0;
    case ZeroMode::kZero1:
      return 1;
    case ZeroMode::kZero2:
      return 2;
    case ZeroMode::kZero3:
    case ZeroMode::kFsdp:
      return 3;
  }
  return 0;
}

ZeroGroups ZeroGroupsOf(const ParallelLayout& l) {
  return {l.DpShard() * l.cp, l.DpShard() * l.cp * l.tp / (l.ep * l.Etp())};
}

uint64_t EmbeddingElements(const ModelSpec& m, const ParallelLayout& l) {
  uint64_t n = 0;
  for (const LayerTensor& t : EmbeddingTensors(m, l)) n += t.elements;
  return n;
}

uint64_t HeadElements(const ModelSpec& m, const ParallelLayout& l) {
  uint64_t n = 0;
  for (const LayerTensor& t : HeadTensors(m, l)) n += t.elements;
  return n;
}

std::vector<uint64_t> StageUnits(const ModelSpec& m, const ParallelLayout& l, uint64_t first_layer,
                                 uint64_t layers, bool embedding, bool head) {
  std::vector<uint64_t> units;
  if (embedding) units.push_back(EmbeddingElements(m, l));
  const Held dense = LayerParameters(m, l, false), moe = LayerParameters(m, l, true);
  for (uint64_t i = first_layer; i < first_layer + layers; ++i) {
    units.push_back(m.MoeLayer(i) ? moe.dense + moe.experts : dense.dense + dense.experts);
  }
  if (head) units.push_back(HeadElements(m, l));
  return units;
}

DataParallelBuffers DataParallelBuffersOf(const TrainingSetup& s, const ParallelLayout& l,
                                          const std::vector<uint64_t>& units, uint64_t zero_group) {
  const int zero = ZeroStage(s);
  const uint64_t element = ElementSize(s.precision.param);
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed && (zero == 1 || zero == 2)) {
    const uint64_t buffers = l.overlap_comm && l.pp < 2 ? 2 : 1;
    return {buffers * l.reduce_bucket_elements * element,
            buffers == 2 ? "DeepSpeed's two reduce buckets (overlap_comm), in backward"
                         : "DeepSpeed's reduce bucket, in backward"};
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed && zero == 3) {
    // stage3.py: its reduce bucket (ipg) allocated with the optimizer and kept; each module's
    // parameters gathered for its use and released, with up to stage3_prefetch_bucket_size
    // elements of the next gathered ahead (in forward order, then backward's).
    uint64_t most = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      const uint64_t next = i + 1 < units.size() ? units[i + 1] : 0;
      const uint64_t previous = i > 0 ? units[i - 1] : 0;
      most = std::max({most, units[i] + std::min(next, l.prefetch_bucket_elements),
                       units[i] + std::min(previous, l.prefetch_bucket_elements)});
    }
    return {(most + l.reduce_bucket_elements) * element,
            "DeepSpeed ZeRO-3: its reduce bucket (kept) and a module gathered with the next "
            "prefetched up to stage3_prefetch_bucket_size"};
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kTorch && zero == 0) {
    if (l.dp * l.cp < 2) return {};
    uint64_t all = 0;
    for (const uint64_t u : units) all += u;
    return {all * element, "DDP's gradient buckets (beside the parameters' .grad)"};
  }
  if (zero < 2 || zero_group < 2 || units.empty()) return {};
  // FSDP2's mixed precision: gathered in 16-bit, reduce-scattered in fp32.
  const uint64_t gathered = l.fsdp_mixed_precision ? 2 : element;
  const uint64_t reduced = l.fsdp_mixed_precision ? 4 : element;
  if (zero == 3 && !l.ReshardAfterForward()) {
    uint64_t all = 0, largest = 0;
    for (const uint64_t u : units) {
      all += u;
      largest = std::max(largest, u);
    }
    if (l.TorchPipeline()) {
      // torch.distributed.pipelining runs the backwards with gradient sync off: the unsharded
      // gradients accumulate through the step, reduce-scattered after the last backward.
      return {all * gathered * 2 + largest * reduced,
              "ZeRO-3 units kept gathered, their unsharded gradients accumulated through the "
              "step (torch.distributed.pipelining: no gradient sync until the last backward), "
              "and reduce-scatter input"};
    }
    return {all * gathered + largest * reduced,
            "ZeRO-3 units kept gathered (no reshard after forward) and reduce-scatter input"};
  }
  uint64_t most = 0;  // bytes
  for (size_t i = 0; i < units.size(); ++i) {
    if (zero == 2) {
      most = std::max(most, units[i] * element);
      continue;
    }
    // Forward: unit i gathered, unit i + 1 prefetched. Backward: unit i gathered again, unit
    // i - 1 prefetched, and unit i's gradients unsharded for the reduce-scatter.
    const uint64_t next = i + 1 < units.size() ? units[i + 1] : 0;
    const uint64_t previous = i > 0 ? units[i - 1] : 0;
    most = std::max({most, (units[i] + next) * gathered,
                     (units[i] + previous) * gathered + units[i] * reduced});
  }
  if (zero == 2) return {most, "ZeRO-2 reduce-scatter input"};
  return {most, l.fsdp_mixed_precision
                    ? "ZeRO-3 all-gathers in 16-bit (unit and prefetch) and fp32 reduce-scatter "
                      "input"
                    : "ZeRO-3 all-gathers (unit and prefetch) and reduce-scatter input"};
}

std::vector<uint64_t> StageLayers(const ModelSpec& m, const ParallelLayout& l) {
  // As Llama 3 trained its 126 layers on 16 stages: 7 on the first and last, 8 on the others.
  std::vector<uint64_t> stage_layers(l.pp, CeilDiv(m.layers, l.pp));
  for (uint64_t excess = l.pp * stage_layers[0] - m.layers, k = 0; excess > 0; --excess, ++k) {
    const uint64_t stage = k % 2 == 0 ? k / 2 : l.pp - 1 - k / 2;
    --stage_layers[stage];
  }
  return stage_layers;
}

}  // namespace vramscope::predict::parallel_terms
