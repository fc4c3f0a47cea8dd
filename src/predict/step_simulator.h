// A model of what PyTorch's eager autograd does with memory during a training step, at the level
// of tensor storages: the forward ops' outputs and what each op saves for backward, the
// autograd engine's order (nodes in reverse creation order, AccumulateGrad at once), when it
// frees incoming gradients and saved tensors, how it accumulates gradients, autocast's weight
// cache, activation checkpointing, and the optimizers' state and step temporaries. Layers
// (layers.h) describe their ops through it; the result is a TensorStream.
//
// The rules, and the goldens that show each of them, are in docs/design/predict.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "predict/tensor_stream.h"

namespace vramscope::predict {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8, kI64, kI32, kBool };
uint64_t ElementSize(DType dtype);
const char* DTypeName(DType dtype);

using TensorId = int32_t;
inline constexpr TensorId kNoTensor = -1;

class StepSimulator;

// What one node's backward sees and does. Allocation order inside a backward function is the
// order of the kernels it launches.
class BackwardContext {
 public:
  bool Needs(size_t input) const;                     // the input requires a gradient
  TensorId GradOut(size_t output = 0) const;          // the incoming gradient, kNoTensor if none
  uint64_t Bytes(TensorId t) const;                   // a tensor's storage bytes
  TensorId New(uint64_t bytes, std::string_view op);  // a temporary (autograd thread)
  // A temporary handed on as a reshaped view of itself (nn.Linear's input gradient for an input
  // of more than two dimensions): the view shares its storage with the result, so the engine
  // cannot add another gradient into it in place.
  TensorId NewReshaped(uint64_t bytes, std::string_view op);
  void Free(TensorId t);
  void Matmul(std::string_view op = "aten::mm");
  void Conv(uint64_t workspace_bytes);
  // Hands `grad` (its reference) to `input`. Inputs that need no gradient drop it.
  void GiveGrad(size_t input, TensorId grad);
  // The incoming gradient of `output` flows on unchanged to `input` (add, views).
  void PassGrad(size_t input, size_t output = 0);
  StepSimulator& sim() { return sim_; }

 private:
  friend class StepSimulator;
  BackwardContext(StepSimulator& sim, int32_t node) : sim_(sim), node_(node) {}
  StepSimulator& sim_;
  int32_t node_;
};

using BackwardFn = std::function<void(BackwardContext&)>;

enum class OptimizerKind : uint8_t { kNone, kSgd, kMomentum, kAdam, kAdamW };
enum class OptimizerImpl : uint8_t { kForeach, kFused, kForLoop };

// How Adam's two states are stored (docs/design/techniques.md):
// - kNative: torch.optim's, in the parameter's dtype (fp32 with master weights);
// - kBnb8bit: bitsandbytes' AdamW8bit (block-wise): a uint8 code per element and an fp32 absmax
//   per block of 256 for parameters of at least 4096 elements, fp32 states below that, and the
//   two 256-entry quantisation maps once;
// - kBnbPaged8bit: PagedAdamW8bit: the same, its code buffers of 100,000 elements or more in CUDA
//   unified memory (outside PyTorch's allocator, paged to the host under pressure);
// - kAo8bit, kAo4bit, kAoFp8: torchao's AdamW8bit (uint8 codes, an fp32 scale per 256 and a
//   256-entry map per state), AdamW4bit (two codes per byte, a scale per 128, a 16-entry map)
//   and AdamWFp8 (float8 codes, a scale per 256), for parameters of at least 4096 elements
//   divisible by the block; other parameters keep zeros_like(param).
// The quantised optimizers step each parameter in one fused kernel: no step temporaries.
enum class StateFormat : uint8_t { kNative, kBnb8bit, kBnbPaged8bit, kAo8bit, kAo4bit, kAoFp8 };

struct OptimizerSetup {
  OptimizerKind kind = OptimizerKind::kAdamW;
  OptimizerImpl impl = OptimizerImpl::kForeach;
  StateFormat states = StateFormat::kNative;
  bool master_weights = false;  // fp32 master copies of low-precision weights in the state
  double weight_decay = 0;      // Adam's L2 term allocates a gradient-sized temporary
  int shards = 1;               // ZeRO-1 and up: each rank keeps 1/shards of the state
  // The optimizer on the host (torchao's CPUOffloadOptimizer, DeepSpeed's ZeRO-Offload): its
  // states and an fp32 copy of each parameter in pinned host memory, each gradient copied over
  // for the step; nothing of it on the GPU. offload_gradients: each gradient leaves the GPU as
  // soon as it is accumulated (CPUOffloadOptimizer(offload_gradients=True)).
  bool offload = false;
  bool offload_gradients = false;
};

class StepSimulator {
 public:
  explicit StepSimulator(TensorStream& out);

  // --- names: the module path of what is being built ("transformer.h.0.attn") -------------
  void EnterModule(std::string_view name);
  void ExitModule();
  const std::string& Scope() const { return scope_; }

  // --- tensors ------------------------------------------------------------------------------
  // A parameter (allocated now, category weight, named scope + "." + name). `bytes` is what
  // this rank holds (a shard under ZeRO-3/FSDP; then `full_bytes` is the gathered size).
  TensorId Parameter(std::string_view name, uint64_t bytes, bool trainable,
                     uint64_t full_bytes = 0);
  TensorId Buffer(std::string_view name, uint64_t bytes);
  TensorId Input(std::string_view name, uint64_t bytes);
  // A forward op's output (one reference: the caller's).
  TensorId New(uint64_t bytes, std::string_view op);
  void Ref(TensorId t);
  // A view of `base` (split, select, expand): no storage of its own, `bytes` of the base's;
  // it keeps the base's storage alive while it lives (saved views included).
  TensorId View(TensorId base, uint64_t bytes);
  void Free(TensorId t);  // drops one reference; the storage goes with the last one
  // Frees the storage now whatever holds it (FSDP resharding a gathered weight that backward
  // saved); later references cost nothing.
  void ReleaseStorage(TensorId t);
  uint64_t Bytes(TensorId t) const { return tensors_[t].bytes; }
  bool RequiresGrad(TensorId t) const { return tensors_[t].requires_grad; }
  bool IsParameter(TensorId t) const { return tensors_[t].param >= 0; }
  // The trainable parameters, qualified name and tensor, in the order they were made: a
  // compiled graph's gradients are matched to them by name.
  std::vector<std::pair<std::string, TensorId>> TrainableParameters() const;
  // A temporary kept for backward outside any node's saved list (a compiled graph's saved
  // tensors, which its backward frees itself): labelled an activation named `name`.
  void MarkActivation(TensorId t, std::string_view name) {
    Relabel(t, model::Category::kActivation, name);
  }

  // --- autograd -----------------------------------------------------------------------------
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  // Records the node that computed `outputs` from `inputs`, keeping `saved` until its
  // backward runs (they become activations). Nothing is recorded, and nothing saved, when
  // grad mode is off or no input requires a gradient; then the outputs require none either.
  void Node(std::string_view name, const std::vector<TensorId>& inputs,
            const std::vector<TensorId>& outputs, const std::vector<TensorId>& saved,
            BackwardFn backward);
  void Matmul(std::string_view op);
  void Conv(uint64_t workspace_bytes, std::string_view op = "aten::cudnn_convolution");

  // --- autocast ------------------------------------------------------------------------------
  // Autocast's cast of a parameter to the autocast dtype: made at its first use inside the
  // autocast region and cached until the region ends (EndAutocast).
  TensorId AutocastWeight(TensorId param, DType to);
  void EndAutocast();
  DType param_dtype = DType::kF32;

  // --- activation checkpointing: runs `block` without saving, saves its input, and runs it
  // again in backward when its gradient arrives (torch.utils.checkpoint). In the recomputation
  // `block` gets an alias of the input (same bytes, no storage of its own) and runs in the
  // module scope and autocast state of the forward, and stops early, as checkpoint does by
  // default: what the block computes after the last node that saves a tensor is never made.
  TensorId Checkpoint(TensorId input, const std::function<TensorId(TensorId)>& block);
  // Set when a tensor of more than kMaxTensorBytes was asked for (sizes beyond any GPU).
  static constexpr uint64_t kMaxTensorBytes = model::kMaxPlausibleBytes;  // 1 PiB (model/limits.h)
  bool too_large() const { return too_large_; }

  // --- the step -----------------------------------------------------------------------------
  void Phase(int32_t step, model::Phase phase, std::string_view label = {}) {
    out_.Phase(step, phase, label);
  }
  // loss.backward(): the gradient of the loss, the engine over every recorded node, and the
  // release of what the graph still holds.
  void Backward(TensorId loss);
  // optimizer.zero_grad(set_to_none): frees the gradients (or keeps them to zero in place).
  void ZeroGrad(bool set_to_none);
  void OptimizerStep(const OptimizerSetup& setup);
  // The optimizer step fused into backward (torchtune's optimizer_in_bwd: one optimizer per
  // parameter, stepped and its gradient dropped by a post-accumulate-grad hook): when set, each
  // parameter is stepped as soon as its gradient is accumulated, and OptimizerStep does nothing.
  // Also the hook of offload_gradients. Not owned.
  const OptimizerSetup* step_in_backward = nullptr;
  // torchtune's OffloadActivations (saved-tensor hooks): every saved tensor of at least this many
  // bytes that is not a parameter goes to pinned host memory; the graph keeps no GPU reference
  // (the copy stream holds it until the next op saves), and backward copies it back just before
  // its node runs. 0: off.
  uint64_t offload_saved_min_bytes = 0;
  // Offloaded checkpointing (Unsloth's): a checkpointed block's input is kept on the host, not
  // the GPU, and copied back for the recomputation.
  bool offload_checkpoints = false;
  // Op-level selective checkpointing (torchtitan's selective_ac_option "op", through
  // torch.utils.checkpoint's create_selective_checkpoint_contexts): inside a checkpointed block
  // the forward keeps the outputs of the fused attention kernel and of every other aten::mm (the
  // 1st, 3rd, ... of the block: torchtitan's policy recomputes every second one), and the
  // recomputation takes those instead of computing them again; everything else is recomputed.
  bool checkpoint_saves_ops = false;
  // Host memory the set-up holds (pinned buffers, offloaded states, unified-memory pages): now and
  // at its most.
  uint64_t host_bytes() const { return host_bytes_; }
  uint64_t host_peak_bytes() const { return host_peak_; }
  // Of it, the unified-memory (paged) optimizer state, which lives on the GPU while there is room.
  uint64_t paged_bytes() const { return paged_bytes_; }
  // ZeRO-2 and up: each gradient, once accumulated, is reduced into this rank's shard.
  int grad_shards = 1;
  // ZeRO-3 / FSDP: each rank keeps 1/param_shards of every parameter; layers gather the full
  // weight around each use (forward, and again in backward) and free it right after.
  int param_shards = 1;
  // --- DistributedDataParallel (data parallel without ZeRO/FSDP), as torch 2.11 does it:
  // DdpConstruct at DDP(model): the parameters and buffers broadcast from rank 0 through flat
  // copies of at most 250 MiB (one tensor alone needs none), then the reducer's initial
  // buckets, one flat gradient buffer per dtype. DdpRebuildBuckets in the forward of the second
  // step: the initial buckets go, and buckets in the order the first backward made the
  // gradients ready replace them, the first closing at `first_bucket_bytes` (1 MiB) and the
  // others at `bucket_cap_bytes` (bucket_cap_mb, 25 MiB). goldens/h100/run/ranks2_ddp_* shows
  // both (docs/design/predict.md).
  void DdpConstruct();
  void DdpRebuildBuckets(uint64_t first_bucket_bytes, uint64_t bucket_cap_bytes);
  // Parameters whose qualified name matches one of these shell patterns are frozen
  // (requires_grad=False): no gradient, no optimizer state ("model.embed_tokens.*").
  std::vector<std::string> frozen_patterns;

  // --- facts for the report -------------------------------------------------------------------
  uint64_t parameter_bytes() const { return parameter_bytes_; }
  uint64_t parameter_elements() const { return parameter_elements_; }
  uint64_t trainable_elements() const { return trainable_elements_; }
  uint64_t buffer_bytes() const { return buffer_bytes_; }

 private:
  friend class BackwardContext;
  struct Tensor {
    uint64_t bytes = 0;
    uint64_t id = 0;         // stream id
    size_t alloc_event = 0;  // index into out_.events of its kAlloc
    int32_t refs = 0;
    int32_t producer = -1;  // node index, -1 for leaves
    int32_t param = -1;
    TensorId grad = kNoTensor;  // gradient accumulated for it during backward
    bool requires_grad = false;
    bool alive = false;
    bool owns_storage = true;      // false: an alias of another tensor's storage (checkpointing)
    TensorId view_of = kNoTensor;  // a view holds a reference to its base's storage
    bool reshaped = false;         // BackwardContext::NewReshaped: shares its storage
  };
  struct Param {
    TensorId tensor = kNoTensor;
    std::string name;
    bool trainable = true;
    uint64_t full_bytes = 0;
    TensorId grad = kNoTensor;     // .grad (after AccumulateGrad)
    TensorId pending = kNoTensor;  // contributions summed before AccumulateGrad runs
    int32_t uses = 0;              // nodes of the current graph that take it as input
    std::vector<TensorId> state;   // optimizer state
    bool ready_seen = false;       // its gradient was made ready once (DDP's rebuild order)
    bool state_made = false;       // the optimizer made its state (its first step)
  };
  struct NodeRec {
    std::string name;
    std::vector<TensorId> inputs, outputs, saved;
    BackwardFn backward;
    bool done = false;
    std::vector<std::pair<size_t, TensorId>> given;  // grads handed out while it runs
    std::vector<uint64_t> offloaded;                 // bytes of saved tensors on the host
  };

  TensorId Alloc(uint64_t bytes, model::Category category, std::string_view name,
                 std::string_view op);
  void Relabel(TensorId t, model::Category category, std::string_view name);
  void StepOptimizer(const OptimizerSetup& setup, const std::vector<int32_t>& stepped);
  // The state of parameter `i` at its first step.
  void MakeState(const OptimizerSetup& setup, int32_t i);
  void AddHost(uint64_t bytes);
  void DropHost(uint64_t bytes) { host_bytes_ -= std::min(bytes, host_bytes_); }
  void RunNode(int32_t index);
  void RunEngine(int32_t from_node);
  void DeliverGrad(TensorId input, TensorId grad, int32_t from_node);
  void AccumulateIntoParam(int32_t param, TensorId grad);
  void ReleaseGraph(int32_t from_node);
  // Checkpointing's early stop: drops what was made from stream event `event` and tensor
  // `tensor` on (allocations, their frees, matmul and conv markers); those tensors stay as
  // storage-less placeholders for the graph's bookkeeping.
  void DropRecomputedTail(size_t event, size_t tensor);
  // Moves stream events [from, end) to `to` (< from), keeping the alloc_event of the tensors
  // made since `tensors` right.
  void MoveEventsBefore(size_t from, size_t to, size_t tensors);
  Thread thread() const { return in_backward_ ? Thread::kBackward : Thread::kMain; }

  TensorStream& out_;
  std::vector<Tensor> tensors_;
  std::vector<Param> params_;
  std::vector<NodeRec> nodes_;
  std::vector<std::pair<TensorId, TensorId>> autocast_cache_;  // (param, cast)
  std::vector<size_t> scope_lengths_;
  std::string scope_;
  uint64_t next_id_ = 0;
  uint64_t parameter_bytes_ = 0;
  uint64_t parameter_elements_ = 0;
  uint64_t trainable_elements_ = 0;
  uint64_t buffer_bytes_ = 0;
  std::vector<TensorId> buffers_;
  std::vector<int32_t> grad_ready_order_;  // parameters, in the order of their first AccumulateGrad
  std::vector<TensorId> ddp_buckets_;
  bool grad_enabled_ = true;
  bool in_backward_ = false;
  bool too_large_ = false;
  // Op-level selective checkpointing: the outputs one checkpointed block's forward kept, in
  // the order its ops made them, and whether its recomputation is now taking them back.
  struct SavedOps {
    std::vector<TensorId> outputs;
    size_t next = 0;
    bool replaying = false;
    int mm_count = 0;  // aten::mm calls so far (torchtitan's policy counts forward and
                       // recomputation apart)
  };
  // Whether the policy keeps the output of `op` (counts the mm calls).
  static bool PolicySaves(SavedOps& saved, std::string_view op);
  SavedOps* saved_ops_ = nullptr;  // the block running now, when the policy is on
  // In a checkpoint's recomputation: where the last node that saved a tensor was recorded.
  bool recomputing_ = false;
  size_t recompute_cut_event_ = 0;
  size_t recompute_cut_tensor_ = 0;
  int32_t recompute_cut_node_ = 0;
  int32_t optimizer_steps_ = 0;
  uint64_t host_bytes_ = 0, host_peak_ = 0, paged_bytes_ = 0;
  bool quantisation_maps_ = false;           // bitsandbytes' two maps, made once
  std::vector<TensorId> offload_in_flight_;  // saved tensors the copy stream still holds
};

}  // namespace vramscope::predict
