// GPT-2: transformers' GPT2LMHeadModel, written as its forward pass.
#include <fmt/format.h>

#include "predict/families/family_common.h"

namespace vramscope::predict::families {

namespace {

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
      // Conv1D: torch.addmm(bias, x, weight) (LoRA's own adapters are nn.Linear).
      for (AdaptedLinear* l : {&b.c_attn, &b.c_proj, &b.c_fc, &b.mlp_proj}) {
        l->base.addmm_args = true;
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
        const TensorId y = s_.Checkpointed(i) ? ops.Checkpoint(x, block) : block(x);
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
    return CausalLmHead(ops, x, head, b, s, s_);
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
      // pow_backward: grad * (3 * x.pow(2)), one kernel per operator; the intermediates go
      // when it is done.
      sim.Node("PowBackward0", {base}, {cube}, {base},
               [bytes = sim.Bytes(base)](BackwardContext& c) {
                 if (!c.Needs(0)) return;
                 const TensorId squared = c.New(bytes, "aten::pow");
                 const TensorId scaled = c.New(bytes, "aten::mul");
                 const TensorId g = c.New(bytes, "aten::mul");
                 c.Free(scaled);
                 c.Free(squared);
                 c.GiveGrad(0, g);
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

}  // namespace

std::unique_ptr<Model> MakeGpt2(const ModelSpec& m, const TrainingSetup& s) {
  return std::make_unique<Gpt2>(m, s);
}

}  // namespace vramscope::predict::families
