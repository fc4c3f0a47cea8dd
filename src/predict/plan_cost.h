// The cost model `predict --plan` ranks its options by: what each memory-saving technique adds to
// the time of a training step, in seconds, from the step's work and documented GPU figures
// (docs/design/techniques.md, "The cost model"). It is a ranking, not a step-time prediction: the
// same rough model prices every option, so that the cheaper one comes first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vramscope::predict {

// A GPU's speeds (vendor datasheets; dense, without sparsity).
struct GpuSpeed {
  double matmul_flops = 0;  // peak 16-bit tensor FLOP/s (fp16 where there is no bf16)
  double memory_bytes = 0;  // HBM/GDDR bandwidth, B/s
  double host_bytes = 0;    // host link (PCIe) bandwidth, one direction, B/s
  double peer_bytes = 0;    // GPU-to-GPU (NVLink, Infinity Fabric; PCIe without), one direction
  std::string source;       // where the figures come from
};
// The speeds of a known GPU (device::KnownGpus' keys); an H100 SXM's for an unknown one (a
// capacity given as a size), with the source saying so.
GpuSpeed SpeedOf(std::string_view gpu_key);

// The assumptions of the model, each a documented figure.
inline constexpr double kModelFlopsUtilisation = 0.4;    // a well-tuned dense step's MFU
inline constexpr double kHostAdamParamsPerSecond = 1e9;  // CPU Adam (DeepSpeed's) on a server

// What one step does, for the model to price.
struct StepWork {
  double parameters = 0;        // every parameter
  double trainable = 0;         // the parameters the optimizer steps
  double block_parameters = 0;  // the repeated blocks' (what checkpointing recomputes)
  double tokens = 0;            // per optimizer step: batch x seq x micro-batches
  double parameter_bytes = 0;   // the weights' bytes
  int micro_batches = 1;
  int gpus = 1;
};

// The step's compute: 6 FLOPs per parameter and token (forward 2, backward 4) at the MFU.
double ComputeSeconds(const StepWork& w, const GpuSpeed& g);

// What each technique adds (seconds per optimizer step; 0 for those that cost nothing
// measurable: chunked or fused cross-entropy, 8-bit states, the optimizer in backward, the
// allocator's expandable segments).
// Checkpointing `fraction` of the blocks: their forward once more (2 FLOPs per parameter and
// token).
double RecomputeSeconds(const StepWork& w, const GpuSpeed& g, double fraction);
// `bytes` to the host and back per optimizer step, what the step's compute does not hide
// (offloaded checkpoints and activations are copied on a side stream during compute).
double OverlappedTransferSeconds(double bytes, const StepWork& w, const GpuSpeed& g);
// The optimizer on the host: each gradient over and each weight back (PCIe, not overlapped
// with the step, as CPUOffloadOptimizer steps after backward) and the CPU's Adam.
double HostOptimizerSeconds(const StepWork& w, const GpuSpeed& g);
// Splitting the micro-batch into `micro_batches` (from w.micro_batches): each extra one reads
// the weights again, once in forward and twice in backward.
double MicroBatchSeconds(const StepWork& w, const GpuSpeed& g, int micro_batches);
// ZeRO-3/FSDP over w.gpus, against DDP or ZeRO-1/2 (which move the same bytes as DDP's
// all-reduce): the weights all-gathered once more (in backward), per optimizer step.
double ShardedWeightsSeconds(const StepWork& w, const GpuSpeed& g);
// QLoRA's NF4 base weights, dequantised `uses` times per micro-batch (forward, backward's input
// gradient, a checkpoint's recomputation): each time the codes read (half a byte per weight)
// and the bf16 weight written (two bytes), 2.5 bytes per block parameter over HBM.
double DequantizeSeconds(const StepWork& w, const GpuSpeed& g, int uses);

}  // namespace vramscope::predict
