#include "predict/role_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "predict/build_trace.h"
#include "predict/model_description.h"
#include "predict/model_spec.h"
#include "predict/parallel_layout.h"
#include "predict/parallel_terms.h"
#include "predict/parallel_test_support.h"

namespace vramscope::predict {
namespace {

using testing::Bf16Adam;
using testing::Preset;

// What a stream allocates and holds at most, by category and by a part of the name.
struct Tally {
  std::map<model::Category, uint64_t> allocated;  // every allocation, summed
  std::map<model::Category, uint64_t> most_live;  // the most alive at once
  uint64_t most_live_named = 0;                   // of the tensors whose name holds `part`
  uint64_t most_passes = 0;                       // micro-batch passes with activations alive
};

Tally Count(const TensorStream& stream, const std::string& part = "") {
  Tally t;
  std::map<uint64_t, const StreamEvent*> live;
  std::map<model::Category, uint64_t> now;
  uint64_t named = 0;
  std::map<std::string, int> passes;  // "layers.3 ... (micro-batch 2)" -> its pass, by suffix
  for (const StreamEvent& e : stream.events) {
    if (e.kind == StreamEvent::Kind::kAlloc) {
      live[e.id] = &e;
      t.allocated[e.category] += e.bytes;
      now[e.category] += e.bytes;
      t.most_live[e.category] = std::max(t.most_live[e.category], now[e.category]);
      const std::string name(stream.strings.Get(e.name));
      if (!part.empty() && name.find(part) != std::string::npos) named += e.bytes;
      t.most_live_named = std::max(t.most_live_named, named);
    } else if (e.kind == StreamEvent::Kind::kFree) {
      const StreamEvent* a = live.at(e.id);
      now[a->category] -= a->bytes;
      const std::string name(stream.strings.Get(a->name));
      if (!part.empty() && name.find(part) != std::string::npos) named -= a->bytes;
      live.erase(e.id);
    }
  }
  return t;
}

ParallelLayout TensorAndDataParallel(uint64_t tp, uint64_t dp) {
  ParallelLayout l;
  l.tp = tp;
  l.dp = dp;
  return l;
}

Result<TensorStream> Stream(const ModelSpec& m, const TrainingSetup& s, const ParallelLayout& l,
                            size_t role, ParallelPrediction* out = nullptr) {
  auto p = PredictParallel(m, s, l);
  if (!p.ok()) return p.status();
  if (out != nullptr) *out = *p;
  return RoleStream(m, s, *p, role);
}

// Every role's stream allocates exactly the weights, gradients and optimizer state the table
// counts, and holds at most the activations of the micro-batches the schedule keeps in flight
// (to the byte per layer and micro-batch: the table rounds a stage's mean once).
TEST(RoleStream, EachRoleHoldsWhatItsRowCounts) {
  ParallelLayout l;
  l.tp = 2;
  l.pp = 4;
  l.dp = 2;
  l.micro_batches = 8;
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero1;
  ParallelPrediction p;
  for (size_t role = 0; role < 4; ++role) {
    auto stream = Stream(Preset("llama2-7b"), s, l, role, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    ASSERT_EQ(p.roles.size(), 4u);
    const RankRole& r = p.roles[role];
    const Tally t = Count(*stream, "logits");
    EXPECT_EQ(t.allocated.at(model::Category::kWeight), r.weight_bytes) << r.name;
    EXPECT_EQ(t.allocated.at(model::Category::kGradient), r.gradient_bytes) << r.name;
    EXPECT_EQ(t.allocated.at(model::Category::kOptimizerState), r.optimizer_bytes) << r.name;
    const uint64_t activations =
        t.most_live.at(model::Category::kActivation) - (r.head ? r.logits_bytes / 2 : 0);
    EXPECT_NEAR(static_cast<double>(activations), static_cast<double>(r.activation_bytes),
                static_cast<double>(r.layers * r.in_flight))
        << r.name;
    // The last stage: the logits and their gradient at once, in its backward.
    EXPECT_EQ(t.most_live_named, r.head ? r.logits_bytes : 0) << r.name;
  }
  // 1F1B: stage i of 4 keeps 4 - i micro-batches in flight.
  EXPECT_EQ(p.roles[0].in_flight, 4u);
  EXPECT_EQ(p.roles[3].in_flight, 1u);
}

// Interleaved 1F1B: stage 0 of 4 with 2 chunks holds (4 - 0 - 1) x 2 + (2 - 1) x 4 + 1 = 11
// chunks of 4 layers.
TEST(RoleStream, InterleavedScheduleKeepsItsChunksInFlight) {
  ParallelLayout l;
  l.pp = 4;
  l.virtual_stages = 2;
  l.schedule = PipelineSchedule::kInterleaved;
  l.micro_batches = 16;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), Bf16Adam(1, 2048), l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  const RankRole& r = p.roles[0];
  ASSERT_EQ(r.in_flight, 11u);
  const Tally t = Count(*stream);
  EXPECT_NEAR(static_cast<double>(t.most_live.at(model::Category::kActivation)),
              static_cast<double>(r.activation_bytes), static_cast<double>(4 * r.in_flight));
}

// ZeRO-3 on llama2-7b at TP 2, DP 4, by hand per TP rank: a layer is q, k, v, o of 4096 x 2048,
// the MLP's 3 x 4096 x 5504 and two norms: 101,195,776 elements; the embedding 16,000 x 4096 =
// 65,536,000. In a layer's backward a rank holds it gathered, the next one prefetched and its
// gradients unsharded: 3 x 101,195,776 x 2 B = 607,174,656 B.
TEST(RoleStream, ZeroThreeGathersAUnitAndPrefetchesTheNext) {
  ParallelLayout l = TensorAndDataParallel(2, 4);
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero3;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, 607'174'656u);
  EXPECT_EQ(p.roles[0].data_parallel,
            "ZeRO-3 all-gathers (unit and prefetch) and reduce-scatter input");
  // The stream's gathered units and reduce-scatter inputs, at most at once.
  const Tally gathered = Count(*stream, "(ZeRO");
  EXPECT_EQ(gathered.most_live_named, 607'174'656u);
  // Made on FSDP2's streams: the gathered units on the all-gather stream, the reduce-scatter
  // inputs on the reduce-scatter stream, everything else on the compute stream.
  for (const StreamEvent& e : stream->events) {
    if (e.kind != StreamEvent::Kind::kAlloc) continue;
    const std::string name(stream->strings.Get(e.name));
    const uint32_t expected = name.find("(ZeRO-3 all-gathered)") != std::string::npos         ? 1
                              : name.find("(ZeRO reduce-scatter input)") != std::string::npos ? 2
                                                                                              : 0;
    EXPECT_EQ(e.cuda_stream, expected) << name;
  }
  // ZeRO-2: one unit's gradients (the largest, a layer's).
  s.zero = ZeroMode::kZero2;
  auto two = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(p.roles[0].data_parallel_bytes, 101'195'776u * 2);
  EXPECT_EQ(Count(*two, "(ZeRO").most_live_named, 101'195'776u * 2);
  // Without a data-parallel group to shard over, or with ZeRO-1, none.
  s.zero = ZeroMode::kZero1;
  ASSERT_TRUE(Stream(Preset("llama2-7b"), s, l, 0, &p).ok());
  EXPECT_EQ(p.roles[0].data_parallel_bytes, 0u);
}

// Under pipeline parallelism FSDP2 keeps each unit gathered from its first forward of the step
// to the step's last backward (torchtitan's reshard_after_forward=False): stage 1 of llama2-7b
// at TP 2, PP 4 holds its 8 layers gathered (8 x 101,195,776 elements) and one layer's
// gradients unsharded in backward: 9 x 101,195,776 x 2 B. --reshard-after-forward true brings
// back the unit and its prefetch.
TEST(RoleStream, ZeroThreeUnderPipelineKeepsTheUnitsGathered) {
  ParallelLayout l;
  l.tp = 2;
  l.pp = 4;
  l.dp = 4;
  l.micro_batches = 8;
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero3;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), s, l, 1, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_FALSE(p.layout.ReshardAfterForward());
  EXPECT_EQ(p.roles[1].data_parallel_bytes, 9u * 101'195'776u * 2u);
  EXPECT_EQ(Count(*stream, "(ZeRO").most_live_named, 9u * 101'195'776u * 2u);
  l.reshard_after_forward = true;
  auto resharded = Stream(Preset("llama2-7b"), s, l, 1, &p);
  ASSERT_TRUE(resharded.ok());
  EXPECT_EQ(p.roles[1].data_parallel_bytes, 3u * 101'195'776u * 2u);
  EXPECT_EQ(Count(*resharded, "(ZeRO").most_live_named, 3u * 101'195'776u * 2u);
}

// Sequence parallelism's all-gathered input is alive around each layer, never two at once.
TEST(RoleStream, CommunicationBufferAroundEachLayer) {
  ParallelLayout l;
  l.tp = 4;
  l.sequence_parallel = true;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), Bf16Adam(2, 4096), l, 0, &p);
  ASSERT_TRUE(stream.ok());
  ASSERT_EQ(p.roles[0].communication_bytes, 2u * 4096 * 2 * 4096);
  EXPECT_EQ(Count(*stream, "SP all-gather").most_live_named, p.roles[0].communication_bytes);
}

// A long schedule is cut after its warm-up and two rounds: the stream stays small, and says so.
TEST(RoleStream, LongSchedulesAreCutAndSaySo) {
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 100000;
  ParallelPrediction p;
  auto stream = Stream(Preset("gpt2"), Bf16Adam(1, 1024), l, 0, &p);
  ASSERT_TRUE(stream.ok());
  EXPECT_LT(stream->events.size(), 100000u);
  bool said = false;
  for (const auto& [key, value] : stream->info.facts) {
    said |= key == "schedule simulated" && value.find("first 12 of 100000") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

// The allocator model places every role's stream: reserved covers allocated, and the first
// stage (four micro-batches in flight) needs the most.
TEST(RoleStream, TheAllocatorModelPlacesEveryRole) {
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 8;
  ParallelPrediction p;
  allocator::AllocatorSettings settings;
  uint64_t first = 0;
  for (size_t role = 0; role < 4; ++role) {
    auto stream = Stream(Preset("llama2-7b"), Bf16Adam(1, 4096), l, role, &p);
    ASSERT_TRUE(stream.ok());
    auto peaks = SimulatePeaks(*stream, settings);
    ASSERT_TRUE(peaks.ok()) << peaks.status().message();
    EXPECT_GE(peaks->peak_reserved, peaks->peak_allocated);
    EXPECT_FALSE(peaks->oom);
    if (role == 0) first = peaks->peak_reserved;
    if (role > 0) EXPECT_LT(peaks->peak_reserved, first) << p.roles[role].name;
  }
}

// What one layer saves per micro-batch, by the per-rank formula (TP 1) and by the step simulator
// (which runs Hugging Face's eager code, byte-exact against real runs): the second layer's
// saved tensors of the first forward, in units of s b h. They differ by what Hugging Face's
// modules keep beyond the formulas' count, and by nothing else:
// - LLaMA-style (llama2-7b, llama3-8b with grouped KV heads, qwen2-0.5b with q/k/v biases):
//   LlamaRMSNorm's fp32 copy of each norm's input, 2 x 4; and 0.03 to 0.07 of small tensors
//   (the norms' fp32 rsqrt, SDPA's log-sum-exp);
// - GPT-2: gelu_new's composite tanh approximation keeps three more ffn-wide intermediates (a
//   product, the tanh's output and 1 + tanh: 3 x 2 x 4 = 24 at ffn = 4 h) where Korthikanti et
//   al. count a fused GELU.
TEST(RoleStream, LayerActivationsAgainstTheStepSimulator) {
  struct Case {
    const char* model;
    double hf_extra_low, hf_extra_high;
  };
  for (const Case& c : {Case{"llama2-7b", 8.0, 8.05}, Case{"llama3-8b", 8.0, 8.05},
                        Case{"qwen2-0.5b", 8.0, 8.1}, Case{"gpt2", 24.0, 24.1}}) {
    ModelSpec m = Preset(c.model);
    m.layers = 2;
    TrainingSetup s = Bf16Adam(1, 2048);
    s.steps = 1;
    auto stream = SimulateTraining(m, s);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    double simulated = 0;
    bool backward = false;
    for (const StreamEvent& e : stream->events) {
      if (e.kind == StreamEvent::Kind::kPhase && e.phase == model::Phase::kBackward) {
        backward = true;
      }
      if (backward || e.kind != StreamEvent::Kind::kAlloc ||
          e.category != model::Category::kActivation) {
        continue;
      }
      const std::string name(stream->strings.Get(e.name));
      for (const char* layer : {"model.layers.1", "transformer.h.1"}) {
        if (name == layer || name.rfind(std::string(layer) + ".", 0) == 0) simulated += e.bytes;
      }
    }
    auto p = PredictParallel(m, s, ParallelLayout{});
    ASSERT_TRUE(p.ok()) << p.status().message();
    const double sbh = 2048.0 * static_cast<double>(m.hidden);
    const double formula = static_cast<double>(p->roles[0].activation_bytes_per_micro_batch) / 2;
    EXPECT_GE((simulated - formula) / sbh, c.hf_extra_low) << c.model;
    EXPECT_LE((simulated - formula) / sbh, c.hf_extra_high) << c.model;
  }
}

// How many tensors whose name holds `part` a stream allocates.
size_t Allocations(const TensorStream& stream, const std::string& part) {
  size_t n = 0;
  for (const StreamEvent& e : stream.events) {
    if (e.kind == StreamEvent::Kind::kAlloc &&
        std::string(stream.strings.Get(e.name)).find(part) != std::string::npos) {
      ++n;
    }
  }
  return n;
}

// llama2-7b's layouts for DeepSpeed: TP 2 x DP 4.
ParallelLayout DeepSpeedLayout() {
  ParallelLayout l = TensorAndDataParallel(2, 4);
  l.data_parallel_impl = model::DataParallelImpl::kDeepSpeed;
  return l;
}

// DeepSpeed's ZeRO-1/2 optimizer (stage_1_and_2.py, contiguous_gradients on by default)
// allocates its reduce bucket, reduce_bucket_size elements in the weights' dtype, as each backward
// starts: 500,000,000 x 2 B in bf16, twice with overlap_comm; under pipeline parallelism once per
// step, for the reduction after the last backward.
TEST(RoleStream, DeepSpeedAllocatesItsReduceBucketsInEachBackward) {
  ParallelLayout l = DeepSpeedLayout();
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero2;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, 1'000'000'000u);
  EXPECT_EQ(p.roles[0].data_parallel, "DeepSpeed's reduce bucket, in backward");
  EXPECT_EQ(Count(*stream, "DeepSpeed reduce bucket").most_live_named, 1'000'000'000u);
  EXPECT_EQ(Allocations(*stream, "DeepSpeed reduce bucket"), 2u);  // one backward per step
  // FSDP2's per-unit reduce-scatter inputs are not DeepSpeed's.
  EXPECT_EQ(Allocations(*stream, "(ZeRO reduce-scatter input)"), 0u);
  l.overlap_comm = true;
  l.reduce_bucket_elements = 200'000'000;
  l.dp = 2;
  s.zero = ZeroMode::kZero1;
  stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, uint64_t{2} * 200'000'000 * 2);
  EXPECT_EQ(Count(*stream, "DeepSpeed reduce bucket").most_live_named,
            uint64_t{2} * 200'000'000 * 2);
  // Pipeline parallelism, 4 micro-batches: one bucket per step, whatever overlap_comm says.
  l.pp = 2;
  l.micro_batches = 4;
  stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, uint64_t{200'000'000} * 2);
  EXPECT_EQ(Allocations(*stream, "DeepSpeed reduce bucket"), 2u);
}

// PyTorch's DistributedDataParallel (gradient_as_bucket_view false) holds each gradient twice:
// the parameters' .grad, made in backward and dropped by zero_grad(set_to_none=True), and the
// flat buckets the reducer copies them into, alive from construction. llama2-7b at TP 2 holds
// 3,369,340,928 elements per rank: 2 x 6,738,681,856 B of gradients in bf16.
TEST(RoleStream, TorchDdpHoldsEachGradientTwice) {
  ParallelLayout l = TensorAndDataParallel(2, 4);
  l.data_parallel_impl = model::DataParallelImpl::kTorch;
  const TrainingSetup s = Bf16Adam(1, 4096);
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  const RankRole& r = p.roles[0];
  EXPECT_EQ(r.gradient_bytes, uint64_t{3'369'340'928} * 2);
  EXPECT_EQ(r.data_parallel_bytes, r.gradient_bytes);
  EXPECT_EQ(Count(*stream, "DDP gradient buckets").most_live_named, r.gradient_bytes);
  EXPECT_EQ(Count(*stream, ".grad").most_live_named, r.gradient_bytes);
  // llama2-7b's 291 parameters (9 per layer, the embedding, the final norm, the head): one .grad
  // each per step.
  EXPECT_EQ(Allocations(*stream, ".grad"), 2u * 291);
  // Both steps' placement holds both copies at the end of backward: above Megatron's layout,
  // which reduces in the one buffer.
  l.data_parallel_impl = model::DataParallelImpl::kMegatron;
  ParallelPrediction megatron;
  auto plain = Stream(Preset("llama2-7b"), s, l, 0, &megatron);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(megatron.roles[0].data_parallel_bytes, 0u);
  EXPECT_EQ(Count(*plain, ".grad").most_live_named, 0u);
  EXPECT_EQ(r.total_bytes, megatron.roles[0].total_bytes + r.gradient_bytes);
  // A single data-parallel rank is not wrapped: no buckets.
  l.data_parallel_impl = model::DataParallelImpl::kTorch;
  l.dp = 1;
  ASSERT_TRUE(Stream(Preset("llama2-7b"), s, l, 0, &p).ok());
  EXPECT_EQ(p.roles[0].data_parallel_bytes, 0u);
}

// FSDP2's MixedPrecisionPolicy as torchtitan sets it (param_dtype bf16, reduce_dtype fp32) over
// fp32 sharded weights: llama2-7b at TP 2 has 101,195,776 elements a layer; a layer's backward
// holds it and the previous one gathered in bf16 (2 x 2 B) and its fp32 reduce-scatter input
// (4 B): 8 x 101,195,776 B, where fp32 throughout holds 3 x 4 B per element.
TEST(RoleStream, FsdpMixedPrecisionGathersIn16BitAndReducesInFp32) {
  ParallelLayout l = TensorAndDataParallel(2, 4);
  TrainingSetup s = Bf16Adam(1, 4096);
  s.precision.param = DType::kF32;
  s.zero = ZeroMode::kZero3;
  ParallelPrediction p;
  ASSERT_TRUE(Stream(Preset("llama2-7b"), s, l, 0, &p).ok());
  EXPECT_EQ(p.roles[0].data_parallel_bytes, uint64_t{12} * 101'195'776);
  l.fsdp_mixed_precision = true;
  auto stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, uint64_t{8} * 101'195'776);
  EXPECT_EQ(p.roles[0].data_parallel,
            "ZeRO-3 all-gathers in 16-bit (unit and prefetch) and fp32 reduce-scatter input");
  EXPECT_EQ(Count(*stream, "(ZeRO").most_live_named, uint64_t{8} * 101'195'776);
  for (const StreamEvent& e : stream->events) {
    if (e.kind != StreamEvent::Kind::kAlloc) continue;
    const std::string name(stream->strings.Get(e.name));
    if (name == "layers.3 (ZeRO-3 all-gathered)") EXPECT_EQ(e.bytes, uint64_t{2} * 101'195'776);
    if (name == "layers.3 (ZeRO reduce-scatter input)") {
      EXPECT_EQ(e.bytes, uint64_t{4} * 101'195'776);
    }
  }
  // Only FSDP2 (ZeRO-3) has the policy.
  s.zero = ZeroMode::kZero2;
  auto refused = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("give --zero 3"), std::string::npos);
}

// DeepSpeed's ZeRO-3 (stage3.py) keeps a reduce bucket of reduce_bucket_size elements from
// construction, and gathers each unit with up to stage3_prefetch_bucket_size (50,000,000)
// elements of the next: llama2-7b at TP 2 in bf16, (101,195,776 + 50,000,000 + 500,000,000) x 2 B.
TEST(RoleStream, DeepSpeedZeroThreeKeepsItsBucketAndPrefetchesABucketAhead) {
  ParallelLayout l = DeepSpeedLayout();
  TrainingSetup s = Bf16Adam(1, 4096);
  s.zero = ZeroMode::kZero3;
  ParallelPrediction p;
  auto stream = Stream(Preset("llama2-7b"), s, l, 0, &p);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  EXPECT_EQ(p.roles[0].data_parallel_bytes, (uint64_t{101'195'776} + 50'000'000 + 500'000'000) * 2);
  // The bucket once, from construction to the end; the prefetched parts at most one at a time.
  EXPECT_EQ(Allocations(*stream, "DeepSpeed reduce bucket"), 1u);
  EXPECT_EQ(Count(*stream, "(DeepSpeed ZeRO-3 prefetched)").most_live_named,
            uint64_t{50'000'000} * 2);
  EXPECT_EQ(Count(*stream, "(ZeRO-3 all-gathered)").most_live_named, uint64_t{101'195'776} * 2);
  EXPECT_EQ(Allocations(*stream, "(ZeRO reduce-scatter input)"), 0u);
}

TEST(RoleStream, DataParallelImplementationsRefuseWhatTheyDoNotDo) {
  ParallelLayout l = TensorAndDataParallel(2, 4);
  TrainingSetup s = Bf16Adam(1, 4096);
  l.data_parallel_impl = model::DataParallelImpl::kTorch;
  s.zero = ZeroMode::kZero2;
  auto refused = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("DistributedDataParallel does not shard"),
            std::string::npos)
      << refused.status().message();
  l.data_parallel_impl = model::DataParallelImpl::kDeepSpeed;
  s.zero = ZeroMode::kNone;
  refused = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("give --zero 1, 2 or 3"), std::string::npos)
      << refused.status().message();
  // DeepSpeed's pipeline engine takes ZeRO-1 only.
  s.zero = ZeroMode::kZero2;
  l.pp = 2;
  refused = PredictParallel(Preset("llama2-7b"), s, l);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("incompatible with pipeline parallelism"),
            std::string::npos)
      << refused.status().message();
  l.pp = 1;
  s.zero = ZeroMode::kZero2;
  l.reduce_bucket_elements = 0;
  EXPECT_FALSE(PredictParallel(Preset("llama2-7b"), s, l).ok());
}

// torch.distributed.pipelining (--pp-impl torch), GPT-2 in bf16 on 4 stages, 8 micro-batches of
// 1 x 1024 tokens: a boundary tensor is 1 x 1024 x 768 x 2 B. Each stage keeps a receive buffer
// per micro-batch and direction for the whole run (the first stage only the gradients', the last
// only the inputs'), each micro-batch's output to its backward, and the last stage every
// micro-batch's output (1024 x 50,257 x 2 B) to the next step, beside the fp32 log-softmax and
// its two gradients.
TEST(RoleStream, TorchPipeliningKeepsItsBuffersAndTheLastStagesOutputs) {
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 8;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  const TrainingSetup s = Bf16Adam(1, 1024);
  const uint64_t boundary = 1024 * 768 * 2, output = 1024 * 50257 * 2;
  auto layout = PredictParallel(Preset("gpt2"), s, l);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->roles.size(), 4u);  // in flight 4, 3, 2, 1
  ParallelPrediction p;
  for (size_t role = 0; role < 4; ++role) {
    auto stream = Stream(Preset("gpt2"), s, l, role, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const RankRole& r = p.roles[role];
    const uint64_t directions = r.embedding || r.head ? 1 : 2;
    EXPECT_EQ(r.pipeline_buffer_bytes, 8 * directions * boundary) << r.name;
    // made at the first step, never freed
    EXPECT_EQ(Count(*stream, "receive buffer").most_live_named, r.pipeline_buffer_bytes);
    if (r.head) {
      EXPECT_EQ(r.logits_bytes, 8 * output + 3 * 1024 * 50257 * 4);
      EXPECT_EQ(Count(*stream, "head output").most_live_named, 8 * output);
      EXPECT_EQ(Count(*stream, "merged outputs").most_live_named, 8 * output);
      EXPECT_EQ(Count(*stream, "stage output").most_live_named, 0u);
    } else {
      EXPECT_EQ(Count(*stream, "stage output").most_live_named, r.in_flight * boundary) << r.name;
    }
  }
  // Megatron's schedules (the default) keep none of it.
  l.pipeline_impl = model::PipelineImpl::kMegatron;
  auto megatron = Stream(Preset("gpt2"), s, l, 2, &p);
  ASSERT_TRUE(megatron.ok());
  EXPECT_EQ(p.roles[2].pipeline_buffer_bytes, 0u);
  EXPECT_EQ(Count(*megatron, "stage output").most_live_named, 0u);
  EXPECT_EQ(Count(*megatron, "receive buffer").most_live_named, 0u);
  // A cut schedule still keeps every micro-batch's output.
  l.pipeline_impl = model::PipelineImpl::kTorch;
  l.micro_batches = 1000;
  auto cut = Stream(Preset("gpt2"), s, l, 3, &p);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(Count(*cut, "head output").most_live_named, 1000 * output);
}

// ScheduleInterleaved1F1B (--pp-impl torch --schedule interleaved): GPT-2's 12 layers in 6
// stages, 3 per rank of 2 (rank 0 holds stages 0, 2 and 4; rank 1 stages 1, 3 and 5), 8
// micro-batches. Each of a rank's stages keeps its receive buffers: 5 per micro-batch on either
// rank (stage 0 receives no input, stage 5 no gradient). Stage outputs are kept to their
// backward for every pass in flight but the last stage's: rank 0 holds 2 x 1 + 2 x 2 + 1 = 7
// passes at once; rank 1 at most 5, all of stages 1 and 3 (after its warm-up of 4 such passes
// and two of stage 5, each backward at once, a pass of stage 1 starts before stage 3's first
// backward), as many as its passes in flight.
TEST(RoleStream, TorchInterleavedKeepsEachStagesBuffers) {
  ParallelLayout l;
  l.pp = 2;
  l.micro_batches = 8;
  l.schedule = PipelineSchedule::kInterleaved;
  l.virtual_stages = 3;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  const TrainingSetup s = Bf16Adam(1, 1024);
  const uint64_t boundary = 1024 * 768 * 2, output = 1024 * 50257 * 2;
  ParallelPrediction p;
  for (size_t role = 0; role < 2; ++role) {
    auto stream = Stream(Preset("gpt2"), s, l, role, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const RankRole& r = p.roles[role];
    EXPECT_EQ(r.pipeline_buffer_bytes, 8 * 5 * boundary) << r.name;
    EXPECT_EQ(Count(*stream, "receive buffer").most_live_named, r.pipeline_buffer_bytes);
    EXPECT_EQ(Count(*stream, "stage 2's stage input receive buffer").most_live_named,
              role == 0 ? 8 * boundary : 0);
    EXPECT_EQ(r.in_flight, role == 0 ? 7u : 5u);
    EXPECT_EQ(Count(*stream, "stage output").most_live_named, r.in_flight * boundary) << r.name;
    EXPECT_EQ(Count(*stream, "head output").most_live_named, role == 1 ? 8 * output : 0);
  }
}

// ScheduleGPipe: every stage holds all 8 micro-batches' stage outputs at once, the last stage
// every micro-batch's output and its fp32 log-softmax before the first backward. With
// return_outputs=False the last stage keeps an output only to its backward (1F1B: one at a
// time) and merges none. Without data parallelism the gradients are the parameters' .grad
// tensors (made in a step's first backward, freed at the next step's zero_grad), no buffer;
// their bytes are the table's.
TEST(RoleStream, TorchGPipeAndReturnOutputs) {
  ParallelLayout l;
  l.pp = 4;
  l.micro_batches = 8;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  l.schedule = PipelineSchedule::kGPipe;
  const TrainingSetup s = Bf16Adam(1, 1024);
  const uint64_t boundary = 1024 * 768 * 2, output = 1024 * 50257 * 2;
  auto layout = PredictParallel(Preset("gpt2"), s, l);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->roles.size(), 3u);  // the middle stages hold the same
  ParallelPrediction p;
  for (size_t role = 0; role < layout->roles.size(); ++role) {
    auto stream = Stream(Preset("gpt2"), s, l, role, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const RankRole& r = p.roles[role];
    EXPECT_EQ(r.in_flight, 8u);
    const Tally t = Count(*stream, r.head ? "log-softmax (fp32)" : "stage output");
    EXPECT_EQ(t.most_live_named, r.head ? 8 * 1024 * 50257 * 4 : 8 * boundary) << r.name;
    EXPECT_EQ(t.most_live.at(model::Category::kGradient), r.gradient_bytes) << r.name;
    EXPECT_EQ(Count(*stream, ".grad").most_live_named, r.gradient_bytes) << r.name;
    EXPECT_EQ(Count(*stream, "gradient buffer").most_live_named, 0u) << r.name;
  }
  l.schedule = PipelineSchedule::k1F1B;
  l.pipeline_return_outputs = false;
  auto last = Stream(Preset("gpt2"), s, l, 3, &p);
  ASSERT_TRUE(last.ok()) << last.status().message();
  EXPECT_EQ(p.roles[3].logits_bytes, output + 3 * 1024 * 50257 * 4);
  EXPECT_EQ(Count(*last, "head output").most_live_named, output);
  EXPECT_EQ(Count(*last, "merged outputs").most_live_named, 0u);
}

// FSDP2 under torch.distributed.pipelining (PP 2 x DP 2, ZeRO-3): every backward runs with
// gradient sync off, so each stage accumulates its parameters' unsharded gradients (twice the
// shard the table counts on DP 2) through the step and reduce-scatters them once after its last
// backward into the sharded .grad; no gradient buffer.
TEST(RoleStream, FsdpUnderTorchPipeliningAccumulatesUnshardedGradients) {
  ParallelLayout l;
  l.pp = 2;
  l.dp = 2;
  l.micro_batches = 4;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  TrainingSetup s = Bf16Adam(1, 1024);
  s.zero = ZeroMode::kZero3;
  ParallelPrediction p;
  for (size_t role = 0; role < 2; ++role) {
    auto stream = Stream(Preset("gpt2"), s, l, role, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const RankRole& r = p.roles[role];
    EXPECT_EQ(Count(*stream, "(unsharded, accumulated)").most_live_named, 2 * r.gradient_bytes)
        << r.name;
    EXPECT_EQ(Count(*stream, "gradient buffer").most_live_named, 0u) << r.name;
    EXPECT_GT(Count(*stream, "reduce-scatter input").most_live_named, 0u) << r.name;
  }
}

// A stage's later micro-batches compute each parameter's gradient into a new tensor that
// AccumulateGrad adds into .grad and drops, one at a time (the first stage of the PP x FSDP2 H100
// capture needed a 20 MiB segment for its embedding's 8 MiB ones): per step, three later
// micro-batches' worth of the stage's gradients, at most the largest parameter's at once; with
// FSDP2 the same of its unsharded gradients.
TEST(RoleStream, LaterMicroBatchesAddTheirGradientsIntoTheFirsts) {
  ParallelLayout l;
  l.pp = 2;
  l.micro_batches = 4;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  const TrainingSetup s = Bf16Adam(1, 1024);
  const char* kAdded = "gradient of a later micro-batch";
  for (const bool fsdp : {false, true}) {
    l.dp = fsdp ? 2 : 1;
    TrainingSetup setup = s;
    if (fsdp) setup.zero = ZeroMode::kZero3;
    ParallelPrediction p;
    auto stream = Stream(Preset("gpt2"), setup, l, 0, &p);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const RankRole& r = p.roles[0];
    uint64_t added = 0;
    std::set<int32_t> steps;  // the steps that run a backward
    for (const StreamEvent& e : stream->events) {
      if (e.kind == StreamEvent::Kind::kPhase && e.phase == model::Phase::kBackward) {
        steps.insert(e.step);
      }
      if (e.kind == StreamEvent::Kind::kAlloc &&
          stream->strings.Get(e.name).find(kAdded) != std::string_view::npos) {
        added += e.bytes;
      }
    }
    // every tensor's gradient, whole (FSDP2 accumulates unsharded: twice the shard's bytes)
    const uint64_t stage_gradients = fsdp ? 2 * r.gradient_bytes : r.gradient_bytes;
    EXPECT_EQ(added, steps.size() * 3 * stage_gradients) << fsdp;
    EXPECT_EQ(Count(*stream, kAdded).most_live_named, 50257u * 768 * 2) << fsdp;  // wte's
  }
}

// GPT-2's dropout masks exist only when its config's dropout is above 0 (F.dropout with p = 0
// returns its input: gpt-small.json, the captured pipelines' model, has none); each decoder
// layer's backward makes the gradient of its MLP's hidden activation, tokens x ffn, once per
// micro-batch; a forward through biased linears asks for cuBLASLt's workspace (addmm).
TEST(RoleStream, DropoutMasksFollowTheConfigAndBackwardMakesTheMlpHiddenGradient) {
  ParallelLayout l;
  l.pp = 2;
  l.micro_batches = 4;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  const TrainingSetup s = Bf16Adam(2, 512);
  for (const double dropout : {0.0, 0.1}) {
    ModelSpec m = Preset("gpt2");
    m.dropout = m.attention_dropout = dropout;
    auto stream = Stream(m, s, l, 0);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    const Tally masks = Count(*stream, "dropout mask");
    EXPECT_EQ(masks.most_live_named > 0, dropout > 0) << dropout;
    uint64_t hidden = 0, count = 0;
    bool addmm = false;
    for (const StreamEvent& e : stream->events) {
      if (e.kind == StreamEvent::Kind::kAlloc &&
          stream->strings.Get(e.name).find("gradient of the MLP's hidden activation") !=
              std::string_view::npos) {
        hidden = e.bytes;
        ++count;
      }
      if (e.kind == StreamEvent::Kind::kMatmul && stream->strings.Get(e.op) == "aten::addmm") {
        addmm = true;
      }
    }
    EXPECT_EQ(hidden, 2u * 512 * 3072 * 2) << dropout;  // micro-batch 2 x 512 tokens x ffn, bf16
    // the first stage's six layers, every simulated backward of two steps
    EXPECT_EQ(count % 6, 0u) << count;
    EXPECT_GT(count, 0u);
    EXPECT_TRUE(addmm);
  }
}

// A checkpointed layer's backward first recomputes its forward: the layer's whole saved set
// less what the forward kept comes back for that layer's backward alone. LLaMA-2-7B, one rank,
// every 2nd layer checkpointed (16 of 32): 16 recomputations per micro-batch, each the full
// layer's bytes less its input (2 s b h); under the op-level policy (every layer), 32, each the
// full layer less the input and the outputs the policy kept; never two at once.
TEST(RoleStream, CheckpointedLayersRecomputeTheirActivationsInBackward) {
  const ModelSpec m = Preset("llama2-7b");
  const TrainingSetup none = Bf16Adam(1, 2048);
  const double full = parallel_terms::LayerActivationBytes(m, none, ParallelLayout{}, 2048, 0);
  for (const bool ops : {false, true}) {
    TrainingSetup s = none;
    s.checkpointing = true;
    s.checkpoint_every = ops ? 1 : 2;
    s.checkpoint_ops = ops;
    const double kept = parallel_terms::LayerActivationBytes(m, s, ParallelLayout{}, 2048, 1);
    EXPECT_EQ(kept > 2.0 * 2048 * 4096, ops);  // the input, and the kept outputs
    auto stream = Stream(m, s, ParallelLayout{}, 0);
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    uint64_t count = 0, bytes = 0;
    for (const StreamEvent& e : stream->events) {
      if (e.kind == StreamEvent::Kind::kAlloc &&
          stream->strings.Get(e.name).find("recomputed activations") != std::string_view::npos) {
        ++count;
        bytes = e.bytes;
      }
    }
    EXPECT_EQ(count % (ops ? 32 : 16), 0u) << count;
    EXPECT_GT(count, 0u);
    EXPECT_EQ(bytes, static_cast<uint64_t>(std::llround(full - kept))) << ops;
    EXPECT_EQ(Count(*stream, "recomputed activations").most_live_named, bytes) << ops;
  }
}

// torch.autocast (bf16) over a pipeline with fp32 weights, as the bf16 H100 captures of
// pp_gpt.py ran it: the residual stream stays fp32 (so each receive buffer is micro-batch x seq
// x hidden x 4 B, and each norm's saved input too); each linear's weight and bias gets a bf16
// copy at its first forward of the step, cached to the step's end (not the norms', not the
// embedding's); the loss's log-softmax is bf16 with an fp32 copy for nll_loss.
TEST(RoleStream, AutocastOverAPipelineKeepsWeightCopiesAndAnFp32ResidualStream) {
  ParallelLayout l;
  l.pp = 2;
  l.micro_batches = 4;
  l.pipeline_impl = model::PipelineImpl::kTorch;
  TrainingSetup s = Bf16Adam(2, 1024);
  s.precision.param = DType::kF32;
  s.precision.autocast = DType::kBF16;
  const ModelSpec m = Preset("gpt2");
  const uint64_t tokens = 2 * 1024, h = 768;
  uint64_t cast = 0;  // one layer's linear weights and biases
  for (const parallel_terms::LayerTensor& t : parallel_terms::LayerTensors(m, l, false)) {
    if (std::string_view(t.name).rfind("ln_", 0) != 0) cast += t.elements;
  }
  ParallelPrediction p;
  auto first = Stream(m, s, l, 0, &p);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(Count(*first, "(autocast copy)").most_live_named, p.roles[0].layers * cast * 2);
  EXPECT_EQ(Count(*first, "receive buffer").most_live_named, 4 * tokens * h * 4);
  EXPECT_EQ(Count(*first, "input norm's input").most_live_named,
            p.roles[0].in_flight * p.roles[0].layers * tokens * h * 4);
  auto last = Stream(m, s, l, 1, &p);
  ASSERT_TRUE(last.ok()) << last.status().message();
  const uint64_t logits = tokens * 50257;
  EXPECT_EQ(Count(*last, "(autocast copy)").most_live_named,
            (p.roles[1].layers * cast + logits / tokens * h) * 2);  // and the head's
  EXPECT_EQ(Count(*last, "log-softmax in fp32").most_live_named, logits * 4);
  EXPECT_EQ(p.roles[1].logits_bytes, 4 * logits * 2 + logits * (2 + 4) + logits * 4);
}

TEST(RoleStream, ARoleOutsideThePredictionIsRefused) {
  ParallelPrediction p;
  auto stream = RoleStream(Preset("gpt2"), Bf16Adam(1, 1024), p, 0);
  EXPECT_FALSE(stream.ok());
}

}  // namespace
}  // namespace vramscope::predict
