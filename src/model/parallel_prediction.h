// The memory per rank role of a parallel layout, as predict/parallel_layout.h computes it and
// the reporters render it (report/parallel_roles_output.h): one struct both stages share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vramscope::model {

// kGPipe: every micro-batch's forward, then every backward (torch.distributed.pipelining's
// ScheduleGPipe; under --pp-impl torch only).
enum class PipelineSchedule : uint8_t { k1F1B, kInterleaved, kGPipe };

enum class DataParallelImpl : uint8_t { kMegatron, kTorch, kDeepSpeed };

enum class PipelineImpl : uint8_t { kMegatron, kTorch };
enum class TensorParallelImpl : uint8_t { kMegatron, kTorch };

struct ParallelLayout {
  uint64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, etp = 0;  // etp 0: as tp
  // HSDP (hybrid sharding): ZeRO/FSDP shards over groups of dp_shard data-parallel ranks (times
  // CP), replicated dp / dp_shard times, as torchtitan's dp_shard x dp_replicate. 0: over all of
  // DP.
  uint64_t dp_shard = 0;
  bool sequence_parallel = false;
  uint64_t micro_batches = 1;  // per optimizer step and data-parallel rank
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  uint64_t virtual_stages = 1;  // interleaved: model chunks per stage
  bool selective_recompute = false;
  // MoE: the experts' capacity, a multiple of the tokens routed to each on average (Megatron's
  // --moe-expert-capacity-factor); 0: dropless, sized as the average (1).
  double capacity_factor = 0;
  // ZeRO-3 as FSDP2: whether a unit's gathered weights are freed after its forward (and gathered
  // again for its backward), or kept from its first forward of the step to the step's last
  // backward. Unset: as torchtitan sets it, kept under pipeline parallelism (to gather once per
  // step rather than per micro-batch), freed otherwise.
  std::optional<bool> reshard_after_forward;
  // How data parallelism reduces the gradients:
  // - kMegatron: in the gradients' own contiguous buffer (Megatron-Core's DDP and distributed
  //   optimizer; ZeRO-2/3 as FSDP2 does them);
  // - kTorch: PyTorch's DistributedDataParallel (ZeRO 0 only): the parameters' own .grad tensors,
  //   made in backward and freed by zero_grad(set_to_none=True), and beside them the flat
  //   buckets the reducer copies them into, alive from construction (gradient_as_bucket_view
  //   false, the default);
  // - kDeepSpeed: DeepSpeed's ZeRO-1/2 optimizer (stage_1_and_2.py): with contiguous_gradients
  //   (its default) each backward allocates a flat buffer of reduce_bucket_size elements in the
  //   weights' dtype, two with overlap_comm, freed when that backward's reduction ends; under
  //   pipeline parallelism one, at the step's reduction.
  DataParallelImpl data_parallel_impl = DataParallelImpl::kMegatron;
  // ZeRO-3 as FSDP2 with its MixedPrecisionPolicy as torchtitan sets it (param_dtype 16-bit,
  // reduce_dtype fp32): units all-gathered in 2 B per element whatever the sharded weights' dtype,
  // their reduce-scatter input in 4 B.
  bool fsdp_mixed_precision = false;
  uint64_t reduce_bucket_elements = 500'000'000;  // DeepSpeed's reduce_bucket_size default
  // DeepSpeed's ZeRO-3: its stage3_prefetch_bucket_size default, the elements of the next
  // module's parameters it gathers ahead.
  uint64_t prefetch_bucket_elements = 50'000'000;
  bool overlap_comm = false;  // DeepSpeed's default for ZeRO-1/2
  // How the pipeline's stages exchange and keep tensors:
  // - kMegatron: Megatron-Core's schedules: a received activation is the stage's input and dies
  //   with the micro-batch's backward, a sent output is freed at once (deallocate_output_tensor),
  //   the last stage's logits die with their backward;
  // - kTorch: torch.distributed.pipelining's (torchtitan's): each stage keeps one receive buffer
  //   per micro-batch and direction for the whole run (the input's on every stage but the first,
  //   the output gradient's on every stage but the last), keeps each micro-batch's output until
  //   its backward, and the last stage keeps every micro-batch's output (the logits) to the
  //   step's end to return them (schedule.step's return_outputs, true by default); its loss is
  //   torch's cross-entropy (fp32 log-softmax saved, two fp32 gradients at once in backward).
  PipelineImpl pipeline_impl = PipelineImpl::kMegatron;
  // kTorch: schedule.step(return_outputs=...). False: the last stage keeps a micro-batch's output
  // only to its backward (the stage's forward cache) and returns no merged outputs.
  bool pipeline_return_outputs = true;
  // How tensor parallelism holds its activations:
  // - kMegatron: Megatron-Core's (Korthikanti et al.): under sequence parallelism the column-
  //   parallel projections save their input sequence-sharded (all-gathered again in backward);
  //   the loss is vocabulary-parallel (the logits stay sharded);
  // - kTorch: DTensor's plans as torchtitan applies them (parallelize_module): under sequence
  //   parallelism the all-gathered (full-sequence) input is what the projections save; the head's
  //   logits are gathered to every rank (ColwiseParallel(output_layouts=Replicate())) and the
  //   loss is torch's cross-entropy on them, unless `loss_parallel` (torchtitan's default:
  //   Shard(-1) logits under loss_parallel()).
  TensorParallelImpl tensor_parallel_impl = TensorParallelImpl::kMegatron;
  bool loss_parallel = false;

  uint64_t World() const { return tp * pp * dp * cp; }
  uint64_t Etp() const { return etp == 0 ? tp : etp; }
  uint64_t DpShard() const { return dp_shard == 0 ? dp : dp_shard; }
  bool ReshardAfterForward() const { return reshard_after_forward.value_or(pp < 2); }
  // torch.distributed.pipelining's buffers apply: its schedule on 2 or more stages.
  bool TorchPipeline() const { return pipeline_impl == PipelineImpl::kTorch && pp > 1; }
  // The head's logits gathered whole to each TP rank (DTensor's plan without loss_parallel).
  bool GatheredLogits() const {
    return tensor_parallel_impl == TensorParallelImpl::kTorch && !loss_parallel && tp > 1;
  }
  // The interleaved schedule's round: the micro-batches each model chunk runs before the next
  // one's turn. Megatron's: PP. ScheduleInterleaved1F1B's: the micro-batches split into
  // max(1, m / PP) rounds (all of them in one when m < PP).
  uint64_t InterleavedRound() const {
    if (!TorchPipeline()) return pp;
    const uint64_t rounds = std::max<uint64_t>(1, micro_batches / pp);
    return micro_batches / rounds;
  }
};

// One distinct role: the stages that share its figures, and those figures per rank.
struct RankRole {
  std::string name;              // "first stage", "stage 3", "last stage", "every rank"
  std::vector<uint64_t> stages;  // pipeline stages with this role
  uint64_t ranks = 0;            // ranks holding it: stages x TP x CP x DP
  uint64_t layers = 0;           // decoder layers on one rank of it
  bool embedding = false, head = false;
  uint64_t parameters = 0;         // elements this rank holds before ZeRO-3
  uint64_t expert_parameters = 0;  // of which experts'
  uint64_t weight_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  uint64_t activation_bytes_per_micro_batch = 0;
  uint64_t in_flight = 0;  // micro-batches (interleaved: model chunks) whose activations it holds
  uint64_t activation_bytes = 0;
  uint64_t logits_bytes = 0;  // the last stage's fp32 logits and their gradient
  // torch.distributed.pipelining's receive buffers, kept for the whole run (0 under Megatron's).
  uint64_t pipeline_buffer_bytes = 0;
  // The largest communication buffer alive at once (they follow one another within a layer):
  // sequence parallelism's all-gathered input, context parallelism's K/V chunks in flight, or
  // the MoE all-to-all's dispatched tokens; `communication` names it ("" for none).
  uint64_t communication_bytes = 0;
  std::string communication;
  // Data parallelism's buffers beside the model states (ZeRO-2's reduce-scatter input, ZeRO-3's
  // all-gathered units); `data_parallel` names them ("" for none).
  uint64_t data_parallel_bytes = 0;
  std::string data_parallel;
  uint64_t total_bytes = 0;  // the sum of the above: every term at once
  // Pinned host memory one rank holds, outside the GPU's total: with the optimizer on the host
  // (--offload-optimizer), its shard's fp32 weights, gradients and states.
  uint64_t host_bytes = 0;
  // The role's step placed by the allocator model (predict/role_stream.h), when it was run:
  // the peaks of what is allocated and of what the allocator reserves for it.
  bool placed = false;
  uint64_t peak_allocated = 0, peak_reserved = 0;
};

struct ParallelPrediction {
  ParallelLayout layout;
  uint64_t world = 0;
  uint64_t parameters = 0;  // the whole model
  std::vector<RankRole> roles;
  std::vector<std::string> assumptions;
  size_t bounding = 0;  // the role with the most bytes per rank
};

// What the roles are compared with: the memory the allocator may have on each rank (0: none
// given), and the GPU named.
struct ParallelCapacity {
  uint64_t allocator_bytes = 0;
  std::string gpu;
};

}  // namespace vramscope::model
