// The forward ops of the layers vramscope predicts, each with what it allocates on CUDA, what it
// saves for backward and what its backward allocates, in kernel order (PyTorch 2.x eager,
// checked against the H200 goldens). Shapes are element counts; dtypes follow autocast's policy
// (matmuls in the autocast dtype; layer_norm, softmax, losses in fp32).
//
// Convention: every op returns a new tensor holding one reference (the caller's) and never
// consumes its inputs; the caller Free()s what its Python code would drop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "predict/step_simulator.h"

namespace vramscope::predict {

struct Precision {
  DType param = DType::kF32;      // the weights' dtype
  std::optional<DType> autocast;  // torch.autocast dtype, when on
  DType Compute() const { return autocast ? *autocast : param; }
};

// A module's weight: the tensor and its shape.
struct Weight {
  TensorId t = kNoTensor;
  uint64_t elements = 0;  // of the whole weight (a ZeRO-3/FSDP rank holds a shard of it)
  bool trainable = true;
};

struct LinearWeights {
  Weight w, b;  // b.t == kNoTensor without a bias
  uint64_t in = 0, out = 0;
  // GPT-2's Conv1D calls torch.addmm(bias, x, weight) where nn.Linear calls
  // linear(x, weight, bias): autocast casts the arguments last to first, so weight, input, bias
  // instead of bias, weight, input.
  bool addmm_args = false;
  // A frozen bitsandbytes Linear4bit (QLoRA): `w` holds the packed NF4 codes (MakeNf4Linear).
  bool nf4 = false;
  // torchao's Float8Linear (--fp8): the products in float8, cast per call (Float8Linear).
  bool float8 = false;
};

class Ops {
 public:
  Ops(StepSimulator& sim, Precision precision);
  StepSimulator& sim() { return sim_; }
  const Precision& precision() const { return precision_; }
  // nn.Linear's inputs have more than two dimensions ([b, s, h]: the transformer families,
  // layer lists with a [seq, features] input): F.linear folds them for the mm, so the input's
  // gradient is a reshaped view of the mm result (BackwardContext::NewReshaped).
  bool linear_inputs_nd = false;

  // --- weights (made in the set-up phase, inside the current module scope) -----------------
  Weight MakeWeight(std::string_view name, uint64_t elements, bool trainable = true);
  LinearWeights MakeLinear(std::string_view name, uint64_t in, uint64_t out, bool bias,
                           bool trainable = true);
  // bitsandbytes' Linear4bit after quantisation (QLoRA's base layers, frozen), as
  // bnb.functional.quantize_4bit leaves it with nf4 and compress_statistics: the packed codes
  // (two per byte) as the weight, and its quant state: the absmax of each block of 64 quantised
  // to uint8 (blocks of 256, with their fp32 absmax and an fp32 offset) and the 16-entry NF4
  // code, all on the GPU; the bias, when there is one, in the weights' dtype.
  LinearWeights MakeNf4Linear(std::string_view name, uint64_t in, uint64_t out, bool bias);
  // A floating-point buffer (BatchNorm's running statistics, rotary frequencies), in the
  // weights' dtype.
  TensorId MakeBuffer(std::string_view name, uint64_t elements);

  // --- tensors --------------------------------------------------------------------------------
  TensorId Input(std::string_view name, uint64_t elements, DType dtype);
  DType Dtype(TensorId t) const;
  uint64_t Elements(TensorId t) const;
  TensorId New(uint64_t elements, DType dtype, std::string_view op);
  void Free(TensorId t) { sim_.Free(t); }
  // StepSimulator::Checkpoint, with the recomputation's input known to the ops (dtype, size).
  TensorId Checkpoint(TensorId x, std::function<TensorId(TensorId)> block);

  // --- ops ------------------------------------------------------------------------------------
  // x [rows, in] -> [rows, out]; addmm with a bias, mm without (F.linear folds leading dims).
  TensorId Linear(TensorId x, const LinearWeights& lw, uint64_t rows);
  // LoRA around a frozen linear: base(x) + B(A(dropout(x))) * scaling.
  TensorId LoraLinear(TensorId x, const LinearWeights& base, const LinearWeights& a,
                      const LinearWeights& b, uint64_t rows, double dropout);
  TensorId Gelu(TensorId x);
  TensorId GeluTanh(TensorId x);  // GPT-2's NewGELU written out (tanh form) is fused here
  TensorId Relu(TensorId x, bool inplace);
  TensorId Silu(TensorId x);
  TensorId Tanh(TensorId x);
  TensorId Sigmoid(TensorId x);
  TensorId Mul(TensorId a, TensorId b);  // same shapes (SwiGLU's gate * up)
  TensorId MulScalar(TensorId a);
  TensorId Add(TensorId a, TensorId b);  // residual add
  TensorId Dropout(TensorId x, double p);
  TensorId LayerNorm(TensorId x, const Weight& gamma, const Weight& beta, uint64_t rows,
                     uint64_t hidden);
  // LLaMA/Qwen2's RMSNorm as transformers writes it (fp32 upcast, pow, mean, rsqrt, two muls).
  TensorId RmsNorm(TensorId x, const Weight& gamma, uint64_t rows, uint64_t hidden);
  TensorId Embedding(TensorId ids, const Weight& table, uint64_t rows, uint64_t hidden);
  // Contiguous copy (transpose + contiguous, reshape of a non-contiguous tensor).
  TensorId Copy(TensorId x, std::string_view op = "aten::clone");
  // A view of x holding `elements` of its dtype (split, select): no storage of its own.
  TensorId View(TensorId x, uint64_t elements);
  TensorId Cast(TensorId x, DType to);
  // F.scaled_dot_product_attention on q, k, v [b, heads, s, d] (k/v may have fewer heads),
  // with the fused kernels (flash / cuDNN / memory-efficient): saves q, k, v, out and the
  // log-sum-exp; no s^2 tensor.
  TensorId FusedAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                          uint64_t kv_heads, uint64_t seq, uint64_t head_dim);
  // F.scaled_dot_product_attention's math kernel, `_scaled_dot_product_attention_math`, as it
  // runs causal grouped-query attention (is_causal, enable_gqa: what fp32 LLaMA/Qwen2 get on
  // sm90, where the fused kernels refuse it): q and k^T scaled by sqrt(scale) before the
  // product, the causal mask built inside, K and V repeated to every head, the mask added in
  // place, softmax, dropout, and the product with V: the output is [b, heads, s, d].
  TensorId SdpaMath(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                    uint64_t seq, uint64_t head_dim, double dropout);
  // F.scaled_dot_product_attention with a boolean mask [batch, 1, seq, seq] (a packed batch's
  // block-diagonal causal mask) and every head in q, k and v: the memory-efficient kernel, the
  // mask made an additive bias in q's dtype (layers_masked_attention.cc).
  TensorId MaskedAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                           uint64_t seq, uint64_t head_dim);
  // transformers' repeat_kv: K or V [b, kv_heads, s, d] copied to every one of `n_rep` query
  // heads; backward sums the copies' gradients back.
  TensorId RepeatKv(TensorId x, uint64_t n_rep);
  // Attention written out: softmax(q k^T / sqrt(d) + mask) v, with dropout on the probabilities.
  TensorId MathAttention(TensorId q, TensorId k, TensorId v, uint64_t batch, uint64_t heads,
                         uint64_t seq, uint64_t head_dim, double dropout);
  // A view through a transpose (a projection's `.view(b, s, heads, d).transpose(1, 2)`, an
  // attention output's `.transpose(1, 2)`) that the gradient coming back cannot take as it is:
  // contiguous in the other layout (after the rotary's backward, or a bmm's), it is copied to go
  // back through the transpose and the view (aten::clone).
  TensorId LayoutView(TensorId x);
  // Rotary embeddings applied to q or k [b, h, s, d] as transformers does (x*cos + rotate(x)*sin);
  // both products save cos or sin, so those live until the last layer's backward.
  TensorId Rotary(TensorId x, TensorId cos, TensorId sin);
  // Conv2d: x [n, cin, h, w] -> [n, cout, ho, wo], with the bias fused when given.
  TensorId Conv2d(TensorId x, const Weight& w, uint64_t out_elements, const Weight& bias = {});
  TensorId BatchNorm2d(TensorId x, const Weight& gamma, const Weight& beta, uint64_t channels);
  TensorId MaxPool2d(TensorId x, uint64_t out_elements);
  TensorId AdaptiveAvgPool(TensorId x, uint64_t out_elements);
  // Losses: the loss tensor (fp32 scalar storage as the kernel leaves it).
  TensorId MseLoss(TensorId out, TensorId target);
  // `target` (the labels) is saved by nll_loss when given.
  TensorId CrossEntropy(TensorId logits, uint64_t rows, uint64_t classes,
                        TensorId target = kNoTensor);
  // Liger's LigerFusedLinearCrossEntropyLoss over x [rows, in] and the head `lw` (no bias): the
  // logits are never made whole. Its forward computes the loss and both gradients chunk by
  // chunk (chunks of next_pow2(ceil(rows / ceil(out / in))) rows, each chunk's logits in the
  // compute dtype, overwritten by their gradient in place), keeps the input's gradient and the
  // weight's (zeros_like of each, filled by the chunks) for backward, which hands them on.
  TensorId FusedLinearCrossEntropy(TensorId x, const LinearWeights& lw, uint64_t rows,
                                   TensorId target);

 private:
  // scaled_dot_product_attention's operand: under autocast (a lower-precision op) a cast of a
  // tensor not in the autocast dtype, else a new reference to it.
  TensorId SdpaOperand(TensorId t);
  // The fused kernels' backward: the gradients of q, k and v (of those sizes) and the kernel's
  // fp32 delta, made by `op`.
  static BackwardFn FusedAttentionBackward(uint64_t bq, uint64_t bk, uint64_t bv, uint64_t delta,
                                           std::string op);
  // bitsandbytes' MatMul4Bit: the weight dequantised (first its absmax, then the weight, in the
  // compute dtype) for the product and freed after it; nothing saved but the packed weight;
  // backward dequantises again for the input's gradient.
  TensorId Nf4Linear(TensorId x, const LinearWeights& lw, uint64_t rows);
  // torchao's Float8Linear (layers_float8.cc): input and weight cast to float8 for the product
  // (each cast a float32 scaled copy, clamped, then the float8 bits and a scale, all dropped
  // after it), the high-precision input and weight saved; backward casts the gradient twice,
  // the weight and the input again, for its two products.
  TensorId Float8Linear(TensorId x, const LinearWeights& lw, uint64_t rows);
  // The 256-entry dynamic map double quantisation shares, made with the first NF4 weight.
  bool nf4_map_made_ = false;
  // Autocast's view of an operand of a matmul: the cast (cached for trainable weights).
  TensorId ForMatmul(TensorId x, bool is_weight);
  // ZeRO-3/FSDP: the all-gathered full weight (a temporary), or the weight itself (one more
  // reference) when parameters are not sharded.
  TensorId Gathered(TensorId weight);
  bool sharded() const { return sim_.param_shards > 1; }
  void ReleaseGathered(TensorId gathered) {
    if (gathered != kNoTensor && !sim_.IsParameter(gathered)) sim_.ReleaseStorage(gathered);
  }
  void SetDtype(TensorId t, DType d, uint64_t elements);

  StepSimulator& sim_;
  Precision precision_;
  std::vector<DType> dtype_;
  std::vector<uint64_t> elements_;
};

}  // namespace vramscope::predict
