// Attention through an explicit mask, as a packed batch runs it (transformers with
// DataCollatorWithFlattening under sdpa): the mask cannot go to the flash or cuDNN kernels, so
// scaled_dot_product_attention takes the memory-efficient one, and transformers, which asks
// sdpa for grouped-query attention only without a mask, repeats K and V to every head first.
// docs/design/techniques.md says what this leaves out.
#include "predict/layers.h"

namespace vramscope::predict {

TensorId Ops::RepeatKv(TensorId x, uint64_t n_rep) {
  // x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d): the reshape of the
  // expanded view copies. Backward: the reshape's gradient is a view, the expand's a sum over
  // the copies (sum_to_size) into a tensor of x's size.
  const TensorId y = New(Elements(x) * n_rep, Dtype(x), "aten::clone");
  sim_.Node("ExpandBackward0", {x}, {y}, {}, [bytes = sim_.Bytes(x)](BackwardContext& c) {
    if (c.Needs(0)) c.GiveGrad(0, c.New(bytes, "aten::sum"));
  });
  return y;
}

TensorId Ops::MaskedAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                              uint64_t seq, uint64_t head_dim) {
  // Autocast casts the floating-point arguments, last to first; the boolean mask stays as it is.
  const TensorId vi = SdpaOperand(v), ki = SdpaOperand(k), qi = SdpaOperand(q);
  const DType d = Dtype(qi);
  // attention.cpp's convert_boolean_attn_mask: where(mask, 0.0, scalar_tensor(-inf, q.dtype)),
  // the additive bias in q's dtype; preprocess_mask pads its last dimension to a multiple of 8
  // (the kernel's alignment) when the rows' stride, seq, is not one, keeps the padded tensor and
  // expands it to every head (a view).
  // Both scalars are device tensors of q's dtype: the -inf, then where's wrapped 0.0.
  const TensorId minus_inf = New(1, d, "aten::scalar_tensor");
  const TensorId zero = New(1, d, "aten::scalar_tensor");
  TensorId bias = New(batch * seq * seq, d, "aten::where");
  sim_.Free(zero);
  sim_.Free(minus_inf);
  if (seq % 8 != 0) {
    const TensorId padded = New(batch * seq * (seq + 8 - seq % 8), d, "aten::constant_pad_nd");
    sim_.Free(bias);
    bias = padded;
  }
  // _scaled_dot_product_efficient_attention: the output [b, heads, s, d] (laid out
  // [b, s, heads, d], so transformers' transpose + contiguous copies nothing) and the fp32
  // log-sum-exp per query, padded to a multiple of 32; no RNG state on the device without
  // dropout. Backward saves the bias with q, k, v, the output and the log-sum-exp.
  const TensorId out =
      New(batch * heads * seq * head_dim, d, "aten::_scaled_dot_product_efficient_attention");
  const TensorId lse = New(batch * heads * ((seq + 31) / 32 * 32), DType::kF32,
                           "aten::_scaled_dot_product_efficient_attention");
  const uint64_t bq = sim_.Bytes(qi), bk = sim_.Bytes(ki), bv = sim_.Bytes(vi);
  const uint64_t delta = batch * heads * seq * 4;
  sim_.Node("ScaledDotProductEfficientAttentionBackward0", {qi, ki, vi}, {out},
            {qi, ki, vi, bias, out, lse},
            FusedAttentionBackward(bq, bk, bv, delta,
                                   "aten::_scaled_dot_product_efficient_attention_backward"));
  sim_.Free(lse);
  sim_.Free(bias);
  sim_.Free(qi);
  sim_.Free(ki);
  sim_.Free(vi);
  return out;
}

}  // namespace vramscope::predict
