// The menu of memory-saving techniques, each counted by hand on a small model: what the step
// simulator allocates with the technique, from how the library that provides it allocates
// (docs/design/techniques.md).
#include "predict/techniques.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "predict/model_description.h"

namespace vramscope::predict {
namespace {

using Kind = StreamEvent::Kind;

// One Linear(1024, 1024) with a bias, MSE loss: a weight of 1,048,576 elements (quantised by
// every 8-bit and 4-bit optimizer) and a bias of 1,024 (below their 4,096-element threshold).
constexpr const char* kLinear = R"({"input": [1024], "loss": "mse", "layers": [
  {"type": "linear", "name": "fc", "in": 1024, "out": 1024}]})";
// A GPT-2 of 4 blocks, 64 wide, with a 1000-token vocabulary.
constexpr const char* kGpt2 = R"({"model_type": "gpt2", "vocab_size": 1000, "n_embd": 64,
  "n_layer": 4, "n_head": 4, "n_positions": 128})";

ModelSpec Spec(const char* json) {
  auto spec = ParseModelJson(json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

TensorStream Simulate(const ModelSpec& m, const TrainingSetup& s) {
  auto stream = SimulateTraining(m, s);
  EXPECT_TRUE(stream.ok()) << stream.status().message();
  return std::move(*stream);
}

uint64_t BytesOf(const TensorStream& s, model::Category c) {
  uint64_t total = 0;
  for (const StreamEvent& e : s.events) {
    if (e.kind == Kind::kAlloc && e.category == c) total += e.bytes;
  }
  return total;
}

// The most bytes of category `c` live at once.
uint64_t PeakOf(const TensorStream& s, model::Category c) {
  std::unordered_map<uint64_t, uint64_t> live;
  uint64_t now = 0, peak = 0;
  for (const StreamEvent& e : s.events) {
    if (e.kind == Kind::kAlloc && e.category == c) {
      live[e.id] = e.bytes;
      now += e.bytes;
      peak = std::max(peak, now);
    } else if (e.kind == Kind::kFree && live.count(e.id)) {
      now -= live[e.id];
      live.erase(e.id);
    }
  }
  return peak;
}

size_t CountAllocs(const TensorStream& s, uint64_t bytes, std::string_view op) {
  return std::count_if(s.events.begin(), s.events.end(), [&](const StreamEvent& e) {
    return e.kind == Kind::kAlloc && e.bytes == bytes && s.strings.Get(e.op) == op;
  });
}

TrainingSetup LinearSetup(StateFormat states) {
  TrainingSetup s;
  s.batch = 64;
  s.steps = 2;
  s.optimizer.states = states;
  return s;
}

TEST(QuantisedOptimizer, BitsandbytesEightBit) {
  const TensorStream s = Simulate(Spec(kLinear), LinearSetup(StateFormat::kBnb8bit));
  // The weight: a uint8 code per element and an fp32 absmax per 256 for each of the two states;
  // the bias: fp32 states (under min_8bit_size); the two shared 256-entry maps.
  const uint64_t weight = 2 * (1048576 + 1048576 / 256 * 4);
  const uint64_t bias = 2 * 1024 * 4;
  EXPECT_EQ(BytesOf(s, model::Category::kOptimizerState), weight + bias + 2 * 256 * 4);
  EXPECT_EQ(s.info.host_bytes, 0u);
}

TEST(QuantisedOptimizer, PagedCodesLiveInUnifiedMemory) {
  const TensorStream s = Simulate(Spec(kLinear), LinearSetup(StateFormat::kBnbPaged8bit));
  // Codes of 100,000 elements or more go to cudaMallocManaged; absmax and the rest stay.
  EXPECT_EQ(BytesOf(s, model::Category::kOptimizerState),
            2 * (1048576 / 256 * 4) + 2 * 1024 * 4 + 2 * 256 * 4);
  EXPECT_EQ(s.info.host_bytes, 2u * 1048576);
  EXPECT_EQ(s.info.paged_bytes, 2u * 1048576);
}

TEST(QuantisedOptimizer, TorchaoFourBitAndFp8) {
  const TensorStream four = Simulate(Spec(kLinear), LinearSetup(StateFormat::kAo4bit));
  // Two codes per byte, an fp32 scale per 128, a 16-entry map per state; the bias keeps
  // zeros_like(param) (fp32).
  EXPECT_EQ(BytesOf(four, model::Category::kOptimizerState),
            2 * (1048576 / 2 + 1048576 / 128 * 4 + 16 * 4) + 2 * 1024 * 4);
  const TensorStream fp8 = Simulate(Spec(kLinear), LinearSetup(StateFormat::kAoFp8));
  EXPECT_EQ(BytesOf(fp8, model::Category::kOptimizerState),
            2 * (1048576 + 1048576 / 256 * 4) + 2 * 1024 * 4);
  const TensorStream eight = Simulate(Spec(kLinear), LinearSetup(StateFormat::kAo8bit));
  EXPECT_EQ(BytesOf(eight, model::Category::kOptimizerState),
            2 * (1048576 + 1048576 / 256 * 4 + 256 * 4) + 2 * 1024 * 4);
}

TEST(QuantisedOptimizer, NoStepTemporaries) {
  const TensorStream native = Simulate(Spec(kLinear), LinearSetup(StateFormat::kNative));
  const TensorStream eight = Simulate(Spec(kLinear), LinearSetup(StateFormat::kBnb8bit));
  // foreach AdamW makes a square root per parameter each step; the fused 8-bit kernel none.
  EXPECT_EQ(CountAllocs(native, 1048576 * 4, "aten::_foreach_sqrt"), 2u);
  EXPECT_EQ(CountAllocs(eight, 1048576 * 4, "aten::_foreach_sqrt"), 0u);
}

TEST(OffloadOptimizer, StatesAndMasterCopiesOnTheHost) {
  TrainingSetup s = LinearSetup(StateFormat::kNative);
  s.optimizer.offload = true;
  const TensorStream t = Simulate(Spec(kLinear), s);
  EXPECT_EQ(BytesOf(t, model::Category::kOptimizerState), 0u);
  // Per element: an fp32 copy of the weight, of its gradient, and two fp32 states.
  EXPECT_EQ(t.info.host_bytes, (1048576u + 1024) * 4 * 4);
  // Gradients stay on the GPU until zero_grad (offload_gradients is off).
  EXPECT_EQ(PeakOf(t, model::Category::kGradient), (1048576u + 1024) * 4);
}

TEST(OptimizerInBackward, OneGradientAtATime) {
  const ModelSpec m = Spec(R"({"input": [1024], "loss": "mse", "layers": [
    {"type": "linear", "name": "fc1", "in": 1024, "out": 1024, "bias": false},
    {"type": "linear", "name": "fc2", "in": 1024, "out": 1024, "bias": false}]})");
  TrainingSetup s = LinearSetup(StateFormat::kNative);
  const TensorStream plain = Simulate(m, s);
  EXPECT_EQ(PeakOf(plain, model::Category::kGradient), 2u * 1048576 * 4);
  s.optimizer_in_backward = true;
  const TensorStream fused = Simulate(m, s);
  // Each weight is stepped and its gradient dropped before the next one's is made.
  EXPECT_EQ(PeakOf(fused, model::Category::kGradient), 1048576u * 4);
  EXPECT_EQ(BytesOf(fused, model::Category::kOptimizerState), 2u * 2 * 1048576 * 4);
}

TEST(OffloadActivations, SavedTensorsComeBackBeforeTheirNode) {
  TrainingSetup s = LinearSetup(StateFormat::kNative);
  const TensorStream plain = Simulate(Spec(kLinear), s);
  s.offload_activations = true;
  const TensorStream t = Simulate(Spec(kLinear), s);
  // The linear saves its input (64 x 1024 fp32: 256 KiB); MSE saves its two operands (the
  // output and the target, 256 KiB each). All three go to the host and come back in backward,
  // one copy each per step.
  EXPECT_EQ(t.info.host_bytes, 3u * 64 * 1024 * 4);
  EXPECT_EQ(CountAllocs(t, 64 * 1024 * 4, "aten::_to_copy") -
                CountAllocs(plain, 64 * 1024 * 4, "aten::_to_copy"),
            3u * 2);
}

TrainingSetup Gpt2Setup() {
  TrainingSetup s;
  s.batch = 2;
  s.seq = 64;
  s.steps = 2;
  return s;
}

TEST(ChunkedCrossEntropy, NoWholeFp32Logits) {
  const ModelSpec m = Spec(kGpt2);
  TrainingSetup s = Gpt2Setup();
  s.precision.param = DType::kBF16;
  const TensorStream whole = Simulate(m, s);
  const uint64_t rows = 2 * 64, vocab = 1000;
  // One fp32 upcast and one fp32 log-softmax of every position per step.
  EXPECT_EQ(CountAllocs(whole, rows * vocab * 4, "aten::_log_softmax"), 2u);
  s.loss_chunks = 4;
  const TensorStream chunked = Simulate(m, s);
  // Four chunks of 16 positions x 2 samples per step, each upcast and log-softmaxed alone.
  EXPECT_EQ(CountAllocs(chunked, rows * vocab * 4, "aten::_log_softmax"), 0u);
  EXPECT_EQ(CountAllocs(chunked, rows / 4 * vocab * 4, "aten::_log_softmax"), 4u * 2);
  EXPECT_EQ(CountAllocs(chunked, rows / 4 * vocab * 4, "aten::_to_copy"), 4u * 2);
  // SplitBackward0 puts the chunks' input gradients together: one whole bf16 gradient per step.
  EXPECT_EQ(CountAllocs(chunked, rows * 64 * 2, "aten::cat"), 2u);
}

TEST(FusedLinearCrossEntropy, ChunksOfLigersSize) {
  const ModelSpec m = Spec(kGpt2);
  TrainingSetup s = Gpt2Setup();
  s.fused_linear_ce = true;
  const TensorStream t = Simulate(m, s);
  // 128 rows, vocab 1000, hidden 64: inc_factor ceil(1000/64) = 16, chunk
  // next_pow2(ceil(128/16)) = 8 rows, so 16 chunks of [8, 1000] fp32 logits per step.
  EXPECT_EQ(CountAllocs(t, 8 * 1000 * 4, "aten::mm"), 16u * 2);
  // No whole logits; the kept gradients of the input and the (tied) weight.
  EXPECT_EQ(CountAllocs(t, 128 * 1000 * 4, "aten::mm"), 0u);
  // (Two steps; AdamW's two states of wte [1000, 64] and wpe [128, 64] are zeros_like too.)
  EXPECT_EQ(CountAllocs(t, 128 * 64 * 4, "aten::zeros_like"), 2u + 2);
  EXPECT_EQ(CountAllocs(t, 1000 * 64 * 4, "aten::zeros_like"), 2u + 2);
}

TEST(Checkpointing, EveryKthBlockCountedFromOne) {
  TrainingSetup s;
  s.checkpointing = true;
  s.checkpoint_every = 2;
  EXPECT_FALSE(s.Checkpointed(0));
  EXPECT_TRUE(s.Checkpointed(1));
  EXPECT_FALSE(s.Checkpointed(2));
  EXPECT_TRUE(s.Checkpointed(3));
  s.checkpoint_every = 1;
  EXPECT_TRUE(s.Checkpointed(0));
}

TEST(Checkpointing, OffloadedInputsComeBackFromTheHost) {
  const ModelSpec m = Spec(kGpt2);
  TrainingSetup s = Gpt2Setup();
  s.checkpointing = true;
  s.checkpoint_every = 2;
  s.offload_checkpoints = true;
  const TensorStream t = Simulate(m, s);
  // Blocks 2 and 4 are checkpointed; each keeps its fp32 input [2, 64, 64] on the host.
  EXPECT_EQ(t.info.host_bytes, 2u * 2 * 64 * 64 * 4);
  size_t back = 0;
  for (const StreamEvent& e : t.events) {
    if (e.kind == Kind::kAlloc &&
        std::string(t.strings.Get(e.name)).find("from the host") != std::string::npos) {
      ++back;
    }
  }
  EXPECT_EQ(back, 2u * 2);  // two blocks, two steps
}

// A LLaMA of 4 blocks, 64 wide (4 heads, 2 KV heads), SwiGLU of 128: seven aten::mm per block
// (q, k, v, o, gate, up, down).
constexpr const char* kLlama = R"({"model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "intermediate_size": 128, "max_position_embeddings": 128})";

size_t CountOp(const TensorStream& s, std::string_view op, Thread thread) {
  return std::count_if(s.events.begin(), s.events.end(), [&](const StreamEvent& e) {
    return e.kind == Kind::kAlloc && e.thread == thread && s.strings.Get(e.op) == op;
  });
}

TEST(Checkpointing, OpLevelKeepsAttentionAndEveryOtherMatmul) {
  const ModelSpec m = Spec(kLlama);
  TrainingSetup s = Gpt2Setup();
  s.precision.param = DType::kBF16;  // the fused attention kernel (flash, grouped-query)
  const TensorStream none = Simulate(m, s);
  s.checkpointing = true;
  const TensorStream full = Simulate(m, s);
  s.checkpoint_ops = true;
  const TensorStream ops = Simulate(m, s);
  // The recomputation (on the backward thread) makes the 2nd, 4th and 6th mm (k, o, up) of each
  // block, not its 7 (4 blocks, 2 steps), and none of attention's 4 outputs (out, log-sum-exp,
  // flash's RNG state and offset).
  const size_t mm_full = CountOp(full, "aten::mm", Thread::kBackward);
  const size_t mm_ops = CountOp(ops, "aten::mm", Thread::kBackward);
  EXPECT_EQ(mm_full - mm_ops, 4u * 4 * 2);
  const std::string_view sdpa = "aten::_scaled_dot_product_attention";
  EXPECT_EQ(CountOp(full, sdpa, Thread::kBackward), 4u * 4 * 2);
  EXPECT_EQ(CountOp(ops, sdpa, Thread::kBackward), 0u);
  // The forward is the same ops either way.
  EXPECT_EQ(CountOp(full, "aten::mm", Thread::kMain), CountOp(ops, "aten::mm", Thread::kMain));
  // What the forward keeps lives until backward: per block q [128, 64], v [128, 32], gate
  // [128, 128] and down [128, 64] in bf16, attention's out [128, 64] bf16, log-sum-exp
  // [2, 4, 64] fp32, RNG state 2 int64 and offset 1 int64: 92,184 bytes, all activations.
  const uint64_t kept = 4 * (128 * 64 * 2 + 128 * 32 * 2 + 128 * 128 * 2 + 128 * 64 * 2 +
                             128 * 64 * 2 + 2 * 4 * 64 * 4 + 16 + 8);
  EXPECT_EQ(kept, 4u * 92184);
  const uint64_t full_peak = PeakOf(full, model::Category::kActivation);
  const uint64_t ops_peak = PeakOf(ops, model::Category::kActivation);
  EXPECT_GE(ops_peak, full_peak + kept);
  EXPECT_LT(ops_peak, PeakOf(none, model::Category::kActivation));
}

TEST(Qlora, Nf4BaseWeightsDequantisedAroundEachUse) {
  const ModelSpec m = Spec(kLlama);
  TrainingSetup s = Gpt2Setup();
  s.precision.param = DType::kBF16;
  s.lora_rank = 8;
  const TensorStream lora = Simulate(m, s);
  s.qlora = true;
  const TensorStream qlora = Simulate(m, s);
  // A block's seven linears hold 36,864 elements (q and o 64 x 64, k and v 64 x 32, gate, up and
  // down 64 x 128): in bf16 73,728 bytes, in NF4 18,432 bytes of codes, 576 of uint8 absmax
  // (one per 64), and per weight an fp32 absmax of the absmax, an fp32 offset and the 16-entry
  // fp32 NF4 code; once, bitsandbytes' 256-entry fp32 dynamic map.
  const uint64_t bf16 = 4 * 36864 * 2;
  const uint64_t nf4 = 4 * (18432 + 576 + 7 * (4 + 4 + 64)) + 1024;
  EXPECT_EQ(BytesOf(lora, model::Category::kWeight) - BytesOf(qlora, model::Category::kWeight),
            bf16 - nf4);
  // Dequantised for every forward use (7 linears x 4 blocks x 2 steps) and for every input
  // gradient: none for block 0's q, k and v, whose input (frozen embedding, frozen norm) needs
  // none.
  EXPECT_EQ(CountOp(qlora, "bitsandbytes::dequantize_4bit", Thread::kMain), 7u * 4 * 2);
  EXPECT_EQ(CountOp(qlora, "bitsandbytes::dequantize_4bit", Thread::kBackward), (4u + 7 * 3) * 2);
  // Each dequantised weight in bf16, after its absmax in fp32.
  EXPECT_EQ(CountAllocs(qlora, 64 * 128 * 2, "bitsandbytes::dequantize_4bit"),
            3u * (4 * 2 + 4 * 2));
  EXPECT_EQ(CountAllocs(qlora, 128 * 4, "bitsandbytes::dequantize_blockwise"),
            3u * (4 * 2 + 4 * 2));
  // Nothing more is saved for backward than LoRA saves (MatMul4Bit keeps only the packed codes).
  EXPECT_LE(PeakOf(qlora, model::Category::kActivation),
            PeakOf(lora, model::Category::kActivation));
}

// The LLaMA above with 96 rows a micro-batch (2 x 48), so that no two of its shapes have the same
// number of elements: rows x hidden 6,144, rows x MLP 12,288, the MLP's weights 8,192.
TrainingSetup Float8Setup() {
  TrainingSetup s = Gpt2Setup();
  s.seq = 48;
  s.float8 = true;
  return s;
}

TEST(Float8, EachProductCastsItsOperandsAndDropsThem) {
  const ModelSpec m = Spec(kLlama);
  TrainingSetup s = Float8Setup();
  s.precision.param = DType::kBF16;
  const TensorStream fp8 = Simulate(m, s);
  s.float8 = false;
  const TensorStream plain = Simulate(m, s);
  // Every cast starts with abs(x): two per forward product (input, weight) and four per
  // backward (the gradient twice, the weight, the input) for the blocks' 7 linears x 4 blocks
  // x 2 steps; none for the head, which torchtitan leaves in bf16.
  EXPECT_EQ(CountOp(fp8, "aten::abs", Thread::kMain), 2u * 28 * 2);
  EXPECT_EQ(CountOp(fp8, "aten::abs", Thread::kBackward), 4u * 28 * 2);
  EXPECT_EQ(CountOp(plain, "aten::abs", Thread::kMain), 0u);
  // A cast of n bf16 elements makes an fp32 copy (4n), scales it (4n), clamps it (4n), then
  // keeps n bytes of float8. Of [96 rows, 128] (the MLP's width): gate's and up's incoming
  // gradients twice each, down's input once in forward and once in backward: 6 per block and
  // step.
  EXPECT_EQ(CountAllocs(fp8, 12288 * 4, "aten::clamp"), 6u * 4 * 2);
  EXPECT_EQ(CountAllocs(fp8, 12288 * 4, "aten::mul"), 6u * 4 * 2);
  // And of the MLP's weights (64 x 128): each once in forward and once in backward.
  EXPECT_EQ(CountAllocs(fp8, 8192 * 4, "aten::clamp"), 3u * 2 * 4 * 2);
  // What backward keeps is what bf16 keeps: the high-precision input and weight.
  EXPECT_EQ(BytesOf(fp8, model::Category::kActivation),
            BytesOf(plain, model::Category::kActivation));
}

TEST(Float8, UnderAutocastTheWeightsAreNotCopiedToBf16) {
  const ModelSpec m = Spec(kLlama);
  TrainingSetup s = Float8Setup();
  s.precision.autocast = DType::kBF16;
  const TensorStream fp8 = Simulate(m, s);
  s.float8 = false;
  const TensorStream plain = Simulate(m, s);
  // Autocast copies each weight a forward uses to bf16 and keeps the copy for backward:
  // gate, up and down (64 x 128) in each block and step. Float8Linear casts the fp32 weight to
  // float8 itself.
  auto forward_copies = [](const TensorStream& t, uint64_t bytes) {
    return std::count_if(t.events.begin(), t.events.end(), [&](const StreamEvent& e) {
      return e.kind == Kind::kAlloc && e.thread == Thread::kMain && e.bytes == bytes &&
             t.strings.Get(e.op) == "aten::_to_copy";
    });
  };
  EXPECT_EQ(forward_copies(plain, 8192 * 2), 3 * 4 * 2);
  EXPECT_EQ(forward_copies(fp8, 8192 * 2), 0);
  EXPECT_EQ(
      BytesOf(plain, model::Category::kActivation) - BytesOf(fp8, model::Category::kActivation),
      2u * 4 * 36864 * 2);
  // The weight's gradient comes out of _scaled_mm in bf16 and is cast to the fp32 weight's
  // dtype, once a block linear and step, as autocast's copy hands it back in plain bf16-amp.
  EXPECT_EQ(CountAllocs(fp8, 8192 * 4, "aten::_to_copy"),
            CountAllocs(plain, 8192 * 4, "aten::_to_copy"));
}

// The LLaMA above (4 blocks, 4 heads of 16, 2 KV heads) on three samples packed into one row of
// 96 tokens, in bf16.
TrainingSetup PackedSetup(std::vector<uint64_t> lengths) {
  TrainingSetup s;
  s.steps = 2;
  s.precision.param = DType::kBF16;
  s.seq = 0;
  for (const uint64_t n : lengths) s.seq += n;
  s.pack = std::move(lengths);
  return s;
}

TEST(Packing, EveryLayerKeepsTheMaskAsABiasAndKAndVForEveryHead) {
  const ModelSpec m = Spec(kLlama);
  const TrainingSetup packed_setup = PackedSetup({40, 24, 32});
  const TensorStream packed = Simulate(m, packed_setup);
  TrainingSetup plain_setup = packed_setup;
  plain_setup.pack.clear();  // the same 96 tokens as one sample: causal, no mask
  const TensorStream plain = Simulate(m, plain_setup);
  // The mask is built once a forward: two 96 x 96 booleans and-ed, the second one kept.
  EXPECT_EQ(CountAllocs(packed, 96 * 96, "aten::bitwise_and"), 2u * 2);
  // Each layer makes it an additive bf16 bias (no padding: 96 is a multiple of 8).
  EXPECT_EQ(CountAllocs(packed, 96 * 96 * 2, "aten::where"), 4u * 2);
  EXPECT_EQ(CountAllocs(packed, 96 * 104 * 2, "aten::constant_pad_nd"), 0u);
  // Per layer and step, backward keeps the bias (18,432 B) and K and V repeated to 4 heads
  // (12,288 B each) where the flash kernel kept the rotated K and V of 2 heads (6,144 B each)
  // and its RNG state (16 + 8 B); the log-sum-exp is the same (96 is a multiple of 32).
  const uint64_t more = 18432 + 2 * 12288;
  const uint64_t fewer = 2 * 6144 + 16 + 8;
  EXPECT_EQ(BytesOf(packed, model::Category::kActivation),
            BytesOf(plain, model::Category::kActivation) + 4 * 2 * (more - fewer));
  // Backward sums each repeated gradient back to 2 heads.
  EXPECT_EQ(CountAllocs(packed, 6144, "aten::sum"), 2u * 4 * 2);
}

TEST(Packing, ARowNotAMultipleOfEightPadsTheBias) {
  const TensorStream packed = Simulate(Spec(kLlama), PackedSetup({40, 24, 36}));
  // 100 tokens: the bias is padded to rows of 104 and the padded tensor kept.
  EXPECT_EQ(CountAllocs(packed, 100 * 104 * 2, "aten::constant_pad_nd"), 4u * 2);
}

TEST(Packing, CheckpointedBlocksRebuildTheBiasFromTheHeldMask) {
  TrainingSetup s = PackedSetup({40, 24, 32});
  s.checkpointing = true;
  const TensorStream packed = Simulate(Spec(kLlama), s);
  // The bias is made in forward and again in each block's recomputation.
  EXPECT_EQ(CountAllocs(packed, 96 * 96 * 2, "aten::where"), 2u * 4 * 2);
}

TEST(TechniqueEffects, PackingIsWeighedAgainstPaddingTheSamples) {
  auto model = LoadModel("qwen2-0.5b");
  ASSERT_TRUE(model.ok());
  PredictRequest r;
  r.model = "qwen2-0.5b";
  r.setup = PackedSetup({1024, 512, 2048});
  auto effects = TechniqueEffects(*model, r);
  ASSERT_TRUE(effects.ok()) << effects.status().message();
  ASSERT_EQ(effects->size(), 1u);
  EXPECT_EQ((*effects)[0].name, "packing 3 samples in one row (against padding them to 2048)");
}

TEST(TechniqueEffects, EachAgainstTheSetUpWithoutIt) {
  auto model = LoadModel("gpt2");
  ASSERT_TRUE(model.ok());
  PredictRequest r;
  r.model = "gpt2";
  r.setup.batch = 4;
  r.setup.seq = 512;
  r.setup.steps = 2;
  r.setup.loss_chunks = 8;
  r.setup.optimizer.states = StateFormat::kBnb8bit;
  auto effects = TechniqueEffects(*model, r);
  ASSERT_TRUE(effects.ok()) << effects.status().message();
  ASSERT_EQ(effects->size(), 2u);
  EXPECT_EQ((*effects)[0].name, "chunked cross-entropy (8 chunks)");
  EXPECT_EQ((*effects)[1].name, "8-bit AdamW states (bitsandbytes)");
  for (const TechniqueEffect& e : *effects) EXPECT_GT(e.gpu_saved, 0) << e.name;
}

}  // namespace
}  // namespace vramscope::predict
