#include "predict/parallel_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "predict/model_description.h"
#include "predict/parallel_test_support.h"

namespace vramscope::predict {
namespace {

using testing::Bf16Adam;
using testing::Preset;

// The published parameter counts of the presets, from the whole-model count.
TEST(ParallelLayout, PresetsHaveTheirPublishedParameterCounts) {
  EXPECT_EQ(ModelParameters(Preset("llama2-7b")), 6'738'415'616u);
  EXPECT_EQ(ModelParameters(Preset("llama3-405b")), 405'853'388'800u);
  EXPECT_EQ(ModelParameters(Preset("mixtral-8x7b")), 46'702'792'704u);
  // Qwen1.5-MoE-A2.7B: "14.3B".
  EXPECT_EQ(ModelParameters(Preset("qwen1.5-moe-a2.7b")), 14'315'784'192u);
  EXPECT_EQ(ModelParameters(Preset("gpt2")), 124'439'808u);
  // DeepSeek-V3: "671B" published; 671,026,404,352 is sum(p.numel()) of transformers'
  // DeepseekV3ForCausalLM(DeepseekV3Config()) built on the meta device (the router's score
  // correction bias is a buffer there, and the multi-token-prediction module not in the model).
  EXPECT_EQ(ModelParameters(Preset("deepseek-v3")), 671'026'404'352u);
}

// DeepSeek-V3 at TP 2, EP 8 (ETP 1), PP 61 (a stage per layer): the first stage holds the
// embedding's half and dense layer 0, stage 3 the first MoE layer. By hand, per TP rank:
//   latent attention: q down 7168 x 1536 + its norm 1536, q up 1536 x (64 heads x 192),
//     kv down 7168 x 576 + its norm 512, kv up 512 x (64 x 256), output (64 x 128) x 7168
//     = 11,010,048 + 1,536 + 18,874,368 + 4,128,768 + 512 + 8,388,608 + 58,720,256
//     = 101,124,096; the two RMSNorms 14,336
//   dense MLP: 3 x 7168 x 9216 = 198,180,864
//   MoE layer: the router 256 x 7168 = 1,835,008 (replicated), the shared expert split by TP
//     3 x 7168 x 1024 = 22,020,096; 32 experts of 3 x 7168 x 2048 = 1,409,286,144
//   the embedding's half: 64,640 x 7168 = 463,339,520
TEST(ParallelLayout, DeepseekV3LatentAttentionAndDenseThenMoeLayers) {
  ParallelLayout l;
  l.tp = 2;
  l.pp = 61;
  l.ep = 8;
  l.etp = 1;
  l.dp = 4;
  auto p = PredictParallel(Preset("deepseek-v3"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const uint64_t attention = 101'124'096 + 14'336;
  auto stage = [&](uint64_t index) -> const RankRole& {
    for (const RankRole& r : p->roles) {
      for (uint64_t s : r.stages) {
        if (s == index) return r;
      }
    }
    ADD_FAILURE() << "no role holds stage " << index;
    return p->roles.front();
  };
  EXPECT_EQ(stage(0).parameters, 463'339'520u + attention + 198'180'864u);
  EXPECT_EQ(stage(0).expert_parameters, 0u);
  EXPECT_EQ(stage(2).parameters, attention + 198'180'864u);  // layer 2: the last dense one
  EXPECT_EQ(stage(3).expert_parameters, 1'409'286'144u);
  EXPECT_EQ(stage(3).parameters, attention + 1'835'008u + 22'020'096u + 1'409'286'144u);
  // The last stage: layer 60 (MoE), the final norm and the head's half.
  EXPECT_EQ(stage(60).parameters,
            attention + 1'835'008u + 22'020'096u + 1'409'286'144u + 7'168u + 463'339'520u);
  // A MoE layer saves more than a dense one (8 experts of 2048 and a shared one against one MLP
  // of 18432, split by TP): per micro-batch, layer 3 against layer 2.
  EXPECT_GT(stage(3).activation_bytes_per_micro_batch, 0u);
  EXPECT_NE(stage(3).activation_bytes_per_micro_batch, stage(2).activation_bytes_per_micro_batch);
}

// Latent attention's activations by the per-layer formula, to the byte: a dense layer of
// DeepSeek-V3 at TP 1, batch 1, seq 4096, bf16, fused attention, no dropout:
//   s b h (8 + [4 a (nope + rope) + 4 a v] / h + [4 (q rank + kv rank) + 2 rope] / h + 8 ffn / h)
//   = 4096 x 7168 x (8 + (98,304 + 65,536) / 7168 + 8,320 / 7168 + 147,456 / 7168)
//   = 29,360,128 x 8 + 4096 x (163,840 + 8,320 + 147,456) = 234,881,024 + 1,309,147,136
TEST(ParallelLayout, DeepseekV3DenseLayerActivationsByFormula) {
  ParallelLayout l;
  l.pp = 61;
  auto p = PredictParallel(Preset("deepseek-v3"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  for (const RankRole& r : p->roles) {
    if (std::find(r.stages.begin(), r.stages.end(), 1u) != r.stages.end()) {
      EXPECT_EQ(r.layers, 1u);
      EXPECT_EQ(r.activation_bytes_per_micro_batch, 234'881'024u + 1'309'147'136u);
      return;
    }
  }
  ADD_FAILURE() << "no role holds stage 1";
}

// llama2-7b at TP=2: each rank holds half of every matrix and all the norms.
//   embedding 32000 x 4096 / 2                       =    65,536,000
//   per layer: q, k, v, o 4096 x 2048 each           =    33,554,432
//              gate, up, down 4096 x 5504 each       =    67,633,152
//              two RMSNorms of 4096                  =         8,192
//   32 layers                                        = 3,238,264,832
//   final norm 4096, lm_head 32000 x 4096 / 2        =    65,540,096
TEST(ParallelLayout, Llama2At2WayTensorParallelHoldsHalfTheMatricesAndAllTheNorms) {
  ParallelLayout l;
  l.tp = 2;
  auto p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->roles.size(), 1u);
  const RankRole& r = p->roles[0];
  EXPECT_EQ(r.name, "every rank");
  EXPECT_EQ(r.ranks, 2u);
  EXPECT_EQ(r.parameters, 65'536'000u + 3'238'264'832u + 65'540'096u);
  EXPECT_EQ(r.parameters, 3'369'340'928u);
  // bf16 weights and gradients, AdamW's two bf16 moments.
  EXPECT_EQ(r.weight_bytes, 2 * r.parameters);
  EXPECT_EQ(r.gradient_bytes, 2 * r.parameters);
  EXPECT_EQ(r.optimizer_bytes, 4 * r.parameters);
}

// The same rank with quantised AdamW states, tensor by tensor (quantised_states.h).
// bitsandbytes' 8-bit: every tensor (the norms' 4,096 elements too) quantised in blocks of 256,
// two 1-byte codes and 2 x 4 / 256 bytes of scales an element, and two 256-entry fp32 maps
// once: 2,048 + 65 N / 32. torchao's 4-bit: blocks of 128, half a byte of code and 4 / 128 of
// scale per element and state, a 16-entry fp32 map per state: 17 N / 16 + 128 per tensor, of
// which the rank holds 291 (the embedding, 9 per layer, the final norm and the head). Under
// ZeRO-1 over 8 ranks each shard is quantised alone: the norms' 512-element shards are too
// small, and keep two fp32 states (4,096 B).
TEST(ParallelLayout, QuantisedAdamStatesAreCountedTensorByTensor) {
  ParallelLayout l;
  l.tp = 2;
  TrainingSetup s = Bf16Adam(1, 4096);
  s.optimizer.states = StateFormat::kBnb8bit;
  const uint64_t n = 3'369'340'928u;  // the rank's elements (the hand count above)
  auto bnb = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_TRUE(bnb.ok()) << bnb.status().message();
  EXPECT_EQ(bnb->roles[0].optimizer_bytes, 2048 + 65 * n / 32);
  s.optimizer.states = StateFormat::kAo4bit;
  auto ao4 = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_TRUE(ao4.ok()) << ao4.status().message();
  EXPECT_EQ(ao4->roles[0].optimizer_bytes, 17 * n / 16 + 128 * 291);
  s.optimizer.states = StateFormat::kBnb8bit;
  s.zero = ZeroMode::kZero1;
  l.dp = 8;
  auto zero1 = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_TRUE(zero1.ok()) << zero1.status().message();
  const uint64_t norms = 32 * 2 + 1, quantised = (n - norms * 4096) / 8;
  EXPECT_EQ(zero1->roles[0].optimizer_bytes, 2048 + 65 * quantised / 32 + norms * 2 * 512 * 4);
  EXPECT_EQ(zero1->roles[0].optimizer_bytes, 855'697'408u);
}

// Pipeline stages of llama2-7b (PP=4, 8 layers each, 1F1B, 8 micro-batches): the first holds
// the embedding and 4 micro-batches in flight, the last the final norm and head and 1.
TEST(ParallelLayout, PipelineStagesDifferByEmbeddingHeadAndMicroBatchesInFlight) {
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 8;
  auto p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->roles.size(), 4u);
  const uint64_t layer = 4 * 4096ull * 4096 + 3 * 4096ull * 11008 + 2 * 4096;
  EXPECT_EQ(p->roles[0].name, "first stage");
  EXPECT_EQ(p->roles[0].parameters, 8 * layer + 32000ull * 4096);
  EXPECT_EQ(p->roles[1].name, "stage 1");
  EXPECT_EQ(p->roles[1].parameters, 8 * layer);
  EXPECT_EQ(p->roles[3].name, "last stage");
  EXPECT_EQ(p->roles[3].parameters, 8 * layer + 4096 + 32000ull * 4096);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(p->roles[i].in_flight, 4 - i);
  // Korthikanti et al.'s count for a LLaMA layer with fused attention, no TP, 16-bit: the two
  // norms' inputs, the q/k/v and MLP inputs (8), q, k, v and the output projection's input (8),
  // and SwiGLU's four ffn-wide tensors: s b h (8 + 8 + 8 ffn / h) per layer (no dropout).
  const double per_layer = 4096.0 * 1 * 4096 * (16 + 8.0 * 11008 / 4096);
  EXPECT_EQ(p->roles[1].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(8 * per_layer)));
  EXPECT_EQ(p->roles[1].activation_bytes, static_cast<uint64_t>(std::llround(3 * 8 * per_layer)));
  // The last stage's fp32 logits [4096, 32000] and their gradient.
  EXPECT_EQ(p->roles[3].logits_bytes, 2ull * 4096 * 32000 * 4);
  EXPECT_EQ(p->bounding, 0u);
  // Interleaved, 2 virtual stages: the first stage holds (4-1) x 2 + (2-1) x 4 + 1 = 11 chunks
  // of 4 layers: 1 + (p-1)/(p v) = 1.375 times 1F1B's 4 x 8 layers, Megatron's penalty.
  l.schedule = PipelineSchedule::kInterleaved;
  l.virtual_stages = 2;
  auto q = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->roles[0].in_flight, 11u);
  EXPECT_EQ(q->roles[0].activation_bytes, static_cast<uint64_t>(std::llround(44 * per_layer)));
}

// Korthikanti et al.'s formulas, eager attention (the 5 a s / h term): GPT-2 small, s 1024, b 8,
// t 4, with and without sequence parallelism, and full recomputation.
TEST(ParallelLayout, ActivationsFollowKorthikantiForTpAndSp) {
  ModelSpec m = Preset("gpt2");
  m.attention = "eager";
  TrainingSetup s = Bf16Adam(8, 1024);
  ParallelLayout l;
  l.tp = 4;
  const double sbh = 1024.0 * 8 * 768, as_h = 12.0 * 1024 / 768;
  auto no_sp = PredictParallel(m, s, l);
  ASSERT_TRUE(no_sp.ok()) << no_sp.status().message();
  EXPECT_EQ(no_sp->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(12 * sbh * (10 + 24.0 / 4 + 5 * as_h / 4))));
  l.sequence_parallel = true;
  auto sp = PredictParallel(m, s, l);
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(sp->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(12 * sbh * (34.0 / 4 + 5 * as_h / 4))));
  l.selective_recompute = true;
  auto selective = PredictParallel(m, s, l);
  EXPECT_EQ(selective->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(12 * sbh * 34.0 / 4)));
  s.checkpointing = true;
  auto full = PredictParallel(m, s, l);
  EXPECT_EQ(full->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(12 * 2 * sbh / 4)));
  // Every 3rd layer checkpointed (torchtitan's selective_ac_option 3): layers 2, 5, 8 and 11
  // keep their input, the other 8 all of the above.
  s.checkpoint_every = 3;
  auto every3 = PredictParallel(m, s, l);
  ASSERT_TRUE(every3.ok());
  EXPECT_EQ(every3->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(8 * sbh * 34.0 / 4 + 4 * 2 * sbh / 4)));
}

// Checkpointing every K-th layer under pipelining: each stage counts its own layers by their
// index in the model. LLaMA-2-7B (32 layers), PP 4 (8 each), every 3rd: layers 2, 5, 8, ..., 29
// are checkpointed, so stage 0 (layers 0-7) holds 2 (2, 5), stage 1 (8-15) 3 (8, 11, 14),
// stage 2 (16-23) 3 (17, 20, 23) and stage 3 (24-31) 2 (26, 29); a checkpointed layer keeps its
// input, 2 s b h (bf16), the others the full LLaMA layer (its terms' sum, taken from the
// prediction without checkpointing).
TEST(ParallelLayout, CheckpointingEveryKthLayerIsCountedPerStage) {
  const ModelSpec m = Preset("llama2-7b");
  TrainingSetup s = Bf16Adam(1, 4096);
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 8;
  auto none = PredictParallel(m, s, l);
  ASSERT_TRUE(none.ok()) << none.status().message();
  const double full_layer =
      static_cast<double>(none->roles[0].activation_bytes_per_micro_batch) / 8;
  const double input = 2.0 * 4096 * 4096;
  s.checkpointing = true;
  s.checkpoint_every = 3;
  auto every3 = PredictParallel(m, s, l);
  ASSERT_TRUE(every3.ok()) << every3.status().message();
  const int checkpointed[] = {2, 3, 3, 2};
  ASSERT_EQ(every3->roles.size(), 4u);
  for (size_t stage = 0; stage < 4; ++stage) {
    const int k = checkpointed[stage];
    EXPECT_EQ(every3->roles[stage].activation_bytes_per_micro_batch,
              static_cast<uint64_t>(std::llround((8 - k) * full_layer + k * input)))
        << "stage " << stage;
  }
}

// Op-level selective checkpointing (torchtitan's selective_ac_option "op") per rank, counted by
// hand. LLaMA-2-7B (no biases: every projection an aten.mm), bf16, one rank: each layer keeps
// its input (2 s b h), the 1st, 3rd, 5th and 7th mm outputs (q, v, gate, down: 2 s b (3 h +
// ffn)), the attention output (2 s b h), its fp32 log-sum-exp (b x heads x s x 4) and cuDNN's
// seed and offset (16 B: every head has its K and V, head dim 128).
// Qwen2-7B at TP 2 with SP under DTensor's TP: q, k and v have biases (addmm, not counted), so
// the mm calls are o, gate, up, down and the policy keeps o's (whole-width partial sums) and
// up's (ffn / 2 columns); the attention output of 14 heads, its log-sum-exp, flash's 24 B of
// RNG state (2 KV heads for 14), the two reduce-scatters' outputs (s / 2 x b x h each) and the
// layer's input, a sequence shard.
TEST(ParallelLayout, OpLevelCheckpointingKeepsWhatTorchtitansPolicySaves) {
  {
    const ModelSpec m = Preset("llama2-7b");
    TrainingSetup s = Bf16Adam(1, 4096);
    s.checkpointing = true;
    s.checkpoint_ops = true;
    auto ops = PredictParallel(m, s, ParallelLayout{});
    ASSERT_TRUE(ops.ok()) << ops.status().message();
    const uint64_t sb = 4096, h = 4096, ffn = 11008;
    const uint64_t layer = 2 * sb * h + 2 * sb * (3 * h + ffn) + 2 * sb * h + 32 * 4096 * 4 + 16;
    EXPECT_EQ(ops->roles[0].activation_bytes_per_micro_batch, 32 * layer);
  }
  {
    const ModelSpec m = Preset("qwen2-7b");
    TrainingSetup s = Bf16Adam(1, 4096);
    s.checkpointing = true;
    s.checkpoint_ops = true;
    ParallelLayout l;
    l.tp = 2;
    l.sequence_parallel = true;
    l.tensor_parallel_impl = model::TensorParallelImpl::kTorch;
    auto ops = PredictParallel(m, s, l);
    ASSERT_TRUE(ops.ok()) << ops.status().message();
    const uint64_t sb = 4096, h = 3584, ffn = 18944;
    const uint64_t layer =
        sb * h + 2 * sb * h + sb * ffn + 2 * sb * (14 * 128) + 14 * 4096 * 4 + 24 + 2 * sb * h;
    EXPECT_EQ(ops->roles[0].activation_bytes_per_micro_batch, 28 * layer);
    // Megatron's TP has no op-level policy, and a mixture of experts no dense mm sequence.
    l.tensor_parallel_impl = model::TensorParallelImpl::kMegatron;
    EXPECT_FALSE(PredictParallel(m, s, l).ok());
    EXPECT_FALSE(PredictParallel(Preset("mixtral-8x7b"), s, ParallelLayout{}).ok());
  }
}

// DTensor's TP (--tp-impl torch), as torchtitan's plan runs it: under SP the attention's and
// the MLP's column-parallel projections save their all-gathered input (2 s b h each, where
// Megatron's save the shard, 2 s b h / t), so a GPT-2 layer (fused attention: no scores) at TP 4
// with SP holds 34 / 4 + 2 x 2 x 3 / 4 = 11.5 s b h; and the head's logits are gathered to
// every rank: the whole vocabulary's, its fp32 log-softmax and two fp32 gradients (bf16
// weights: 2 + 3 x 4 bytes per logit), where --loss-parallel keeps Megatron's shard.
TEST(ParallelLayout, TorchTensorParallelSavesGatheredInputsAndGathersTheLogits) {
  const ModelSpec m = Preset("gpt2");
  TrainingSetup s = Bf16Adam(8, 1024);
  ParallelLayout l;
  l.tp = 4;
  l.sequence_parallel = true;
  l.tensor_parallel_impl = model::TensorParallelImpl::kTorch;
  const double sbh = 1024.0 * 8 * 768;
  auto torch = PredictParallel(m, s, l);
  ASSERT_TRUE(torch.ok()) << torch.status().message();
  EXPECT_EQ(torch->roles[0].activation_bytes_per_micro_batch,
            static_cast<uint64_t>(std::llround(12 * sbh * (34.0 / 4 + 3))));
  const uint64_t logits = 8ull * 1024 * 50257;
  EXPECT_EQ(torch->roles[0].logits_bytes, logits * (2 + 3 * 4));
  l.loss_parallel = true;
  auto sharded = PredictParallel(m, s, l);
  ASSERT_TRUE(sharded.ok());
  EXPECT_EQ(sharded->roles[0].logits_bytes, 2 * 8ull * 1024 * ((50257 + 3) / 4) * 4);
}

// Mixtral 8x7B at EP=8 over 8 ranks: each holds one expert per layer, all of the attention.
TEST(ParallelLayout, ExpertParallelSplitsTheExperts) {
  ParallelLayout l;
  l.dp = 8;
  l.ep = 8;
  auto p = PredictParallel(Preset("mixtral-8x7b"), Bf16Adam(1, 4096), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  const uint64_t attention = 2 * 4096ull * 4096 + 2 * 4096ull * 1024;
  const uint64_t expert = 3 * 4096ull * 14336;
  const uint64_t layer = attention + 4096 * 8 + 2 * 4096 + expert;
  EXPECT_EQ(p->roles[0].expert_parameters, 32 * expert);
  EXPECT_EQ(p->roles[0].parameters, 32 * layer + 2 * 32000ull * 4096 + 4096);
  // ZeRO-1 shards the dense state over the 8 data-parallel ranks; the experts' over the
  // expert-data-parallel group, here of 1 rank (8 / 8).
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero1;
  auto z = PredictParallel(Preset("mixtral-8x7b"), s, l);
  const uint64_t dense = p->roles[0].parameters - p->roles[0].expert_parameters;
  EXPECT_EQ(z->roles[0].optimizer_bytes, 4 * ((dense + 7) / 8 + 32 * expert));
}

// HSDP: ZeRO shards over groups of dp_shard data-parallel ranks (times CP) and replicates over
// the rest; the experts' state over the ranks of a shard group holding the same experts.
TEST(ParallelLayout, HsdpShardsOverTheShardGroupOnly) {
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero3;
  ParallelLayout full;
  full.tp = 2;
  full.dp = 8;
  ParallelLayout hybrid = full;
  hybrid.dp_shard = 4;
  auto f = PredictParallel(Preset("llama2-7b"), s, full);
  auto h = PredictParallel(Preset("llama2-7b"), s, hybrid);
  ASSERT_TRUE(f.ok() && h.ok());
  // Both hold llama2-7b's half (TP 2): 3,369,340,928 elements (the hand count above).
  const uint64_t held = 3'369'340'928u;
  EXPECT_EQ(h->roles[0].parameters, held);
  // bf16 weights and gradients, 2 bytes each; AdamW's two moments in the parameters' dtype (as
  // torch.optim keeps them), 4 bytes.
  EXPECT_EQ(f->roles[0].weight_bytes, 2 * (held / 8));
  EXPECT_EQ(h->roles[0].weight_bytes, 2 * (held / 4));
  EXPECT_EQ(h->roles[0].gradient_bytes, 2 * (held / 4));
  EXPECT_EQ(h->roles[0].optimizer_bytes, 4 * (held / 4));
  EXPECT_EQ(h->roles[0].activation_bytes, f->roles[0].activation_bytes);  // no effect on them
  // With CP 2 the shard group is dp_shard x CP = 8 ranks.
  hybrid.cp = 2;
  auto c = PredictParallel(Preset("llama2-7b"), s, hybrid);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->roles[0].weight_bytes, 2 * (held / 8));
  // Mixtral at EP 8 in shard groups of dp_shard 8 (x TP 2 = 16 ranks): the dense state over the 8
  // shard ranks, the experts' over the 16 / (EP 8 x ETP 2) = 1 rank holding the same experts.
  ParallelLayout moe;
  moe.tp = 2;
  moe.dp = 16;
  moe.dp_shard = 8;
  moe.ep = 8;
  TrainingSetup z1 = Bf16Adam(1, 4096);
  z1.zero = ZeroMode::kZero1;
  auto m = PredictParallel(Preset("mixtral-8x7b"), z1, moe);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const uint64_t dense = m->roles[0].parameters - m->roles[0].expert_parameters;
  EXPECT_EQ(m->roles[0].optimizer_bytes, 4 * ((dense + 7) / 8 + m->roles[0].expert_parameters));
  // A shard group that does not divide DP is refused, as one that cannot hold the experts.
  ParallelLayout odd = full;
  odd.dp_shard = 3;
  EXPECT_FALSE(PredictParallel(Preset("llama2-7b"), s, odd).ok());
  moe.dp_shard = 2;  // 2 x 2 ranks cannot hold EP 8 x ETP 2
  EXPECT_FALSE(PredictParallel(Preset("mixtral-8x7b"), z1, moe).ok());
}

// Llama 3.1 405B's 126 layers on 16 stages: 7 on the first and the last, 8 on the others.
TEST(ParallelLayout, UnevenStagesGiveTheOutermostFewerLayers) {
  ParallelLayout l;
  l.tp = 8;
  l.pp = 16;
  l.dp = 128;
  l.micro_batches = 32;
  auto p = PredictParallel(Preset("llama3-405b"), Bf16Adam(1, 8192), l);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->world, 16384u);
  EXPECT_EQ(p->roles.front().name, "first stage");
  EXPECT_EQ(p->roles.front().layers, 7u);
  EXPECT_EQ(p->roles.back().name, "last stage");
  EXPECT_EQ(p->roles.back().layers, 7u);
  uint64_t layers = 0, held = 0;
  for (const RankRole& r : p->roles) {
    for (const uint64_t stage : r.stages) {
      layers += r.layers;
      held += r.parameters;
      if (stage != 0 && stage != 15) {
        EXPECT_EQ(r.layers, 8u);
      }
    }
  }
  EXPECT_EQ(layers, 126u);
  // Over the 16 stages, one TP rank each: the model's parameters over 8, but the norms whole.
  const uint64_t norms = 126 * 2 * 16384 + 16384;
  EXPECT_EQ(held, (405'853'388'800u - norms) / 8 + norms);
}

TEST(ParallelLayout, LayoutsThatDoNotDivideTheModelAreRefused) {
  ParallelLayout l;
  l.tp = 3;
  auto p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("32 attention heads"), std::string::npos);
  l.tp = 1;
  l.pp = 33;
  p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("32 layers"), std::string::npos);
  l.pp = 3;
  l.schedule = PipelineSchedule::kInterleaved;
  l.virtual_stages = 2;
  p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("6 chunks"), std::string::npos);
  l.schedule = PipelineSchedule::k1F1B;
  l.virtual_stages = 1;
  l.pp = 1;
  l.ep = 2;
  p = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), l);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("mixture-of-experts"), std::string::npos);
  auto r = PredictParallel(Preset("resnet50"), Bf16Adam(1, 4096), ParallelLayout{});
  ASSERT_FALSE(r.ok());
}

// The largest communication buffer of a layer, by hand (bf16, batch 1, seq 4096):
//   SP at TP 2: the all-gathered input, 4096 x 4096 x 2                      = 33,554,432
//   CP 2 at TP 2: K and V chunks of 2048 tokens x 16 KV heads x 128, in use and arriving:
//     2 x 2048 x (2048 + 2048) x 2                                           = 33,554,432
//   Mixtral at EP 8, TP 2 with SP, capacity factor 1.25: 2048 tokens x 2 experts x 1.25 sent
//     and received, 2 x 5120 x 4096 x 2                                      = 83,886,080
TEST(ParallelLayout, CommunicationBuffersByHand) {
  ParallelLayout sp;
  sp.tp = 2;
  sp.sequence_parallel = true;
  auto a = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), sp);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->roles[0].communication_bytes, 33'554'432u);
  EXPECT_EQ(a->roles[0].communication, "SP all-gather");

  ParallelLayout cp;
  cp.tp = 2;
  cp.cp = 2;
  auto b = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), cp);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->roles[0].communication_bytes, 33'554'432u);
  EXPECT_EQ(b->roles[0].communication, "CP K/V chunks");

  ParallelLayout ep;
  ep.tp = 2;
  ep.ep = 8;
  ep.dp = 8;
  ep.sequence_parallel = true;
  ep.capacity_factor = 1.25;
  auto c = PredictParallel(Preset("mixtral-8x7b"), Bf16Adam(1, 4096), ep);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->roles[0].communication_bytes, 83'886'080u);
  EXPECT_EQ(c->roles[0].communication, "MoE all-to-all");
  EXPECT_EQ(c->roles[0].total_bytes,
            c->roles[0].weight_bytes + c->roles[0].gradient_bytes + c->roles[0].optimizer_bytes +
                c->roles[0].activation_bytes + c->roles[0].logits_bytes + 83'886'080u);

  // The capacity factor scales what the experts save: their part of a layer is (SwiGLU's four
  // tensors) 8 k c ffn_e / (h ETP) s b h, here 8 x 2 x 14336 / (4096 x 2) x 4096 x 4096 bytes =
  // 469,762,048 at c = 1 (split by ETP, not by SP); c = 1.25 adds a quarter of it per layer.
  ep.capacity_factor = 0;
  auto d = PredictParallel(Preset("mixtral-8x7b"), Bf16Adam(1, 4096), ep);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(
      c->roles[0].activation_bytes_per_micro_batch - d->roles[0].activation_bytes_per_micro_batch,
      uint64_t{32} * 469'762'048u / 4u);
  EXPECT_EQ(d->roles[0].communication_bytes, 2u * 4096u * 4096u * 2u);  // dropless: c = 1

  // No buffer without SP, CP or EP: TP's all-reduces run in place.
  ParallelLayout tp;
  tp.tp = 2;
  auto e = PredictParallel(Preset("llama2-7b"), Bf16Adam(1, 4096), tp);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->roles[0].communication_bytes, 0u);
}

}  // namespace
}  // namespace vramscope::predict
