#include "predict/role_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <vector>

#include "predict/parallel_terms.h"
#include "predict/quantised_states.h"
#include "predict/step_simulator.h"

namespace vramscope::predict {

namespace {

using model::Category;
using model::ParallelLayout;
using model::Phase;
using model::PipelineSchedule;
using model::RankRole;
using parallel_terms::Held;

// The CUDA streams a rank's allocations are made on, as FSDP2 makes them (the tracer sees them
// so on the two-rank capture): the compute stream, the all-gather copy-in stream (the gathered
// units) and the reduce-scatter stream (its inputs). The allocator model keeps their blocks
// apart.
constexpr uint32_t kComputeStream = 0, kAllGatherStream = 1, kReduceScatterStream = 2;

// One unit of a model chunk as the rank holds it: a decoder layer, the embedding or the head.
struct Unit {
  std::string name;       // "layers.12", "embedding", "head"
  uint64_t elements = 0;  // this rank's model-parallel shard, before ZeRO (dense + experts)
  uint64_t expert_elements = 0;
  std::vector<parallel_terms::LayerTensor> tensors;  // its parameters, summing to `elements`
  bool head = false;
  // Per micro-batch: what its forward saves (bytes, summing to the formula's) and the largest
  // communication buffer around it.
  std::vector<std::pair<std::string, uint64_t>> saved;
  uint64_t communication = 0;
  std::string communication_what;
  // Backward's largest transient of a decoder layer, which the saved tensors do not count: the
  // gradient of the MLP's hidden activation (tokens x this rank's ffn), alive while the MLP's
  // weight gradients are made. 0 for the embedding, the head and MoE layers (not modelled).
  uint64_t backward_temporary = 0;
  // A checkpointed decoder layer (TrainingSetup::Checkpointed): what its recomputation makes
  // again when backward reaches it, the layer's whole saved set less what the forward kept (its
  // input; under the op-level policy the outputs it saved), alive through the layer's backward.
  uint64_t recomputed = 0;
};

// The saved tensors of one micro-batch's pass through a chunk, freed by its backward.
struct Pass {
  uint64_t micro_batch = 0;
  std::vector<std::vector<uint64_t>> saved;  // per unit, stream ids
  uint64_t stage_output = 0;  // torch.distributed.pipelining: the stage's output, to backward
  // torch.distributed.pipelining's last stage under return_outputs=False: its output, kept in
  // the stage's forward cache to its backward (else kept to the next step: step_outputs_).
  uint64_t head_output = 0;
};

class RoleStepBuilder {
 public:
  RoleStepBuilder(const ModelSpec& m, const TrainingSetup& s, const model::ParallelPrediction& p,
                  const RankRole& r, TensorStream& out)
      : m_(m), s_(s), l_(p.layout), r_(r), out_(out) {}

  Status Build();

 private:
  uint64_t Alloc(uint64_t bytes, Category category, std::string_view name, std::string_view op,
                 uint32_t cuda_stream = kComputeStream) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kAlloc;
    e.thread = thread_;
    e.cuda_stream = cuda_stream;
    e.category = category;
    e.id = next_id_++;
    e.bytes = bytes;
    e.name = out_.strings.Intern(name);
    e.op = out_.strings.Intern(op);
    out_.events.push_back(e);
    return e.id;
  }
  void Free(uint64_t id) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kFree;
    e.thread = thread_;
    e.id = id;
    out_.events.push_back(e);
  }
  // A matmul marker (device_rules.cc gives each thread its cuBLAS workspace at its first). A
  // forward through biased linears runs addmm, through cuBLASLt, whose own workspace comes with
  // the first (the small GPT's captures: 1 MiB beside the two cuBLAS workspaces).
  void Matmul() {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kMatmul;
    e.thread = thread_;
    e.op = out_.strings.Intern(thread_ == Thread::kMain && biased_linears_ ? "aten::addmm"
                                                                           : "aten::mm");
    out_.events.push_back(e);
  }
  void MarkPhase(int32_t step, Phase phase, std::string_view label) {
    if (phase == phase_ && step == step_) return;
    phase_ = phase;
    step_ = step;
    out_.Phase(step, phase, label);
  }

  void MakeChunks();
  void Construct();
  void Forward(size_t chunk, uint64_t micro_batch);
  void Backward(size_t chunk);
  void OptimizerState();
  void QuantisedOptimizerState();
  void OptimizerTemporaries();
  // torch.distributed.pipelining: the receive buffers (made at the first step, kept), and the
  // last stage's merge of its outputs at the step's end.
  void PipelineBuffers();
  // Whether the rank's model chunk `chunk` is the model's last stage (the head's).
  bool LastStageChunk(size_t chunk) const { return r_.head && chunk + 1 == chunks_.size(); }
  void MergeOutputs();
  void ReleaseOutputs() {  // clear_runtime_states at the next step's start
    for (const uint64_t id : step_outputs_) Free(id);
    step_outputs_.clear();
  }
  // Each parameter of the role as "unit.tensor" and its elements on this rank, sharded once
  // ZeRO's stage reaches `from_stage` (1: optimizer state, 3: weights), in forward order.
  std::vector<std::pair<std::string, uint64_t>> TensorElements(int from_stage) const;
  uint64_t Gather(const Unit& u) {
    return Alloc(u.elements * (l_.fsdp_mixed_precision ? 2 : element_size_), Category::kWeight,
                 u.name + " (ZeRO-3 all-gathered)", "all_gather", kAllGatherStream);
  }
  // Without resharding after forward: the unit gathered once and kept.
  void KeepGathered(size_t chunk, size_t unit) {
    if (kept_[chunk][unit] == 0) kept_[chunk][unit] = Gather(chunks_[chunk][unit]);
  }
  void ReleaseKept() {
    for (std::vector<uint64_t>& chunk : kept_) {
      for (uint64_t& id : chunk) {
        if (id != 0) Free(id);
        id = 0;
      }
    }
  }

  // DeepSpeed's reduce bucket(s): `count` flat buffers of reduce_bucket_size elements.
  std::vector<uint64_t> ReduceBuckets(uint64_t count) {
    std::vector<uint64_t> ids;
    for (uint64_t k = 0; k < count; ++k) {
      ids.push_back(Alloc(l_.reduce_bucket_elements * element_size_, Category::kGradient,
                          count == 1 ? std::string("DeepSpeed reduce bucket (ipg_buffer)")
                                     : fmt::format("DeepSpeed reduce bucket {} (ipg_buffer)", k),
                          "DeepSpeedZeroOptimizer.backward"));
    }
    return ids;
  }
  // Unit `i` gathered whole (a prefetched part of it replaced), and unit `next` (out of range:
  // none) prefetched: whole under FSDP2, up to stage3_prefetch_bucket_size elements under
  // DeepSpeed's ZeRO-3.
  void GatherWithPrefetch(const std::vector<Unit>& units, size_t i, size_t next,
                          std::vector<uint64_t>& gathered, std::vector<bool>& partial) {
    if (partial[i]) {
      Free(gathered[i]);
      gathered[i] = 0;
      partial[i] = false;
    }
    if (gathered[i] == 0) gathered[i] = Gather(units[i]);
    if (next >= units.size() || gathered[next] != 0) return;
    if (deepspeed_) {
      const uint64_t n = std::min(units[next].elements, l_.prefetch_bucket_elements);
      gathered[next] = Alloc(n * element_size_, Category::kWeight,
                             units[next].name + " (DeepSpeed ZeRO-3 prefetched)", "all_gather",
                             kAllGatherStream);
      partial[next] = true;
    } else {
      gathered[next] = Gather(units[next]);
    }
  }
  // fsdp_pipeline_: unit i of `chunk`'s unsharded gradients, made at its first backward of the
  // step (later micro-batches accumulate into them), in the gathered parameters' dtype.
  void AccumulateUnsharded(size_t chunk, size_t i) {
    std::vector<uint64_t>& grads = unsharded_grads_[chunk][i];
    const Unit& u = chunks_[chunk][i];
    if (!grads.empty()) {
      AddedGradients(u, l_.fsdp_mixed_precision ? 2 : element_size_);
      return;
    }
    for (const parallel_terms::LayerTensor& t : u.tensors) {
      grads.push_back(Alloc(
          t.elements * (l_.fsdp_mixed_precision ? 2 : element_size_), Category::kGradient,
          fmt::format("{}.{}.grad (unsharded, accumulated)", u.name, t.name), "AccumulateGrad"));
    }
  }
  // A later micro-batch's backward of a unit whose parameters already hold a .grad: each
  // parameter's gradient is computed into a new tensor (the matmul's output, embedding
  // backward's dense table) that AccumulateGrad adds into .grad and drops, one at a time.
  void AddedGradients(const Unit& u, uint64_t element_size) {
    for (const parallel_terms::LayerTensor& t : u.tensors) {
      Free(Alloc(t.elements * element_size, Category::kTemporary,
                 fmt::format("{}.{} gradient of a later micro-batch (accumulated, dropped)", u.name,
                             t.name),
                 "AccumulateGrad"));
    }
  }
  // fsdp_pipeline_, after the stage's last backward: each unit's reduce-scatter input (its
  // unsharded gradients copied in, then freed), the sharded .grad it scatters into.
  void ReduceAccumulated() {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      for (size_t i = chunks_[c].size(); i-- > 0;) {
        std::vector<uint64_t>& unsharded = unsharded_grads_[c][i];
        if (unsharded.empty()) continue;
        const Unit& u = chunks_[c][i];
        const uint64_t input =
            Alloc(u.elements * (l_.fsdp_mixed_precision ? 4 : element_size_), Category::kGradient,
                  u.name + " (ZeRO reduce-scatter input)", "reduce_scatter", kReduceScatterStream);
        for (const uint64_t id : unsharded) Free(id);
        unsharded.clear();
        for (const parallel_terms::LayerTensor& t : u.tensors) {
          const uint64_t n = parallel_terms::Sharded(
              t.elements, t.expert ? groups_.experts : groups_.dense, zero_, 2);
          grads_[c][i].push_back(Alloc(n * element_size_, Category::kGradient,
                                       fmt::format("{}.{}.grad", u.name, t.name),
                                       "reduce_scatter"));
        }
        Free(input);
      }
    }
  }
  // zero_grad(set_to_none=True): the parameters' .grad tensors go (per_parameter_grads_,
  // fsdp_pipeline_).
  void ZeroGrad() {
    for (std::vector<std::vector<uint64_t>>& chunk : grads_) {
      for (std::vector<uint64_t>& unit : chunk) {
        for (const uint64_t id : unit) Free(id);
        unit.clear();
      }
    }
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  const ParallelLayout& l_;
  const RankRole& r_;
  TensorStream& out_;
  std::vector<std::vector<Unit>> chunks_;    // the stage's model chunks, units in forward order
  std::vector<std::deque<Pass>> in_flight_;  // per chunk, oldest first
  // ZeRO-3 without resharding after forward: per chunk and unit, its gathered weights (0: not
  // gathered), kept from its first forward of the step to the step's end of backward.
  std::vector<std::vector<uint64_t>> kept_;
  // PyTorch's DDP: per chunk and unit, its parameters' .grad (none yet this step: empty).
  std::vector<std::vector<std::vector<uint64_t>>> grads_;
  uint64_t next_id_ = 1;
  Thread thread_ = Thread::kMain;
  Phase phase_ = Phase::kUnknown;
  int32_t step_ = -1;
  int zero_ = 0;
  parallel_terms::ZeroGroups groups_;
  uint64_t element_size_ = 4;
  bool biased_linears_ = false;  // the forward's linears carry biases: addmm, through cuBLASLt
  bool data_parallel_buffers_ = false;
  bool torch_ddp_ = false;  // PyTorch's DDP: .grad per parameter beside the buckets
  // The parameters' own .grad tensors, made at a step's first backward through them and freed
  // by the next step's zero_grad(set_to_none=True): under PyTorch's DDP, and under
  // torch.distributed.pipelining without data parallelism (plain autograd; no gradient buffer).
  bool per_parameter_grads_ = false;
  // FSDP2 (ZeRO-3) under torch.distributed.pipelining: the stage runs every micro-batch's
  // backward with gradient sync off (set_requires_gradient_sync(False)), so each parameter's
  // unsharded gradient accumulates on the gathered parameter, and the stage reduce-scatters them
  // once after its last backward (perform_reduce_grad); the sharded .grad lives from there to the
  // next step's zero_grad.
  bool fsdp_pipeline_ = false;
  std::vector<std::vector<std::vector<uint64_t>>> unsharded_grads_;  // per chunk, unit
  bool deepspeed_ = false;  // DeepSpeed's ZeRO-1/2: reduce buckets in each backward
  // torch.distributed.pipelining (ParallelLayout::pipeline_impl kTorch, PP 2 or more).
  bool torch_pipeline_ = false;
  // torch's cross-entropy on the head's output (a torch pipeline's, or DTensor's gathered
  // logits): head_output_ and logits_fp32_ are set, the loss's tensors as torch makes them.
  bool torch_loss_ = false;
  uint64_t boundary_ = 0;     // one micro-batch's stage input, output or their gradients
  uint64_t head_output_ = 0;  // one micro-batch's output of the last stage, activations' dtype
  uint64_t logits_fp32_ = 0;  // the same in fp32 (the log-softmax and its gradients)
  std::vector<uint64_t> step_outputs_;  // the last stage's outputs this step
  // torch.autocast over a pipeline's schedule step (fp32 weights): one autocast region for the
  // whole step, so each matmul weight's copy in the autocast dtype, made at its unit's first
  // forward of the step, stays in autocast's cache to the step's end.
  uint64_t autocast_element_size_ = 0;  // 0: no copies
  std::vector<uint64_t> autocast_copies_;
  std::vector<std::vector<bool>> autocast_cached_;  // per chunk, unit
  void AutocastCopies(size_t chunk, size_t i) {
    if (autocast_element_size_ == 0 || autocast_cached_[chunk][i]) return;
    autocast_cached_[chunk][i] = true;
    const Unit& u = chunks_[chunk][i];
    if (u.name == "embedding") return;  // a lookup, not an autocast op
    for (const parallel_terms::LayerTensor& t : u.tensors) {
      const std::string_view name(t.name);
      // norms run in fp32 under autocast; every linear's weight and bias is cast
      if (name.find("norm") != std::string_view::npos || name.rfind("ln_", 0) == 0) continue;
      // of the whole tensor (under ZeRO-3, the gathered one)
      autocast_copies_.push_back(Alloc(t.elements * autocast_element_size_, Category::kTemporary,
                                       fmt::format("{}.{} (autocast copy)", u.name, t.name),
                                       "aten::_to_copy"));
    }
  }
  void EndAutocast() {
    for (const uint64_t id : autocast_copies_) Free(id);
    autocast_copies_.clear();
    for (std::vector<bool>& chunk : autocast_cached_) chunk.assign(chunk.size(), false);
  }
};

// Sizes that must add up to `total`: the last takes what rounding left (never below zero).
void AdjustLast(std::vector<uint64_t>& sizes, uint64_t total) {
  if (sizes.empty()) return;
  uint64_t sum = 0;
  for (uint64_t b : sizes) sum += b;
  if (sum > total && sizes.back() >= sum - total) {
    sizes.back() -= sum - total;
  } else if (sum < total) {
    sizes.back() += total - sum;
  }
}

void RoleStepBuilder::MakeChunks() {
  const uint64_t stage = r_.stages.front();
  const bool interleaved = l_.schedule == PipelineSchedule::kInterleaved;
  const uint64_t v = interleaved ? l_.virtual_stages : 1;
  const std::vector<uint64_t> stage_layers = parallel_terms::StageLayers(m_, l_);
  const uint64_t seq = (s_.seq ? s_.seq : m_.default_seq) / l_.cp;
  const Held dense = parallel_terms::LayerParameters(m_, l_, false);
  const Held moe = parallel_terms::LayerParameters(m_, l_, true);
  chunks_.resize(v);
  for (uint64_t c = 0; c < v; ++c) {
    uint64_t first = 0, count = 0;
    if (interleaved) {
      count = m_.layers / (l_.pp * v);
      first = (c * l_.pp + stage) * count;
    } else {
      for (uint64_t i = 0; i < stage; ++i) first += stage_layers[i];
      count = stage_layers[stage];
    }
    std::vector<Unit>& units = chunks_[c];
    if (stage == 0 && c == 0) {
      Unit embedding;
      embedding.name = "embedding";
      embedding.elements = parallel_terms::EmbeddingElements(m_, l_);
      embedding.tensors = parallel_terms::EmbeddingTensors(m_, l_);
      units.push_back(std::move(embedding));
    }
    for (uint64_t i = first; i < first + count; ++i) {
      const bool is_moe = m_.MoeLayer(i);
      const Held& held = is_moe ? moe : dense;
      Unit u;
      u.name = fmt::format("layers.{}", i);
      u.elements = held.dense + held.experts;
      u.expert_elements = held.experts;
      u.tensors = parallel_terms::LayerTensors(m_, l_, is_moe);
      const double layer_bytes = parallel_terms::LayerActivationBytes(m_, s_, l_, seq, i);
      std::vector<uint64_t> sizes;
      for (const parallel_terms::ActivationTerm& t :
           parallel_terms::LayerActivationTerms(m_, s_, l_, seq, i)) {
        u.saved.emplace_back(t.what, 0);
        sizes.push_back(static_cast<uint64_t>(std::llround(t.bytes)));
      }
      AdjustLast(sizes, static_cast<uint64_t>(std::llround(layer_bytes)));
      for (size_t k = 0; k < sizes.size(); ++k) u.saved[k].second = sizes[k];
      if (s_.Checkpointed(i)) {
        TrainingSetup whole = s_;
        whole.checkpointing = false;
        const double full = parallel_terms::LayerActivationBytes(m_, whole, l_, seq, i);
        if (full > layer_bytes)
          u.recomputed = static_cast<uint64_t>(std::llround(full - layer_bytes));
      }
      const parallel_terms::Communication comm =
          parallel_terms::LargestCommunicationBuffer(m_, s_, l_, seq, is_moe);
      u.communication = comm.bytes;
      u.communication_what = comm.what;
      if (!is_moe) {
        // the small GPT's 1F1B capture: a 2 MiB mm output (512 tokens x 1024 x fp32) beside
        // the MLP's weight gradient at the first stage's peak
        u.backward_temporary =
            seq * s_.batch * (m_.intermediate / l_.tp) * parallel_terms::ActivationElementSize(s_);
      }
      units.push_back(std::move(u));
    }
    if (stage == l_.pp - 1 && c == v - 1) {
      Unit head;
      head.name = "head";
      head.elements = parallel_terms::HeadElements(m_, l_);
      head.tensors = parallel_terms::HeadTensors(m_, l_);
      head.head = true;
      if (l_.GatheredLogits() && !torch_pipeline_) {
        // DTensor's gathered logits, the forward's output, alive to the step's end of backward
        // (a torch pipeline keeps its outputs itself, Forward).
        head.saved.emplace_back("logits gathered from the TP ranks", head_output_);
      }
      if (torch_loss_ && s_.precision.autocast) {
        // Under autocast the loss's log-softmax runs in the autocast dtype and nll_loss saves
        // an fp32 copy of it (torch 2.11, measured); the copy must stay last (Backward).
        head.saved.emplace_back("log-softmax (autocast dtype)", head_output_);
        head.saved.emplace_back("log-softmax in fp32 (nll_loss's input)", logits_fp32_);
      } else if (torch_loss_) {
        // The loss's fp32 log-softmax (a pipeline's output is kept by the schedule, Forward).
        head.saved.emplace_back("log-softmax (fp32)", logits_fp32_);
      } else {
        // The fp32 logits of the vocabulary shard; their gradient comes in backward.
        head.saved.emplace_back("logits (fp32)", r_.logits_bytes / 2);
      }
      units.push_back(std::move(head));
    }
  }
  in_flight_.resize(v);
  kept_.resize(v);
  grads_.resize(v);
  unsharded_grads_.resize(v);
  autocast_cached_.resize(v);
  for (uint64_t c = 0; c < v; ++c) {
    kept_[c].assign(chunks_[c].size(), 0);
    grads_[c].assign(chunks_[c].size(), {});
    unsharded_grads_[c].assign(chunks_[c].size(), {});
    autocast_cached_[c].assign(chunks_[c].size(), false);
  }
}

void RoleStepBuilder::Construct() {
  MarkPhase(0, Phase::kSetup, "setup");
  // The weights, one tensor per parameter (ZeRO-3 shards each, as FSDP2 does; the experts'
  // over their own group).
  std::vector<std::pair<std::string, uint64_t>> weights;
  for (const auto& [name, n] : TensorElements(3)) weights.emplace_back(name, element_size_ * n);
  std::vector<uint64_t> sizes;
  for (const auto& w : weights) sizes.push_back(w.second);
  AdjustLast(sizes, r_.weight_bytes);
  for (size_t i = 0; i < weights.size(); ++i) {
    Alloc(sizes[i], Category::kWeight, weights[i].first, "model construction");
  }
  // The gradients: one contiguous buffer per model chunk (Megatron-Core's), alive throughout;
  // under PyTorch's DDP these are its buckets, and the gradients themselves come in backward,
  // as they do (with no buffer) in a torch.distributed.pipelining stage without DP.
  if ((per_parameter_grads_ && !torch_ddp_) || fsdp_pipeline_) return;
  sizes.clear();
  for (const std::vector<Unit>& chunk : chunks_) {
    uint64_t bytes = 0;
    for (const Unit& u : chunk) {
      bytes += element_size_ *
               (parallel_terms::Sharded(u.elements - u.expert_elements, groups_.dense, zero_, 2) +
                parallel_terms::Sharded(u.expert_elements, groups_.experts, zero_, 2));
    }
    sizes.push_back(bytes);
  }
  AdjustLast(sizes, torch_ddp_ ? r_.data_parallel_bytes : r_.gradient_bytes);
  const std::string buffer = torch_ddp_ ? "DDP gradient buckets" : "gradient buffer";
  for (size_t c = 0; c < sizes.size(); ++c) {
    if (sizes[c] == 0) continue;
    Alloc(sizes[c], Category::kGradient,
          chunks_.size() == 1 ? buffer : fmt::format("{} (model chunk {})", buffer, c),
          "DistributedDataParallel");
  }
  if (deepspeed_ && zero_ >= 3) ReduceBuckets(1);  // stage3.py's, kept from construction
}

void RoleStepBuilder::Forward(size_t chunk, uint64_t micro_batch) {
  thread_ = Thread::kMain;
  Matmul();
  const std::vector<Unit>& units = chunks_[chunk];
  Pass pass;
  pass.micro_batch = micro_batch;
  pass.saved.resize(units.size());
  const bool gather = data_parallel_buffers_ && zero_ >= 3 && l_.ReshardAfterForward();
  std::vector<uint64_t> gathered(units.size(), 0);
  std::vector<bool> partial(units.size(), false);
  for (size_t i = 0; i < units.size(); ++i) {
    const Unit& u = units[i];
    if (data_parallel_buffers_ && zero_ >= 3 && !l_.ReshardAfterForward()) KeepGathered(chunk, i);
    if (gather) {
      GatherWithPrefetch(units, i, i + 1, gathered, partial);
    }
    uint64_t comm = 0;
    if (u.communication > 0) {
      comm = Alloc(u.communication, Category::kTemporary,
                   fmt::format("{} {} (forward)", u.name, u.communication_what), "collective");
    }
    AutocastCopies(chunk, i);
    if (u.head && torch_pipeline_) {
      if (l_.pipeline_return_outputs) {
        step_outputs_.push_back(
            Alloc(head_output_, Category::kActivation,
                  fmt::format("head output (micro-batch {}, kept by the schedule to the next step)",
                              micro_batch),
                  "forward"));
      } else {
        pass.head_output =
            Alloc(head_output_, Category::kActivation,
                  fmt::format("head output (micro-batch {}, kept to its backward)", micro_batch),
                  "forward");
      }
    }
    for (const auto& [what, bytes] : u.saved) {
      if (bytes == 0) continue;
      pass.saved[i].push_back(
          Alloc(bytes, Category::kActivation,
                fmt::format("{}: {} (micro-batch {})", u.name, what, micro_batch), "forward"));
    }
    if (comm != 0) Free(comm);
    if (gather) {
      Free(gathered[i]);
      gathered[i] = 0;
    }
  }
  if (torch_pipeline_ && !LastStageChunk(chunk)) {
    pass.stage_output = Alloc(
        boundary_, Category::kActivation,
        fmt::format("stage output (micro-batch {}, kept to its backward)", micro_batch), "forward");
  }
  in_flight_[chunk].push_back(std::move(pass));
}

void RoleStepBuilder::Backward(size_t chunk) {
  // The chunk Megatron's schedule names; should it hold nothing (a schedule the layout does
  // not divide evenly), the oldest pass of any chunk.
  if (in_flight_[chunk].empty()) {
    for (size_t c = 0; c < in_flight_.size(); ++c) {
      if (!in_flight_[c].empty()) {
        chunk = c;
        break;
      }
    }
    if (in_flight_[chunk].empty()) return;
  }
  thread_ = Thread::kBackward;
  Matmul();
  Pass pass = std::move(in_flight_[chunk].front());
  in_flight_[chunk].pop_front();
  const std::vector<Unit>& units = chunks_[chunk];
  const bool gather = data_parallel_buffers_ && zero_ >= 3 && l_.ReshardAfterForward();
  const bool reduce_scatter =
      data_parallel_buffers_ && zero_ >= 2 && !deepspeed_;  // DeepSpeed's: its reduce bucket
  std::vector<uint64_t> gathered(units.size(), 0);
  std::vector<bool> partial(units.size(), false);
  // DeepSpeed's ZeRO-1/2 allocate their reduce bucket(s) as each backward starts and drop them
  // when its reduction ends (under pipeline parallelism, once at the step's end); ZeRO-3 keeps
  // one from construction.
  const std::vector<uint64_t> buckets = deepspeed_ && zero_ < 3 && l_.pp < 2
                                            ? ReduceBuckets(l_.overlap_comm ? 2 : 1)
                                            : std::vector<uint64_t>{};
  for (size_t i = units.size(); i-- > 0;) {
    const Unit& u = units[i];
    if (data_parallel_buffers_ && zero_ >= 3 && !l_.ReshardAfterForward()) KeepGathered(chunk, i);
    if (gather) GatherWithPrefetch(units, i, i - 1, gathered, partial);
    uint64_t logits_grad = 0;
    if (u.head && torch_loss_ && logits_fp32_ > 0 && s_.precision.autocast) {
      // nll_loss's backward: the fp32 gradient of its fp32 copy of the log-softmax (the copy
      // goes with it), cast to the autocast dtype, then the log-softmax's backward.
      const uint64_t loss_grad = Alloc(logits_fp32_, Category::kTemporary,
                                       "log-softmax's gradient (fp32)", "aten::nll_loss_backward");
      Free(pass.saved[i].back());
      pass.saved[i].pop_back();
      const uint64_t cast = Alloc(head_output_, Category::kTemporary,
                                  "log-softmax's gradient (autocast dtype)", "aten::_to_copy");
      Free(loss_grad);
      logits_grad = Alloc(head_output_, Category::kTemporary, "logits' gradient (autocast dtype)",
                          "aten::_log_softmax_backward_data");
      Free(cast);
    } else if (u.head && torch_loss_ && logits_fp32_ > 0) {
      // F.cross_entropy's backward: the gradient of the log-softmax, then of the logits.
      const uint64_t loss_grad = Alloc(logits_fp32_, Category::kTemporary,
                                       "log-softmax's gradient (fp32)", "aten::nll_loss_backward");
      logits_grad = Alloc(logits_fp32_, Category::kTemporary, "logits' gradient (fp32)",
                          "aten::_log_softmax_backward_data");
      Free(loss_grad);
    } else if (u.head && !u.saved.empty() && u.saved.front().second > 0) {
      logits_grad = Alloc(u.saved.front().second, Category::kTemporary, "logits' gradient (fp32)",
                          "backward");
    }
    const uint64_t recomputed =
        u.recomputed > 0
            ? Alloc(u.recomputed, Category::kActivation,
                    fmt::format("{}: recomputed activations (checkpointing, micro-batch {})",
                                u.name, pass.micro_batch),
                    "recompute")
            : 0;
    uint64_t comm = 0;
    if (u.communication > 0) {
      comm = Alloc(u.communication, Category::kTemporary,
                   fmt::format("{} {} (backward)", u.name, u.communication_what), "collective");
    }
    const uint64_t hidden_grad =
        u.backward_temporary > 0
            ? Alloc(u.backward_temporary, Category::kTemporary,
                    fmt::format("{}: gradient of the MLP's hidden activation (micro-batch "
                                "backward)",
                                u.name),
                    "backward")
            : 0;
    if (per_parameter_grads_ && grads_[chunk][i].empty()) {
      for (const parallel_terms::LayerTensor& t : u.tensors) {
        grads_[chunk][i].push_back(Alloc(t.elements * element_size_, Category::kGradient,
                                         fmt::format("{}.{}.grad", u.name, t.name),
                                         "AccumulateGrad"));
      }
    } else if (per_parameter_grads_) {
      AddedGradients(u, element_size_);
    }
    if (hidden_grad != 0) Free(hidden_grad);
    if (fsdp_pipeline_) AccumulateUnsharded(chunk, i);
    uint64_t rs = 0;
    if (reduce_scatter && !fsdp_pipeline_) {
      rs = Alloc(u.elements * (l_.fsdp_mixed_precision && zero_ >= 3 ? 4 : element_size_),
                 Category::kGradient, u.name + " (ZeRO reduce-scatter input)", "reduce_scatter",
                 kReduceScatterStream);
    }
    if (comm != 0) Free(comm);
    for (auto it = pass.saved[i].rbegin(); it != pass.saved[i].rend(); ++it) Free(*it);
    if (recomputed != 0) Free(recomputed);
    if (logits_grad != 0) Free(logits_grad);
    if (gather) {
      Free(gathered[i]);
      gathered[i] = 0;
    }
    if (rs != 0) Free(rs);
  }
  if (pass.stage_output != 0) Free(pass.stage_output);
  if (pass.head_output != 0) Free(pass.head_output);
  for (const uint64_t id : buckets) Free(id);
}

void RoleStepBuilder::PipelineBuffers() {
  if (!torch_pipeline_) return;
  // Each of the rank's stages (one per model chunk; chunk c is global stage c x PP + stage)
  // receives its input unless it is the first stage, and its output's gradient unless it is
  // the last.
  const uint64_t stage = r_.stages.front();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const uint64_t global = c * l_.pp + stage;
    const std::string which = chunks_.size() == 1 ? "" : fmt::format("stage {}'s ", global);
    for (uint64_t k = 0; k < l_.micro_batches; ++k) {
      if (global > 0) {
        Alloc(boundary_, Category::kTemporary,
              fmt::format("{}stage input receive buffer (micro-batch {})", which, k),
              "PipelineStage recv");
      }
      if (!LastStageChunk(c)) {
        Alloc(boundary_, Category::kTemporary,
              fmt::format("{}output gradient receive buffer (micro-batch {})", which, k),
              "PipelineStage recv");
      }
    }
  }
}

void RoleStepBuilder::MergeOutputs() {
  if (step_outputs_.empty()) return;
  // schedule.step returns the micro-batches' outputs concatenated; the caller drops them.
  Free(Alloc(head_output_ * l_.micro_batches, Category::kTemporary,
             "merged outputs (schedule.step's return value)", "aten::cat"));
}

std::vector<std::pair<std::string, uint64_t>> RoleStepBuilder::TensorElements(
    int from_stage) const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const std::vector<Unit>& chunk : chunks_) {
    for (const Unit& u : chunk) {
      for (const parallel_terms::LayerTensor& t : u.tensors) {
        out.emplace_back(
            fmt::format("{}.{}", u.name, t.name),
            parallel_terms::Sharded(t.elements, t.expert ? groups_.experts : groups_.dense, zero_,
                                    from_stage));
      }
    }
  }
  return out;
}

void RoleStepBuilder::OptimizerState() {
  if (s_.optimizer.offload) return;  // on the host (RankRole::host_bytes)
  if (s_.optimizer.states != StateFormat::kNative) {
    QuantisedOptimizerState();
    return;
  }
  const uint64_t per_element = parallel_terms::OptimizerBytesPerElement(s_);
  if (per_element == 0) return;
  const bool master = s_.optimizer.master_weights;
  const uint64_t state = master ? 4 : element_size_;
  const uint64_t moments = (per_element - (master ? 4 : 0)) / state;
  std::vector<std::pair<std::string, uint64_t>> tensors;
  for (const auto& [name, n] : TensorElements(1)) {
    if (master) tensors.emplace_back(name + " (fp32 master weights)", 4 * n);
    static constexpr const char* kMoments[] = {"exp_avg", "exp_avg_sq"};
    for (uint64_t k = 0; k < moments; ++k) {
      tensors.emplace_back(
          fmt::format("{} ({})", name, moments == 1 ? "momentum_buffer" : kMoments[k % 2]),
          state * n);
    }
  }
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.second);
  AdjustLast(sizes, r_.optimizer_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    Alloc(sizes[i], Category::kOptimizerState, tensors[i].first, "optimizer.step");
  }
}

// bitsandbytes' and torchao's quantised AdamW states, tensor by tensor as the step simulator
// makes them for one GPU (quantised_states.h): the shared maps, then each tensor's codes and
// scales (fp32 or zeros_like states for tensors too small or not divisible by the block).
void RoleStepBuilder::QuantisedOptimizerState() {
  const StateFormat format = s_.optimizer.states;
  std::vector<std::pair<std::string, uint64_t>> tensors;
  for (const QuantisedState& q : SharedQuantisationMaps(format)) {
    tensors.emplace_back("optimizer" + q.suffix, q.bytes);
  }
  for (const auto& [name, n] : TensorElements(1)) {
    for (const QuantisedState& q : QuantisedAdamStates(format, n, n * element_size_)) {
      tensors.emplace_back(name + q.suffix, q.bytes);
    }
  }
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.second);
  AdjustLast(sizes, r_.optimizer_bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    Alloc(sizes[i], Category::kOptimizerState, tensors[i].first, "optimizer.step");
  }
}

// Adam's and AdamW's step temporaries, one tensor per parameter as the step simulator counts them
// for one GPU (byte-exact against torch 2.11's _multi_tensor_adam and _single_tensor_adam):
// foreach, the low-precision gradients converted to fp32 beside master weights, Adam's L2 term a
// new gradient list, then every exp_avg_sq's square root at once; the for-loop, one parameter's
// root and denominator at a time; fused, none (nor SGD's and momentum's in-place updates).
void RoleStepBuilder::OptimizerTemporaries() {
  const OptimizerSetup& o = s_.optimizer;
  if (o.offload) return;  // the host's optimizer steps there; the GPU copies weights back in place
  if (o.kind != OptimizerKind::kAdam && o.kind != OptimizerKind::kAdamW) return;
  // The fused kernels (torch's, and every quantised optimizer's: one per parameter) make none.
  if (o.impl == OptimizerImpl::kFused || o.states != StateFormat::kNative) return;
  const uint64_t state = o.master_weights ? 4 : element_size_;
  const bool l2 = o.kind == OptimizerKind::kAdam && o.weight_decay != 0;
  const std::vector<std::pair<std::string, uint64_t>> tensors = TensorElements(1);
  auto list = [&](std::string_view what, std::string_view op) {
    std::vector<uint64_t> ids;
    for (const auto& [name, n] : tensors) {
      if (n > 0) {
        ids.push_back(
            Alloc(state * n, Category::kTemporary, fmt::format("{} ({})", name, what), op));
      }
    }
    return ids;
  };
  auto drop = [&](std::vector<uint64_t>& ids) {  // Python drops a list's items last to first
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) Free(*it);
    ids.clear();
  };
  if (o.impl == OptimizerImpl::kForeach) {
    std::vector<uint64_t> grads;
    if (o.master_weights) grads = list("gradient in fp32", "aten::_to_copy");
    if (l2) {
      std::vector<uint64_t> decayed = list("gradient + L2 term", "aten::_foreach_add");
      drop(grads);
      grads = std::move(decayed);
    }
    drop(grads);
    std::vector<uint64_t> roots = list("exp_avg_sq.sqrt()", "aten::_foreach_sqrt");
    drop(roots);
    return;
  }
  uint64_t previous = 0, previous_grad = 0;
  for (const auto& [name, n] : tensors) {
    if (n == 0) continue;
    const uint64_t grad =
        l2 ? Alloc(state * n, Category::kTemporary, name + " (gradient + L2 term)", "aten::add")
           : 0;
    if (previous_grad != 0) Free(previous_grad);
    previous_grad = grad;
    const uint64_t root =
        Alloc(state * n, Category::kTemporary, name + " (exp_avg_sq.sqrt())", "aten::sqrt");
    const uint64_t denom =
        Alloc(state * n, Category::kTemporary, name + " (Adam's denominator)", "aten::div");
    Free(root);
    if (previous != 0) Free(previous);
    previous = denom;
  }
  if (previous != 0) Free(previous);
  if (previous_grad != 0) Free(previous_grad);
}

Status RoleStepBuilder::Build() {
  zero_ = parallel_terms::ZeroStage(s_);
  groups_ = parallel_terms::ZeroGroupsOf(l_);
  element_size_ = ElementSize(s_.precision.param);
  biased_linears_ = m_.family == Family::kGpt2 || m_.qkv_bias || m_.mlp_bias;
  data_parallel_buffers_ = r_.data_parallel_bytes > 0;
  torch_ddp_ = data_parallel_buffers_ && l_.data_parallel_impl == model::DataParallelImpl::kTorch;
  deepspeed_ =
      data_parallel_buffers_ && l_.data_parallel_impl == model::DataParallelImpl::kDeepSpeed;
  torch_pipeline_ = l_.TorchPipeline();
  // plain autograd without data parallelism under a torch pipeline or DTensor's TP: no buffer
  const bool torch_model_parallel =
      torch_pipeline_ ||
      (l_.tensor_parallel_impl == model::TensorParallelImpl::kTorch && l_.tp > 1);
  per_parameter_grads_ = torch_ddp_ || (torch_model_parallel && zero_ == 0 && l_.dp * l_.cp == 1);
  fsdp_pipeline_ = torch_pipeline_ && data_parallel_buffers_ && zero_ >= 3 && !deepspeed_;
  // autocast casts fp32 weights only (not FSDP2's, gathered in bf16 under its policy)
  if (torch_pipeline_ && s_.precision.autocast && element_size_ == 4 &&
      !(zero_ >= 3 && l_.fsdp_mixed_precision)) {
    autocast_element_size_ = ElementSize(*s_.precision.autocast);
  }
  torch_loss_ = torch_pipeline_ || l_.GatheredLogits();
  if (torch_loss_) {
    const uint64_t seq = (s_.seq ? s_.seq : m_.default_seq) / l_.cp;
    boundary_ = parallel_terms::StageBoundaryBytes(m_, s_, l_, seq);
    const uint64_t logits = parallel_terms::LogitsElements(m_, s_, l_, seq);
    head_output_ = logits * parallel_terms::ActivationElementSize(s_);
    logits_fp32_ = logits * 4;
  }
  MakeChunks();
  Construct();
  const bool interleaved = l_.schedule == PipelineSchedule::kInterleaved;
  const uint64_t p = l_.pp, v = interleaved ? l_.virtual_stages : 1;
  const uint64_t stage = r_.stages.front();
  const uint64_t total = l_.micro_batches * v;   // chunk forwards per step
  const uint64_t round = l_.InterleavedRound();  // micro-batches per chunk's turn
  // GPipe: every forward is warm-up, the backwards all come after.
  const uint64_t warmup = std::min(total, l_.schedule == PipelineSchedule::kGPipe ? total
                                          : interleaved ? (p - stage - 1) * 2 + (v - 1) * round
                                                        : p - stage - 1);
  // After the warm-up and two rounds of the pipeline the schedule repeats itself.
  const uint64_t forwards = std::min(total, warmup + 1 + 2 * p * v);
  auto forward_chunk = [&](uint64_t k) { return interleaved ? (k / round) % v : 0; };
  auto backward_chunk = [&](uint64_t k) { return interleaved ? v - 1 - (k / round) % v : 0; };
  // The micro-batch a chunk forward belongs to (interleaved: groups of a round per chunk).
  auto micro_batch = [&](uint64_t k) {
    return interleaved ? (k / (round * v)) * round + k % round : k;
  };
  uint64_t head_forwards = 0;  // the simulated forwards of the last model chunk
  for (uint64_t k = 0; k < forwards; ++k) head_forwards += forward_chunk(k) == v - 1;
  for (int32_t step = 0; step < 2; ++step) {
    if ((per_parameter_grads_ || fsdp_pipeline_) && step > 0) {
      MarkPhase(step, Phase::kBeforeForward, "zero_grad");
      ZeroGrad();
    }
    if (torch_pipeline_ && step > 0) {
      MarkPhase(step, Phase::kBeforeForward, "schedule.step");
      ReleaseOutputs();
    }
    uint64_t next_backward = 0;
    for (uint64_t k = 0; k < forwards; ++k) {
      MarkPhase(step, Phase::kForward, "forward");
      if (step == 0 && k == 0) PipelineBuffers();
      if (k == 0 && torch_pipeline_ && r_.head && l_.pipeline_return_outputs &&
          head_forwards < l_.micro_batches) {
        // The outputs of the micro-batches the cut schedule does not run, kept all the same.
        const uint64_t skipped = l_.micro_batches - head_forwards;
        step_outputs_.push_back(
            Alloc(head_output_ * skipped, Category::kActivation,
                  fmt::format("head outputs of the {} micro-batches not simulated (kept by the "
                              "schedule to the next step)",
                              skipped),
                  "forward"));
      }
      Forward(forward_chunk(k), micro_batch(k));
      if (k >= warmup) {
        MarkPhase(step, Phase::kBackward, "backward");
        Backward(backward_chunk(next_backward++));
      }
    }
    while (next_backward < forwards) {
      MarkPhase(step, Phase::kBackward, "backward");
      Backward(backward_chunk(next_backward++));
    }
    MergeOutputs();
    if (fsdp_pipeline_) ReduceAccumulated();  // perform_reduce_grad, after the last backward
    ReleaseKept();                            // resharded after the step's last backward
    EndAutocast();                            // the schedule step's autocast region ends
    if (deepspeed_ && zero_ < 3 && l_.pp > 1) {
      for (const uint64_t id : ReduceBuckets(1)) Free(id);  // reduce_gradients(pipeline_parallel)
    }
    thread_ = Thread::kMain;
    MarkPhase(step, Phase::kOptimizer, "optimizer");
    if (step == 0) OptimizerState();
    OptimizerTemporaries();
  }
  out_.info.facts.emplace_back(
      "schedule simulated",
      forwards == total
          ? fmt::format("every one of the {} micro-batch forwards of a step", total)
          : fmt::format("the first {} of {} micro-batch forwards of a step (the rest repeat the "
                        "steady state)",
                        forwards, total));
  return Status::Ok();
}

}  // namespace

Result<TensorStream> RoleStream(const ModelSpec& m, const TrainingSetup& s,
                                const model::ParallelPrediction& prediction, size_t role) {
  if (role >= prediction.roles.size()) {
    return UsageError(
        fmt::format("role {} of a layout with {} roles", role, prediction.roles.size()));
  }
  const RankRole& r = prediction.roles[role];
  TensorStream out;
  RoleStepBuilder builder(m, s, prediction, r, out);
  RETURN_IF_ERROR(builder.Build());
  out.info.parameters = r.parameters;
  out.info.trainable_parameters = r.parameters;
  out.info.parameter_bytes = r.weight_bytes;
  return out;
}

}  // namespace vramscope::predict
