// The encoders: BERT and RoBERTa (transformers' BertForMaskedLM) and ViT
// (ViTForImageClassification), written as their forward passes.
#include <fmt/format.h>

#include <optional>

#include "predict/families/family_common.h"

namespace vramscope::predict::families {

namespace {

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

  void BuildHead(Ops& ops) override {
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
        // The patches' slice goes to the convolution cast back to its dtype when the cat
        // promoted (validate_outputs).
        const uint64_t conv_cast = ops.Dtype(conv) != d ? sim.Bytes(conv) : 0;
        sim.Node("CatBackward0", {cls_.t, conv}, {cat}, {},
                 [cls_bytes = sim.Bytes(cls_.t), conv_cast](BackwardContext& c) {
                   if (c.Needs(0)) c.GiveGrad(0, c.New(cls_bytes, "aten::sum"));
                   if (conv_cast == 0) {
                     c.PassGrad(1);
                   } else if (c.Needs(1)) {
                     c.GiveGrad(1, c.New(conv_cast, "aten::_to_copy"));
                   }
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
        const TensorId y = s_.Checkpointed(i) ? ops.Checkpoint(x, block) : block(x);
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
      TensorId logits;
      {
        Scope c(sim, "classifier");
        logits = ops.Linear(cls_row, classifier_, b);
      }
      sim.Free(cls_row);
      TensorId loss;
      {
        Scope l(sim, "loss");
        loss = ops.CrossEntropy(logits, b, m_.num_labels);
      }
      // forward keeps `sequence_output` until it returns, after the loss.
      sim.Free(n);
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
    TensorId loss;
    {
      Scope l(sim, "loss");
      loss = ops.CrossEntropy(scores, rows, m_.vocab);
    }
    // forward keeps `sequence_output` until it returns, after the loss.
    sim.Free(x);
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

}  // namespace

std::unique_ptr<Model> MakeEncoder(const ModelSpec& m, const TrainingSetup& s) {
  return std::make_unique<Encoder>(m, s);
}

}  // namespace vramscope::predict::families
