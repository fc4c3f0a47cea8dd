// predict --compile for the LLaMA family (compiled_step.h): what it refuses, and what the
// compiled step keeps that eager does not. tests/tracer/test_compiled_families.py compares it
// with the tracer byte for byte.
#include "predict/compiled_step.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <unordered_map>

#include "predict/model_description.h"
#include "predict/predict.h"
#include "predict/techniques.h"

namespace vramscope::predict {
namespace {

TrainingSetup Bf16(uint64_t batch, uint64_t seq) {
  TrainingSetup s;
  s.batch = batch;
  s.seq = seq;
  s.steps = 1;
  s.precision.param = DType::kBF16;
  s.optimizer.kind = OptimizerKind::kAdamW;
  s.compile = true;
  return s;
}

TEST(CompiledStep, NamesWhatItHasNoTemplateFor) {
  const ModelSpec llama = *LoadModelSpec("llama3-8b");
  EXPECT_EQ(CompiledStepUnsupported(llama, Bf16(1, 512)), "");
  EXPECT_NE(CompiledStepUnsupported(*LoadModelSpec("gpt2"), Bf16(1, 512)).find("LLaMA family"),
            std::string::npos);
  TrainingSetup fp32 = Bf16(1, 512);
  fp32.precision.param = DType::kF32;
  EXPECT_NE(CompiledStepUnsupported(llama, fp32).find("bf16"), std::string::npos);
  TrainingSetup ckpt = Bf16(1, 512);
  ckpt.checkpointing = true;
  EXPECT_EQ(CompiledStepUnsupported(llama, ckpt), "");
  ckpt.checkpoint_every = 2;
  EXPECT_NE(CompiledStepUnsupported(llama, ckpt).find("--checkpointing-every"), std::string::npos);
  TrainingSetup ddp = Bf16(1, 512);
  ddp.world_size = 2;
  EXPECT_NE(CompiledStepUnsupported(llama, ddp).find("data parallelism"), std::string::npos);
  TrainingSetup lora = Bf16(1, 512);
  lora.lora_rank = 8;
  EXPECT_NE(CompiledStepUnsupported(llama, lora).find("--lora"), std::string::npos);
  ModelSpec shallow = llama;
  shallow.layers = 2;
  EXPECT_NE(CompiledStepUnsupported(shallow, Bf16(1, 512)).find("3 layers or more"),
            std::string::npos);
}

struct Live {
  uint64_t by_category[model::kCategoryCount] = {};
  uint64_t largest_activation = 0;
};

// What is allocated when the stream reaches the phase `label` of step 1.
Live LiveAt(const TensorStream& stream, std::string_view label) {
  std::unordered_map<uint64_t, const StreamEvent*> live;
  for (const StreamEvent& e : stream.events) {
    if (e.kind == StreamEvent::Kind::kPhase && e.step == 1 && stream.strings.Get(e.name) == label) {
      break;
    }
    if (e.kind == StreamEvent::Kind::kAlloc) live[e.id] = &e;
    if (e.kind == StreamEvent::Kind::kFree) live.erase(e.id);
  }
  Live out;
  for (const auto& [id, e] : live) {
    out.by_category[static_cast<int>(e->category)] += e->bytes;
    if (e->category == model::Category::kActivation) {
      out.largest_activation = std::max(out.largest_activation, e->bytes);
    }
  }
  return out;
}

uint64_t Cat(const Live& l, model::Category c) { return l.by_category[static_cast<int>(c)]; }

// The compiled graph computes the loss from the bf16 logits (Inductor fuses the fp32 upcast
// into the log-softmax): the largest tensor kept for backward is b x s x vocab x 2 bytes, where
// eager keeps the fp32 upcast (x 4). Weights, gradients and optimizer state are the same.
TEST(CompiledStep, KeepsTheBf16LogitsNotAnFp32CopyAndTheSameModelStates) {
  const ModelSpec m = *LoadModelSpec("llama3-8b");
  const uint64_t b = 1, s = 1024;
  TrainingSetup compiled = Bf16(b, s);
  TrainingSetup eager = compiled;
  eager.compile = false;
  auto c = SimulateTraining(m, compiled);
  auto e = SimulateTraining(m, eager);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(e.ok()) << e.status().message();
  const Live cb = LiveAt(*c, "backward"), eb = LiveAt(*e, "backward");
  EXPECT_EQ(cb.largest_activation, b * s * m.vocab * 2);
  EXPECT_EQ(eb.largest_activation, b * s * m.vocab * 4);
  EXPECT_LT(Cat(cb, model::Category::kActivation), Cat(eb, model::Category::kActivation));
  const Live ce = LiveAt(*c, "step_end"), ee = LiveAt(*e, "step_end");
  for (const auto cat :
       {model::Category::kWeight, model::Category::kGradient, model::Category::kOptimizerState}) {
    EXPECT_EQ(Cat(ce, cat), Cat(ee, cat)) << static_cast<int>(cat);
  }
}

// The summary's effect line: the set-up predicted again eager. With SGD the step's peak is in
// backward, where the compiled graph holds less (the bf16 logits, fused pointwise chains).
TEST(CompiledStep, ItsEffectIsWeighedAgainstEager) {
  auto model = LoadModel("llama3-8b");
  ASSERT_TRUE(model.ok());
  PredictRequest r;
  r.model = "llama3-8b";
  r.setup = Bf16(2, 2048);
  r.setup.optimizer.kind = OptimizerKind::kSgd;
  auto effects = TechniqueEffects(*model, r);
  ASSERT_TRUE(effects.ok()) << effects.status().message();
  ASSERT_EQ(effects->size(), 1u);
  EXPECT_EQ((*effects)[0].name, "torch.compile (against eager)");
  EXPECT_GT((*effects)[0].gpu_saved, int64_t{1} << 30) << EffectText((*effects)[0]);
  EXPECT_EQ((*effects)[0].host_added, 0);
}

}  // namespace
}  // namespace vramscope::predict
