// torchao's float8 training (convert_to_float8_training with the default Float8LinearConfig:
// tensorwise dynamic scaling), as eager PyTorch runs Float8Linear: each product's operands cast
// to float8 right before it and dropped right after, the high-precision input and weight saved
// for backward (torchao's matmul_with_hp_or_float8_args). docs/design/techniques.md says what a
// step holds and what --compile would change.
#include "predict/layers.h"

namespace vramscope::predict {

namespace {

// A tensor cast to float8 (torchao's hp_tensor_to_float8_dynamic), in kernel order as the tracer
// records it on fake CUDA tensors (torchao 0.18, torch 2.15): amax = max(abs(x)) (the abs a
// temporary the size of x, the max a scalar of x's dtype); scale = finfo.max / clamp(amax) in
// float64, then float32; x.to(float32) (nothing when x is float32) * scale, clamped, .to(float8).
// Leaves the float8 bits (1 B per element) and the scale (4 B); `where` is the StepSimulator in
// forward or the BackwardContext in backward (New(bytes, op), Free).
struct Float8Cast {
  TensorId bits = kNoTensor, scale = kNoTensor;
};

template <typename Where>
Float8Cast CastToFloat8(Where& where, uint64_t elements, DType hp) {
  const uint64_t e = ElementSize(hp);
  const TensorId abs = where.New(elements * e, "aten::abs");
  const TensorId amax = where.New(e, "aten::max");
  where.Free(abs);
  const TensorId amax64 = where.New(8, "aten::_to_copy");
  const TensorId clamped_amax = where.New(8, "aten::clamp");
  const TensorId reciprocal = where.New(8, "aten::reciprocal");
  const TensorId scale64 = where.New(8, "aten::mul");
  where.Free(reciprocal);
  where.Free(clamped_amax);
  Float8Cast out;
  out.scale = where.New(4, "aten::_to_copy");
  where.Free(scale64);
  where.Free(amax64);
  where.Free(amax);
  const TensorId upcast = hp == DType::kF32 ? kNoTensor : where.New(elements * 4, "aten::_to_copy");
  const TensorId scaled = where.New(elements * 4, "aten::mul");
  where.Free(upcast);
  const TensorId saturated = where.New(elements * 4, "aten::clamp");
  out.bits = where.New(elements, "aten::_to_copy");
  where.Free(saturated);
  where.Free(scaled);
  return out;
}

template <typename Where>
void FreeCast(Where& where, const Float8Cast& c) {
  where.Free(c.bits);
  where.Free(c.scale);
}

}  // namespace

TensorId Ops::Float8Linear(TensorId x, const LinearWeights& lw, uint64_t rows) {
  // Float8Linear.forward: under autocast the input is cast to the autocast dtype (ForMatmul);
  // the weight goes in as it is (no autocast copy of it is made or kept).
  const TensorId xin = ForMatmul(x, false);
  const TensorId w = Gathered(lw.w.t);
  const DType hp = Dtype(xin), wdtype = Dtype(w);
  const Float8Cast x8 = CastToFloat8(sim_, rows * lw.in, hp);
  const Float8Cast w8 = CastToFloat8(sim_, lw.in * lw.out, wdtype);
  // torch._scaled_mm: the output in the input's original dtype.
  const TensorId y = New(rows * lw.out, hp, "aten::mm");
  sim_.Matmul("aten::_scaled_mm");
  FreeCast(sim_, w8);
  FreeCast(sim_, x8);
  const uint64_t gx = rows * lw.in * ElementSize(hp);
  const uint64_t gw = lw.in * lw.out * ElementSize(hp);
  const uint64_t gw_param = lw.in * lw.out * ElementSize(wdtype);
  const uint64_t regather = sharded() ? Elements(lw.w.t) * ElementSize(wdtype) : 0;
  // Backward casts the incoming gradient and the weight for the input's gradient, then the
  // gradient and the input again (the other layout) for the weight's: every float8 copy lives
  // to the node's end. It computes both gradients whatever needs them.
  sim_.Node("matmul_with_hp_or_float8_argsBackward", {xin, w}, {y}, {xin, w},
            [=, nd = linear_inputs_nd](BackwardContext& c) {
              const TensorId gathered =
                  regather > 0 ? c.New(regather, "c10d::all_gather") : kNoTensor;
              const Float8Cast g8 = CastToFloat8(c, rows * lw.out, hp);
              const Float8Cast wt8 = CastToFloat8(c, lw.in * lw.out, wdtype);
              const TensorId grad_in = nd ? c.NewReshaped(gx, "aten::mm") : c.New(gx, "aten::mm");
              c.Matmul("aten::_scaled_mm");
              const Float8Cast g8t = CastToFloat8(c, rows * lw.out, hp);
              const Float8Cast x8t = CastToFloat8(c, rows * lw.in, hp);
              TensorId grad_w = c.New(gw, "aten::mm");
              c.Matmul("aten::_scaled_mm");
              FreeCast(c, g8);
              FreeCast(c, wt8);
              FreeCast(c, g8t);
              FreeCast(c, x8t);
              c.Free(gathered);
              // The engine casts a gradient to its input's dtype (an fp32 weight under autocast).
              if (gw_param != gw) {
                const TensorId cast = c.New(gw_param, "aten::_to_copy");
                c.Free(grad_w);
                grad_w = cast;
              }
              c.GiveGrad(1, grad_w);
              c.GiveGrad(0, grad_in);
            });
  sim_.Free(xin);
  if (sharded()) ReleaseGathered(w);
  sim_.Free(w);
  if (lw.b.t == kNoTensor) return y;
  // output + self.bias.to(output.dtype): the bias cast under autocast, then a new sum.
  const TensorId b = Dtype(lw.b.t) == hp ? (sim_.Ref(lw.b.t), lw.b.t) : Cast(lw.b.t, hp);
  const TensorId out = New(rows * lw.out, hp, "aten::add");
  const uint64_t gb = lw.out * ElementSize(hp);
  sim_.Node("AddBackward0", {y, b}, {out}, {}, [gb](BackwardContext& c) {
    c.PassGrad(0);
    if (c.Needs(1)) c.GiveGrad(1, c.New(gb, "aten::sum"));
  });
  sim_.Free(y);
  sim_.Free(b);
  return out;
}

}  // namespace vramscope::predict
