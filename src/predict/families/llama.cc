// LLaMA, Mistral and Qwen2: transformers' LlamaForCausalLM and its relatives, written as their
// forward pass.
#include <fmt/format.h>

#include "predict/compiled_step.h"
#include "predict/families/family_common.h"

namespace vramscope::predict::families {

namespace {

class Llama : public Model {
 public:
  Llama(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    const bool base_trainable = s_.lora_rank == 0;
    const uint64_t h = m_.hidden, d = h / m_.heads, kv = m_.kv_heads * d;
    {
      Scope mdl(ops.sim(), "model");
      embed_ = ops.MakeWeight("embed_tokens.weight", m_.vocab * h, base_trainable);
      for (uint64_t i = 0; i < m_.layers; ++i) {
        Scope l(ops.sim(), fmt::format("layers.{}", i));
        Layer layer;
        {
          Scope a(ops.sim(), "self_attn");
          layer.q = MakeAdapted(ops, "q_proj", h, h, m_.qkv_bias, s_, true);
          layer.k = MakeAdapted(ops, "k_proj", h, kv, m_.qkv_bias, s_, false);
          layer.v = MakeAdapted(ops, "v_proj", h, kv, m_.qkv_bias, s_, true);
          layer.o = MakeAdapted(ops, "o_proj", h, h, false, s_, false);
        }
        {
          Scope f(ops.sim(), "mlp");
          layer.gate = MakeAdapted(ops, "gate_proj", h, m_.intermediate, m_.mlp_bias, s_, false);
          layer.up = MakeAdapted(ops, "up_proj", h, m_.intermediate, m_.mlp_bias, s_, false);
          layer.down = MakeAdapted(ops, "down_proj", m_.intermediate, h, m_.mlp_bias, s_, false);
        }
        {
          Scope n(ops.sim(), "input_layernorm");
          layer.norm1 = ops.MakeWeight("weight", h, base_trainable);
        }
        {
          Scope n(ops.sim(), "post_attention_layernorm");
          layer.norm2 = ops.MakeWeight("weight", h, base_trainable);
        }
        layers_.push_back(layer);
      }
      {
        Scope n(ops.sim(), "norm");
        norm_ = ops.MakeWeight("weight", h, base_trainable);
      }
      // The rotary embedding's inverse frequencies (two fp32 buffers of d/2).
      Scope r(ops.sim(), "rotary_emb");
      ops.MakeBuffer("inv_freq", d / 2);
      ops.MakeBuffer("original_inv_freq", d / 2);
    }
    if (m_.tie_embeddings) {
      head_.w = embed_;
    } else {
      Scope l(ops.sim(), "lm_head");
      head_.w = ops.MakeWeight("weight", m_.vocab * h, base_trainable);
    }
    head_.in = h;
    head_.out = m_.vocab;
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    const uint64_t n = s_.batch * Seq();
    std::vector<TensorId> in = {ops.Input("input_ids", n, DType::kI64),
                                ops.Input("labels", n, DType::kI64)};
    // DataCollatorWithFlattening hands the restarting positions to the model.
    if (!s_.pack.empty()) in.push_back(ops.Input("position_ids", n, DType::kI64));
    return in;
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    if (s_.compile) {
      // torch.compile(model): the whole forward and loss one graph (compiled_step.h).
      const CompiledOutputs compiled = RunCompiledStep(sim, m_, s_);
      StepTensors out;
      out.output = compiled.output;
      out.loss = compiled.loss;
      out.held_to_step_end = compiled.held_to_step_end;
      return out;
    }
    const uint64_t b = s_.batch, s = Seq(), h = m_.hidden, rows = b * s, d = h / m_.heads;
    TensorId x;
    {
      Scope mdl(sim, "model");
      {
        Scope e(sim, "embed_tokens");
        x = ops.Embedding(in[0], embed_, rows, h);
      }
      if (!s_.pack.empty()) mask_ = PackedMask(ops, s);
      // Rotary position embeddings, once per forward: cos and sin [1, s, d] in the compute
      // dtype (computed in fp32 first).
      const TensorId freqs = ops.New(s * d / 2, DType::kF32, "aten::matmul");
      const TensorId emb = ops.New(s * d, DType::kF32, "aten::cat");
      sim.Free(freqs);
      // emb.cos() * attention_scaling (and sin): the products are what the layers save.
      TensorId cos = ops.New(s * d, DType::kF32, "aten::cos");
      TensorId cos_scaled = ops.New(s * d, DType::kF32, "aten::mul");
      sim.Free(cos);
      TensorId sin = ops.New(s * d, DType::kF32, "aten::sin");
      TensorId sin_scaled = ops.New(s * d, DType::kF32, "aten::mul");
      sim.Free(sin);
      sim.Free(emb);
      cos = cos_scaled;
      sin = sin_scaled;
      // .to(x.dtype): the hidden states' dtype (fp32 under autocast, bf16 in pure bf16).
      if (ops.Dtype(x) != DType::kF32) {
        const TensorId c2 = ops.New(s * d, ops.Dtype(x), "aten::_to_copy");
        const TensorId s2 = ops.New(s * d, ops.Dtype(x), "aten::_to_copy");
        sim.Free(cos);
        sim.Free(sin);
        cos = c2;
        sin = s2;
      }
      cos_ = cos;
      sin_ = sin;
      for (uint64_t i = 0; i < m_.layers; ++i) {
        Scope l(sim, fmt::format("layers.{}", i));
        auto block = [&, i](TensorId input) { return LayerForward(ops, layers_[i], input); };
        const TensorId y = s_.Checkpointed(i) ? ops.Checkpoint(x, block) : block(x);
        sim.Free(x);
        x = y;
      }
      sim.Free(cos);
      sim.Free(sin);
      Scope n(sim, "norm");
      const TensorId y = ops.RmsNorm(x, norm_, rows, h);
      sim.Free(x);
      x = y;
    }
    StepTensors out = CausalLmHead(ops, x, head_, b, s, s_);
    if (!s_.pack.empty()) {
      // The model drops its mask when it returns; checkpointed blocks hold it as an argument of
      // their recomputation, until backward (which runs LayerForward again, packed).
      if (s_.checkpointing) {
        out.held_for_backward.push_back(mask_);
      } else {
        sim.Free(mask_);
      }
    }
    return out;
  }

 private:
  struct Layer {
    AdaptedLinear q, k, v, o, gate, up, down;
    Weight norm1, norm2;
  };
  uint64_t Seq() const { return s_.seq ? s_.seq : m_.default_seq; }

  // A packed row's attention mask [1, 1, s, s] (bool), as transformers 5 builds it in
  // create_causal_mask (masking_utils.py) from the restarting position ids: first
  // find_packed_sequence_indices (which sample each token is in: a diff with a prepended value,
  // != 1, cumsum, and a check that there is more than one sample), then sdpa_mask over
  // broadcast index ranges: the causal rule on the remapped positions, and-ed with "same
  // sample", each an s x s boolean. Only the last one is kept.
  TensorId PackedMask(Ops& ops, uint64_t s) {
    StepSimulator& sim = ops.sim();
    const uint64_t square = s * s;
    const TensorId first = ops.New(1, DType::kI64, "aten::sub");  // position_ids[:, :1] - 1
    const TensorId prepended = ops.New(s + 1, DType::kI64, "aten::cat");
    const TensorId diff = ops.New(s, DType::kI64, "aten::sub");
    sim.Free(prepended);
    const TensorId starts = ops.New(s, DType::kBool, "aten::ne");
    const TensorId sample_of = ops.New(s, DType::kI64, "aten::cumsum");
    sim.Free(starts);
    const TensorId last = ops.New(1, DType::kBool, "aten::eq");
    const TensorId all = ops.New(1, DType::kBool, "aten::all");
    sim.Free(last);
    sim.Free(all);
    sim.Free(first);
    sim.Free(diff);
    // sdpa_mask: arange(batch), arange(1), the query and key positions (arange + offset).
    const TensorId batch_idx = ops.New(1, DType::kI64, "aten::arange");
    const TensorId head_idx = ops.New(1, DType::kI64, "aten::arange");
    auto positions = [&] {
      const TensorId range = ops.New(s, DType::kI64, "aten::arange");
      const TensorId shifted = ops.New(s, DType::kI64, "aten::add");
      sim.Free(range);
      return shifted;
    };
    const TensorId q_idx = positions();
    const TensorId kv_idx = positions();
    // and_masks: ones & causal(position_ids[q], position_ids[kv]) & same_sample(q, kv).
    const TensorId ones = ops.New(1, DType::kBool, "aten::new_ones");
    auto pairwise = [&](std::string_view compare) {
      const TensorId at_q = ops.New(s, DType::kI64, "aten::index");
      const TensorId at_kv = ops.New(s, DType::kI64, "aten::index");
      const TensorId result = ops.New(square, DType::kBool, compare);
      sim.Free(at_q);
      sim.Free(at_kv);
      return result;
    };
    const TensorId causal = pairwise("aten::le");
    const TensorId causal_and = ops.New(square, DType::kBool, "aten::bitwise_and");
    sim.Free(causal);
    sim.Free(ones);
    const TensorId same = pairwise("aten::eq");
    const TensorId mask = ops.New(square, DType::kBool, "aten::bitwise_and");
    sim.Free(same);
    sim.Free(causal_and);
    for (const TensorId t : {batch_idx, head_idx, q_idx, kv_idx, sample_of}) sim.Free(t);
    return mask;
  }

  TensorId LayerForward(Ops& ops, const Layer& layer, TensorId x) {
    StepSimulator& sim = ops.sim();
    const uint64_t b = s_.batch, s = Seq(), h = m_.hidden, rows = b * s;
    const uint64_t d = h / m_.heads;
    TensorId n1;
    {
      Scope n(sim, "input_layernorm");
      n1 = ops.RmsNorm(x, layer.norm1, rows, h);
    }
    TensorId attn;
    {
      Scope a(sim, "self_attn");
      TensorId q, k, v;
      // q and k: .view(b, s, heads, d).transpose(1, 2), whose backward copies the rotary's
      // gradient back into the projection's layout.
      auto split = [&](TensorId t) {
        const TensorId heads = ops.LayoutView(t);
        sim.Free(t);
        return heads;
      };
      // fp32 with grouped KV heads: the memory-efficient kernel refuses GQA and the others need
      // 16-bit inputs, so sdpa runs its math kernel, whose gradient of v comes back contiguous
      // in [b, kv_heads, s, d] and is copied too.
      const bool fp32 = !ops.precision().autocast && ops.precision().param == DType::kF32;
      // A packed row's mask goes to the memory-efficient kernel with K and V repeated to every
      // head (MaskedAttention); the repeat's gradient comes back contiguous in
      // [b, kv_heads, s, d], so v's is copied through the transpose too.
      const bool packed = !s_.pack.empty();
      const uint64_t n_rep = m_.heads / m_.kv_heads;
      const bool math = fp32 && m_.kv_heads != m_.heads && !packed;
      q = split(ApplyIn(ops, "q_proj", layer.q, n1, rows, s_));
      k = split(ApplyIn(ops, "k_proj", layer.k, n1, rows, s_));
      v = ApplyIn(ops, "v_proj", layer.v, n1, rows, s_);
      if (math || (packed && n_rep > 1)) v = split(v);
      const TensorId qr = ops.Rotary(q, cos_, sin_);
      sim.Free(q);
      const TensorId kr = ops.Rotary(k, cos_, sin_);
      sim.Free(k);
      TensorId merged;
      if (packed) {
        // sdpa_attention_forward with a mask: transformers asks sdpa for grouped-query
        // attention only without one, so K and V are repeated to every head first; the rotated
        // K and the V projection stay referenced until the layer returns (after o_proj).
        const TensorId kk = n_rep > 1 ? ops.RepeatKv(kr, n_rep) : kr;
        const TensorId vv = n_rep > 1 ? ops.RepeatKv(v, n_rep) : v;
        merged = ops.MaskedAttention(qr, kk, vv, b, m_.heads, s, d);
        sim.Free(qr);
        if (n_rep > 1) {
          sim.Free(kk);
          sim.Free(vv);
        }
        attn = ApplyIn(ops, "o_proj", layer.o, merged, rows, s_);
        sim.Free(merged);
        sim.Free(kr);
        sim.Free(v);
      } else {
        if (math) {
          const TensorId ctx = ops.SdpaMath(qr, kr, v, b, m_.heads, s, d, m_.attention_dropout);
          // attn_output.transpose(1, 2).contiguous(): a copy of the kernel's [b, heads, s, d]
          // output; the gradient coming back goes through the transpose with a copy too.
          const TensorId t = ops.LayoutView(ctx);
          sim.Free(ctx);
          merged = ops.Copy(t, "aten::clone");
          sim.Free(t);
        } else {
          // The fused kernels' output is laid out [b, s, heads, d]: transpose + contiguous
          // copy nothing.
          merged = ops.FusedAttention(qr, kr, v, b, m_.heads, m_.kv_heads, s, d);
        }
        sim.Free(qr);
        sim.Free(kr);
        sim.Free(v);
        attn = ApplyIn(ops, "o_proj", layer.o, merged, rows, s_);
        sim.Free(merged);
      }
    }
    sim.Free(n1);
    const TensorId r1 = ops.Add(x, attn);
    sim.Free(attn);
    TensorId n2;
    {
      Scope n(sim, "post_attention_layernorm");
      n2 = ops.RmsNorm(r1, layer.norm2, rows, h);
    }
    TensorId mlp;
    {
      Scope f(sim, "mlp");
      TensorId gate, up;
      gate = ApplyIn(ops, "gate_proj", layer.gate, n2, rows, s_);
      TensorId act;
      {
        Scope p(sim, "act_fn");
        act = ops.Silu(gate);
      }
      sim.Free(gate);
      up = ApplyIn(ops, "up_proj", layer.up, n2, rows, s_);
      const TensorId prod = ops.Mul(act, up);
      sim.Free(act);
      sim.Free(up);
      mlp = ApplyIn(ops, "down_proj", layer.down, prod, rows, s_);
      sim.Free(prod);
    }
    sim.Free(n2);
    const TensorId out = ops.Add(r1, mlp);
    sim.Free(r1);
    sim.Free(mlp);
    return out;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  TensorId cos_ = kNoTensor, sin_ = kNoTensor;  // this forward's rotary tables
  // A packed row's attention mask (PackedMask), this forward's: freed when it ends, or after
  // backward under checkpointing.
  TensorId mask_ = kNoTensor;
  Weight embed_, norm_;
  LinearWeights head_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> MakeLlama(const ModelSpec& m, const TrainingSetup& s) {
  return std::make_unique<Llama>(m, s);
}

}  // namespace vramscope::predict::families
