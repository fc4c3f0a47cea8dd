// One test per attribution rule, each on a small trace built the way real snapshots look: alloc
// and free events with stacks (C++ frames innermost, then Python), run through BuildAllocations.
#include "attribution/attribution.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace vramscope::attribution {
namespace {

using model::Action;
using model::StackId;

const std::string kModule = "/usr/lib/python3/site-packages/torch/nn/modules/module.py";
const std::string kLinear = "/usr/lib/python3/site-packages/torch/nn/modules/linear.py";
const std::string kAdam = "/usr/lib/python3/site-packages/torch/optim/adam.py";
const std::string kOptimizer = "/usr/lib/python3/site-packages/torch/optim/optimizer.py";
const std::string kTensor = "/usr/lib/python3/site-packages/torch/_tensor.py";
const std::string kAutograd = "/usr/lib/python3/site-packages/torch/autograd/__init__.py";

// Builds a one-device trace event by event; Finish() derives the allocations.
class TraceBuilder {
 public:
  TraceBuilder() {
    t.facts.has_allocator_state = true;
    t.facts.reserved_known = true;
  }

  StackId Stack(std::vector<std::tuple<std::string, int, std::string>> frames) {
    std::vector<model::FrameId> ids;
    for (const auto& [file, line, function] : frames) {
      ids.push_back(t.frames.Intern(
          {t.strings.Intern(file), t.strings.Intern(function), line, model::ClassifyFrame(file)}));
    }
    return t.stacks.Intern(ids);
  }
  // Returns the address, which names the allocation.
  uint64_t Alloc(uint64_t size, StackId stack) {
    const uint64_t addr = next_addr_;
    next_addr_ += (size + 511) / 512 * 512;
    t.events.Push(Action::kAlloc, 0, addr, size, 0, ++time_, stack);
    return addr;
  }
  void Free(uint64_t addr, StackId stack) {
    uint64_t size = 0;
    for (size_t i = 0; i < t.events.count(); ++i) {
      if (t.events.addr[i] == addr && t.events.action[i] == Action::kAlloc) size = t.events.size[i];
    }
    t.events.Push(Action::kFreeRequested, 0, addr, size, 0, ++time_, stack);
    t.events.Push(Action::kFreeCompleted, 0, addr, size, 0, time_, stack);
  }
  Attribution Finish() {
    t.devices = {0};
    t.device_event_ranges = {{0, t.events.count()}};
    t.facts.has_trace = true;
    t.facts.has_native_frames = true;
    model::BuildAllocations(t);
    return Attribute(model::Uninterpreted(t));
  }
  // The attribution of the allocation at `addr` (its latest lifetime).
  const AllocationInfo& Of(const Attribution& a, uint64_t addr) const {
    for (size_t i = t.allocations.size(); i-- > 0;) {
      if (t.allocations[i].addr == addr) return a.allocations[i];
    }
    ADD_FAILURE() << "no allocation at " << addr;
    return a.allocations.front();
  }

  model::Trace t;

 private:
  uint64_t next_addr_ = 0x7f0000000000;
  int64_t time_ = 1000;
};

// The stacks of a plain training loop, as a snapshot with C++ frames records them.
struct LoopStacks {
  explicit LoopStacks(TraceBuilder& b)
      : forward(b.Stack({{"??", 0, "at::_ops::empty_strided::call(...)"},
                         {"??", 0, "at::_ops::addmm::call(at::Tensor const&)"},
                         {kLinear, 116, "forward"},
                         {kModule, 1527, "_call_impl"},
                         {"/proj/train.py", 20, "train_step"}})),
        loss_backward(b.Stack({{kAutograd, 170, "_make_grads"},
                               {kAutograd, 251, "backward"},
                               {kTensor, 492, "backward"},
                               {"/proj/train.py", 24, "train_step"}})),
        engine(b.Stack({{"??", 0, "at::_ops::mm::call(...)"},
                        {"??", 0, "torch::autograd::Engine::evaluate_function(...)"},
                        {"??", 0, "torch::autograd::Engine::thread_main(...)"}})),
        accumulate(b.Stack({{"??", 0, "torch::autograd::AccumulateGrad::apply(...)"},
                            {"??", 0, "torch::autograd::Engine::evaluate_function(...)"}})),
        adam_state(b.Stack({{"??", 0, "at::_ops::zeros_like::call(...)"},
                            {kAdam, 111, "_init_group"},
                            {kAdam, 157, "step"},
                            {"/proj/train.py", 27, "train_step"}})),
        adam_step(b.Stack({{"??", 0, "at::_ops::_foreach_sqrt::call(...)"},
                           {kAdam, 400, "_multi_tensor_adam"},
                           {kAdam, 157, "step"},
                           {"/proj/train.py", 27, "train_step"}})),
        zero_grad(b.Stack({{kOptimizer, 450, "zero_grad"}, {"/proj/train.py", 19, "train_step"}})),
        to_device(b.Stack(
            {{"??", 0, "at::_ops::_to_copy::call(...)"}, {"/proj/train.py", 22, "train_step"}})),
        create_weight(b.Stack({{"??", 0, "at::_ops::_to_copy::call(...)"},
                               {kModule, 1143, "_apply"},
                               {kModule, 1160, "to"},
                               {"/proj/train.py", 35, "main"}})),
        workspace(b.Stack({{"??", 0, "at::cuda::getCurrentCUDABlasHandle()"},
                           {"??", 0, "at::_ops::addmm::call(...)"},
                           {kLinear, 116, "forward"},
                           {kModule, 1527, "_call_impl"}})),
        user(b.Stack({{"/proj/train.py", 30, "main"}})) {}
  StackId forward, loss_backward, engine, accumulate, adam_state, adam_step, zero_grad, to_device,
      create_weight, workspace, user;
};

constexpr uint64_t kWeight = 4096 * 4096 * 4;  // a 4096x4096 fp32 Linear weight

// One Adam training step: weights, batch, forward, backward, step, zero_grad. Returns the
// addresses of each kind of tensor.
struct Step {
  uint64_t weight, input, saved, scratch, loss_grad, act_grad, grad, exp_avg, exp_avg_sq, step_tmp,
      workspace;
};

Step TrainingStep(TraceBuilder& b, const LoopStacks& s, uint64_t weight, bool first) {
  Step out{};
  out.weight = weight;
  out.input = b.Alloc(8 * 4096 * 4, s.to_device);
  if (first) out.workspace = b.Alloc(8519680, s.workspace);
  out.saved = b.Alloc(8 * 4096 * 4, s.forward);
  out.scratch = b.Alloc(8 * 4096 * 4, s.forward);
  b.Free(out.scratch, s.forward);
  out.loss_grad = b.Alloc(4, s.loss_backward);
  out.act_grad = b.Alloc(8 * 4096 * 4, s.engine);
  out.grad = b.Alloc(kWeight, s.accumulate);
  b.Free(out.act_grad, s.engine);
  b.Free(out.saved, s.engine);
  b.Free(out.loss_grad, s.engine);
  if (first) {
    out.exp_avg = b.Alloc(kWeight, s.adam_state);
    out.exp_avg_sq = b.Alloc(kWeight, s.adam_state);
  }
  out.step_tmp = b.Alloc(kWeight, s.adam_step);
  b.Free(out.step_tmp, s.adam_step);
  b.Free(out.grad, s.zero_grad);
  b.Free(out.input, s.user);
  return out;
}

class TwoSteps : public ::testing::Test {
 protected:
  void SetUp() override {
    weight_ = b_.Alloc(kWeight, stacks_.create_weight);
    first_ = TrainingStep(b_, stacks_, weight_, true);
    second_ = TrainingStep(b_, stacks_, weight_, false);
    a_ = b_.Finish();
  }
  Category Cat(uint64_t addr) { return b_.Of(a_, addr).category; }
  std::string Why(uint64_t addr) { return a_.RuleText(b_.Of(a_, addr).rule_id); }

  TraceBuilder b_;
  LoopStacks stacks_{b_};
  uint64_t weight_ = 0;
  Step first_{}, second_{};
  Attribution a_;
};

TEST_F(TwoSteps, PhasesFindTwoIterationsWithEveryPhase) {
  ASSERT_EQ(a_.phases.iterations.size(), 2u);
  for (const Iteration& it : a_.phases.iterations) {
    EXPECT_TRUE(it.has_forward && it.has_backward && it.has_optimizer) << it.step;
  }
  EXPECT_TRUE(a_.phases.detected);
  EXPECT_TRUE(a_.phases.from_native_frames);
  // The weight is made before the first forward: setup, step 0.
  EXPECT_EQ(b_.Of(a_, weight_).phase, Phase::kSetup);
  EXPECT_EQ(b_.Of(a_, first_.saved).phase, Phase::kForward);
  EXPECT_EQ(b_.Of(a_, first_.act_grad).phase, Phase::kBackward);
  EXPECT_EQ(b_.Of(a_, first_.exp_avg).phase, Phase::kOptimizer);
}

TEST_F(TwoSteps, EveryEventsStepIsItsIterations) {
  const Phases& p = a_.phases;
  for (const Iteration& it : p.iterations) {
    for (uint32_t e = it.first_event; e <= it.last_event; ++e) EXPECT_EQ(p.StepAt(e), it.step);
  }
  EXPECT_EQ(p.StepAt(0), 0);  // setup
  EXPECT_EQ(p.StepAt(-1), 0);
  EXPECT_EQ(p.StepAt(static_cast<int64_t>(p.event_phase.size())), 0);
  // Runs, not an array: one per change of step.
  EXPECT_EQ(p.step_runs.size(), 2u);
}

// Steps as runs over several devices: each device's events start at step 0.
TEST(Phases, StepRunsRestartAtEachDevice) {
  Phases p;
  p.event_phase.assign(10, Phase::kUnknown);
  p.SetStep(0, 0);
  p.SetStep(2, 1);
  p.SetStep(3, 1);
  p.SetStep(4, 2);
  p.SetStep(6, 0);  // the next device
  p.SetStep(8, 5);
  p.SetStep(8, 6);  // a later call for the same event wins
  const int32_t want[10] = {0, 0, 1, 1, 2, 2, 0, 0, 6, 6};
  for (int64_t e = 0; e < 10; ++e) EXPECT_EQ(p.StepAt(e), want[e]) << e;
  EXPECT_EQ(p.step_runs.size(), 4u);
}

TEST_F(TwoSteps, WeightFromModuleTo) {
  EXPECT_EQ(Cat(weight_), Category::kWeight) << Why(weight_);
  EXPECT_EQ(b_.Of(a_, weight_).confidence, Confidence::kMedium);
}

TEST_F(TwoSteps, InputCopiedOutsideAnyModule) {
  EXPECT_EQ(Cat(first_.input), Category::kInput) << Why(first_.input);
}

TEST_F(TwoSteps, WorkspaceFromCublasHandleCode) {
  EXPECT_EQ(Cat(first_.workspace), Category::kWorkspace);
  EXPECT_EQ(b_.Of(a_, first_.workspace).confidence, Confidence::kHigh);
}

TEST_F(TwoSteps, ActivationSavedInForwardReleasedInBackward) {
  EXPECT_EQ(Cat(first_.saved), Category::kActivation) << Why(first_.saved);
  EXPECT_EQ(b_.Of(a_, first_.saved).confidence, Confidence::kHigh);
  EXPECT_EQ(a_.Name(b_.Of(a_, first_.saved).operation), "aten::addmm");
}

TEST_F(TwoSteps, ForwardScratchFreedBeforeBackwardIsTemporary) {
  EXPECT_EQ(Cat(first_.scratch), Category::kTemporary) << Why(first_.scratch);
}

TEST_F(TwoSteps, ActivationGradientIsTemporary) {
  EXPECT_EQ(Cat(first_.act_grad), Category::kTemporary) << Why(first_.act_grad);
  EXPECT_EQ(Cat(first_.loss_grad), Category::kTemporary) << Why(first_.loss_grad);
}

TEST_F(TwoSteps, AccumulateGradIsAGradient) {
  EXPECT_EQ(Cat(first_.grad), Category::kGradient);
  EXPECT_EQ(Cat(second_.grad), Category::kGradient);
}

TEST_F(TwoSteps, AdamStateCreatedAtTheFirstStepAndKept) {
  EXPECT_EQ(Cat(first_.exp_avg), Category::kOptimizerState) << Why(first_.exp_avg);
  EXPECT_EQ(Cat(first_.exp_avg_sq), Category::kOptimizerState);
}

TEST_F(TwoSteps, StepScratchIsTemporary) {
  EXPECT_EQ(Cat(first_.step_tmp), Category::kTemporary) << Why(first_.step_tmp);
  EXPECT_EQ(a_.Name(b_.Of(a_, first_.step_tmp).operation), "aten::_foreach_sqrt");
}

TEST_F(TwoSteps, EveryRuleHasASentence) {
  for (const AllocationInfo& info : a_.allocations) {
    EXPECT_NE(std::string(a_.RuleText(info.rule_id)), "");
    EXPECT_NE(info.category, Category::kUnknown) << a_.RuleText(info.rule_id);
  }
}

// Gradients made by an op in backward (no AccumulateGrad frame: the grad was stolen) and kept
// until zero_grad.
TEST(Attribute, BackwardOutputFreedByZeroGradIsAGradient) {
  TraceBuilder b;
  LoopStacks s(b);
  const uint64_t w = b.Alloc(kWeight, s.create_weight);
  const uint64_t x = b.Alloc(4096, s.forward);
  const uint64_t g = b.Alloc(kWeight, s.engine);
  b.Free(x, s.engine);
  b.Free(g, s.zero_grad);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, g).category, Category::kGradient);
  EXPECT_EQ(b.Of(a, g).confidence, Confidence::kHigh);
  EXPECT_EQ(b.Of(a, w).category, Category::kWeight);
}

// FSDP2 under torch.distributed.pipelining: each micro-batch's backward leaves the unsharded
// gradient (a matmul output autograd stole as the gathered parameter's .grad) to accumulate, and
// the stage's last backward reduce-scatters and frees it in FSDP2's post_backward, all within
// the step's backward phase (the free stack as ranks4_pp_fsdp2_gpt's H100 capture records it).
// A gradient, not the backward scratch an activation gradient is.
TEST(Attribute, UnshardedGradientFreedByFsdpPostBackwardIsAGradient) {
  TraceBuilder b;
  LoopStacks s(b);
  const std::string fsdp = "/x/torch/distributed/fsdp/_fully_shard/";
  const StackId reduce =
      b.Stack({{fsdp + "_fsdp_collectives.py", 480, "foreach_reduce"},
               {fsdp + "_fsdp_param_group.py", 530, "post_backward"},
               {"/x/torch/distributed/pipelining/stage.py", 600, "perform_reduce_grad"},
               {"/x/torch/distributed/pipelining/schedules.py", 1300, "_step_microbatches"},
               {"/proj/pp_train.py", 40, "train_step"}});
  b.Alloc(kWeight, s.create_weight);
  const uint64_t x1 = b.Alloc(4096, s.forward);
  const uint64_t x2 = b.Alloc(4096, s.forward);
  const uint64_t unsharded = b.Alloc(kWeight, s.engine);  // micro-batch 1's backward
  const uint64_t act_grad = b.Alloc(4096, s.engine);
  b.Free(act_grad, s.engine);
  b.Free(x1, s.engine);
  b.Free(x2, s.engine);  // micro-batch 2's backward accumulated into it in place
  b.Free(unsharded, reduce);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, unsharded).category, Category::kGradient);
  EXPECT_EQ(b.Of(a, unsharded).confidence, Confidence::kHigh);
  EXPECT_NE(std::string(a.RuleText(b.Of(a, unsharded).rule_id)).find("FSDP2's post_backward"),
            std::string::npos);
  EXPECT_EQ(b.Of(a, act_grad).category, Category::kTemporary);
}

// Under torch.autocast the loss (outside any module) casts its bf16 input to fp32: a _to_copy
// whose stack holds at::autocast::cached_cast, made during forward and released in backward
// (the stack as gpt_adamw_bf16's H100 capture records it). Not a batch copied to the device:
// an activation by its lifetime. The batch's own copy stays an input.
TEST(Attribute, AutocastCastOutsideModulesIsNotAnInput) {
  TraceBuilder b;
  LoopStacks s(b);
  const StackId cast = b.Stack({{"??", 0, "at::_ops::_to_copy::call(at::Tensor const&)"},
                                {"??", 0, "at::_ops::to_dtype::call(at::Tensor const&)"},
                                {"??", 0, "at::autocast::cached_cast(c10::ScalarType)"},
                                {"??", 0, "at::_ops::nll_loss::call(at::Tensor const&)"},
                                {"/proj/train.py", 23, "train_step"}});
  const uint64_t w = b.Alloc(kWeight, s.create_weight);
  const uint64_t batch = b.Alloc(8 * 4096 * 4, s.to_device);
  const uint64_t saved = b.Alloc(8 * 4096 * 4, s.forward);
  const uint64_t fp32 = b.Alloc(8 * 50257 * 4, cast);
  const uint64_t loss_grad = b.Alloc(4, s.loss_backward);
  b.Free(fp32, s.engine);
  const uint64_t g = b.Alloc(kWeight, s.accumulate);
  b.Free(saved, s.engine);
  b.Free(loss_grad, s.engine);
  b.Free(g, s.zero_grad);
  b.Free(batch, s.user);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, fp32).category, Category::kActivation);
  EXPECT_EQ(b.Of(a, batch).category, Category::kInput);
  EXPECT_EQ(b.Of(a, w).category, Category::kWeight);
}

// Kept past backward, but no weight has its size: an activation gradient the user kept.
TEST(Attribute, KeptBackwardTensorOfNoWeightSizeIsNotAGradient) {
  TraceBuilder b;
  LoopStacks s(b);
  b.Alloc(kWeight, s.create_weight);
  const uint64_t x = b.Alloc(4096, s.forward);
  const uint64_t kept = b.Alloc(12345, s.engine);
  b.Free(x, s.engine);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, kept).category, Category::kTemporary);
  EXPECT_NE(std::string(a.RuleText(b.Of(a, kept).rule_id)).find("no weight has its size"),
            std::string::npos);
}

// The source's own category (PyTorch's memory profiler) wins over every other rule.
TEST(Attribute, RecordedCategoryWins) {
  TraceBuilder b;
  LoopStacks s(b);
  const uint64_t x = b.Alloc(4096, s.forward);
  b.t.events.category[static_cast<uint32_t>(b.t.events.count() - 1)] = Category::kInput;
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, x).category, Category::kInput);
  EXPECT_EQ(b.Of(a, x).confidence, Confidence::kHigh);
}

// Python-only stacks: the autograd thread records no Python frames, so backward allocations have
// empty stacks; they take the phase of the last marked event (Tensor.backward).
TEST(Attribute, PythonOnlyStacksUseEventOrderForBackward) {
  TraceBuilder b;
  const StackId weight = b.Stack({{kModule, 1143, "_apply"}, {"/proj/train.py", 35, "main"}});
  const StackId fwd = b.Stack({{"/x/torch/nn/functional.py", 1500, "gelu"},
                               {"/x/torch/nn/modules/activation.py", 690, "forward"},
                               {kModule, 1527, "_call_impl"},
                               {"/proj/train.py", 20, "train_step"}});
  const StackId backward = b.Stack({{kAutograd, 170, "_make_grads"}, {kTensor, 492, "backward"}});
  const uint64_t w = b.Alloc(kWeight, weight);
  const uint64_t act = b.Alloc(4096, fwd);
  const uint64_t ones = b.Alloc(4, backward);
  const uint64_t act_grad = b.Alloc(4096, model::kEmptyStack);
  const uint64_t grad = b.Alloc(kWeight, model::kEmptyStack);
  b.Free(act_grad, model::kEmptyStack);
  b.Free(act, model::kEmptyStack);
  b.Free(ones, model::kEmptyStack);
  b.t.facts.has_native_frames = false;
  b.t.devices = {0};
  b.t.device_event_ranges = {{0, b.t.events.count()}};
  b.t.facts.has_trace = true;
  model::BuildAllocations(b.t);
  const Attribution a = Attribute(model::Uninterpreted(b.t));
  EXPECT_FALSE(a.phases.from_native_frames);
  EXPECT_EQ(b.Of(a, act).category, Category::kActivation);
  EXPECT_EQ(a.Name(b.Of(a, act).operation), "gelu");
  EXPECT_EQ(b.Of(a, act_grad).category, Category::kTemporary);
  EXPECT_EQ(b.Of(a, grad).category, Category::kGradient);
  EXPECT_EQ(b.Of(a, grad).confidence, Confidence::kLow);
  EXPECT_EQ(b.Of(a, w).category, Category::kWeight);
}

// No stacks at all: tensors alive across the whole trace are model state; with three of each
// gradient's size and an optimizer step in the trace, two of each three are Adam's moments.
TEST(Attribute, PersistentTensorsWithoutStacksSplitIntoWeightsAndAdamState) {
  TraceBuilder b;
  LoopStacks s(b);
  // Before the trace: a weight and its two moments, recorded only as live blocks of the dump.
  for (int k = 0; k < 3; ++k) {
    model::Segment seg;
    seg.address = 0x100000000 * (k + 1);
    seg.total_size = seg.allocated_size = seg.active_size = seg.requested_size = kWeight;
    seg.first_block = static_cast<uint32_t>(b.t.blocks.size());
    seg.block_count = 1;
    b.t.segments.push_back(seg);
    model::Block block;
    block.address = seg.address;
    block.size = block.requested_size = kWeight;
    block.state = model::BlockState::kActiveAllocated;
    block.segment = static_cast<uint32_t>(b.t.segments.size() - 1);
    b.t.blocks.push_back(block);
  }
  const uint64_t x = b.Alloc(4096, s.forward);
  const uint64_t g = b.Alloc(kWeight, s.accumulate);
  b.Free(x, s.engine);
  const uint64_t tmp = b.Alloc(kWeight, s.adam_step);
  b.Free(tmp, s.adam_step);
  const Attribution a = b.Finish();
  int weights = 0, state = 0;
  for (size_t i = 0; i < b.t.allocations.size(); ++i) {
    if (b.t.allocations[i].alloc_event != model::kNoEvent) continue;
    weights += a.allocations[i].category == Category::kWeight;
    state += a.allocations[i].category == Category::kOptimizerState;
  }
  EXPECT_EQ(weights, 1);
  EXPECT_EQ(state, 2);
  EXPECT_EQ(b.Of(a, g).category, Category::kGradient);
}

// An input that gets a gradient and Adam state of its size is trained: a weight.
TEST(Attribute, TrainedLeafCopiedToTheDeviceIsAWeight) {
  TraceBuilder b;
  LoopStacks s(b);
  const uint64_t target = b.Alloc(kWeight, s.to_device);
  const uint64_t leaf = b.Alloc(kWeight, s.to_device);
  const uint64_t x = b.Alloc(4096, s.forward);
  const uint64_t g = b.Alloc(kWeight, s.accumulate);
  b.Free(x, s.engine);
  b.Alloc(kWeight, s.adam_state);
  b.Alloc(kWeight, s.adam_state);
  b.Free(g, s.zero_grad);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, leaf).category, Category::kWeight) << a.RuleText(b.Of(a, leaf).rule_id);
  EXPECT_EQ(b.Of(a, target).category, Category::kInput);
}

// The default cuBLAS workspace size, alive throughout, without a stack.
TEST(Attribute, CublasWorkspaceBySize) {
  TraceBuilder b;
  LoopStacks s(b);
  model::Segment seg;
  seg.address = 0x200000000;
  seg.total_size = 20 << 20;
  seg.allocated_size = seg.active_size = seg.requested_size = 8519680;
  seg.block_count = 2;
  b.t.segments.push_back(seg);
  b.t.blocks.push_back(
      {seg.address, 8519680, 8519680, model::BlockState::kActiveAllocated, model::kEmptyStack, 0});
  b.t.blocks.push_back({seg.address + 8519680, (20 << 20) - 8519680, 0,
                        model::BlockState::kInactive, model::kEmptyStack, 0});
  const uint64_t x = b.Alloc(4096, s.forward);
  b.Free(x, s.engine);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, 0x200000000).category, Category::kWorkspace);
}

// A forward whose backward the trace does not reach: what it keeps is taken as activations.
TEST(Attribute, ForwardOnlyTraceKeepsActivations) {
  TraceBuilder b;
  LoopStacks s(b);
  const uint64_t kept = b.Alloc(4096, s.forward);
  const Attribution a = b.Finish();
  EXPECT_EQ(b.Of(a, kept).category, Category::kActivation);
  EXPECT_EQ(b.Of(a, kept).confidence, Confidence::kLow);
}

// Profiler traces: an operator event and an nn.Module event turned into frames.
TEST(StackFacts, ProfilerFramesNameTheOperatorAndTheModule) {
  TraceBuilder b;
  const StackId op = b.Stack({{"", 0, "aten::addmm"}, {"nn.Module", 0, "Linear_3"}});
  StackFactsCache cache(b.t);
  const StackFacts f = cache.Get(op);
  EXPECT_TRUE(f.in_forward);
  EXPECT_EQ(cache.Name(f.operation), "aten::addmm");
  EXPECT_EQ(cache.Name(f.module_kind), "Linear");
}

TEST(CategoryName, AllEightNamedAndParsed) {
  const char* names[] = {"weight", "gradient",  "optimizer_state", "activation",
                         "input",  "workspace", "temporary",       "unknown"};
  for (int i = 0; i < kCategoryCount; ++i) {
    EXPECT_STREQ(CategoryName(static_cast<Category>(i)), names[i]);
    EXPECT_EQ(model::ParseCategory(names[i]), static_cast<Category>(i));
  }
  EXPECT_FALSE(model::ParseCategory("weights").has_value());
}

}  // namespace
}  // namespace vramscope::attribution
