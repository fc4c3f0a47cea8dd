// `vramscope predict --model M --batch N ...`: the memory of a training step before you have
// the GPU. Builds the predicted trace (src/predict) and reports it like a measured one.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/outside_allocator_flags.h"
#include "common/status.h"
#include "predict/model_spec.h"
#include "predict/predict.h"

namespace vramscope::cli {

struct PredictOptions {
  std::string model;
  uint64_t batch = 1;
  uint64_t seq = 0;
  uint64_t image_size = 0;
  std::string dtype = "fp32";
  bool master_weights = false;
  std::string optimizer = "adamw";
  std::string optimizer_impl = "foreach";
  double weight_decay = 0;
  std::string zero_grad = "set-to-none";
  int grad_accum = 1;
  int steps = 3;
  uint64_t max_events = predict::kDefaultMaxPredictedEvents;  // --max-events
  bool checkpointing = false;
  int lora = 0;
  double lora_dropout = 0;  // --lora-dropout: peft's lora_dropout (its default, 0)
  std::vector<std::string> freeze;
  int zero = 0;
  bool fsdp = false;
  int world_size = 1;
  std::string fsdp_mp;  // traced models with --fsdp: FSDP2's MixedPrecisionPolicy dtype
  int rank = -1;        // traced models under --world-size: the rank traced; -1: not given (rank 0)
  bool all_ranks = false;     // traced models under --world-size: every rank
  int jobs = 0;               // --all-ranks: tracer processes at once; 0: the CPUs, at most 8
  double ddp_bucket_mb = 25;  // DDP(bucket_cap_mb): MiB
  // A parallel layout (predict/parallel_layout.h): memory per rank role.
  uint64_t tp = 1, pp = 1, cp = 1, dp = 0, ep = 1, etp = 0;  // dp 0: from --world-size
  uint64_t dp_shard = 0;  // HSDP: ZeRO/FSDP over groups of this many DP ranks; 0: all of DP
  bool sequence_parallel = false;
  bool selective_recompute = false;
  double capacity_factor = 0;  // MoE: 0 dropless
  uint64_t micro_batches = 1;
  std::string schedule = "1f1b";
  uint64_t virtual_stages = 1;
  // The role -o/--html/--emit-stream report: its name ("last stage") or a stage's number;
  // empty: the role that bounds the job.
  std::string role;
  // ZeRO-3 per role: FSDP2's reshard_after_forward; "auto": false under --pp, as torchtitan.
  std::string reshard_after_forward = "auto";
  // Per role: how data parallelism reduces gradients (megatron, torch, deepspeed), and
  // DeepSpeed's reduce_bucket_size (elements; 0: its default, 5e8) and overlap_comm.
  std::string dp_impl = "megatron";
  std::string pp_impl = "megatron";
  std::string tp_impl = "megatron";
  bool loss_parallel = false;  // --loss-parallel: --tp-impl torch with Shard(-1) logits
  bool pp_no_outputs = false;  // --pp-no-outputs: schedule.step(return_outputs=False)
  uint64_t reduce_bucket_size = 0;
  bool overlap_comm = false;
  std::string gpu;
  std::string capacity;
  std::string fit;
  std::string fit_dim = "batch";
  uint64_t fit_max = 1 << 20;
  std::string torch_version = "2.11";
  std::string alloc_conf;
  // Memory outside the allocator (src/device/non_pytorch_memory.h): overrides of the model's
  // figures, in MiB, and how CUDA loads modules.
  OutsideAllocatorFlags outside;
  std::string module_loading = "lazy";
  std::string python = "python3";  // runs the tracer for --model my.py:build / hf:config.json
  std::string emit_stream;         // write the predicted tensor stream here (tracer format)
  bool compile = false;            // the tracer's --compile: the step as torch.compile runs it
  bool cuda_graphs = false;        // the tracer's --cuda-graphs (mode="reduce-overhead")
  // Output, as `report`.
  std::string output;
  std::string html;
  bool force = false;
  bool json = false;
  bool quiet = false;
  int top = 10;
};

void RegisterPredictCommand(CLI::App& app, PredictOptions& options);
// The predictor's request for the flags (checked as `predict` checks them); `explain --model`
// uses it to fit a batch into the memory an out-of-memory message leaves.
Result<predict::PredictRequest> BuildPredictRequest(const PredictOptions& options);
int RunPredictCommand(const PredictOptions& options);

}  // namespace vramscope::cli
