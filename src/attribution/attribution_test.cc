#include "attribution/attribution.h"

#include <gtest/gtest.h>

#include <tuple>

namespace vramscope::attribution {
namespace {

using model::Allocation;
using model::StackId;

// Builds stacks from (file, line, function) triples, innermost first.
class Stacks {
 public:
  explicit Stacks(model::Trace& t) : t_(t) {}
  StackId Make(std::vector<std::tuple<std::string, int, std::string>> frames) {
    std::vector<model::FrameId> ids;
    for (const auto& [file, line, function] : frames) {
      ids.push_back(t_.frames.Intern({t_.strings.Intern(file), t_.strings.Intern(function), line,
                                      model::ClassifyFrame(file)}));
    }
    return t_.stacks.Intern(ids);
  }

 private:
  model::Trace& t_;
};

const std::string kModule = "/usr/lib/python3/site-packages/torch/nn/modules/module.py";
const std::string kLinear = "/usr/lib/python3/site-packages/torch/nn/modules/linear.py";
const std::string kAdam = "/usr/lib/python3/site-packages/torch/optim/adam.py";
const std::string kOptimizer = "/usr/lib/python3/site-packages/torch/optim/optimizer.py";

Allocation Alloc(StackId alloc, StackId free, bool alive) {
  Allocation a;
  a.alloc_stack = alloc;
  a.free_stack = free;
  a.alive_at_end = alive;
  a.requested_size = a.size = 4096;
  a.alloc_event = 0;
  if (!alive) a.free_requested_event = a.free_completed_event = 1;
  return a;
}

TEST(Attribute, EachRuleOnItsOwnEvidence) {
  model::Trace t;
  Stacks s(t);
  const StackId user = s.Make({{"/proj/train.py", 30, "main"}});
  const StackId forward_addmm = s.Make({{"??", 0, "at::_ops::empty_strided::call(...)"},
                                        {"??", 0, "at::_ops::addmm::call(at::Tensor const&)"},
                                        {kLinear, 116, "forward"},
                                        {kModule, 1527, "_call_impl"},
                                        {"/proj/train.py", 20, "train_step"}});
  const StackId backward = s.Make({{"??", 0, "at::_ops::mm::call(...)"},
                                   {"??", 0, "torch::autograd::Engine::evaluate_function(...)"}});
  const StackId workspace = s.Make({{"??", 0, "at::cuda::getCurrentCUDABlasHandle()"},
                                    {"??", 0, "at::_ops::addmm::call(...)"},
                                    {kModule, 1527, "_call_impl"}});
  const StackId accumulate = s.Make({{"??", 0, "torch::autograd::AccumulateGrad::apply(...)"},
                                     {"??", 0, "torch::autograd::Engine::evaluate_function(...)"}});
  const StackId weights =
      s.Make({{kModule, 1143, "_apply"}, {kModule, 1160, "to"}, {"/proj/train.py", 35, "main"}});
  const StackId adam = s.Make({{kAdam, 400, "_multi_tensor_adam"},
                               {kAdam, 160, "step"},
                               {"/proj/train.py", 27, "train_step"}});
  const StackId zero_grad =
      s.Make({{kOptimizer, 450, "zero_grad"}, {"/proj/train.py", 19, "train_step"}});
  const StackId to_device =
      s.Make({{"??", 0, "at::_ops::_to_copy::call(...)"}, {"/proj/train.py", 22, "train_step"}});
  const StackId forward_relu =
      s.Make({{kModule, 1527, "_call_impl"}, {"/proj/train.py", 21, "train_step"}});

  t.allocations = {
      Alloc(workspace, model::kEmptyStack, true),           // 0
      Alloc(accumulate, zero_grad, false),                  // 1
      Alloc(weights, model::kEmptyStack, true),             // 2
      Alloc(adam, model::kEmptyStack, true),                // 3
      Alloc(adam, adam, false),                             // 4
      Alloc(forward_addmm, backward, false),                // 5
      Alloc(forward_relu, forward_relu, false),             // 6
      Alloc(backward, zero_grad, false),                    // 7
      Alloc(backward, backward, false),                     // 8
      Alloc(to_device, user, false),                        // 9
      Alloc(model::kEmptyStack, model::kEmptyStack, true),  // 10
      Alloc(user, user, false),                             // 11
      Alloc(forward_relu, model::kEmptyStack, true),        // 12
  };
  const Attribution a = Attribute(t);
  ASSERT_EQ(a.allocations.size(), t.allocations.size());
  const Category want[] = {Category::kWorkspace,      Category::kGradient,  Category::kWeight,
                           Category::kOptimizerState, Category::kTemporary, Category::kActivation,
                           Category::kTemporary,      Category::kGradient,  Category::kTemporary,
                           Category::kInput,          Category::kUnknown,   Category::kUnknown,
                           Category::kActivation};
  for (size_t i = 0; i < t.allocations.size(); ++i) {
    EXPECT_EQ(a.allocations[i].category, want[i])
        << "allocation " << i << ": got " << CategoryName(a.allocations[i].category) << " ("
        << RuleText(a.allocations[i].rule_id) << ")";
    EXPECT_NE(std::string(RuleText(a.allocations[i].rule_id)), "") << i;
  }
  // The operation that produced the activation skips the storage helper (empty_strided).
  EXPECT_EQ(t.strings.Get(a.allocations[5].operation), "aten::addmm");
  EXPECT_EQ(a.allocations[5].confidence, Confidence::kHigh);
  EXPECT_EQ(t.strings.Get(a.allocations[2].module_kind), "");  // created via Module.to, no kind
  EXPECT_EQ(a.allocations[10].confidence, Confidence::kLow);
  EXPECT_STREQ(RuleText(a.allocations[10].rule_id), "no stack was recorded for this allocation");
}

TEST(Attribute, PythonOnlyStacksNameTheFunctionalOp) {
  model::Trace t;
  Stacks s(t);
  const StackId gelu = s.Make({{"/x/torch/nn/functional.py", 1500, "gelu"},
                               {"/x/torch/nn/modules/activation.py", 690, "forward"},
                               {kModule, 1527, "_call_impl"}});
  const StackId backward = s.Make({{"/x/torch/autograd/__init__.py", 251, "backward"}});
  t.allocations = {Alloc(gelu, backward, false)};
  const Attribution a = Attribute(t);
  EXPECT_EQ(a.allocations[0].category, Category::kActivation);
  EXPECT_EQ(t.strings.Get(a.allocations[0].operation), "gelu");
  EXPECT_EQ(t.strings.Get(a.allocations[0].module_kind), "activation");
}

TEST(CategoryName, AllEightNamed) {
  const char* names[] = {"weight", "gradient",  "optimizer_state", "activation",
                         "input",  "workspace", "temporary",       "unknown"};
  for (int i = 0; i < kCategoryCount; ++i) {
    EXPECT_STREQ(CategoryName(static_cast<Category>(i)), names[i]);
  }
}

}  // namespace
}  // namespace vramscope::attribution
