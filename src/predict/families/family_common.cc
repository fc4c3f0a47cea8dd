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
    l.base = setup.qlora ? ops.MakeNf4Linear("base_layer", in, out, bias)
                         : ops.MakeLinear("base_layer", in, out, bias, false);
    l.lora.a = ops.MakeLinear("lora_A.default", in, setup.lora_rank, false, true);
    l.lora.b = ops.MakeLinear("lora_B.default", setup.lora_rank, out, false, true);
    l.lora.on = true;
  } else if (setup.qlora) {
    l.base = ops.MakeNf4Linear(name, in, out, bias);
  } else {
    l.base = ops.MakeLinear(name, in, out, bias, !frozen);
    // torchao's float8 matmul (torch._scaled_mm) needs both dimensions multiples of 16;
    // torchtitan's converter leaves the other linears in high precision.
    l.base.float8 = setup.float8 && in % 16 == 0 && out % 16 == 0;
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
  // labels[..., 1:].contiguous(): a copy, but of one row the slice is contiguous already (a
  // dimension of size 1 has no stride to honour), so a batch of 1 (a packed row) keeps the
  // padded labels alive through the view the loss saves.
  const TensorId shifted =
      batch == 1 ? ops.View(padded, seq) : ops.New(batch * seq, DType::kI64, "aten::clone");
  sim.Free(padded);
  const TensorId loss = ops.CrossEntropy(x, batch * seq, vocab, shifted);
  sim.Free(x);
  sim.Free(shifted);
  return loss;
}

namespace {

// torchtune's TransformerDecoder with num_output_chunks and CEWithChunkedOutputLoss: the
// hidden states chunked along the sequence (views), each chunk through the head, then per chunk
// labels.chunk(...).reshape(-1) (a copy: the chunk is not contiguous), logits.float() and
// F.cross_entropy(reduction="sum"), the chunks' losses summed.
StepTensors ChunkedHead(Ops& ops, TensorId hidden, const LinearWeights& head, uint64_t batch,
                        uint64_t seq, uint64_t chunks) {
  StepSimulator& sim = ops.sim();
  std::vector<std::pair<TensorId, uint64_t>> logits;  // (chunk, its rows)
  {
    Scope l(sim, "lm_head");
    // torch.chunk: chunks of ceil(seq / chunks) positions, the last one what remains; views
    // whose one backward node (SplitBackward0) puts their gradients together in a whole one.
    const uint64_t per = (seq + chunks - 1) / chunks;
    std::vector<TensorId> parts;
    std::vector<uint64_t> rows;
    for (uint64_t c = 0; c * per < seq && c < chunks; ++c) {
      rows.push_back(batch * std::min(per, seq - c * per));
      parts.push_back(ops.View(hidden, rows.back() * head.in));
    }
    const uint64_t whole = sim.Bytes(hidden);
    sim.Node("SplitBackward0", {hidden}, parts, {}, [whole](BackwardContext& c) {
      if (c.Needs(0)) c.GiveGrad(0, c.New(whole, "aten::cat"));
    });
    for (size_t c = 0; c < parts.size(); ++c) {
      logits.emplace_back(ops.Linear(parts[c], head, rows[c]), rows[c]);
      sim.Free(parts[c]);
    }
  }
  TensorId total = kNoTensor;
  {
    Scope l(sim, "loss");
    const TensorId padded = ops.New(batch * (seq + 1), DType::kI64, "aten::constant_pad_nd");
    for (const auto& [chunk, n] : logits) {
      const TensorId labels = ops.New(n, DType::kI64, "aten::clone");
      const TensorId x = ops.Cast(chunk, DType::kF32);
      const TensorId loss = ops.CrossEntropy(x, n, head.out, labels);
      sim.Free(x);
      sim.Free(labels);
      if (total == kNoTensor) {
        total = loss;
      } else {
        const TensorId sum = ops.Add(total, loss);
        sim.Free(total);
        sim.Free(loss);
        total = sum;
      }
    }
    sim.Free(padded);
    const TensorId mean = ops.MulScalar(total);  // total_loss / total_elements
    sim.Free(total);
    total = mean;
  }
  for (const auto& chunk : logits) sim.Free(chunk.first);  // del logits
  sim.Free(hidden);
  return {{}, kNoTensor, total};
}

}  // namespace

StepTensors CausalLmHead(Ops& ops, TensorId hidden, const LinearWeights& head, uint64_t batch,
                         uint64_t seq, const TrainingSetup& setup) {
  StepSimulator& sim = ops.sim();
  if (setup.loss_chunks > 1) return ChunkedHead(ops, hidden, head, batch, seq, setup.loss_chunks);
  if (setup.fused_linear_ce) {
    TensorId loss;
    {
      Scope l(sim, "loss");
      // Liger's patched forward: the shifted labels, then the fused head and loss.
      const TensorId padded = ops.New(batch * (seq + 1), DType::kI64, "aten::constant_pad_nd");
      const TensorId shifted = ops.New(batch * seq, DType::kI64, "aten::clone");
      sim.Free(padded);
      loss = ops.FusedLinearCrossEntropy(hidden, head, batch * seq, shifted);
      sim.Free(shifted);
    }
    sim.Free(hidden);
    return {{}, kNoTensor, loss};
  }
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
