// Predict: the memory of a training step before there is a GPU, as the same report a measured
// step gives. The request is the user's set-up in the user's words (the flags of `vramscope
// predict`, the keywords of the Python API): a model (a preset, a Hugging Face config.json, a
// layer list, a tracer stream, or the user's own model as FILE.py:FUNCTION or hf:config.json that
// the tracer runs on fake tensors), the batch, dtype, optimizer and training tricks, a GPU, and
// optionally a parallel layout, a fit to find, or the ranks of the user's parallel job. Predict
// checks every setting, resolves the vocabulary (predict::PredictRequest, predict::ParallelLayout),
// runs the predictor, the tracer and the allocator model as the request asks, and returns one
// immutable result; reporters render it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "model/parallel_prediction.h"
#include "pipeline/analyze.h"
#include "pipeline/outside_overrides.h"
#include "predict/fit_advice.h"
#include "predict/model_description.h"
#include "predict/plan.h"
#include "predict/predict.h"

namespace vramscope::pipeline {

// all_ranks traces each rank in a Python process of its own (seconds to minutes each, 812 MiB
// peak RSS for examples/distributed/pp_gpt.py, bench/predict_all_ranks.py): at most this many at
// once, and past kMaxTracedRanks ranks the ones that differ are better traced by name (rank).
inline constexpr size_t kTracerJobs = 8;
using predict::kDefaultMaxPredictedEvents;
inline constexpr int kMaxTracedRanks = 64;

struct PredictRequest {
  // --- the model and its step (as the built-in families and the tracer take them) ---
  std::string model;
  uint64_t batch = 1;
  uint64_t seq = 0;            // 0: the model's context length
  uint64_t image_size = 0;     // 0: the model's
  std::string dtype = "fp32";  // fp32, bf16, fp16 (weights in it), bf16-amp, fp16-amp
  bool master_weights = false;
  std::string optimizer = "adamw";         // sgd, momentum, adam, adamw, none
  std::string optimizer_impl = "foreach";  // foreach, fused, for-loop
  double weight_decay = 0;
  std::string zero_grad = "set-to-none";  // set-to-none, zero, none
  int grad_accum = 1;
  int steps = 3;
  uint64_t max_events = predict::kDefaultMaxPredictedEvents;
  bool checkpointing = false;
  // --- the menu of memory-saving techniques (docs/guide/predict.md, "Techniques") ---
  int checkpointing_every = 0;  // checkpoint every k-th block (implies checkpointing); 0: all
  bool checkpointing_offload = false;  // checkpointed blocks' inputs on the host
  bool checkpointing_ops = false;      // op-level selective checkpointing (torchtitan's "op")
  int loss_chunks = 0;                 // torchtune's chunked cross-entropy; 0: none
  bool fused_linear_ce = false;        // Liger's fused linear cross-entropy
  bool optimizer_in_backward = false;
  bool offload_activations = false;  // torchtune's OffloadActivations
  bool offload_optimizer = false;    // optimizer states on the host
  bool offload_gradients = false;    // and gradients, as soon as they are accumulated
  bool fp8 = false;                  // torchao's float8 training of the blocks' linears
  std::vector<uint64_t> pack;        // --pack: sample lengths packed into one row
  int lora = 0;                      // LoRA rank; 0: none
  int qlora = 0;                     // QLoRA rank (LoRA over NF4 base weights); 0: none
  double lora_dropout = 0;           // peft's lora_dropout
  std::vector<std::string> freeze;   // shell patterns of parameter names
  // --- data parallelism, ZeRO and the ranks of the user's own job ---
  int zero = 0;  // ZeRO stage 1, 2 or 3
  bool fsdp = false;
  int world_size = 1;
  std::string fsdp_mp;     // FSDP2's MixedPrecisionPolicy: bf16 or fp16; "": none
  int rank = -1;           // the traced rank under world_size; -1: not given (rank 0)
  bool all_ranks = false;  // trace every rank
  int jobs = 0;            // all_ranks: tracer processes at once; 0: the CPUs, at most 8
  double ddp_bucket_mb = 25;
  // --- a parallel layout of a built-in family: the memory of each rank role ---
  uint64_t tp = 1, pp = 1, cp = 1, dp = 0, ep = 1, etp = 0;  // dp 0: from world_size
  uint64_t dp_shard = 0;  // HSDP: ZeRO/FSDP over groups of this many DP ranks; 0: all of DP
  bool sequence_parallel = false;
  bool selective_recompute = false;
  double capacity_factor = 0;  // MoE: 0 dropless
  uint64_t micro_batches = 1;
  std::string schedule = "1f1b";  // 1f1b, interleaved, gpipe
  uint64_t virtual_stages = 1;
  // The role whose step becomes the report: its name ("last stage") or a stage's number; empty:
  // the role that bounds the job.
  std::string role;
  std::string reshard_after_forward = "auto";  // auto, true, false
  std::string dp_impl = "megatron";            // megatron, torch, deepspeed
  std::string pp_impl = "megatron";            // megatron, torch
  std::string tp_impl = "megatron";            // megatron, torch
  bool loss_parallel = false;
  bool pp_no_outputs = false;
  uint64_t reduce_bucket_size = 0;  // DeepSpeed's, in elements; 0: its default
  bool overlap_comm = false;
  // --- the GPU, a fit, the allocator ---
  std::string gpu;       // a known GPU or a size ("80GiB")
  std::string capacity;  // a size; overrides the GPU's
  std::string fit;       // find the largest size (or layout) that fits this GPU or size
  // The cheapest set-ups that fit this budget: a GPU or a size, optionally "N x" GPUs of it
  // ("8xh100-80gb", "24GiB"); host_memory bounds what offloading may use ("" : unbounded).
  std::string plan;
  std::string host_memory;
  std::string fit_dim = "batch";  // batch, seq, layout
  uint64_t fit_max = 1 << 20;
  std::string torch_version = "2.11";
  std::string alloc_conf;
  OutsideOverrides outside;
  std::string module_loading = "lazy";  // lazy, eager
  // --- the tracer ---
  std::string python = "python3";
  bool compile = false;
  bool cuda_graphs = false;
  // --- what to make beside the figures ---
  // Also write the predicted tensor stream here (the tracer's JSON Lines); `force` overwrites.
  std::string emit_stream;
  bool force = false;
  // A layout's chosen role as a full report (for a database or a viewer page): its step placed
  // by the allocator model and analysed. Without it, a layout's result holds the roles' figures.
  bool role_report = false;
  std::string project_root;  // "" = the current directory
  // Stages on control.progress; what starts (a tracer process, ...) as its notes; control.cancel
  // checked between simulations, stages and ranks.
  Control control;
};

// --fit on the batch or the sequence length.
struct StepFit {
  predict::FitDimension dimension = predict::FitDimension::kBatch;
  uint64_t largest = 0;
  uint64_t peak_reserved = 0;
  uint64_t capacity = 0;
  int simulations = 0;
};

// --fit found no size that fits: why, and what is left to try. The request failed (its message
// is the advice's); the result holds it for the JSON.
struct NoFit {
  std::string dimension;  // "batch", "sequence length"
  uint64_t capacity = 0;
  uint64_t needed_allocated = 0;
  int simulations = 0;
  predict::NoFitAdvice advice;
};

// --plan: the options that fit the budget, ranked by their cost to the step's time.
struct PlanAnswer {
  predict::PlanResult result;
  std::string budget;  // as given
  int gpus = 1;
  uint64_t gpu_memory = 0;  // each GPU's
  std::string gpu_name;     // "" for a size
  std::string model_label;
  std::string setup_text;
};

// --fit-dim layout: the smallest TP x PP layout that fits.
struct LayoutFitFound {
  uint64_t tried = 0;           // layouts predicted
  std::string bounding_role;    // the role the per-rank estimate found bounding
  uint64_t bounding_bytes = 0;  // what it needs, by that estimate
};

struct LayoutResult {
  model::ParallelPrediction prediction;  // every role placed; `bounding` by the one rule
  size_t chosen = 0;                     // the role the report is of (request.role)
  std::string model_label;               // "LLaMA-3-8B (built-in family: llama)"
  std::string setup_text;
  model::ParallelCapacity capacity;
  std::optional<LayoutFitFound> fit;
};

struct PredictResult {
  enum class Kind {
    kStep,      // one step (a built-in family, a layer list, a traced model): `report`
    kLayout,    // a parallel layout's roles: `layout`, and `report` with role_report
    kAllRanks,  // every rank of the user's job traced: `report` (the bounding rank's, with ranks)
    kNoFit,     // --fit found nothing: `no_fit`
    kPlan,      // --plan: `plan`
  };
  Kind kind = Kind::kStep;
  std::unique_ptr<const Analyzed> report;
  std::optional<StepFit> fit;
  std::optional<NoFit> no_fit;
  std::optional<LayoutResult> layout;
  std::optional<PlanAnswer> plan;
};

Result<PredictResult> Predict(const PredictRequest& request);

// The built-in presets' names (predict::PresetNames), for the help of whoever takes `model`.
using predict::PresetNames;

// The predictor's request for a set-up (every setting checked): `explain --model` fits a batch
// into the memory an out-of-memory message leaves with it.
Result<predict::PredictRequest> ResolvePredictRequest(const PredictRequest& request);

}  // namespace vramscope::pipeline
