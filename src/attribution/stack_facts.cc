#include "attribution/stack_facts.h"

#include <algorithm>
#include <string_view>

namespace vramscope::attribution {

namespace {

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Path with '/' separators so Windows-recorded frames match the same rules.
std::string Normalise(std::string_view path) {
  std::string out(path);
  for (char& c : out) {
    if (c == '\\') c = '/';
  }
  return out;
}

// "at::_ops::addmm::call(...)" (a recorded C++ frame) or "aten::addmm" (a profiler operator
// event turned into a frame) -> "addmm"; empty when not an operator frame.
std::string_view OpsName(std::string_view function) {
  if (StartsWith(function, "aten::")) {
    std::string_view rest = function.substr(6);
    return rest.substr(0, std::min(rest.find('('), rest.size()));
  }
  constexpr std::string_view kOps = "at::_ops::";
  const size_t at = function.find(kOps);
  if (at == std::string_view::npos) return {};
  std::string_view rest = function.substr(at + kOps.size());
  const size_t end = rest.find("::");
  if (end == std::string_view::npos) return {};
  return rest.substr(0, end);
}

// Operators that only create storage for another operator's result; the caller is the producer.
bool IsAllocationHelper(std::string_view op) {
  return StartsWith(op, "empty") || StartsWith(op, "new_empty") || op == "resize_" ||
         StartsWith(op, "zeros") || StartsWith(op, "ones") || StartsWith(op, "full");
}

}  // namespace

StackFactsCache::StackFactsCache(const model::Trace& trace)
    : trace_(trace), cache_(trace.stacks.size()), done_(trace.stacks.size(), false) {}

const StackFacts& StackFactsCache::Get(model::StackId stack) {
  if (stack >= cache_.size()) {
    cache_.resize(trace_.stacks.size());
    done_.resize(trace_.stacks.size(), false);
  }
  if (!done_[stack]) {
    cache_[stack] = Compute(stack);
    done_[stack] = true;
  }
  return cache_[stack];
}

StackFacts StackFactsCache::Compute(model::StackId stack) {
  StackFacts f;
  f.known = stack != model::kEmptyStack;
  std::string_view native_op, python_op, module_kind;
  trace_.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    const model::Frame& frame = trace_.frames.Get(id);
    const std::string_view function = trace_.strings.Get(frame.function);
    // A profiler's module event ("nn.Module: Linear_0") turned into a frame.
    if (trace_.strings.Get(frame.filename) == "nn.Module") {
      f.in_forward = true;
      if (module_kind.empty()) {
        std::string_view name = function;
        const size_t cut = name.rfind('_');
        if (cut != std::string_view::npos && cut + 1 < name.size() &&
            name.find_first_not_of("0123456789", cut + 1) == std::string_view::npos) {
          name = name.substr(0, cut);
        }
        module_kind = names_.Get(names_.Intern(name));
      }
      return;
    }
    if (frame.kind == model::FrameKind::kNative) {
      if (Contains(function, "AccumulateGrad") || Contains(function, "accumulateGrad")) {
        f.accumulate_grad = true;
      }
      if (Contains(function, "autograd::Engine") || Contains(function, "autograd::engine")) {
        f.in_backward = true;
      }
      if (Contains(function, "BlasLtWorkspace") || Contains(function, "getCurrentCUDABlasHandle") ||
          Contains(function, "getCUDABlasLtWorkspace") ||
          (Contains(function, "cudnn") && Contains(function, "orkspace")) ||
          (Contains(function, "cublas") && Contains(function, "orkspace"))) {
        f.workspace = true;
      }
      if (Contains(function, "_fused_adam") || Contains(function, "_fused_sgd") ||
          StartsWith(function, "Optimizer.step#")) {
        f.in_optimizer = true;
      }
      if (StartsWith(function, "Optimizer.zero_grad#")) f.zero_grad = true;
      if (Contains(function, "at::autocast::")) f.autocast_cast = true;
      const std::string_view op = OpsName(function);
      if (native_op.empty() && !op.empty() && !IsAllocationHelper(op)) native_op = op;
      if (!op.empty() && (op == "_to_copy" || op == "to" || op == "copy_")) f.host_copy = true;
      return;
    }
    const std::string file = Normalise(trace_.strings.Get(frame.filename));
    if (Contains(file, "/torch/optim/")) {
      f.in_optimizer = true;
      if (function == "zero_grad") f.zero_grad = true;
    }
    if (EndsWith(file, "torch/nn/modules/module.py")) {
      if (function == "_call_impl" || function == "_wrapped_call_impl") f.in_forward = true;
      if (function == "_apply" || function == "to" || function == "cuda" ||
          function == "load_state_dict" || function == "_load_from_state_dict" ||
          function == "register_parameter") {
        f.weight_creation = true;
      }
      if (function == "zero_grad") f.zero_grad = true;
    }
    if (EndsWith(file, "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py")) {
      if (function == "unshard" || function == "wait_for_unshard") f.fsdp_unshard = true;
      if (function == "post_backward") f.fsdp_reduce = true;
    }
    if (EndsWith(file, "torch/nn/parameter.py") || function == "reset_parameters" ||
        function == "from_pretrained" || function == "_load_state_dict_into_meta_model" ||
        function == "set_module_tensor_to_device" || function == "load_checkpoint_and_dispatch") {
      f.weight_creation = true;
    }
    if ((EndsWith(file, "torch/_tensor.py") && function == "backward") ||
        (EndsWith(file, "torch/autograd/__init__.py") &&
         (function == "backward" || function == "_make_grads")) ||
        function == "_engine_run_backward") {
      f.in_backward = true;
    }
    if (Contains(file, "/torch/nn/modules/") && !EndsWith(file, "module.py")) {
      if (function == "__init__") f.weight_creation = true;
      if (module_kind.empty()) {
        const size_t slash = file.rfind('/');
        std::string_view stem = std::string_view(file).substr(slash + 1);
        stem.remove_suffix(3);  // ".py"
        module_kind = names_.Get(names_.Intern(stem));
      }
      if (python_op.empty() && function == "forward") python_op = module_kind;
    }
    if (EndsWith(file, "torch/nn/functional.py") && python_op.empty()) {
      python_op = trace_.strings.Get(frame.function);
    }
  });
  if (!native_op.empty()) {
    f.operation = names_.Intern("aten::" + std::string(native_op));
  } else if (!python_op.empty()) {
    f.operation = names_.Intern(python_op);
  }
  if (!module_kind.empty()) f.module_kind = names_.Intern(module_kind);
  // A copy to the device is an input only when no module, autograd or autocast code is on the
  // stack.
  f.host_copy =
      f.host_copy && !f.in_forward && !f.in_backward && !f.in_optimizer && !f.autocast_cast;
  return f;
}

}  // namespace vramscope::attribution
