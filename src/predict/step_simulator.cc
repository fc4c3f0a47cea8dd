#include "predict/step_simulator.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "predict/quantised_states.h"

namespace vramscope::predict {

uint64_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
    case DType::kF8:
    case DType::kBool:
      return 1;
    case DType::kI64:
      return 8;
  }
  return 4;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF8:
      return "float8";
    case DType::kI64:
      return "int64";
    case DType::kI32:
      return "int32";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

// --- BackwardContext ----------------------------------------------------------------------------

bool BackwardContext::Needs(size_t input) const {
  const auto& n = sim_.nodes_[node_];
  return input < n.inputs.size() && sim_.tensors_[n.inputs[input]].requires_grad;
}

TensorId BackwardContext::GradOut(size_t output) const {
  const auto& n = sim_.nodes_[node_];
  return output < n.outputs.size() ? sim_.tensors_[n.outputs[output]].grad : kNoTensor;
}

uint64_t BackwardContext::Bytes(TensorId t) const { return sim_.tensors_[t].bytes; }

TensorId BackwardContext::New(uint64_t bytes, std::string_view op) {
  return sim_.Alloc(bytes, model::Category::kTemporary, sim_.nodes_[node_].name, op);
}

TensorId BackwardContext::NewReshaped(uint64_t bytes, std::string_view op) {
  const TensorId t = New(bytes, op);
  sim_.tensors_[t].reshaped = true;
  return t;
}

void BackwardContext::Free(TensorId t) { sim_.Free(t); }
void BackwardContext::Matmul(std::string_view op) { sim_.Matmul(op); }
void BackwardContext::Conv(uint64_t workspace_bytes) { sim_.Conv(workspace_bytes); }

void BackwardContext::GiveGrad(size_t input, TensorId grad) {
  if (grad == kNoTensor) return;
  sim_.nodes_[node_].given.emplace_back(input, grad);
}

void BackwardContext::PassGrad(size_t input, size_t output) {
  const TensorId g = GradOut(output);
  if (g == kNoTensor || !Needs(input)) return;
  sim_.Ref(g);
  GiveGrad(input, g);
}

// --- StepSimulator ------------------------------------------------------------------------------

StepSimulator::StepSimulator(TensorStream& out) : out_(out) {}

void StepSimulator::EnterModule(std::string_view name) {
  scope_lengths_.push_back(scope_.size());
  if (name.empty()) return;
  if (!scope_.empty()) scope_ += '.';
  scope_ += name;
}

void StepSimulator::ExitModule() {
  if (scope_lengths_.empty()) return;
  scope_.resize(scope_lengths_.back());
  scope_lengths_.pop_back();
}

TensorId StepSimulator::Alloc(uint64_t bytes, model::Category category, std::string_view name,
                              std::string_view op) {
  if (bytes > kMaxTensorBytes) {
    too_large_ = true;
    bytes = kMaxTensorBytes;
  }
  Tensor t;
  t.bytes = bytes;
  t.id = next_id_++;
  t.refs = 1;
  t.alive = true;
  t.alloc_event = out_.events.size();
  StreamEvent e;
  e.kind = StreamEvent::Kind::kAlloc;
  e.thread = thread();
  e.id = t.id;
  e.bytes = bytes;
  e.category = category;
  e.name = name.empty() ? model::kEmptyString : out_.strings.Intern(name);
  e.op = op.empty() ? model::kEmptyString : out_.strings.Intern(op);
  out_.events.push_back(e);
  tensors_.push_back(t);
  return static_cast<TensorId>(tensors_.size() - 1);
}

std::vector<std::pair<std::string, TensorId>> StepSimulator::TrainableParameters() const {
  std::vector<std::pair<std::string, TensorId>> out;
  for (const Param& p : params_) {
    if (p.trainable && tensors_[p.tensor].requires_grad) out.emplace_back(p.name, p.tensor);
  }
  return out;
}

void StepSimulator::Relabel(TensorId t, model::Category category, std::string_view name) {
  StreamEvent& e = out_.events[tensors_[t].alloc_event];
  e.category = category;
  if (!name.empty()) e.name = out_.strings.Intern(name);
}

TensorId StepSimulator::Parameter(std::string_view name, uint64_t bytes, bool trainable,
                                  uint64_t full_bytes) {
  const std::string full = scope_.empty() ? std::string(name) : scope_ + "." + std::string(name);
  for (const std::string& pattern : frozen_patterns) {
    if (fnmatch(pattern.c_str(), full.c_str(), 0) == 0) trainable = false;
  }
  const TensorId t = Alloc(bytes, model::Category::kWeight, full, "aten::empty");
  Param p;
  p.tensor = t;
  p.name = full;
  p.trainable = trainable;
  p.full_bytes = full_bytes == 0 ? bytes : full_bytes;
  tensors_[t].param = static_cast<int32_t>(params_.size());
  tensors_[t].requires_grad = trainable;
  params_.push_back(std::move(p));
  parameter_bytes_ += bytes;
  const uint64_t elements = (full_bytes == 0 ? bytes : full_bytes) / ElementSize(param_dtype);
  parameter_elements_ += elements;
  if (trainable) trainable_elements_ += elements;
  return t;
}

TensorId StepSimulator::Buffer(std::string_view name, uint64_t bytes) {
  const std::string full = scope_.empty() ? std::string(name) : scope_ + "." + std::string(name);
  buffer_bytes_ += bytes;
  const TensorId t = Alloc(bytes, model::Category::kWeight, full, "aten::empty");
  buffers_.push_back(t);
  return t;
}

void StepSimulator::DdpConstruct() {
  // _sync_module_states: broadcast_coalesced groups the states into chunks of at most 250 MiB
  // (a larger tensor alone) and broadcasts each through a flat copy, freed before the next.
  constexpr uint64_t kBroadcastBucket = uint64_t{250} << 20;
  std::vector<uint64_t> states;
  for (const Param& p : params_) states.push_back(tensors_[p.tensor].bytes);
  for (const TensorId b : buffers_) states.push_back(tensors_[b].bytes);
  uint64_t chunk = 0;
  int tensors = 0;
  auto flush = [&] {
    if (tensors > 1) {
      Free(Alloc(chunk, model::Category::kTemporary, "DDP broadcast of the module's states",
                 "c10d::broadcast_coalesced"));
    }
    chunk = 0;
    tensors = 0;
  };
  for (const uint64_t bytes : states) {
    if (tensors > 0 && chunk + bytes > kBroadcastBucket) flush();
    chunk += bytes;
    ++tensors;
  }
  flush();
  // The reducer's initial bucket: one flat buffer for the trainable parameters' gradients.
  uint64_t trainable = 0;
  for (const Param& p : params_) {
    if (p.trainable) trainable += tensors_[p.tensor].bytes;
  }
  if (trainable > 0) {
    ddp_buckets_.push_back(Alloc(trainable, model::Category::kGradient,
                                 "DDP gradient bucket (initial)", "c10d::Reducer"));
  }
}

void StepSimulator::DdpRebuildBuckets(uint64_t first_bucket_bytes, uint64_t bucket_cap_bytes) {
  if (ddp_buckets_.empty() || grad_ready_order_.empty()) return;
  for (const TensorId b : ddp_buckets_) Free(b);
  ddp_buckets_.clear();
  std::vector<uint64_t> sizes;
  uint64_t open = 0;
  for (const int32_t index : grad_ready_order_) {
    open += tensors_[params_[index].tensor].bytes;
    if (open >= (sizes.empty() ? first_bucket_bytes : bucket_cap_bytes)) {
      sizes.push_back(open);
      open = 0;
    }
  }
  if (open > 0) sizes.push_back(open);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ddp_buckets_.push_back(Alloc(sizes[i], model::Category::kGradient,
                                 fmt::format("DDP gradient bucket {}", i), "c10d::Reducer"));
  }
}

TensorId StepSimulator::Input(std::string_view name, uint64_t bytes) {
  return Alloc(bytes, model::Category::kInput, name, "aten::_to_copy");
}

bool StepSimulator::PolicySaves(SavedOps& saved, std::string_view op) {
  if (op == "aten::mm") return ++saved.mm_count % 2 == 1;
  return op == "aten::_scaled_dot_product_attention";
}

TensorId StepSimulator::New(uint64_t bytes, std::string_view op) {
  if (saved_ops_ != nullptr && PolicySaves(*saved_ops_, op)) {
    SavedOps& s = *saved_ops_;
    if (s.replaying) {
      // The recomputation takes the output the forward kept (its one reference passes to the
      // caller); nothing is computed or allocated.
      if (s.next < s.outputs.size()) return s.outputs[s.next++];
    } else {
      // Kept from the forward until the recomputation takes it: an activation.
      const TensorId t = Alloc(bytes, model::Category::kActivation, scope_, op);
      Ref(t);
      s.outputs.push_back(t);
      return t;
    }
  }
  return Alloc(bytes, model::Category::kTemporary, scope_, op);
}

void StepSimulator::Ref(TensorId t) {
  if (t != kNoTensor) ++tensors_[t].refs;
}

TensorId StepSimulator::View(TensorId base, uint64_t bytes) {
  Tensor v;
  v.bytes = bytes;
  v.owns_storage = false;
  v.view_of = base;
  v.refs = 1;
  v.alive = true;
  v.alloc_event = tensors_[base].alloc_event;
  v.requires_grad = tensors_[base].requires_grad;
  Ref(base);
  tensors_.push_back(v);
  return static_cast<TensorId>(tensors_.size() - 1);
}

void StepSimulator::Free(TensorId t) {
  if (t == kNoTensor) return;
  Tensor& x = tensors_[t];
  if (--x.refs > 0 || !x.alive) return;
  x.alive = false;
  if (!x.owns_storage) {  // a view lets go of its base; a checkpoint's alias owns nothing
    if (x.view_of != kNoTensor) Free(x.view_of);
    return;
  }
  if (x.bytes == 0) return;
  StreamEvent e;
  e.kind = StreamEvent::Kind::kFree;
  e.id = x.id;
  out_.events.push_back(e);
}

void StepSimulator::ReleaseStorage(TensorId t) {
  if (t == kNoTensor) return;
  Tensor& x = tensors_[t];
  if (!x.alive) return;
  x.alive = false;
  if (x.bytes == 0 || !x.owns_storage) return;
  StreamEvent e;
  e.kind = StreamEvent::Kind::kFree;
  e.id = x.id;
  out_.events.push_back(e);
}

void StepSimulator::Node(std::string_view name, const std::vector<TensorId>& inputs,
                         const std::vector<TensorId>& outputs, const std::vector<TensorId>& saved,
                         BackwardFn backward) {
  if (!grad_enabled_) return;
  bool any = false;
  for (const TensorId t : inputs) any |= t != kNoTensor && tensors_[t].requires_grad;
  if (!any) return;
  const auto index = static_cast<int32_t>(nodes_.size());
  NodeRec n;
  n.name = scope_.empty() ? std::string(name) : scope_ + " (" + std::string(name) + ")";
  n.inputs = inputs;
  n.outputs = outputs;
  std::vector<TensorId> to_host;
  for (const TensorId t : saved) {
    if (t == kNoTensor) continue;
    if (offload_saved_min_bytes > 0 && tensors_[t].param < 0 &&
        tensors_[t].bytes >= offload_saved_min_bytes) {
      to_host.push_back(t);
      n.offloaded.push_back(tensors_[t].bytes);
      AddHost(tensors_[t].bytes);
    } else {
      n.saved.push_back(t);
    }
  }
  if (offload_saved_min_bytes > 0 && !to_host.empty()) {
    // The copy stream holds what it copies until the next op saves (its event is waited on).
    for (const TensorId t : offload_in_flight_) Free(t);
    offload_in_flight_ = to_host;
    for (const TensorId t : to_host) Ref(t);
  }
  n.backward = std::move(backward);
  for (const TensorId t : outputs) {
    tensors_[t].requires_grad = true;
    tensors_[t].producer = index;
  }
  for (const TensorId t : inputs) {
    if (t != kNoTensor && tensors_[t].param >= 0 && tensors_[t].requires_grad) {
      ++params_[tensors_[t].param].uses;
    }
  }
  for (const TensorId t : n.saved) {
    Ref(t);
    if (out_.events[tensors_[t].alloc_event].category == model::Category::kTemporary) {
      out_.events[tensors_[t].alloc_event].category = model::Category::kActivation;
    }
  }
  if (recomputing_ && (!n.saved.empty() || !n.offloaded.empty())) {
    recompute_cut_event_ = out_.events.size();
    recompute_cut_tensor_ = tensors_.size();
    recompute_cut_node_ = index + 1;
  }
  nodes_.push_back(std::move(n));
}

void StepSimulator::MoveEventsBefore(size_t from, size_t to, size_t tensors) {
  auto& events = out_.events;
  const size_t moved = events.size() - from, skipped = from - to;
  if (moved == 0) return;
  std::rotate(events.begin() + static_cast<std::ptrdiff_t>(to),
              events.begin() + static_cast<std::ptrdiff_t>(from), events.end());
  for (size_t i = tensors; i < tensors_.size(); ++i) {
    size_t& e = tensors_[i].alloc_event;
    if (e < to || e >= to + skipped + moved) continue;
    e = e >= from ? e - skipped : e + moved;
  }
}

void StepSimulator::DropRecomputedTail(size_t event, size_t tensor) {
  std::vector<uint64_t> dropped;
  for (size_t i = tensor; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    if (!t.owns_storage) continue;  // views and aliases own no allocation
    dropped.push_back(t.id);
    t.owns_storage = false;
    t.view_of = kNoTensor;
  }
  std::sort(dropped.begin(), dropped.end());
  auto is_dropped = [&](uint64_t id) {
    return std::binary_search(dropped.begin(), dropped.end(), id);
  };
  auto& events = out_.events;
  auto kept = events.begin() + static_cast<std::ptrdiff_t>(event);
  for (auto it = kept; it != events.end(); ++it) {
    const bool drop =
        ((it->kind == StreamEvent::Kind::kAlloc || it->kind == StreamEvent::Kind::kFree) &&
         is_dropped(it->id)) ||
        it->kind == StreamEvent::Kind::kMatmul || it->kind == StreamEvent::Kind::kConv;
    if (!drop) *kept++ = *it;
  }
  events.erase(kept, events.end());
}

void StepSimulator::Matmul(std::string_view op) {
  StreamEvent e;
  e.kind = StreamEvent::Kind::kMatmul;
  e.thread = thread();
  e.op = out_.strings.Intern(op);
  out_.events.push_back(e);
}

void StepSimulator::Conv(uint64_t workspace_bytes, std::string_view op) {
  StreamEvent e;
  e.kind = StreamEvent::Kind::kConv;
  e.thread = thread();
  e.bytes = workspace_bytes;
  e.op = out_.strings.Intern(op);
  out_.events.push_back(e);
}

TensorId StepSimulator::AutocastWeight(TensorId param, DType to) {
  for (const auto& [p, cast] : autocast_cache_) {
    if (p == param) {
      Ref(cast);
      return cast;
    }
  }
  const uint64_t elements = tensors_[param].bytes / ElementSize(param_dtype);
  const Tensor& source = tensors_[param];
  const std::string name =
      source.param >= 0 ? params_[source.param].name + " (autocast copy)" : scope_;
  const TensorId cast =
      Alloc(elements * ElementSize(to), model::Category::kTemporary, name, "aten::_to_copy");
  const uint64_t source_bytes = tensors_[param].bytes;
  Node("ToCopyBackward0", {param}, {cast}, {}, [source_bytes](BackwardContext& b) {
    if (b.Needs(0)) b.GiveGrad(0, b.New(source_bytes, "aten::_to_copy"));
  });
  // Autocast caches casts of leaves that require a gradient (trainable weights) until the
  // region ends; a frozen weight is cast again at every use.
  if (tensors_[param].requires_grad) {
    autocast_cache_.emplace_back(param, cast);
    Ref(cast);
  }
  return cast;
}

void StepSimulator::EndAutocast() {
  for (const auto& [p, cast] : autocast_cache_) Free(cast);
  autocast_cache_.clear();
}

TensorId StepSimulator::Checkpoint(TensorId input, const std::function<TensorId(TensorId)>& block) {
  const bool was = grad_enabled_;
  grad_enabled_ = false;
  auto saved_ops = std::make_shared<SavedOps>();
  if (checkpoint_saves_ops && was) saved_ops_ = saved_ops.get();
  const TensorId y = block(input);
  saved_ops_ = nullptr;
  grad_enabled_ = was;
  if (!was) return y;
  // The output requires a gradient when the block holds trainable weights or the input does.
  tensors_[y].requires_grad = false;
  // (Approximated by: the model has trainable weights, as in every checkpointed block that
  // matters; torch's non-reentrant checkpoint, the default, behaves this way.)
  const bool any_trainable =
      std::any_of(params_.begin(), params_.end(), [](const Param& p) { return p.trainable; });
  const bool needs = tensors_[input].requires_grad || any_trainable;
  if (!needs) return y;
  // The node takes the input (to pass its gradient on) and saves it, as checkpoint does.
  const TensorId input_copy = input;
  const std::string forward_scope = scope_;
  const bool offload = offload_checkpoints;
  if (offload) AddHost(tensors_[input].bytes);
  auto backward = [this, block, input_copy, forward_scope, offload, saved_ops](BackwardContext& b) {
    const auto mark = static_cast<int32_t>(nodes_.size());
    const bool was_enabled = grad_enabled_;
    grad_enabled_ = true;
    // The recomputation runs as the forward did: in its module scope, under its autocast
    // state (torch.utils.checkpoint restores it), whose weight casts go when it ends.
    const std::string backward_scope = scope_;
    scope_ = forward_scope;
    // The recomputation starts from a detached alias of the saved input.
    TensorId x = kNoTensor;
    if (offload) {
      // Offloaded: the input comes back from the host into a GPU copy of its own.
      x = Alloc(tensors_[input_copy].bytes, model::Category::kActivation,
                forward_scope + " (checkpoint input, from the host)", "aten::_to_copy");
      DropHost(tensors_[input_copy].bytes);
    } else {
      Tensor alias;
      alias.bytes = tensors_[input_copy].bytes;
      alias.owns_storage = false;
      alias.refs = 1;
      alias.alive = true;
      alias.requires_grad = tensors_[input_copy].requires_grad;
      alias.alloc_event = tensors_[input_copy].alloc_event;
      tensors_.push_back(alias);
      x = static_cast<TensorId>(tensors_.size() - 1);
    }
    // Parameters of the block get a gradient only through the recomputed graph.
    tensors_[x].requires_grad = true;
    // Early stop (torch.utils.checkpoint's default): the recomputation ends once the last
    // tensor the block's backward needs is saved; what the block computes after that (GPT-2's
    // final residual add) is never made.
    const size_t recompute_start = out_.events.size();
    const size_t recompute_tensors = tensors_.size();
    recomputing_ = true;
    recompute_cut_event_ = out_.events.size();
    recompute_cut_tensor_ = tensors_.size();
    recompute_cut_node_ = mark;
    saved_ops->replaying = true;
    saved_ops->mm_count = 0;  // the policy counts the recomputation's mm calls afresh
    if (!saved_ops->outputs.empty()) saved_ops_ = saved_ops.get();
    const TensorId y2 = block(x);
    saved_ops_ = nullptr;
    recomputing_ = false;
    DropRecomputedTail(recompute_cut_event_, recompute_cut_tensor_);
    const int32_t tail_nodes = recompute_cut_node_;
    grad_enabled_ = was_enabled;
    EndAutocast();
    scope_ = backward_scope;
    const TensorId g = b.GradOut(0);
    if (g != kNoTensor && tensors_[y2].requires_grad) {
      Ref(g);
      tensors_[y2].grad = g;
      // The nodes after the last saved tensor (GPT-2's final residual add) are, in PyTorch, the
      // forward graph's own and save nothing: they run as soon as the gradient arrives, before
      // the recomputation that the next node's first saved tensor starts. Run them first and
      // put what they do before the recomputation.
      const size_t tail_start = out_.events.size();
      RunEngine(tail_nodes);
      MoveEventsBefore(tail_start, recompute_start, recompute_tensors);
      RunEngine(mark);
    }
    Free(y2);
    // Kept outputs the early-stopped recomputation never reached go with the checkpoint's frame.
    for (size_t i = saved_ops->next; i < saved_ops->outputs.size(); ++i) {
      Free(saved_ops->outputs[i]);
    }
    saved_ops->next = saved_ops->outputs.size();
    const TensorId gx = tensors_[x].grad;
    tensors_[x].grad = kNoTensor;
    Free(x);
    if (b.Needs(0)) {
      b.GiveGrad(0, gx);
    } else {
      Free(gx);
    }
  };
  // Node() needs an input that requires a gradient: the weights inside make the output need
  // one even when the input does not, so mark the node's input side accordingly.
  const bool input_required = tensors_[input].requires_grad;
  tensors_[input].requires_grad = true;
  // Offloaded, the node keeps the input on the host only (no GPU reference).
  Node("CheckpointFunctionBackward", {input}, {y},
       offload ? std::vector<TensorId>{} : std::vector<TensorId>{input}, std::move(backward));
  tensors_[input].requires_grad = input_required;
  return y;
}

void StepSimulator::RunNode(int32_t index) {
  BackwardFn fn = nodes_[index].backward;  // the function may append nodes (checkpointing)
  // Offloaded saved tensors come back to the GPU just before their node runs.
  std::vector<TensorId> unpacked;
  for (const uint64_t bytes : std::vector<uint64_t>(nodes_[index].offloaded)) {
    unpacked.push_back(
        Alloc(bytes, model::Category::kActivation, nodes_[index].name, "aten::_to_copy"));
    DropHost(bytes);
  }
  nodes_[index].offloaded.clear();
  BackwardContext ctx(*this, index);
  fn(ctx);
  for (const TensorId t : unpacked) Free(t);
  // The engine drops the incoming gradients, then the node's saved tensors, then hands the
  // node's outputs on (goldens/h200/mlp_adam_fp32: events 28-33).
  for (const TensorId o : std::vector<TensorId>(nodes_[index].outputs)) {
    const TensorId g = tensors_[o].grad;
    tensors_[o].grad = kNoTensor;
    Free(g);
  }
  std::vector<TensorId> saved = std::move(nodes_[index].saved);
  nodes_[index].saved.clear();
  for (const TensorId s : saved) Free(s);
  nodes_[index].done = true;
  const auto given = std::move(nodes_[index].given);
  nodes_[index].given.clear();
  const std::vector<TensorId> inputs = nodes_[index].inputs;
  for (const auto& [input, grad] : given) {
    if (input >= inputs.size()) {
      Free(grad);
      continue;
    }
    DeliverGrad(inputs[input], grad, index);
  }
}

void StepSimulator::DeliverGrad(TensorId input, TensorId grad, int32_t from_node) {
  Tensor& t = tensors_[input];
  if (!t.requires_grad) {
    Free(grad);
    return;
  }
  if (t.param >= 0) {
    AccumulateIntoParam(t.param, grad);
    return;
  }
  if (t.grad == kNoTensor) {
    t.grad = grad;
  } else if (tensors_[t.grad].reshaped) {
    // InputBuffer::accumulate adds in place only into a gradient that owns its storage alone;
    // a reshaped view shares it with the result it views, so the first sum is `old + new` (the
    // buffer then holds the sum, and later gradients go into it in place).
    const TensorId old = t.grad;
    const TensorId sum = Alloc(tensors_[old].bytes, model::Category::kTemporary,
                               nodes_[from_node].name, "aten::add");
    tensors_[input].grad = sum;
    Free(old);
    Free(grad);
  } else {
    Free(grad);  // InputBuffer::accumulate adds in place into the first gradient
  }
}

void StepSimulator::AccumulateIntoParam(int32_t param, TensorId grad) {
  Param& p = params_[param];
  if (p.pending == kNoTensor) {
    p.pending = grad;
  } else if (out_.strings.Get(out_.events[tensors_[p.pending].alloc_event].op) == "aten::mm") {
    // A weight used twice (a tied embedding and LM head): its InputBuffer adds the second
    // gradient out of place when the first is a matmul's weight gradient (a transposed result
    // it cannot add into) ...
    const TensorId sum = Alloc(tensors_[p.pending].bytes, model::Category::kTemporary,
                               p.name + " (gradient sum)", "aten::add");
    Free(p.pending);
    Free(grad);
    p.pending = sum;
  } else {
    Free(grad);  // ... and in place into a fresh one (autocast's fp32 copy of it)
  }
  if (--p.uses > 0) return;
  p.uses = 0;
  if (!p.ready_seen) {
    p.ready_seen = true;
    grad_ready_order_.push_back(param);
  }
  const TensorId g = p.pending;
  p.pending = kNoTensor;
  if (p.grad != kNoTensor) {
    Free(g);  // accumulation into an existing .grad happens in place
    return;
  }
  // AccumulateGrad steals a gradient nobody else holds; a shared one is cloned.
  TensorId own = g;
  if (tensors_[g].refs > 1) {
    own = Alloc(tensors_[g].bytes, model::Category::kGradient, p.name + ".grad", "aten::clone");
    Free(g);
  } else {
    Relabel(g, model::Category::kGradient, p.name + ".grad");
  }
  if (grad_shards > 1) {
    // ZeRO-2: reduce-scatter into this rank's shard; the full gradient goes.
    // The shard of the whole parameter (small weights that layers use without gathering
    // produce a shard-sized gradient already).
    const uint64_t shard = (p.full_bytes + grad_shards - 1) / grad_shards;
    const TensorId part =
        Alloc(shard, model::Category::kGradient, p.name + ".grad (shard)", "c10d::reduce_scatter");
    Free(own);
    own = part;
  }
  p.grad = own;
  if (step_in_backward != nullptr && p.trainable) {
    // The post-accumulate-grad hook: optimizer.step() for this parameter alone, then
    // zero_grad() (set to none); offloaded gradients are copied to the host and dropped.
    EnterModule("optimizer");
    StepOptimizer(*step_in_backward, {param});
    ExitModule();
    Free(p.grad);
    p.grad = kNoTensor;
  }
}

void StepSimulator::RunEngine(int32_t from_node) {
  for (auto i = static_cast<int32_t>(nodes_.size()) - 1; i >= from_node; --i) {
    if (nodes_[i].done) continue;
    bool has_grad = false;
    for (const TensorId o : nodes_[i].outputs) has_grad |= tensors_[o].grad != kNoTensor;
    if (!has_grad) continue;
    RunNode(i);
  }
}

void StepSimulator::ReleaseGraph(int32_t from_node) {
  for (auto i = static_cast<size_t>(from_node); i < nodes_.size(); ++i) {
    std::vector<TensorId> saved = std::move(nodes_[i].saved);
    nodes_[i].saved.clear();
    for (const TensorId s : saved) Free(s);
    for (const uint64_t bytes : nodes_[i].offloaded) DropHost(bytes);
    nodes_[i].offloaded.clear();
    nodes_[i].done = true;
  }
}

void StepSimulator::Backward(TensorId loss) {
  for (const TensorId t : offload_in_flight_) Free(t);
  offload_in_flight_.clear();
  in_backward_ = true;
  // torch.autograd's _make_grads: ones_like(loss), held by the Python call until it returns.
  // The loss is a scalar (its storage may be larger: mse_loss leaves the mean in a tensor of
  // the input's size); its gradient is one fp32 element.
  const TensorId g = Alloc(4, model::Category::kTemporary, "loss gradient", "aten::ones_like");
  Ref(g);
  tensors_[loss].grad = g;
  RunEngine(0);
  // Gradients still waiting for a use that never ran (a weight used by an unreachable node).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].pending != kNoTensor) {
      const TensorId pending = params_[i].pending;
      params_[i].pending = kNoTensor;
      params_[i].uses = 1;
      AccumulateIntoParam(static_cast<int32_t>(i), pending);
    }
    params_[i].uses = 0;
  }
  Free(g);
  in_backward_ = false;
  ReleaseGraph(0);
  nodes_.clear();
  for (Tensor& t : tensors_) {
    if (t.grad != kNoTensor && t.param < 0) {
      const TensorId stale = t.grad;
      t.grad = kNoTensor;
      Free(stale);
    }
    t.producer = -1;
  }
}

void StepSimulator::ZeroGrad(bool set_to_none) {
  if (!set_to_none) return;  // kept, and zeroed in place
  for (Param& p : params_) {
    if (p.grad == kNoTensor) continue;
    Free(p.grad);
    p.grad = kNoTensor;
  }
}

void StepSimulator::OptimizerStep(const OptimizerSetup& setup) {
  // Stepped in backward already (optimizer_in_bwd, or offloaded gradients): nothing is left.
  if (step_in_backward != nullptr) return;
  // The step's temporaries are the optimizer's.
  EnterModule("optimizer");
  std::vector<int32_t> stepped;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].trainable && params_[i].grad != kNoTensor) {
      stepped.push_back(static_cast<int32_t>(i));
    }
  }
  StepOptimizer(setup, stepped);
  ++optimizer_steps_;
  ExitModule();
}

void StepSimulator::AddHost(uint64_t bytes) {
  host_bytes_ += bytes;
  host_peak_ = std::max(host_peak_, host_bytes_);
}

void StepSimulator::MakeState(const OptimizerSetup& setup, int32_t i) {
  Param& p = params_[i];
  const auto element_bytes = ElementSize(param_dtype);
  const uint64_t elements = p.full_bytes / element_bytes;
  const auto shard = [&](uint64_t bytes) {
    return (bytes + setup.shards - 1) / static_cast<uint64_t>(setup.shards);
  };
  if (setup.offload) {
    // Host: an fp32 copy of the parameter (the optimizer's own), its gradient's copy, and the
    // states in fp32 (Adam: two, momentum: one).
    const uint64_t own = shard(elements * 4);
    const int states = setup.kind == OptimizerKind::kMomentum ? 1 : 2;
    AddHost(own * (2 + states));
    return;
  }
  const auto state = [&](uint64_t bytes, const std::string& name, std::string_view op) {
    p.state.push_back(Alloc(bytes, model::Category::kOptimizerState, p.name + name, op));
  };
  if (setup.states != StateFormat::kNative && setup.kind != OptimizerKind::kMomentum) {
    const uint64_t n = (elements + setup.shards - 1) / static_cast<uint64_t>(setup.shards);
    if (!quantisation_maps_) {
      quantisation_maps_ = true;
      for (const QuantisedState& q : SharedQuantisationMaps(setup.states)) {
        state(q.bytes, q.suffix, q.op);
      }
    }
    for (const QuantisedState& q : QuantisedAdamStates(setup.states, n, shard(p.full_bytes))) {
      if (q.paged) {
        AddHost(q.bytes);
        paged_bytes_ += q.bytes;
      } else {
        state(q.bytes, q.suffix, q.op);
      }
    }
    return;
  }
  const uint64_t state_bytes = setup.master_weights ? elements * 4 : tensors_[p.tensor].bytes;
  const uint64_t own =
      setup.shards > 1 ? shard(setup.master_weights ? elements * 4 : p.full_bytes) : state_bytes;
  const bool device_step =
      setup.impl == OptimizerImpl::kFused && setup.kind != OptimizerKind::kMomentum;
  if (device_step) state(4, ".step", "aten::zeros");
  if (setup.master_weights) state(own, ".master", "aten::_to_copy");
  if (setup.kind == OptimizerKind::kMomentum) {
    state(own, ".momentum_buffer", "aten::clone");
  } else {
    state(own, ".exp_avg", "aten::zeros_like");
    state(own, ".exp_avg_sq", "aten::zeros_like");
  }
}

void StepSimulator::StepOptimizer(const OptimizerSetup& setup,
                                  const std::vector<int32_t>& stepped) {
  // plain SGD updates in place (foreach, fused or not)
  if (setup.kind == OptimizerKind::kNone || setup.kind == OptimizerKind::kSgd) return;
  const auto shard = [&](uint64_t bytes) {
    return (bytes + setup.shards - 1) / static_cast<uint64_t>(setup.shards);
  };
  const auto element_bytes = ElementSize(param_dtype);
  // State: created at a parameter's first step, in parameter order (_init_group).
  for (const int32_t i : stepped) {
    if (!params_[i].state_made) {
      params_[i].state_made = true;
      MakeState(setup, i);
    }
  }
  // The host optimizer copies each gradient over and the parameter back in place; the
  // quantised ones step in one fused kernel per parameter.
  if (setup.offload || setup.states != StateFormat::kNative) return;
  if (setup.kind == OptimizerKind::kMomentum) return;  // the momentum update is in place
  // Adam/AdamW step temporaries.
  const auto state_size = [&](int32_t i) {
    const Param& p = params_[i];
    const uint64_t bytes = setup.master_weights ? p.full_bytes / element_bytes * 4 : p.full_bytes;
    return setup.shards > 1 ? shard(bytes)
                            : (setup.master_weights ? bytes : tensors_[p.tensor].bytes);
  };
  if (setup.impl == OptimizerImpl::kFused) return;
  const bool l2 = setup.kind == OptimizerKind::kAdam && setup.weight_decay != 0;
  // Python drops a list's items last to first.
  auto drop = [this](std::vector<TensorId>& list) {
    for (auto it = list.rbegin(); it != list.rend(); ++it) Free(*it);
    list.clear();
  };
  if (setup.impl == OptimizerImpl::kForeach) {
    std::vector<TensorId> grads, roots;
    // Low-precision gradients stepped into fp32 masters are converted first.
    if (setup.master_weights) {
      for (const int32_t i : stepped) grads.push_back(New(state_size(i), "aten::_to_copy"));
    }
    // Adam's L2 term: grads = _foreach_add(grads, params, alpha=weight_decay), a new list;
    // _multi_tensor_adam deletes it (del device_grads) before the square roots.
    if (l2) {
      std::vector<TensorId> decayed;
      for (const int32_t i : stepped) decayed.push_back(New(state_size(i), "aten::_foreach_add"));
      drop(grads);
      grads = std::move(decayed);
    }
    drop(grads);
    // exp_avg_sq.sqrt() for every parameter at once (_multi_tensor_adam).
    for (const int32_t i : stepped) roots.push_back(New(state_size(i), "aten::_foreach_sqrt"));
    drop(roots);
    return;
  }
  // The for-loop step, per parameter: grad = grad.add(param, alpha=weight_decay) for Adam's L2
  // term; denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps).
  TensorId previous = kNoTensor, previous_grad = kNoTensor;
  for (const int32_t i : stepped) {
    const TensorId grad = l2 ? New(state_size(i), "aten::add") : kNoTensor;
    Free(previous_grad);
    previous_grad = grad;
    const TensorId root = New(state_size(i), "aten::sqrt");
    const TensorId denom = New(state_size(i), "aten::div");
    Free(root);
    Free(previous);
    previous = denom;
  }
  Free(previous);
  Free(previous_grad);
}

}  // namespace vramscope::predict
