#include "predict/layers.h"

#include <algorithm>

namespace vramscope::predict {

Ops::Ops(StepSimulator& sim, Precision precision) : sim_(sim), precision_(precision) {
  sim_.param_dtype = precision.param;
}

void Ops::SetDtype(TensorId t, DType d, uint64_t elements) {
  if (static_cast<size_t>(t) >= dtype_.size()) {
    dtype_.resize(static_cast<size_t>(t) + 1024, DType::kF32);
    elements_.resize(static_cast<size_t>(t) + 1024, 0);
  }
  dtype_[t] = d;
  elements_[t] = elements;
}

DType Ops::Dtype(TensorId t) const {
  return static_cast<size_t>(t) < dtype_.size() ? dtype_[t] : DType::kF32;
}

uint64_t Ops::Elements(TensorId t) const {
  return static_cast<size_t>(t) < elements_.size() ? elements_[t] : 0;
}

TensorId Ops::New(uint64_t elements, DType dtype, std::string_view op) {
  const TensorId t = sim_.New(elements * ElementSize(dtype), op);
  SetDtype(t, dtype, elements);
  return t;
}

Weight Ops::MakeWeight(std::string_view name, uint64_t elements, bool trainable) {
  Weight w;
  w.elements = elements;
  w.trainable = trainable;
  const uint64_t full = elements * ElementSize(precision_.param);
  const auto shards = static_cast<uint64_t>(sim_.param_shards);
  // A rank's shard of a flattened parameter: the elements divided evenly, rounded up.
  const uint64_t own =
      shards > 1 ? (elements + shards - 1) / shards * ElementSize(precision_.param) : full;
  w.t = sim_.Parameter(name, own, trainable, full);
  SetDtype(w.t, precision_.param, elements);
  return w;
}

TensorId Ops::Gathered(TensorId weight) {
  if (!sharded() || weight == kNoTensor || !sim_.IsParameter(weight)) {
    sim_.Ref(weight);
    return weight;
  }
  // The all-gather output is the full weight; its gradient goes back to the shard through
  // the reduce-scatter the simulator models (grad_shards).
  const uint64_t elements = Elements(weight);
  const TensorId full = New(elements, Dtype(weight), "c10d::all_gather");
  sim_.Node("AllGatherBackward", {weight}, {full}, {}, [](BackwardContext& c) { c.PassGrad(0); });
  return full;
}

LinearWeights Ops::MakeLinear(std::string_view name, uint64_t in, uint64_t out, bool bias,
                              bool trainable) {
  LinearWeights lw;
  lw.in = in;
  lw.out = out;
  sim_.EnterModule(name);
  lw.w = MakeWeight("weight", in * out, trainable);
  if (bias) lw.b = MakeWeight("bias", out, trainable);
  sim_.ExitModule();
  return lw;
}

LinearWeights Ops::MakeNf4Linear(std::string_view name, uint64_t in, uint64_t out, bool bias) {
  LinearWeights lw;
  lw.in = in;
  lw.out = out;
  lw.nf4 = true;
  const uint64_t n = in * out;
  const uint64_t blocks = (n + 63) / 64;
  sim_.EnterModule(name);
  if (!nf4_map_made_) {
    // bitsandbytes' name2qmap["dynamic"]: 256 fp32, made once per device.
    sim_.Buffer("(bitsandbytes dynamic map)", 256 * 4);
    nf4_map_made_ = true;
  }
  lw.w.elements = n;
  lw.w.trainable = false;
  lw.w.t = sim_.Parameter("weight", (n + 1) / 2, false, (n + 1) / 2);
  sim_.Buffer("weight.quant_state.absmax", blocks);  // uint8 codes of the absmax
  sim_.Buffer("weight.quant_state.state2.absmax", (blocks + 255) / 256 * 4);
  sim_.Buffer("weight.quant_state.offset", 4);
  sim_.Buffer("weight.quant_state.code", 16 * 4);
  if (bias) lw.b = MakeWeight("bias", out, false);
  sim_.ExitModule();
  return lw;
}

TensorId Ops::Nf4Linear(TensorId x, const LinearWeights& lw, uint64_t rows) {
  const uint64_t n = lw.in * lw.out;
  const uint64_t absmax_bytes = (n + 63) / 64 * 4;
  const DType compute = precision_.Compute();
  const uint64_t dequantized = n * ElementSize(compute);
  auto dequantize = [absmax_bytes, dequantized](auto& where) {
    const TensorId absmax = where.New(absmax_bytes, "bitsandbytes::dequantize_blockwise");
    const TensorId w = where.New(dequantized, "bitsandbytes::dequantize_4bit");
    where.Free(absmax);
    return w;
  };
  const TensorId w = dequantize(sim_);  // StepSimulator and BackwardContext: New, Free
  const bool has_bias = lw.b.t != kNoTensor;
  const TensorId b = has_bias ? ForMatmul(lw.b.t, true) : kNoTensor;
  const TensorId xin = ForMatmul(x, false);
  const char* op = has_bias ? "aten::addmm" : "aten::mm";
  const TensorId y = New(rows * lw.out, compute, op);
  sim_.Matmul(op);
  sim_.Free(w);
  const uint64_t gx = rows * lw.in * ElementSize(Dtype(xin));
  std::vector<TensorId> inputs = {xin};
  if (has_bias) inputs.push_back(b);
  // MatMul4Bit keeps only the packed weight (ctx.tensors = (None, B)): no activation.
  sim_.Node("MatMul4BitBackward", inputs, {y}, {},
            [gx, dequantize, nd = linear_inputs_nd](BackwardContext& c) {
              if (!c.Needs(0)) return;
              const TensorId deq = dequantize(c);
              c.GiveGrad(0, nd ? c.NewReshaped(gx, "aten::mm") : c.New(gx, "aten::mm"));
              c.Matmul();
              c.Free(deq);
            });
  sim_.Free(xin);
  sim_.Free(b);
  return y;
}

TensorId Ops::Checkpoint(TensorId x, std::function<TensorId(TensorId)> block) {
  const DType d = Dtype(x);
  const uint64_t n = Elements(x);
  return sim_.Checkpoint(x, [this, x, d, n, block = std::move(block)](TensorId in) {
    if (in != x) SetDtype(in, d, n);
    return block(in);
  });
}

TensorId Ops::MakeBuffer(std::string_view name, uint64_t elements) {
  // A floating-point buffer follows the model's dtype (model.to(dtype) converts buffers too).
  const DType d = precision_.param;
  const TensorId t = sim_.Buffer(name, elements * ElementSize(d));
  SetDtype(t, d, elements);
  return t;
}

TensorId Ops::Input(std::string_view name, uint64_t elements, DType dtype) {
  const TensorId t = sim_.Input(name, elements * ElementSize(dtype));
  SetDtype(t, dtype, elements);
  return t;
}

TensorId Ops::Cast(TensorId x, DType to) {
  const DType from = Dtype(x);
  const uint64_t n = Elements(x);
  const TensorId y = New(n, to, "aten::_to_copy");
  const uint64_t back = n * ElementSize(from);
  sim_.Node("ToCopyBackward0", {x}, {y}, {}, [back](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(back, "aten::_to_copy"));
  });
  return y;
}

TensorId Ops::ForMatmul(TensorId x, bool is_weight) {
  if (!precision_.autocast || Dtype(x) == *precision_.autocast) {
    sim_.Ref(x);
    return x;
  }
  if (is_weight && sim_.IsParameter(x)) {
    const TensorId c = sim_.AutocastWeight(x, *precision_.autocast);
    SetDtype(c, *precision_.autocast, Elements(x));
    return c;
  }
  return Cast(x, *precision_.autocast);
}

TensorId Ops::Copy(TensorId x, std::string_view op) {
  const uint64_t bytes = sim_.Bytes(x);
  const TensorId y = New(Elements(x), Dtype(x), op);
  sim_.Node("CloneBackward0", {x}, {y}, {}, [bytes](BackwardContext& b) { b.PassGrad(0); });
  (void)bytes;
  return y;
}

TensorId Ops::View(TensorId x, uint64_t elements) {
  const TensorId v = sim_.View(x, elements * ElementSize(Dtype(x)));
  SetDtype(v, Dtype(x), elements);
  return v;
}

TensorId Ops::Linear(TensorId x, const LinearWeights& lw, uint64_t rows) {
  if (lw.nf4) return Nf4Linear(x, lw, rows);
  if (lw.float8) return Float8Linear(x, lw, rows);
  // Autocast casts the arguments last to first: linear(x, weight, bias) bias, weight, input, as
  // the H200 goldens show (linear_adam_bf16, events 6-8); addmm(bias, x, weight) weight, input,
  // bias.
  const bool has_bias = lw.b.t != kNoTensor;
  const TensorId wg = Gathered(lw.w.t);
  const TensorId bg = has_bias ? Gathered(lw.b.t) : kNoTensor;
  TensorId b = kNoTensor, w = kNoTensor, xin = kNoTensor;
  if (lw.addmm_args) {
    w = ForMatmul(wg, true);
    xin = ForMatmul(x, false);
    b = has_bias ? ForMatmul(bg, true) : kNoTensor;
  } else {
    b = has_bias ? ForMatmul(bg, true) : kNoTensor;
    w = ForMatmul(wg, true);
    xin = ForMatmul(x, false);
  }
  const DType out_dtype = precision_.Compute();
  const char* op = has_bias ? "aten::addmm" : "aten::mm";
  const TensorId y = New(rows * lw.out, out_dtype, op);
  sim_.Matmul(op);
  // addmm saves mat1 when mat2 needs a gradient and mat2 when mat1 does.
  std::vector<TensorId> saved;
  if (sim_.RequiresGrad(w)) saved.push_back(xin);
  if (sim_.RequiresGrad(xin)) saved.push_back(w);
  const uint64_t gx = rows * lw.in * ElementSize(Dtype(xin));
  const uint64_t gw = lw.in * lw.out * ElementSize(Dtype(w));
  const uint64_t gb = has_bias ? lw.out * ElementSize(Dtype(b)) : 0;
  std::vector<TensorId> inputs = {xin, w};
  if (has_bias) inputs.push_back(b);
  // Under ZeRO-3/FSDP backward gathers the weight again for the input gradient.
  const uint64_t regather = sharded() ? Elements(lw.w.t) * ElementSize(Dtype(w)) : 0;
  // AddmmBackward0 computes the input's gradient, then the weight's; MmBackward0 (no bias)
  // the gradient of `mat2` (the weight) first.
  sim_.Node(has_bias ? "AddmmBackward0" : "MmBackward0", inputs, {y}, saved,
            [gx, gw, gb, regather, has_bias, nd = linear_inputs_nd](BackwardContext& c) {
              const TensorId gathered =
                  regather > 0 ? c.New(regather, "c10d::all_gather") : kNoTensor;
              auto input = [&] {
                if (!c.Needs(0)) return;
                c.GiveGrad(0, nd ? c.NewReshaped(gx, "aten::mm") : c.New(gx, "aten::mm"));
                c.Matmul();
              };
              auto weight = [&] {
                if (!c.Needs(1)) return;
                c.GiveGrad(1, c.New(gw, "aten::mm"));
                c.Matmul();
              };
              if (has_bias) {
                input();
                weight();
              } else {
                weight();
                input();
              }
              // The bias gradient: the engine sums the broadcast gradient (reduce_grad).
              if (gb > 0 && c.Needs(2)) c.GiveGrad(2, c.New(gb, "aten::sum"));
              c.Free(gathered);
            });
  sim_.Free(xin);
  sim_.Free(w);
  sim_.Free(b);
  // FSDP frees the gathered weight after the module's forward even though backward saved it
  // (it is gathered again for backward): its storage goes now.
  if (sharded()) {
    ReleaseGathered(wg);
    ReleaseGathered(bg);
  }
  sim_.Free(wg);
  sim_.Free(bg);
  return y;
}

TensorId Ops::LoraLinear(TensorId x, const LinearWeights& base, const LinearWeights& a,
                         const LinearWeights& b, uint64_t rows, double dropout) {
  const TensorId y = Linear(x, base, rows);
  const TensorId xd = Dropout(x, dropout);
  const TensorId h = Linear(xd, a, rows);
  sim_.Free(xd);
  const TensorId z = Linear(h, b, rows);
  sim_.Free(h);
  const TensorId zs = MulScalar(z);
  sim_.Free(z);
  const TensorId out = Add(y, zs);
  sim_.Free(y);
  sim_.Free(zs);
  return out;
}

namespace {

// a * b saves b when a needs a gradient and a when b does (MulBackward0): with a frozen weight
// (LoRA) the other operand is not kept.
std::vector<TensorId> MulSaves(const StepSimulator& sim, TensorId a, TensorId b) {
  std::vector<TensorId> saved;
  if (sim.RequiresGrad(b)) saved.push_back(a);
  if (sim.RequiresGrad(a)) saved.push_back(b);
  return saved;
}

// An elementwise op whose backward allocates one gradient of the input's size.
TensorId Elementwise(Ops& ops, TensorId x, std::string_view op, std::string_view node,
                     bool save_input, bool save_output) {
  StepSimulator& sim = ops.sim();
  const TensorId y = ops.New(ops.Elements(x), ops.Dtype(x), op);
  std::vector<TensorId> saved;
  if (save_input) saved.push_back(x);
  if (save_output) saved.push_back(y);
  const uint64_t bytes = sim.Bytes(x);
  const std::string backward_op = std::string(op) + "_backward";
  sim.Node(node, {x}, {y}, saved, [bytes, backward_op](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(bytes, backward_op));
  });
  return y;
}

}  // namespace

TensorId Ops::Gelu(TensorId x) {
  return Elementwise(*this, x, "aten::gelu", "GeluBackward0", true, false);
}
TensorId Ops::GeluTanh(TensorId x) {
  return Elementwise(*this, x, "aten::gelu", "GeluBackward0", true, false);
}
TensorId Ops::Silu(TensorId x) {
  return Elementwise(*this, x, "aten::silu", "SiluBackward0", true, false);
}
TensorId Ops::Tanh(TensorId x) {
  return Elementwise(*this, x, "aten::tanh", "TanhBackward0", false, true);
}
TensorId Ops::Sigmoid(TensorId x) {
  return Elementwise(*this, x, "aten::sigmoid", "SigmoidBackward0", false, true);
}

TensorId Ops::Relu(TensorId x, bool inplace) {
  if (!inplace) return Elementwise(*this, x, "aten::relu", "ReluBackward0", false, true);
  // In place: no new storage; the node saves the result, which is x itself.
  sim_.Ref(x);
  const uint64_t bytes = sim_.Bytes(x);
  sim_.Node("ReluBackward0", {x}, {x}, {x}, [bytes](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(bytes, "aten::threshold_backward"));
  });
  return x;
}

TensorId Ops::Mul(TensorId a, TensorId b) {
  // Type promotion: bf16 * fp32 is fp32.
  const DType d = ElementSize(Dtype(a)) >= ElementSize(Dtype(b)) ? Dtype(a) : Dtype(b);
  const TensorId y = New(std::max(Elements(a), Elements(b)), d, "aten::mul");
  // Each gradient is a product in the output gradient's dtype (grad * other); the engine's
  // validate_outputs then casts it to its input's dtype where they differ (a bf16 operand of an
  // fp32 product under autocast), after the node has made both.
  const uint64_t ea = Elements(a), eb = Elements(b), out_size = ElementSize(d);
  const uint64_t ba = sim_.Bytes(a), bb = sim_.Bytes(b);
  sim_.Node("MulBackward0", {a, b}, {y}, MulSaves(sim_, a, b),
            [ea, eb, out_size, ba, bb](BackwardContext& c) {
              TensorId ga = c.Needs(0) ? c.New(ea * out_size, "aten::mul") : kNoTensor;
              TensorId gb = c.Needs(1) ? c.New(eb * out_size, "aten::mul") : kNoTensor;
              for (auto [g, bytes] : {std::pair{&ga, ba}, std::pair{&gb, bb}}) {
                if (*g == kNoTensor || c.Bytes(*g) == bytes) continue;
                const TensorId cast = c.New(bytes, "aten::_to_copy");
                c.Free(*g);
                *g = cast;
              }
              c.GiveGrad(0, ga);
              c.GiveGrad(1, gb);
            });
  return y;
}

TensorId Ops::MulScalar(TensorId a) {
  const TensorId y = New(Elements(a), Dtype(a), "aten::mul");
  const uint64_t ba = sim_.Bytes(a);
  sim_.Node("MulBackward1", {a}, {y}, {}, [ba](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(ba, "aten::mul"));
  });
  return y;
}

TensorId Ops::Add(TensorId a, TensorId b) {
  const DType d = ElementSize(Dtype(a)) >= ElementSize(Dtype(b)) ? Dtype(a) : Dtype(b);
  const uint64_t n = std::max(Elements(a), Elements(b));
  const TensorId y = New(n, d, "aten::add");
  // An operand broadcast to the output (a bias, position embeddings) gets the gradient summed
  // to its shape; one of the output's shape gets it as it is, or, when its dtype is not the
  // output's (a bf16 branch added to the fp32 residual stream under autocast), the engine's
  // validate_outputs casts it to the operand's dtype.
  const uint64_t reduce_a = Elements(a) < n ? sim_.Bytes(a) : 0;
  const uint64_t reduce_b = Elements(b) < n ? sim_.Bytes(b) : 0;
  const uint64_t cast_a = Dtype(a) != d ? sim_.Bytes(a) : 0;
  const uint64_t cast_b = Dtype(b) != d ? sim_.Bytes(b) : 0;
  sim_.Node("AddBackward0", {a, b}, {y}, {},
            [reduce_a, reduce_b, cast_a, cast_b](BackwardContext& c) {
              auto one = [&](size_t input, uint64_t reduce, uint64_t cast) {
                if (reduce > 0) {
                  if (c.Needs(input)) c.GiveGrad(input, c.New(reduce, "aten::sum"));
                } else if (cast > 0) {
                  if (c.Needs(input)) c.GiveGrad(input, c.New(cast, "aten::_to_copy"));
                } else {
                  c.PassGrad(input);
                }
              };
              one(0, reduce_a, cast_a);
              one(1, reduce_b, cast_b);
            });
  return y;
}

TensorId Ops::Dropout(TensorId x, double p) {
  if (p <= 0) {
    sim_.Ref(x);
    return x;
  }
  // native_dropout: the output, then the bool mask it saves.
  const TensorId y = New(Elements(x), Dtype(x), "aten::native_dropout");
  const TensorId mask = New(Elements(x), DType::kBool, "aten::native_dropout");
  const uint64_t bytes = sim_.Bytes(x);
  sim_.Node("NativeDropoutBackward0", {x}, {y}, {mask}, [bytes](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(bytes, "aten::native_dropout_backward"));
  });
  sim_.Free(mask);
  return y;
}

TensorId Ops::LayerNorm(TensorId x, const Weight& gamma, const Weight& beta, uint64_t rows,
                        uint64_t hidden) {
  // layer_norm runs in fp32 under autocast.
  TensorId xin = x;
  if (precision_.autocast && Dtype(x) != DType::kF32) {
    xin = Cast(x, DType::kF32);
  } else {
    sim_.Ref(xin);
  }
  const DType d = Dtype(xin);
  const TensorId y = New(rows * hidden, d, "aten::native_layer_norm");
  const TensorId mean = New(rows, DType::kF32, "aten::native_layer_norm");
  const TensorId rstd = New(rows, DType::kF32, "aten::native_layer_norm");
  const uint64_t gx = sim_.Bytes(xin);
  const uint64_t gg = gamma.t != kNoTensor ? sim_.Bytes(gamma.t) : 0;
  const uint64_t gb = beta.t != kNoTensor ? sim_.Bytes(beta.t) : 0;
  sim_.Node("NativeLayerNormBackward0", {xin, gamma.t, beta.t}, {y},
            {xin, gamma.t, beta.t, mean, rstd}, [gx, gg, gb](BackwardContext& c) {
              if (c.Needs(0)) c.GiveGrad(0, c.New(gx, "aten::native_layer_norm_backward"));
              if (gg > 0 && c.Needs(1)) {
                c.GiveGrad(1, c.New(gg, "aten::native_layer_norm_backward"));
              }
              if (gb > 0 && c.Needs(2)) {
                c.GiveGrad(2, c.New(gb, "aten::native_layer_norm_backward"));
              }
            });
  sim_.Free(mean);
  sim_.Free(rstd);
  sim_.Free(xin);
  return y;
}

TensorId Ops::RmsNorm(TensorId x, const Weight& gamma, uint64_t rows, uint64_t hidden) {
  // transformers' LlamaRMSNorm: h = x.to(float32); var = h.pow(2).mean(-1, keepdim=True);
  // h = h * rsqrt(var + eps); return weight * h.to(input_dtype).
  const DType in_dtype = Dtype(x);
  TensorId h = x;
  if (in_dtype != DType::kF32) {
    h = Cast(x, DType::kF32);
  } else {
    sim_.Ref(h);
  }
  // Each backward as PyTorch's formula computes it, one kernel per operator: PowBackward0 is
  // grad * (2 * h.pow(1)) (pow_backward), MeanBackward1 grad.expand(...) / n (the expand is a
  // view), RsqrtBackward0 -0.5 * grad * result.pow(3); the intermediates go when the formula
  // is done.
  auto formula = [](BackwardContext& c, uint64_t bytes, const char* first) {
    if (!c.Needs(0)) return;
    const TensorId t1 = c.New(bytes, first);
    const TensorId t2 = c.New(bytes, "aten::mul");
    const TensorId g = c.New(bytes, "aten::mul");
    c.Free(t2);
    c.Free(t1);
    c.GiveGrad(0, g);
  };
  const TensorId sq = New(Elements(h), DType::kF32, "aten::pow");
  sim_.Node("PowBackward0", {h}, {sq}, {h}, [formula, bytes = sim_.Bytes(h)](BackwardContext& c) {
    formula(c, bytes, "aten::pow");
  });
  const TensorId var = New(rows, DType::kF32, "aten::mean");
  sim_.Node("MeanBackward1", {sq}, {var}, {}, [bytes = sim_.Bytes(sq)](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(bytes, "aten::div"));
  });
  sim_.Free(sq);
  const TensorId var_eps = New(rows, DType::kF32, "aten::add");
  sim_.Node("AddBackward0", {var}, {var_eps}, {}, [](BackwardContext& b) { b.PassGrad(0); });
  sim_.Free(var);
  const TensorId inv = New(rows, DType::kF32, "aten::rsqrt");
  sim_.Node("RsqrtBackward0", {var_eps}, {inv}, {inv},
            [formula, bytes = sim_.Bytes(var_eps)](BackwardContext& c) {
              formula(c, bytes, "aten::pow");
            });
  sim_.Free(var_eps);
  // h * inv (broadcast): saves both.
  const TensorId normed = New(rows * hidden, DType::kF32, "aten::mul");
  const uint64_t bh = sim_.Bytes(h), bi = sim_.Bytes(inv);
  sim_.Node("MulBackward0", {h, inv}, {normed}, MulSaves(sim_, h, inv),
            [bh, bi](BackwardContext& c) {
              if (c.Needs(0)) c.GiveGrad(0, c.New(bh, "aten::mul"));
              if (c.Needs(1)) {
                const TensorId full = c.New(bh, "aten::mul");
                c.GiveGrad(1, c.New(bi, "aten::sum"));
                c.Free(full);
              }
            });
  sim_.Free(inv);
  sim_.Free(h);
  TensorId back = normed;
  if (in_dtype != DType::kF32) {
    back = Cast(normed, in_dtype);
    sim_.Free(normed);
  }
  // weight * h: the weight is in the parameter dtype (fp32 under autocast: the product is
  // fp32, as type promotion says).
  const DType out_dtype =
      ElementSize(precision_.param) > ElementSize(in_dtype) ? precision_.param : in_dtype;
  const TensorId y = New(rows * hidden, out_dtype, "aten::mul");
  const uint64_t bw = sim_.Bytes(gamma.t), bx = sim_.Bytes(back);
  const uint64_t by = sim_.Bytes(y);
  sim_.Node("MulBackward0", {gamma.t, back}, {y}, MulSaves(sim_, gamma.t, back),
            [bw, bx, by](BackwardContext& c) {
              // Both products first, then the weight gradient's reduction.
              const TensorId full = c.Needs(0) ? c.New(by, "aten::mul") : kNoTensor;
              if (c.Needs(1)) c.GiveGrad(1, c.New(bx, "aten::mul"));
              if (c.Needs(0)) {
                c.GiveGrad(0, c.New(bw, "aten::sum"));
                c.Free(full);
              }
            });
  sim_.Free(back);
  return y;
}

TensorId Ops::Embedding(TensorId ids, const Weight& table, uint64_t rows, uint64_t hidden) {
  const TensorId t = Gathered(table.t);
  const TensorId y = New(rows * hidden, Dtype(t), "aten::embedding");
  const uint64_t gt = Elements(t) * ElementSize(Dtype(t));
  sim_.Node("EmbeddingBackward0", {t}, {y}, {ids}, [gt, rows](BackwardContext& c) {
    if (!c.Needs(0)) return;
    // embedding_dense_backward on CUDA sorts the indices first.
    const TensorId sorted = c.New(rows * 8, "aten::sort");
    const TensorId order = c.New(rows * 8, "aten::sort");
    c.GiveGrad(0, c.New(gt, "aten::embedding_dense_backward"));
    c.Free(sorted);
    c.Free(order);
  });
  if (sharded()) ReleaseGathered(t);
  sim_.Free(t);
  return y;
}

TensorId Ops::SdpaOperand(TensorId t) {
  if (precision_.autocast && Dtype(t) != *precision_.autocast) return Cast(t, *precision_.autocast);
  sim_.Ref(t);
  return t;
}

BackwardFn Ops::FusedAttentionBackward(uint64_t bq, uint64_t bk, uint64_t bv, uint64_t delta,
                                       std::string op) {
  return [bq, bk, bv, delta, op = std::move(op)](BackwardContext& c) {
    const TensorId dq = c.New(bq, op);
    const TensorId dk = c.New(bk, op);
    const TensorId dv = c.New(bv, op);
    // The kernels' delta (the row sums of dO * O), fp32, freed before they return.
    const TensorId softmax_d = c.New(delta, op);
    c.Free(softmax_d);
    c.GiveGrad(0, dq);
    c.GiveGrad(1, dk);
    c.GiveGrad(2, dv);
  };
}

TensorId Ops::FusedAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                             uint64_t kv_heads, uint64_t seq, uint64_t head_dim) {
  // Autocast casts the arguments last to first.
  const TensorId vi = SdpaOperand(v), ki = SdpaOperand(k), qi = SdpaOperand(q);
  const DType d = Dtype(qi);
  const TensorId out =
      New(batch * heads * seq * head_dim, d, "aten::_scaled_dot_product_attention");
  // The kernel PyTorch (2.9 and later) picks on sm90: memory-efficient for fp32; for 16-bit
  // inputs cuDNN when K and V have every head and the head dim is at most 128 (a multiple of
  // 8), else flash (grouped-query attention through enable_gqa).
  // The log-sum-exp per query, fp32; the memory-efficient kernel pads the queries to a multiple
  // of 32. Then the RNG state the kernel saves for backward: cuDNN's philox seed and offset,
  // [1] int64 each on the device; flash's `rng_state` [2] uint64 and an unused 0-d uint64, on
  // the device (flash_api.cpp mha_fwd); the memory-efficient kernel allocates none on the
  // device (the fp32 H200 goldens, torch 2.11: only its output and log-sum-exp).
  const bool fp32 = d == DType::kF32;
  const bool cudnn = kv_heads == heads && head_dim <= 128 && head_dim % 8 == 0;
  const uint64_t lse_seq = fp32 ? (seq + 31) / 32 * 32 : seq;
  const TensorId lse =
      New(batch * heads * lse_seq, DType::kF32, "aten::_scaled_dot_product_attention");
  const TensorId seed =
      fp32 ? kNoTensor : New(cudnn ? 1 : 2, DType::kI64, "aten::_scaled_dot_product_attention");
  const TensorId offset =
      fp32 ? kNoTensor : New(1, DType::kI64, "aten::_scaled_dot_product_attention");
  const uint64_t bq = sim_.Bytes(qi), bk = sim_.Bytes(ki), bv = sim_.Bytes(vi);
  const uint64_t delta = batch * heads * seq * 4;
  sim_.Node(
      "ScaledDotProductAttentionBackward0", {qi, ki, vi}, {out},
      {qi, ki, vi, out, lse, seed, offset},
      FusedAttentionBackward(bq, bk, bv, delta, "aten::_scaled_dot_product_attention_backward"));
  sim_.Free(lse);
  sim_.Free(seed);
  sim_.Free(offset);
  sim_.Free(qi);
  sim_.Free(ki);
  sim_.Free(vi);
  return out;
}

TensorId Ops::SdpaMath(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                       uint64_t seq, uint64_t head_dim, double dropout) {
  const DType d = Dtype(q);
  const uint64_t full = batch * heads * seq * head_dim;
  // q * sqrt(scale): "scale before the product for stability".
  const TensorId q_scaled = MulScalar(q);
  // is_causal: ones({L, S}, bool).tril(), made a float mask by where(mask, 0.0, -inf).
  const TensorId ones = New(seq * seq, DType::kBool, "aten::ones");
  const TensorId tril = New(seq * seq, DType::kBool, "aten::tril");
  sim_.Free(ones);
  const TensorId zero = New(1, DType::kF32, "aten::scalar_tensor");
  const TensorId minus_inf = New(1, DType::kF32, "aten::scalar_tensor");
  const TensorId mask = New(seq * seq, d, "aten::where");
  sim_.Free(minus_inf);
  sim_.Free(zero);
  sim_.Free(tril);
  // enable_gqa: repeat_interleave of K and V to every head (a copy; its backward sums).
  auto repeat = [&](TensorId t) {
    const TensorId r = New(full, Dtype(t), "aten::clone");
    sim_.Node("RepeatInterleaveBackward0", {t}, {r}, {},
              [bytes = sim_.Bytes(t)](BackwardContext& c) {
                if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::sum"));
              });
    return r;
  };
  const TensorId k_rep = repeat(k);
  const TensorId v_rep = repeat(v);
  // k^T * sqrt(scale), saved by the product.
  const TensorId k_scaled = MulScalar(k_rep);
  // matmul folds q [b, heads, s, d] (in the projection's [b, s, heads, d] layout) with a copy.
  const TensorId q_fold = Copy(q_scaled, "aten::clone");
  // attn = q @ k^T; BmmBackward0 computes mat2's gradient first.
  const TensorId scores = New(batch * heads * seq * seq, d, "aten::bmm");
  sim_.Matmul("aten::bmm");
  sim_.Node("BmmBackward0", {q_fold, k_scaled}, {scores}, {q_fold, k_scaled},
            [bq = sim_.Bytes(q_fold), bk = sim_.Bytes(k_scaled)](BackwardContext& c) {
              if (c.Needs(1)) {
                c.GiveGrad(1, c.New(bk, "aten::bmm"));
                c.Matmul("aten::bmm");
              }
              if (c.Needs(0)) {
                c.GiveGrad(0, c.New(bq, "aten::bmm"));
                c.Matmul("aten::bmm");
              }
            });
  // attn.add_(mask): in place (no new storage), no gradient of its own to make.
  const TensorId probs =
      Elementwise(*this, scores, "aten::_safe_softmax", "SoftmaxBackward0", false, true);
  sim_.Free(scores);
  const TensorId pd = Dropout(probs, dropout);
  sim_.Free(probs);
  const TensorId out = New(full, d, "aten::bmm");
  sim_.Matmul("aten::bmm");
  sim_.Node("BmmBackward0", {pd, v_rep}, {out}, {pd, v_rep},
            [bp = sim_.Bytes(pd), bv = sim_.Bytes(v_rep)](BackwardContext& c) {
              if (c.Needs(1)) {
                c.GiveGrad(1, c.New(bv, "aten::bmm"));
                c.Matmul("aten::bmm");
              }
              if (c.Needs(0)) {
                c.GiveGrad(0, c.New(bp, "aten::bmm"));
                c.Matmul("aten::bmm");
              }
            });
  // The kernel's locals go when it returns.
  sim_.Free(pd);
  sim_.Free(q_fold);
  sim_.Free(k_scaled);
  sim_.Free(v_rep);
  sim_.Free(k_rep);
  sim_.Free(q_scaled);
  sim_.Free(mask);
  return out;
}

TensorId Ops::MathAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                            uint64_t seq, uint64_t head_dim, double dropout) {
  const DType d = Dtype(q);
  const uint64_t scores_n = batch * heads * seq * seq;
  // scores = q @ k^T (bmm saves both operands).
  const TensorId scores = New(scores_n, d, "aten::bmm");
  sim_.Matmul("aten::bmm");
  const uint64_t bq = sim_.Bytes(q), bk = sim_.Bytes(k), bv = sim_.Bytes(v);
  // BmmBackward0 computes the gradient of `mat2` first.
  sim_.Node("BmmBackward0", {q, k}, {scores}, {q, k}, [bq, bk](BackwardContext& c) {
    if (c.Needs(1)) {
      c.GiveGrad(1, c.New(bk, "aten::bmm"));
      c.Matmul("aten::bmm");
    }
    if (c.Needs(0)) {
      c.GiveGrad(0, c.New(bq, "aten::bmm"));
      c.Matmul("aten::bmm");
    }
  });
  // / sqrt(d), + mask: one new tensor each, nothing saved.
  const TensorId scaled = MulScalar(scores);
  sim_.Free(scores);
  // softmax (fp32 under autocast) saves its output.
  TensorId probs_in = scaled;
  if (precision_.autocast && d != DType::kF32) {
    probs_in = Cast(scaled, DType::kF32);
    sim_.Free(scaled);
  }
  const TensorId probs =
      Elementwise(*this, probs_in, "aten::_softmax", "SoftmaxBackward0", false, true);
  sim_.Free(probs_in);
  TensorId p = probs;
  if (precision_.autocast && d != DType::kF32) {
    p = Cast(probs, d);
    sim_.Free(probs);
  }
  const TensorId pd = Dropout(p, dropout);
  sim_.Free(p);
  // out = probs @ v
  const TensorId out = New(batch * heads * seq * head_dim, d, "aten::bmm");
  sim_.Matmul("aten::bmm");
  const uint64_t bp = sim_.Bytes(pd);
  // BmmBackward0 computes the gradient of `mat2` first.
  sim_.Node("BmmBackward0", {pd, v}, {out}, {pd, v}, [bp, bv](BackwardContext& c) {
    if (c.Needs(1)) {
      c.GiveGrad(1, c.New(bv, "aten::bmm"));
      c.Matmul("aten::bmm");
    }
    if (c.Needs(0)) {
      c.GiveGrad(0, c.New(bp, "aten::bmm"));
      c.Matmul("aten::bmm");
    }
  });
  sim_.Free(pd);
  return out;
}

TensorId Ops::LayoutView(TensorId x) {
  const TensorId v = View(x, Elements(x));
  sim_.Node("ViewBackward0", {x}, {v}, {}, [bytes = sim_.Bytes(x)](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::clone"));
  });
  return v;
}

TensorId Ops::Rotary(TensorId x, TensorId cos, TensorId sin) {
  // transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, where rotate_half is
  // x1 = x[..., :d/2], x2 = x[..., d/2:], cat(-x2, x1). The products save cos and sin (x needs
  // the gradient); with fp32 cos/sin under autocast the results are fp32 (type promotion).
  const TensorId a = Mul(x, cos);
  // The halves are views; each SliceBackward0 writes its gradient into zeros of x's size.
  const uint64_t half = Elements(x) / 2, full_bytes = sim_.Bytes(x);
  auto slice = [&] {
    const TensorId s = View(x, half);
    sim_.Node("SliceBackward0", {x}, {s}, {}, [full_bytes](BackwardContext& c) {
      if (c.Needs(0)) c.GiveGrad(0, c.New(full_bytes, "aten::slice_backward"));
    });
    return s;
  };
  const TensorId x1 = slice();
  const TensorId x2 = slice();
  const TensorId neg = New(half, Dtype(x), "aten::neg");
  sim_.Node("NegBackward0", {x2}, {neg}, {}, [bytes = sim_.Bytes(neg)](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::neg"));
  });
  sim_.Free(x2);
  const TensorId rot = New(Elements(x), Dtype(x), "aten::cat");
  // CatBackward0 hands each input a narrow view of the gradient: no allocation.
  sim_.Node("CatBackward0", {neg, x1}, {rot}, {}, [](BackwardContext& c) {
    c.PassGrad(0);
    c.PassGrad(1);
  });
  sim_.Free(neg);
  sim_.Free(x1);
  const TensorId b = Mul(rot, sin);
  sim_.Free(rot);
  const TensorId y = Add(a, b);
  sim_.Free(a);
  sim_.Free(b);
  return y;
}

TensorId Ops::Conv2d(TensorId x, const Weight& w, uint64_t out_elements, const Weight& bias) {
  // Autocast casts the arguments last to first: bias, weight, input.
  const TensorId bin = bias.t != kNoTensor ? ForMatmul(bias.t, true) : kNoTensor;
  const TensorId win = ForMatmul(w.t, true);
  const TensorId xin = ForMatmul(x, false);
  const TensorId y = New(out_elements, precision_.Compute(), "aten::cudnn_convolution");
  sim_.Conv(0);
  const uint64_t gx = sim_.Bytes(xin), gw = sim_.Bytes(win);
  const uint64_t gb = bin != kNoTensor ? sim_.Bytes(bin) : 0;
  // ConvolutionBackward0 keeps both the input and the weight (the autocast copy of it, too).
  std::vector<TensorId> inputs = {xin, win};
  if (bin != kNoTensor) inputs.push_back(bin);
  sim_.Node("ConvolutionBackward0", inputs, {y}, {xin, win}, [gx, gw, gb](BackwardContext& c) {
    if (c.Needs(0)) {
      c.GiveGrad(0, c.New(gx, "aten::convolution_backward"));
      c.Conv(0);
    }
    if (c.Needs(1)) {
      c.GiveGrad(1, c.New(gw, "aten::convolution_backward"));
      c.Conv(0);
    }
    if (gb > 0 && c.Needs(2)) c.GiveGrad(2, c.New(gb, "aten::convolution_backward"));
  });
  sim_.Free(xin);
  sim_.Free(win);
  sim_.Free(bin);
  return y;
}

TensorId Ops::BatchNorm2d(TensorId x, const Weight& gamma, const Weight& beta, uint64_t channels) {
  // cudnn_batch_norm (fp32 under autocast? batch_norm is not on autocast's lists: it runs in
  // the input's dtype with fp32 statistics): output, save_mean, save_invstd, reserve.
  const TensorId y = New(Elements(x), Dtype(x), "aten::cudnn_batch_norm");
  const TensorId mean = New(channels, DType::kF32, "aten::cudnn_batch_norm");
  const TensorId invstd = New(channels, DType::kF32, "aten::cudnn_batch_norm");
  const uint64_t gx = sim_.Bytes(x), gg = sim_.Bytes(gamma.t), gb = sim_.Bytes(beta.t);
  sim_.Node("CudnnBatchNormBackward0", {x, gamma.t, beta.t}, {y}, {x, gamma.t, mean, invstd},
            [gx, gg, gb](BackwardContext& c) {
              if (c.Needs(0)) c.GiveGrad(0, c.New(gx, "aten::cudnn_batch_norm_backward"));
              if (c.Needs(1)) c.GiveGrad(1, c.New(gg, "aten::cudnn_batch_norm_backward"));
              if (c.Needs(2)) c.GiveGrad(2, c.New(gb, "aten::cudnn_batch_norm_backward"));
            });
  sim_.Free(mean);
  sim_.Free(invstd);
  return y;
}

TensorId Ops::MaxPool2d(TensorId x, uint64_t out_elements) {
  const TensorId y = New(out_elements, Dtype(x), "aten::max_pool2d_with_indices");
  const TensorId idx = New(out_elements, DType::kI64, "aten::max_pool2d_with_indices");
  const uint64_t gx = sim_.Bytes(x);
  sim_.Node("MaxPool2DWithIndicesBackward0", {x}, {y}, {x, idx}, [gx](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(gx, "aten::max_pool2d_with_indices_backward"));
  });
  sim_.Free(idx);
  return y;
}

TensorId Ops::AdaptiveAvgPool(TensorId x, uint64_t out_elements) {
  const TensorId y = New(out_elements, Dtype(x), "aten::mean");
  const uint64_t gx = sim_.Bytes(x);
  sim_.Node("MeanBackward1", {x}, {y}, {}, [gx](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(gx, "aten::expand"));
  });
  return y;
}

TensorId Ops::MseLoss(TensorId out, TensorId target) {
  // mse_loss runs in fp32 under autocast; the kernel writes the elementwise loss into a
  // tensor the mean then lives in (the loss's storage keeps the full size: the goldens'
  // sidecars show a 4-byte loss on a 256 KiB storage) and uses one more temporary.
  TensorId o = out;
  if (precision_.autocast && Dtype(out) != DType::kF32) {
    o = Cast(out, DType::kF32);
  } else {
    sim_.Ref(o);
  }
  const uint64_t n = Elements(o);
  const TensorId loss = New(n, DType::kF32, "aten::mse_loss");
  const TensorId tmp = New(n, DType::kF32, "aten::mse_loss");
  sim_.Free(tmp);
  const uint64_t go = sim_.Bytes(o);
  sim_.Node("MseLossBackward0", {o}, {loss}, {o, target}, [go](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(go, "aten::mse_loss_backward"));
  });
  sim_.Free(o);
  return loss;
}

TensorId Ops::CrossEntropy(TensorId logits, uint64_t rows, uint64_t classes, TensorId target) {
  // F.cross_entropy = log_softmax + nll_loss. log_softmax runs in the logits' dtype and saves
  // its output; under autocast nll_loss is an fp32 op, so its input is a cast of that output,
  // which it saves (golden bert_b16s512_bf16amp, events 1061-1246: bf16 log-probabilities,
  // their fp32 copy; in backward the fp32 gradient, its bf16 copy, then the logits' gradient).
  const TensorId logp =
      Elementwise(*this, logits, "aten::_log_softmax", "LogSoftmaxBackward0", false, true);
  TensorId nll_in = logp;
  if (precision_.autocast && Dtype(logp) != DType::kF32) {
    nll_in = Cast(logp, DType::kF32);
  } else {
    sim_.Ref(nll_in);
  }
  sim_.Free(logp);
  const TensorId loss = New(1, DType::kF32, "aten::nll_loss_forward");
  const TensorId total_weight = New(1, DType::kF32, "aten::nll_loss_forward");
  const uint64_t gl = rows * classes * ElementSize(Dtype(nll_in));
  sim_.Node("NllLossBackward0", {nll_in}, {loss}, {nll_in, target, total_weight},
            [gl](BackwardContext& c) {
              if (c.Needs(0)) c.GiveGrad(0, c.New(gl, "aten::nll_loss_backward"));
            });
  sim_.Free(total_weight);
  sim_.Free(nll_in);
  return loss;
}

TensorId Ops::FusedLinearCrossEntropy(TensorId x, const LinearWeights& lw, uint64_t rows,
                                      TensorId target) {
  // liger_kernel/ops/fused_linear_cross_entropy.py (fused_linear_cross_entropy_forward).
  const uint64_t in = lw.in, out = lw.out;
  const uint64_t inc_factor = (out + in - 1) / std::max<uint64_t>(in, 1);
  uint64_t chunk = 1;
  while (chunk < (rows + inc_factor - 1) / inc_factor) chunk <<= 1;
  const uint64_t chunks = (rows + chunk - 1) / chunk;
  const TensorId wg = Gathered(lw.w.t);
  // The autograd.Function's forward runs without grad; autocast still casts the matmuls (the
  // weight's cast is cached: a leaf that requires grad).
  const bool was_enabled = sim_.grad_enabled();
  sim_.set_grad_enabled(false);
  const TensorId w = ForMatmul(wg, true);
  const bool weight_grad = sim_.RequiresGrad(lw.w.t);
  const TensorId grad_weight =
      weight_grad ? New(Elements(wg), Dtype(wg), "aten::zeros_like") : kNoTensor;
  const TensorId grad_input = New(rows * in, Dtype(x), "aten::zeros_like");
  const TensorId loss_1d = New(rows, DType::kF32, "aten::zeros");
  const DType compute = precision_.Compute();
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t n = std::min(chunk, rows - c * chunk);
    const TensorId logits = New(n * out, compute, "aten::mm");  // _input_chunk @ weight.t()
    sim_.Matmul("aten::mm");
    // grad_input[start:end] = grad_logits_chunk @ weight: a chunk-sized product, copied in.
    const TensorId part = New(n * in, compute, "aten::mm");
    sim_.Matmul("aten::mm");
    sim_.Free(part);
    if (weight_grad) sim_.Matmul("aten::addmm");  // torch.addmm(..., out=grad_weight)
    sim_.Free(logits);
  }
  const TensorId loss = New(1, DType::kF32, "aten::sum");
  sim_.Free(loss_1d);
  sim_.Free(w);
  sim_.set_grad_enabled(was_enabled);
  // Backward with grad_output 1 hands the kept gradients on unchanged.
  sim_.Node("LigerFusedLinearCrossEntropyFunctionBackward", {x, wg}, {loss},
            {grad_input, grad_weight, target}, [grad_input, grad_weight](BackwardContext& c) {
              if (c.Needs(0)) {
                c.sim().Ref(grad_input);
                c.GiveGrad(0, grad_input);
              }
              if (grad_weight != kNoTensor && c.Needs(1)) {
                c.sim().Ref(grad_weight);
                c.GiveGrad(1, grad_weight);
              }
            });
  sim_.Free(grad_input);
  if (grad_weight != kNoTensor) sim_.Free(grad_weight);
  ReleaseGathered(wg);
  sim_.Free(wg);
  return loss;
}

}  // namespace vramscope::predict
