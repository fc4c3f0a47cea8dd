// The pieces the families share (family_common.h).
#include "predict/families/family_common.h"

namespace vramscope::predict::families {

LayerNormWeights MakeLayerNorm(Ops& ops, std::string_view name, uint64_t hidden, bool bias,
                               bool trainable) {
  Scope s(ops.sim(), name);
  LayerNormWeights ln;
  ln.w = ops.MakeWeight("weight", hidden, trainable);
  if (bias) ln.b = ops.MakeWeight("bias", hidden, trainable);
  return ln;
}

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

TensorId ApplyIn(Ops& ops, std::string_view name, const AdaptedLinear& l, TensorId x, uint64_t rows,
                 const TrainingSetup& setup) {
  Scope scope(ops.sim(), name);
  return Apply(ops, l, x, rows, setup);
}

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

StepTensors CausalLmHead(Ops& ops, TensorId hidden, const LinearWeights& head, uint64_t batch,
                         uint64_t seq) {
  StepSimulator& sim = ops.sim();
  TensorId logits;
  {
    Scope l(sim, "lm_head");
    logits = ops.Linear(hidden, head, batch * seq);
  }
  TensorId loss;
  {
    Scope l(sim, "loss");
    loss = CausalLmLoss(ops, logits, batch, seq, head.out);
  }
  // forward keeps `hidden_states` in a local variable until it returns, after the loss.
  sim.Free(hidden);
  return {{}, logits, loss};
}

}  // namespace vramscope::predict::families
