// The built-in model families and the layer-list model, written as the forward passes of their
// reference implementations (transformers' modeling files, torchvision's ResNet) so that the
// step simulator sees the same ops, in the same order, as PyTorch would run on a GPU. Parameter
// names follow the reference implementations, so a prediction names the same tensors a capture
// does.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "predict/model_spec.h"

namespace vramscope::predict {

const char* FamilyName(Family family) {
  switch (family) {
    case Family::kGpt2:
      return "GPT-2";
    case Family::kLlama:
      return "LLaMA-style decoder";
    case Family::kBert:
      return "BERT-style encoder";
    case Family::kVit:
      return "Vision Transformer";
    case Family::kResnet:
      return "ResNet";
    case Family::kLayerList:
      return "layer list";
  }
  return "?";
}

namespace {

// RAII module scope.
class Scope {
 public:
  Scope(StepSimulator& sim, std::string_view name) : sim_(sim) { sim_.EnterModule(name); }
  ~Scope() { sim_.ExitModule(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  StepSimulator& sim_;
};

struct StepTensors {
  std::vector<TensorId> inputs;  // in the order the loop moved them to the device
  TensorId output = kNoTensor;   // what the loop keeps until the step ends
  TensorId loss = kNoTensor;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void Build(Ops& ops) = 0;
  virtual std::vector<TensorId> Inputs(Ops& ops) = 0;
  // Forward and loss; returns output and loss, each holding the loop's reference.
  virtual StepTensors Forward(Ops& ops, const std::vector<TensorId>& inputs) = 0;
};

struct LoraPair {
  LinearWeights a, b;
  bool on = false;
};

// --- transformer pieces ----------------------------------------------------------------------

struct LayerNormWeights {
  Weight w, b;
};

LayerNormWeights MakeLayerNorm(Ops& ops, std::string_view name, uint64_t hidden, bool bias = true,
                               bool trainable = true) {
  Scope s(ops.sim(), name);
  LayerNormWeights ln;
  ln.w = ops.MakeWeight("weight", hidden, trainable);
  if (bias) ln.b = ops.MakeWeight("bias", hidden, trainable);
  return ln;
}

// A linear that may carry a LoRA adapter (peft names: <name>.base_layer, lora_A.default, ...).
// The targets are peft's defaults for each architecture: q_proj and v_proj (LLaMA, Qwen2),
// c_attn (GPT-2), query and value (BERT, ViT).
struct AdaptedLinear {
  LinearWeights base;
  LoraPair lora;
};

AdaptedLinear MakeAdapted(Ops& ops, std::string_view name, uint64_t in, uint64_t out, bool bias,
                          const TrainingSetup& setup, bool lora_target) {
  AdaptedLinear l;
  const bool frozen = setup.lora_rank > 0;
  if (frozen && lora_target) {
    Scope s(ops.sim(), name);
    l.base = ops.MakeLinear("base_layer", in, out, bias, false);
    l.lora.a = ops.MakeLinear("lora_A.default", in, setup.lora_rank, false, true);
    l.lora.b = ops.MakeLinear("lora_B.default", setup.lora_rank, out, false, true);
    l.lora.on = true;
  } else {
    l.base = ops.MakeLinear(name, in, out, bias, !frozen);
  }
  return l;
}

TensorId Apply(Ops& ops, const AdaptedLinear& l, TensorId x, uint64_t rows,
               const TrainingSetup& setup) {
  if (!l.lora.on) return ops.Linear(x, l.base, rows);
  return ops.LoraLinear(x, l.base, l.lora.a, l.lora.b, rows, setup.lora_dropout);
}

// Apply inside the module scope `name` (its tensors are named after it).
TensorId ApplyIn(Ops& ops, std::string_view name, const AdaptedLinear& l, TensorId x, uint64_t rows,
                 const TrainingSetup& setup) {
  Scope scope(ops.sim(), name);
  return Apply(ops, l, x, rows, setup);
}

// The causal-LM loss of transformers (ForCausalLMLoss): logits upcast to fp32, labels padded
// and shifted, cross-entropy over every position.
TensorId CausalLmLoss(Ops& ops, TensorId logits, uint64_t batch, uint64_t seq, uint64_t vocab) {
  StepSimulator& sim = ops.sim();
  TensorId x = logits;
  if (ops.Dtype(logits) != DType::kF32) {
    x = ops.Cast(logits, DType::kF32);  // logits.float()
  } else {
    sim.Ref(x);
  }
  const TensorId padded = ops.New(batch * (seq + 1), DType::kI64, "aten::constant_pad_nd");
  const TensorId shifted = ops.New(batch * seq, DType::kI64, "aten::clone");
  sim.Free(padded);
  const TensorId loss = ops.CrossEntropy(x, batch * seq, vocab, shifted);
  sim.Free(x);
  sim.Free(shifted);
  return loss;
}

// The LM head over the final hidden states (consumed) and the causal-LM loss: the logits, held
// by the loop until the step ends, and the loss.
StepTensors CausalLmHead(Ops& ops, TensorId hidden, const LinearWeights& head, uint64_t batch,
                         uint64_t seq) {
  StepSimulator& sim = ops.sim();
  TensorId logits;
  {
    Scope l(sim, "lm_head");
    logits = ops.Linear(hidden, head, batch * seq);
  }
  sim.Free(hidden);
  Scope l(sim, "loss");
  const TensorId loss = CausalLmLoss(ops, logits, batch, seq, head.out);
  return {{}, logits, loss};
}

// --- GPT-2 (transformers' GPT2LMHeadModel) -------------------------------------------------

class Gpt2 : public Model {
 public:
  Gpt2(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    Scope t(ops.sim(), "transformer");
    wte_ = ops.MakeWeight("wte.weight", m_.vocab * m_.hidden, s_.lora_rank == 0);
    wpe_ = ops.MakeWeight("wpe.weight", m_.max_positions * m_.hidden, s_.lora_rank == 0);
    for (uint64_t i = 0; i < m_.layers; ++i) {
      Scope h(ops.sim(), fmt::format("h.{}", i));
      Block b;
      b.ln_1 = MakeLayerNorm(ops, "ln_1", m_.hidden, true, s_.lora_rank == 0);
      {
        Scope a(ops.sim(), "attn");
        b.c_attn = MakeAdapted(ops, "c_attn", m_.hidden, 3 * m_.hidden, true, s_, true);
        b.c_proj = MakeAdapted(ops, "c_proj", m_.hidden, m_.hidden, true, s_, false);
      }
      b.ln_2 = MakeLayerNorm(ops, "ln_2", m_.hidden, true, s_.lora_rank == 0);
      {
        Scope f(ops.sim(), "mlp");
        b.c_fc = MakeAdapted(ops, "c_fc", m_.hidden, Inner(), true, s_, false);
        b.mlp_proj = MakeAdapted(ops, "c_proj", Inner(), m_.hidden, true, s_, false);
      }
      blocks_.push_back(b);
    }
    ln_f_ = MakeLayerNorm(ops, "ln_f", m_.hidden, true, s_.lora_rank == 0);
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    const uint64_t n = s_.batch * Seq();
    return {ops.Input("input_ids", n, DType::kI64), ops.Input("labels", n, DType::kI64)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    const uint64_t b = s_.batch, s = Seq(), h = m_.hidden, rows = b * s;
    TensorId x;
    {
      Scope t(sim, "transformer");
      const TensorId pos = ops.New(s, DType::kI64, "aten::arange");
      TensorId tok = kNoTensor, pe = kNoTensor;
      {
        Scope w(sim, "wte");
        tok = ops.Embedding(in[0], wte_, rows, h);
      }
      {
        Scope w(sim, "wpe");
        pe = ops.Embedding(pos, wpe_, s, h);
      }
      const TensorId sum = ops.Add(tok, pe);
      sim.Free(tok);
      sim.Free(pe);
      sim.Free(pos);
      x = ops.Dropout(sum, m_.dropout);
      sim.Free(sum);
      for (uint64_t i = 0; i < m_.layers; ++i) {
        Scope hs(sim, fmt::format("h.{}", i));
        auto block = [&, i](TensorId input) { return BlockForward(ops, blocks_[i], input); };
        const TensorId y = s_.checkpointing ? ops.Checkpoint(x, block) : block(x);
        sim.Free(x);
        x = y;
      }
      Scope f(sim, "ln_f");
      const TensorId y = ops.LayerNorm(x, ln_f_.w, ln_f_.b, rows, h);
      sim.Free(x);
      x = y;
    }
    LinearWeights head;
    head.w = wte_;
    head.in = h;
    head.out = m_.vocab;
    return CausalLmHead(ops, x, head, b, s);
  }

 private:
  struct Block {
    LayerNormWeights ln_1, ln_2;
    AdaptedLinear c_attn, c_proj, c_fc, mlp_proj;
  };
  uint64_t Seq() const { return s_.seq ? s_.seq : m_.default_seq; }
  uint64_t Inner() const { return m_.intermediate ? m_.intermediate : 4 * m_.hidden; }

  TensorId BlockForward(Ops& ops, const Block& blk, TensorId x) {
    StepSimulator& sim = ops.sim();
    const uint64_t b = s_.batch, s = Seq(), h = m_.hidden, rows = b * s;
    const uint64_t heads = m_.heads, d = h / heads;
    TensorId n1;
    {
      Scope l(sim, "ln_1");
      n1 = ops.LayerNorm(x, blk.ln_1.w, blk.ln_1.b, rows, h);
    }
    TensorId attn_out;
    {
      Scope a(sim, "attn");
      TensorId qkv;
      qkv = ApplyIn(ops, "c_attn", blk.c_attn, n1, rows, s_);
      // qkv.split(h, dim=2) + view + transpose: q, k and v are views of qkv's storage; their
      // gradients are put back together by a cat (SplitBackward) of qkv's size.
      const uint64_t third = ops.Elements(qkv) / 3;
      const TensorId q = ops.View(qkv, third), k = ops.View(qkv, third), v = ops.View(qkv, third);
      sim.Node("SplitWithSizesBackward0", {qkv}, {q, k, v}, {},
               [bytes = sim.Bytes(qkv)](BackwardContext& c) {
                 if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::cat"));
               });
      sim.Free(qkv);
      const TensorId ctx = Attention(ops, q, k, v, b, heads, heads, s, d);
      sim.Free(q);
      sim.Free(k);
      sim.Free(v);
      // transpose(1, 2).reshape(...).contiguous(): a copy after the written-out attention; the
      // fused kernels already lay their output out as [b, s, heads, d], so it is a no-op.
      const TensorId merged = MergeHeads(ops, ctx);
      sim.Free(ctx);
      attn_out = ApplyIn(ops, "c_proj", blk.c_proj, merged, rows, s_);
      sim.Free(merged);
      const TensorId dropped = ops.Dropout(attn_out, m_.dropout);
      sim.Free(attn_out);
      attn_out = dropped;
    }
    sim.Free(n1);
    const TensorId r1 = ops.Add(attn_out, x);
    sim.Free(attn_out);
    TensorId n2;
    {
      Scope l(sim, "ln_2");
      n2 = ops.LayerNorm(r1, blk.ln_2.w, blk.ln_2.b, rows, h);
    }
    TensorId m;
    {
      Scope f(sim, "mlp");
      TensorId up;
      up = ApplyIn(ops, "c_fc", blk.c_fc, n2, rows, s_);
      TensorId act;
      {
        Scope g(sim, "act");
        act = Activation(ops, up);
      }
      sim.Free(up);
      m = ApplyIn(ops, "c_proj", blk.mlp_proj, act, rows, s_);
      sim.Free(act);
      const TensorId dropped = ops.Dropout(m, m_.dropout);
      sim.Free(m);
      m = dropped;
    }
    sim.Free(n2);
    const TensorId out = ops.Add(r1, m);
    sim.Free(r1);
    sim.Free(m);
    return out;
  }

  TensorId Activation(Ops& ops, TensorId x) {
    if (m_.activation == "gelu_new") {
      // NewGELUActivation written out: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
      // pow(x, 3)))), evaluated left to right. Under autocast pow is an fp32 op (x is cast
      // first) and type promotion keeps everything after it in fp32 (the H200 golden
      // gpt2_b8s512_bf16amp holds three fp32 [b, s, 4h] tensors per layer at its peak).
      StepSimulator& sim = ops.sim();
      const TensorId half = ops.MulScalar(x);
      TensorId base = x;
      if (ops.precision().autocast && ops.Dtype(x) != DType::kF32) {
        base = ops.Cast(x, DType::kF32);
      } else {
        sim.Ref(base);
      }
      const TensorId cube = ops.New(ops.Elements(base), ops.Dtype(base), "aten::pow");
      sim.Node("PowBackward0", {base}, {cube}, {base},
               [bytes = sim.Bytes(base)](BackwardContext& c) {
                 if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::pow_backward"));
               });
      sim.Free(base);
      const TensorId scaled = ops.MulScalar(cube);
      sim.Free(cube);
      const TensorId inner = ops.Add(x, scaled);
      sim.Free(scaled);
      const TensorId inner2 = ops.MulScalar(inner);
      sim.Free(inner);
      const TensorId t = ops.Tanh(inner2);
      sim.Free(inner2);
      const TensorId one_plus = ops.New(ops.Elements(t), ops.Dtype(t), "aten::add");
      sim.Node("AddBackward1", {t}, {one_plus}, {}, [](BackwardContext& c) { c.PassGrad(0); });
      sim.Free(t);
      const TensorId y = ops.Mul(half, one_plus);
      sim.Free(half);
      sim.Free(one_plus);
      return y;
    }
    if (m_.activation == "relu") return ops.Relu(x, false);
    if (m_.activation == "silu") return ops.Silu(x);
    return ops.Gelu(x);
  }

  TensorId MergeHeads(Ops& ops, TensorId ctx) {
    if (m_.attention == "eager") return ops.Copy(ctx, "aten::clone");
    ops.sim().Ref(ctx);
    return ctx;
  }

  TensorId Attention(Ops& ops, TensorId q, TensorId k, TensorId v, uint64_t b, uint64_t heads,
                     uint64_t kv_heads, uint64_t s, uint64_t d) {
    if (m_.attention == "eager") {
      return ops.MathAttention(q, k, v, b, heads, s, d, m_.attention_dropout);
    }
    return ops.FusedAttention(q, k, v, b, heads, kv_heads, s, d);
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  Weight wte_, wpe_;
  std::vector<Block> blocks_;
  LayerNormWeights ln_f_;
};

// --- LLaMA / Mistral / Qwen2 (transformers' LlamaForCausalLM and relatives) -------------------

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
    return {ops.Input("input_ids", n, DType::kI64), ops.Input("labels", n, DType::kI64)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    const uint64_t b = s_.batch, s = Seq(), h = m_.hidden, rows = b * s, d = h / m_.heads;
    TensorId x;
    {
      Scope mdl(sim, "model");
      {
        Scope e(sim, "embed_tokens");
        x = ops.Embedding(in[0], embed_, rows, h);
      }
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
        const TensorId y = s_.checkpointing ? ops.Checkpoint(x, block) : block(x);
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
    return CausalLmHead(ops, x, head_, b, s);
  }

 private:
  struct Layer {
    AdaptedLinear q, k, v, o, gate, up, down;
    Weight norm1, norm2;
  };
  uint64_t Seq() const { return s_.seq ? s_.seq : m_.default_seq; }

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
      q = ApplyIn(ops, "q_proj", layer.q, n1, rows, s_);
      k = ApplyIn(ops, "k_proj", layer.k, n1, rows, s_);
      v = ApplyIn(ops, "v_proj", layer.v, n1, rows, s_);
      const TensorId qr = ops.Rotary(q, cos_, sin_);
      sim.Free(q);
      const TensorId kr = ops.Rotary(k, cos_, sin_);
      sim.Free(k);
      TensorId ctx;
      const bool fp32 = !ops.precision().autocast && ops.precision().param == DType::kF32;
      if (fp32 && m_.kv_heads != m_.heads) {
        // fp32 with grouped KV heads: the memory-efficient kernel refuses GQA and the others
        // need 16-bit inputs, so sdpa runs its math path on K and V repeated to every head.
        auto repeat = [&](TensorId t) {
          const TensorId full = ops.New(b * m_.heads * s * d, ops.Dtype(t), "aten::clone");
          sim.Node("ExpandBackward0", {t}, {full}, {}, [bytes = sim.Bytes(t)](BackwardContext& c) {
            if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::sum"));
          });
          return full;
        };
        const TensorId kf = repeat(kr), vf = repeat(v);
        ctx = ops.MathAttention(qr, kf, vf, b, m_.heads, s, d, m_.attention_dropout);
        sim.Free(kf);
        sim.Free(vf);
      } else {
        ctx = ops.FusedAttention(qr, kr, v, b, m_.heads, m_.kv_heads, s, d);
      }
      sim.Free(qr);
      sim.Free(kr);
      sim.Free(v);
      // The fused kernels' output is laid out [b, s, heads, d]: transpose + contiguous copy
      // nothing.
      const TensorId merged = ctx;
      sim.Ref(merged);
      sim.Free(ctx);
      attn = ApplyIn(ops, "o_proj", layer.o, merged, rows, s_);
      sim.Free(merged);
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
  Weight embed_, norm_;
  LinearWeights head_;
  std::vector<Layer> layers_;
};

// --- BERT (transformers' BertForMaskedLM) and ViT (ViTForImageClassification) ----------------

class Encoder : public Model {
 public:
  Encoder(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    const uint64_t h = m_.hidden;
    const bool vit = m_.family == Family::kVit;
    const bool t = s_.lora_rank == 0;
    Scope root(ops.sim(), vit ? "vit" : "bert");
    {
      Scope e(ops.sim(), "embeddings");
      if (vit) {
        cls_ = ops.MakeWeight("cls_token", h, t);
        pos_ = ops.MakeWeight("position_embeddings", (Patches() + 1) * h, t);
        Scope p(ops.sim(), "patch_embeddings.projection");
        patch_w_ = ops.MakeWeight("weight", h * m_.channels * m_.patch * m_.patch, t);
        patch_b_ = ops.MakeWeight("bias", h, t);
      } else {
        word_ = ops.MakeWeight("word_embeddings.weight", m_.vocab * h, t);
        pos_ = ops.MakeWeight("position_embeddings.weight", m_.max_positions * h, t);
        type_ = ops.MakeWeight("token_type_embeddings.weight", m_.type_vocab * h, t);
        emb_ln_ = MakeLayerNorm(ops, "LayerNorm", h, true, t);
      }
    }
    if (!vit) {
      // position_ids and token_type_ids: int64 buffers of max_positions.
      Scope e(ops.sim(), "embeddings");
      position_ids_ = ops.sim().Buffer("position_ids", m_.max_positions * 8);
      ops.sim().Buffer("token_type_ids", m_.max_positions * 8);
    }
    // transformers 5 names: ViT's blocks are vit.layers.N with attention.{q,k,v,o}_proj and
    // mlp.fc1/fc2; BERT keeps bert.encoder.layer.N.
    std::optional<Scope> enc;
    if (!vit) enc.emplace(ops.sim(), "encoder");
    for (uint64_t i = 0; i < m_.layers; ++i) {
      Scope l(ops.sim(), fmt::format(fmt::runtime(vit ? "layers.{}" : "layer.{}"), i));
      Layer layer;
      if (vit) {
        {
          Scope a(ops.sim(), "attention");
          layer.q = MakeAdapted(ops, "q_proj", h, h, true, s_, true);
          layer.k = MakeAdapted(ops, "k_proj", h, h, true, s_, false);
          layer.v = MakeAdapted(ops, "v_proj", h, h, true, s_, true);
          layer.o = MakeAdapted(ops, "o_proj", h, h, true, s_, false);
        }
        layer.ln1 = MakeLayerNorm(ops, "layernorm_before", h, true, t);
        layer.ln2 = MakeLayerNorm(ops, "layernorm_after", h, true, t);
        layer.inter = MakeAdapted(ops, "mlp.fc1", h, m_.intermediate, true, s_, false);
        layer.out = MakeAdapted(ops, "mlp.fc2", m_.intermediate, h, true, s_, false);
      } else {
        {
          Scope a(ops.sim(), "attention");
          {
            Scope s(ops.sim(), "self");
            layer.q = MakeAdapted(ops, "query", h, h, true, s_, true);
            layer.k = MakeAdapted(ops, "key", h, h, true, s_, false);
            layer.v = MakeAdapted(ops, "value", h, h, true, s_, true);
          }
          Scope o(ops.sim(), "output");
          layer.o = MakeAdapted(ops, "dense", h, h, true, s_, false);
          layer.ln1 = MakeLayerNorm(ops, "LayerNorm", h, true, t);
        }
        layer.inter = MakeAdapted(ops, "intermediate.dense", h, m_.intermediate, true, s_, false);
        layer.out = MakeAdapted(ops, "output.dense", m_.intermediate, h, true, s_, false);
        layer.ln2 = MakeLayerNorm(ops, "output.LayerNorm", h, true, t);
      }
      layers_.push_back(layer);
    }
  }

  void BuildHead(Ops& ops) {
    const uint64_t h = m_.hidden;
    const bool t = s_.lora_rank == 0;
    if (m_.family == Family::kVit) {
      final_ln_ = MakeLayerNorm(ops, "vit.layernorm", h, true, t);
      classifier_ = ops.MakeLinear("classifier", h, m_.num_labels, true, true);
    } else {
      Scope c(ops.sim(), "cls.predictions");
      mlm_bias_ = ops.MakeWeight("bias", m_.vocab, t);
      Scope tr(ops.sim(), "transform");
      mlm_dense_ = ops.MakeLinear("dense", h, h, true, t);
      mlm_ln_ = MakeLayerNorm(ops, "LayerNorm", h, true, t);
    }
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    if (m_.family == Family::kVit) {
      const uint64_t side = Image();
      return {ops.Input("pixel_values", s_.batch * m_.channels * side * side, DType::kF32),
              ops.Input("labels", s_.batch, DType::kI64)};
    }
    const uint64_t n = s_.batch * Seq();
    return {ops.Input("input_ids", n, DType::kI64), ops.Input("labels", n, DType::kI64)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    const bool vit = m_.family == Family::kVit;
    const uint64_t h = m_.hidden, b = s_.batch, s = vit ? Patches() + 1 : Seq(), rows = b * s;
    TensorId x;
    {
      Scope root(sim, vit ? "vit" : "bert");
      Scope e(sim, "embeddings");
      if (vit) {
        // The patch embedding: a convolution with its bias; flatten + transpose are views.
        TensorId conv;
        {
          Scope p(sim, "patch_embeddings.projection");
          conv = ops.Conv2d(in[0], patch_w_, b * h * Patches(), patch_b_);
        }
        // cat(cls_token.expand(b, -1, -1), patches): the expand is a view of the parameter;
        // the cat promotes to the wider dtype (fp32 under autocast). Its backward hands each
        // input a narrow view of the gradient; the expand's backward sums the class token's.
        const DType d = ElementSize(ops.Dtype(cls_.t)) > ElementSize(ops.Dtype(conv))
                            ? ops.Dtype(cls_.t)
                            : ops.Dtype(conv);
        const TensorId cat = ops.New(rows * h, d, "aten::cat");
        sim.Node("CatBackward0", {cls_.t, conv}, {cat}, {},
                 [cls_bytes = sim.Bytes(cls_.t)](BackwardContext& c) {
                   if (c.Needs(0)) c.GiveGrad(0, c.New(cls_bytes, "aten::sum"));
                   c.PassGrad(1);
                 });
        sim.Free(conv);
        x = ops.Add(cat, pos_.t);  // + position_embeddings (broadcast over the batch)
        sim.Free(cat);
        const TensorId dropped = ops.Dropout(x, m_.dropout);
        sim.Free(x);
        x = dropped;
      } else {
        // transformers 5: token types gathered from the buffer by the position ids ([1, s])
        // and expanded to [b, s] (a view) before the lookup; position ids a view of their
        // buffer, whose embedding ([1, s, h]) is broadcast.
        const TensorId types = ops.New(s, DType::kI64, "aten::gather");
        const TensorId w = ops.Embedding(in[0], word_, rows, h);
        const TensorId t = ops.Embedding(types, type_, rows, h);
        const TensorId sum = ops.Add(w, t);
        sim.Free(w);
        sim.Free(t);
        const TensorId p = ops.Embedding(position_ids_, pos_, s, h);
        const TensorId sum2 = ops.Add(sum, p);
        sim.Free(sum);
        sim.Free(p);
        sim.Free(types);
        const TensorId n = ops.LayerNorm(sum2, emb_ln_.w, emb_ln_.b, rows, h);
        sim.Free(sum2);
        x = ops.Dropout(n, m_.dropout);
        sim.Free(n);
      }
    }
    {
      Scope root(sim, vit ? "vit" : "bert");
      std::optional<Scope> enc;
      if (!vit) enc.emplace(sim, "encoder");
      for (uint64_t i = 0; i < m_.layers; ++i) {
        Scope l(sim, fmt::format(fmt::runtime(vit ? "layers.{}" : "layer.{}"), i));
        auto block = [&, i](TensorId input) { return LayerForward(ops, layers_[i], input); };
        const TensorId y = s_.checkpointing ? ops.Checkpoint(x, block) : block(x);
        sim.Free(x);
        x = y;
      }
    }
    if (vit) {
      const TensorId n = ops.LayerNorm(x, final_ln_.w, final_ln_.b, rows, h);
      sim.Free(x);
      // classifier(sequence_output[:, 0, :]): a view of the class token's row (what autocast
      // casts for the linear); its backward writes the gradient into zeros of n's size.
      const TensorId cls_row = ops.View(n, b * h);
      sim.Node("SelectBackward0", {n}, {cls_row}, {}, [bytes = sim.Bytes(n)](BackwardContext& c) {
        if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::select_backward"));
      });
      sim.Free(n);
      TensorId logits;
      {
        Scope c(sim, "classifier");
        logits = ops.Linear(cls_row, classifier_, b);
      }
      sim.Free(cls_row);
      Scope l(sim, "loss");
      const TensorId loss = ops.CrossEntropy(logits, b, m_.num_labels);
      return {{}, logits, loss};
    }
    TensorId scores;
    {
      Scope c(sim, "cls.predictions");
      TensorId t;
      {
        Scope tr(sim, "transform");
        const TensorId d = ops.Linear(x, mlm_dense_, rows);
        const TensorId g = ops.Gelu(d);
        sim.Free(d);
        t = ops.LayerNorm(g, mlm_ln_.w, mlm_ln_.b, rows, h);
        sim.Free(g);
      }
      LinearWeights decoder;
      decoder.w = word_;
      decoder.b = mlm_bias_;
      decoder.in = h;
      decoder.out = m_.vocab;
      Scope dec(sim, "decoder");
      scores = ops.Linear(t, decoder, rows);
      sim.Free(t);
    }
    sim.Free(x);
    Scope l(sim, "loss");
    const TensorId loss = ops.CrossEntropy(scores, rows, m_.vocab);
    return {{}, scores, loss};
  }

 private:
  struct Layer {
    AdaptedLinear q, k, v, o, inter, out;
    LayerNormWeights ln1, ln2;
  };
  uint64_t Seq() const { return s_.seq ? s_.seq : m_.default_seq; }
  uint64_t Image() const { return s_.image_size ? s_.image_size : m_.image_size; }
  uint64_t Patches() const { return (Image() / m_.patch) * (Image() / m_.patch); }

  TensorId LayerForward(Ops& ops, const Layer& layer, TensorId x) {
    StepSimulator& sim = ops.sim();
    const bool vit = m_.family == Family::kVit;
    const uint64_t h = m_.hidden, b = s_.batch, s = vit ? Patches() + 1 : Seq(), rows = b * s;
    const uint64_t d = h / m_.heads;
    TensorId a_in = x;
    if (vit) {
      a_in = ops.LayerNorm(x, layer.ln1.w, layer.ln1.b, rows, h);
    } else {
      sim.Ref(a_in);
    }
    const TensorId q = Apply(ops, layer.q, a_in, rows, s_);
    const TensorId k = Apply(ops, layer.k, a_in, rows, s_);
    const TensorId v = Apply(ops, layer.v, a_in, rows, s_);
    sim.Free(a_in);
    const TensorId ctx = m_.attention == "eager"
                             ? ops.MathAttention(q, k, v, b, m_.heads, s, d, m_.attention_dropout)
                             : ops.FusedAttention(q, k, v, b, m_.heads, m_.heads, s, d);
    sim.Free(q);
    sim.Free(k);
    sim.Free(v);
    TensorId merged = ctx;
    if (m_.attention == "eager") {
      merged = ops.Copy(ctx, "aten::clone");
    } else {
      sim.Ref(merged);  // fused kernels write [b, s, heads, d]: contiguous() copies nothing
    }
    sim.Free(ctx);
    const TensorId o = Apply(ops, layer.o, merged, rows, s_);
    sim.Free(merged);
    const TensorId od = ops.Dropout(o, m_.dropout);
    sim.Free(o);
    const TensorId r1 = ops.Add(od, x);
    sim.Free(od);
    TensorId a_out = r1;
    TensorId m_in;
    if (vit) {
      m_in = ops.LayerNorm(r1, layer.ln2.w, layer.ln2.b, rows, h);
    } else {
      a_out = ops.LayerNorm(r1, layer.ln1.w, layer.ln1.b, rows, h);
      sim.Free(r1);
      m_in = a_out;
      sim.Ref(m_in);
    }
    const TensorId i = Apply(ops, layer.inter, m_in, rows, s_);
    sim.Free(m_in);
    const TensorId g = ops.Gelu(i);
    sim.Free(i);
    const TensorId o2 = Apply(ops, layer.out, g, rows, s_);
    sim.Free(g);
    const TensorId o2d = ops.Dropout(o2, m_.dropout);
    sim.Free(o2);
    const TensorId r2 = ops.Add(o2d, a_out);
    sim.Free(o2d);
    sim.Free(a_out);
    if (vit) return r2;
    const TensorId out = ops.LayerNorm(r2, layer.ln2.w, layer.ln2.b, rows, h);
    sim.Free(r2);
    return out;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  Weight word_, pos_, type_, cls_, patch_w_, patch_b_, mlm_bias_;
  TensorId position_ids_ = kNoTensor;
  LayerNormWeights emb_ln_, final_ln_, mlm_ln_;
  LinearWeights classifier_, mlm_dense_;
  std::vector<Layer> layers_;
};

// --- ResNet (torchvision's layout) ----------------------------------------------------------

class ResNet : public Model {
 public:
  ResNet(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    conv1_ = ops.MakeWeight("conv1.weight", 64 * m_.channels * 7 * 7);
    bn1_ = MakeBn(ops, "bn1", 64);
    uint64_t in = 64;
    for (size_t stage = 0; stage < m_.blocks.size(); ++stage) {
      const uint64_t width = m_.widths[stage];
      const uint64_t out = m_.bottleneck ? width * 4 : width;
      for (uint64_t i = 0; i < m_.blocks[stage]; ++i) {
        Scope l(ops.sim(), fmt::format("layer{}.{}", stage + 1, i));
        Block b;
        b.stride = (i == 0 && stage > 0) ? 2 : 1;
        b.in = in;
        b.width = width;
        b.out = out;
        if (m_.bottleneck) {
          b.convs.push_back({ops.MakeWeight("conv1.weight", width * in), 1, 1});
          b.bns.push_back(MakeBn(ops, "bn1", width));
          b.convs.push_back({ops.MakeWeight("conv2.weight", width * width * 9), 3, b.stride});
          b.bns.push_back(MakeBn(ops, "bn2", width));
          b.convs.push_back({ops.MakeWeight("conv3.weight", out * width), 1, 1});
          b.bns.push_back(MakeBn(ops, "bn3", out));
        } else {
          b.convs.push_back({ops.MakeWeight("conv1.weight", width * in * 9), 3, b.stride});
          b.bns.push_back(MakeBn(ops, "bn1", width));
          b.convs.push_back({ops.MakeWeight("conv2.weight", width * width * 9), 3, 1});
          b.bns.push_back(MakeBn(ops, "bn2", width));
        }
        if (b.stride != 1 || in != out) {
          b.down = ops.MakeWeight("downsample.0.weight", out * in);
          b.down_bn = MakeBn(ops, "downsample.1", out);
        }
        blocks_.push_back(b);
        in = out;
      }
    }
    fc_ = ops.MakeLinear("fc", in, m_.num_labels, true);
    features_ = in;
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    const uint64_t side = Image();
    return {ops.Input("images", s_.batch * m_.channels * side * side, DType::kF32),
            ops.Input("labels", s_.batch, DType::kI64)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    const uint64_t n = s_.batch;
    uint64_t side = (Image() + 1) / 2;  // 7x7 stride 2, padding 3
    TensorId x = ops.Conv2d(in[0], conv1_, n * 64 * side * side);
    x = BnRelu(ops, x, bn1_, 64, true);
    side = (side + 1) / 2;  // max-pool 3x3 stride 2, padding 1
    const TensorId p = ops.MaxPool2d(x, n * 64 * side * side);
    sim.Free(x);
    x = p;
    for (const Block& b : blocks_) {
      const uint64_t out_side = b.stride == 2 ? (side + 1) / 2 : side;
      TensorId y = x;
      sim.Ref(y);
      const size_t convs = b.convs.size();
      uint64_t cur = side;
      for (size_t k = 0; k < convs; ++k) {
        const uint64_t channels = k + 1 == convs ? b.out : b.width;
        if (b.convs[k].stride == 2) cur = (cur + 1) / 2;
        const TensorId c = ops.Conv2d(y, b.convs[k].w, n * channels * cur * cur);
        sim.Free(y);
        y = BnRelu(ops, c, b.bns[k], channels, k + 1 < convs);
      }
      TensorId identity = x;
      if (b.down.t != kNoTensor) {
        const TensorId d = ops.Conv2d(x, b.down, n * b.out * out_side * out_side);
        identity = BnRelu(ops, d, b.down_bn, b.out, false);
      } else {
        sim.Ref(identity);
      }
      // out += identity (in place), then ReLU in place.
      sim.Node("AddBackward0", {y, identity}, {y}, {}, [](BackwardContext& c) {
        c.PassGrad(0);
        c.PassGrad(1);
      });
      sim.Free(identity);
      const TensorId r = ops.Relu(y, true);
      sim.Free(y);
      sim.Free(x);
      x = r;
      side = out_side;
    }
    const TensorId pooled = ops.AdaptiveAvgPool(x, n * features_);
    sim.Free(x);
    const TensorId logits = ops.Linear(pooled, fc_, n);
    sim.Free(pooled);
    Scope l(sim, "loss");
    const TensorId loss = ops.CrossEntropy(logits, n, m_.num_labels);
    return {{}, logits, loss};
  }

 private:
  struct Bn {
    Weight w, b;
    TensorId mean = kNoTensor, var = kNoTensor, count = kNoTensor;
  };
  struct Conv {
    Weight w;
    uint64_t kernel = 3, stride = 1;
  };
  struct Block {
    std::vector<Conv> convs;
    std::vector<Bn> bns;
    Weight down;
    Bn down_bn;
    uint64_t stride = 1, in = 0, width = 0, out = 0;
  };
  uint64_t Image() const { return s_.image_size ? s_.image_size : m_.image_size; }

  Bn MakeBn(Ops& ops, std::string_view name, uint64_t c) {
    Scope s(ops.sim(), name);
    Bn bn;
    bn.w = ops.MakeWeight("weight", c);
    bn.b = ops.MakeWeight("bias", c);
    bn.mean = ops.MakeBuffer("running_mean", c);
    bn.var = ops.MakeBuffer("running_var", c);
    bn.count = ops.sim().Buffer("num_batches_tracked", 8);
    return bn;
  }

  TensorId BnRelu(Ops& ops, TensorId x, const Bn& bn, uint64_t c, bool relu) {
    const TensorId y = ops.BatchNorm2d(x, bn.w, bn.b, c);
    ops.sim().Free(x);
    if (!relu) return y;
    const TensorId r = ops.Relu(y, true);
    ops.sim().Free(y);
    return r;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  Weight conv1_;
  Bn bn1_;
  std::vector<Block> blocks_;
  LinearWeights fc_;
  uint64_t features_ = 0;
};

// --- layer lists ----------------------------------------------------------------------------

class LayerList : public Model {
 public:
  LayerList(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    for (size_t i = 0; i < m_.layer_list.size(); ++i) {
      const LayerSpec& l = m_.layer_list[i];
      Built b;
      const std::string name = l.name.empty() ? std::to_string(i) : l.name;
      if (l.type == "linear") {
        b.linear = ops.MakeLinear(name, l.in, l.out, l.bias);
      } else if (l.type == "conv2d") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.out * l.in * l.kernel * l.kernel);
      } else if (l.type == "batchnorm2d" || l.type == "layernorm" || l.type == "rmsnorm") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.in);
        if (l.type != "rmsnorm") b.b = ops.MakeWeight("bias", l.in);
        if (l.type == "batchnorm2d") {
          ops.MakeBuffer("running_mean", l.in);
          ops.MakeBuffer("running_var", l.in);
          ops.sim().Buffer("num_batches_tracked", 8);
        }
      } else if (l.type == "embedding") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.in * l.out);
      } else if (l.type == "attention") {
        Scope s(ops.sim(), name);
        b.linear = ops.MakeLinear("in_proj", l.in, 3 * l.in, l.bias);
        b.linear2 = ops.MakeLinear("out_proj", l.in, l.in, l.bias);
      }
      built_.push_back(b);
    }
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    uint64_t n = s_.batch;
    for (const uint64_t d : m_.input_shape) n *= d;
    const bool ids = !m_.layer_list.empty() && m_.layer_list.front().type == "embedding";
    const uint64_t out = OutputElements();
    return {ops.Input("input", n, ids ? DType::kI64 : DType::kF32),
            ops.Input("target", m_.loss == "cross_entropy" ? s_.batch : out,
                      m_.loss == "cross_entropy" ? DType::kI64 : DType::kF32)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    // Shape tracking: rows (batch x tokens) and features, or [C, H, W] for images.
    uint64_t rows = s_.batch, features = 1, c = 0, hgt = 0, wdt = 0;
    if (m_.input_shape.size() == 3) {
      c = m_.input_shape[0];
      hgt = m_.input_shape[1];
      wdt = m_.input_shape[2];
    } else if (m_.input_shape.size() == 2) {
      rows *= m_.input_shape[0];
      features = m_.input_shape[1];
    } else if (!m_.input_shape.empty()) {
      features = m_.input_shape[0];
    }
    TensorId x = in[0];
    sim.Ref(x);
    std::vector<TensorId> outputs;  // each layer's output, for residual references
    for (size_t i = 0; i < m_.layer_list.size(); ++i) {
      const LayerSpec& l = m_.layer_list[i];
      const Built& b = built_[i];
      Scope s(sim, l.name.empty() ? std::to_string(i) : l.name);
      TensorId y = kNoTensor;
      if (l.type == "linear") {
        y = ops.Linear(x, b.linear, rows);
        features = l.out;
      } else if (l.type == "conv2d") {
        hgt = (hgt + 2 * l.padding - l.kernel) / l.stride + 1;
        wdt = (wdt + 2 * l.padding - l.kernel) / l.stride + 1;
        c = l.out;
        y = ops.Conv2d(x, b.w, s_.batch * c * hgt * wdt);
      } else if (l.type == "batchnorm2d") {
        y = ops.BatchNorm2d(x, b.w, b.b, l.in);
      } else if (l.type == "layernorm") {
        y = ops.LayerNorm(x, b.w, b.b, rows, features);
      } else if (l.type == "rmsnorm") {
        y = ops.RmsNorm(x, b.w, rows, features);
      } else if (l.type == "relu") {
        y = ops.Relu(x, false);
      } else if (l.type == "gelu") {
        y = ops.Gelu(x);
      } else if (l.type == "silu") {
        y = ops.Silu(x);
      } else if (l.type == "tanh") {
        y = ops.Tanh(x);
      } else if (l.type == "sigmoid") {
        y = ops.Sigmoid(x);
      } else if (l.type == "dropout") {
        y = ops.Dropout(x, l.p);
      } else if (l.type == "embedding") {
        y = ops.Embedding(x, b.w, rows, l.out);
        features = l.out;
      } else if (l.type == "attention") {
        const uint64_t seq = m_.input_shape.size() == 2 ? m_.input_shape[0] : 1;
        const uint64_t d = features / l.heads;
        const TensorId qkv = ops.Linear(x, b.linear, rows);
        const TensorId ctx = ops.FusedAttention(qkv, qkv, qkv, s_.batch, l.heads, l.heads, seq, d);
        sim.Free(qkv);
        const TensorId merged = ctx;  // [b, s, heads, d] already: no copy
        sim.Ref(merged);
        sim.Free(ctx);
        y = ops.Linear(merged, b.linear2, rows);
        sim.Free(merged);
      } else if (l.type == "residual") {
        y = ops.Add(x, outputs[static_cast<size_t>(l.from)]);
      } else if (l.type == "maxpool2d") {
        hgt = (hgt + 2 * l.padding - l.kernel) / l.stride + 1;
        wdt = (wdt + 2 * l.padding - l.kernel) / l.stride + 1;
        y = ops.MaxPool2d(x, s_.batch * c * hgt * wdt);
      } else if (l.type == "avgpool") {
        hgt = wdt = 1;
        y = ops.AdaptiveAvgPool(x, s_.batch * c);
      } else if (l.type == "flatten") {
        features = c * hgt * wdt;
        sim.Ref(x);
        y = x;
      }
      sim.Ref(y);
      outputs.push_back(y);
      sim.Free(x);
      x = y;
    }
    for (const TensorId o : outputs) sim.Free(o);
    Scope l(sim, "loss");
    const TensorId loss =
        m_.loss == "cross_entropy" ? ops.CrossEntropy(x, rows, features) : ops.MseLoss(x, in[1]);
    return {{}, x, loss};
  }

 private:
  struct Built {
    LinearWeights linear, linear2;
    Weight w, b;
  };
  uint64_t OutputElements() const {
    // The target of an MSE loss has the output's shape: rows x the last linear's features.
    uint64_t rows = s_.batch, features = 1;
    if (m_.input_shape.size() == 2) {
      rows *= m_.input_shape[0];
      features = m_.input_shape[1];
    } else if (!m_.input_shape.empty()) {
      for (const uint64_t d : m_.input_shape) features *= d;
    }
    for (const LayerSpec& l : m_.layer_list) {
      if (l.type == "linear" || l.type == "embedding") features = l.out;
    }
    return rows * features;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  std::vector<Built> built_;
};

std::unique_ptr<Model> MakeModel(const ModelSpec& m, const TrainingSetup& s) {
  switch (m.family) {
    case Family::kGpt2:
      return std::make_unique<Gpt2>(m, s);
    case Family::kLlama:
      return std::make_unique<Llama>(m, s);
    case Family::kBert:
    case Family::kVit:
      return std::make_unique<Encoder>(m, s);
    case Family::kResnet:
      return std::make_unique<ResNet>(m, s);
    case Family::kLayerList:
      return std::make_unique<LayerList>(m, s);
  }
  return nullptr;
}

}  // namespace

Result<TensorStream> SimulateTraining(const ModelSpec& m, const TrainingSetup& setup) {
  if (setup.batch == 0) return UsageError("--batch must be at least 1");
  if (setup.steps < 1) return UsageError("--steps must be at least 1");
  if (setup.grad_accum < 1) return UsageError("--grad-accum must be at least 1");
  TensorStream stream;
  StepSimulator sim(stream);
  Ops ops(sim, setup.precision);
  const int shards = setup.zero == ZeroMode::kNone ? 1 : setup.world_size;
  if (setup.zero == ZeroMode::kZero2 || setup.zero == ZeroMode::kZero3 ||
      setup.zero == ZeroMode::kFsdp) {
    sim.grad_shards = shards;
  }
  if (setup.zero == ZeroMode::kZero3 || setup.zero == ZeroMode::kFsdp) sim.param_shards = shards;
  sim.frozen_patterns = setup.freeze;
  OptimizerSetup optimizer = setup.optimizer;
  optimizer.shards = shards;
  auto model = MakeModel(m, setup);
  stream.Phase(0, model::RecordedPhase::kSetup, "setup");
  // peft wraps the model: every name gains "base_model.model." under LoRA.
  const std::string_view root = setup.lora_rank > 0 ? "base_model.model" : "";
  sim.EnterModule(root);
  model->Build(ops);
  if (auto* encoder = dynamic_cast<Encoder*>(model.get())) encoder->BuildHead(ops);
  sim.ExitModule();
  if (sim.too_large()) {
    return UsageError(
        "the model's weights are larger than any GPU (a tensor over 1 PiB): check the config");
  }
  stream.info.parameters = sim.parameter_elements();
  stream.info.trainable_parameters = sim.trainable_elements();
  stream.info.parameter_bytes = sim.parameter_bytes();
  stream.info.buffer_bytes = sim.buffer_bytes();
  const bool autocast = setup.precision.autocast.has_value();
  using model::RecordedPhase;
  // The loop of examples/training/train.py (and of most training scripts).
  for (int step = 1; step <= setup.steps; ++step) {
    stream.Phase(step, RecordedPhase::kBeforeForward, "zero_grad");
    if (setup.zero_grad) sim.ZeroGrad(setup.set_to_none);
    StepTensors kept;
    for (int micro = 1; micro <= setup.grad_accum; ++micro) {
      stream.Phase(step, RecordedPhase::kBeforeForward, "inputs");
      std::vector<TensorId> inputs = model->Inputs(ops);
      stream.Phase(step, RecordedPhase::kForward, "forward");
      sim.EnterModule(root);
      StepTensors t = model->Forward(ops, inputs);
      sim.ExitModule();
      t.inputs = std::move(inputs);
      if (autocast) sim.EndAutocast();
      stream.Phase(step, RecordedPhase::kBackward, "backward");
      sim.Backward(t.loss);
      if (micro < setup.grad_accum) {
        for (const TensorId i : t.inputs) sim.Free(i);
        sim.Free(t.output);
        sim.Free(t.loss);
      } else {
        kept = std::move(t);
      }
    }
    stream.Phase(step, RecordedPhase::kOptimizer, "optimizer");
    sim.OptimizerStep(optimizer);
    // The loop drops the batch, the output and the loss at the end of the step.
    stream.Phase(step, RecordedPhase::kOptimizer, "step_end");
    for (const TensorId i : kept.inputs) sim.Free(i);
    sim.Free(kept.output);
    sim.Free(kept.loss);
    if (sim.too_large()) {
      return UsageError(fmt::format(
          "batch {} x sequence {} makes a tensor of more than 1 PiB, beyond any GPU: use a "
          "smaller --batch or --seq",
          setup.batch, setup.seq ? setup.seq : m.default_seq));
    }
  }
  return stream;
}

}  // namespace vramscope::predict
