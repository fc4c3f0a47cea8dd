#include "pipeline/predict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "capture/tracer_process.h"
#include "common/units.h"
#include "device/non_pytorch_memory.h"
#include "pipeline/hub_download.h"
#include "pipeline/predict_parts.h"
#include "predict/compiled_step.h"
#include "predict/model_description.h"
#include "predict/techniques.h"
#include "predict/tracer_stream.h"

namespace vramscope::pipeline {

namespace {

using predict::DType;

// "80GiB", "80GB", "81920MiB", "85899345920": bytes.
Result<uint64_t> ParseCapacity(const std::string& text, const char* flag) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  double value = 0;
  try {
    value = std::stod(text.substr(0, i));
  } catch (...) {
    return UsageError(fmt::format("{} {}: give a GPU name or a size such as 80GiB", flag, text));
  }
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "kib") {
    scale = 1024.0;
  } else if (unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "gib" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return UsageError(
        fmt::format("{} {}: unknown unit '{}'; use GiB, GB, MiB or bytes", flag, text, unit));
  }
  const double bytes = value * scale;
  if (!(bytes >= (1 << 20)) || bytes > 1e18) {
    return UsageError(fmt::format(
        "{} {}: not a usable capacity; give a GPU's memory such as 80GiB, or a GPU name", flag,
        text));
  }
  return static_cast<uint64_t>(bytes);
}

// A GPU key or a capacity, for --gpu / --fit.
Status ApplyTarget(const std::string& text, const char* flag, predict::PredictRequest& r) {
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0]))) {
    ASSIGN_OR_RETURN(r.capacity, ParseCapacity(text, flag));
    return Status::Ok();
  }
  auto gpu = predict::FindGpu(text);
  if (!gpu.ok()) return UsageError(fmt::format("{}{}", flag, gpu.status().message().substr(5)));
  r.gpu = *gpu;
  return Status::Ok();
}

Result<predict::PredictRequest> Resolve(const PredictRequest& o) {
  predict::PredictRequest r;
  r.model = o.model;
  predict::TrainingSetup& s = r.setup;
  s.batch = o.batch;
  s.seq = o.seq;
  s.image_size = o.image_size;
  if (o.dtype == "fp32") {
    s.precision.param = DType::kF32;
  } else if (o.dtype == "bf16") {
    s.precision.param = DType::kBF16;
  } else if (o.dtype == "fp16") {
    s.precision.param = DType::kF16;
  } else if (o.dtype == "bf16-amp") {
    s.precision.autocast = DType::kBF16;
  } else if (o.dtype == "fp16-amp") {
    s.precision.autocast = DType::kF16;
  } else {
    return UsageError(fmt::format(
        "--dtype {}: use fp32, bf16, fp16 (weights in that dtype) or bf16-amp, fp16-amp (fp32 "
        "weights under torch.autocast)",
        o.dtype));
  }
  s.optimizer.master_weights = o.master_weights;
  if (o.master_weights && s.precision.param == DType::kF32) {
    return UsageError(
        "--master-weights keeps fp32 copies of bf16/fp16 weights; it needs "
        "--dtype bf16 or fp16");
  }
  using predict::OptimizerKind;
  if (o.optimizer == "sgd") {
    s.optimizer.kind = OptimizerKind::kSgd;
  } else if (o.optimizer == "momentum") {
    s.optimizer.kind = OptimizerKind::kMomentum;
  } else if (o.optimizer == "adam") {
    s.optimizer.kind = OptimizerKind::kAdam;
  } else if (o.optimizer == "adamw") {
    s.optimizer.kind = OptimizerKind::kAdamW;
  } else if (o.optimizer == "none") {
    s.optimizer.kind = OptimizerKind::kNone;
  } else if (o.optimizer != "adamw8bit" && o.optimizer != "paged-adamw8bit" &&
             o.optimizer != "adamw8bit-ao" && o.optimizer != "adamw4bit" &&
             o.optimizer != "adamw-fp8") {
    return UsageError(fmt::format(
        "--optimizer {}: use sgd, momentum, adam, adamw, none, or a quantised AdamW: adamw8bit, "
        "paged-adamw8bit (bitsandbytes), adamw8bit-ao, adamw4bit, adamw-fp8 (torchao)",
        o.optimizer));
  }
  using predict::OptimizerImpl;
  if (o.optimizer_impl == "foreach") {
    s.optimizer.impl = OptimizerImpl::kForeach;
  } else if (o.optimizer_impl == "fused") {
    s.optimizer.impl = OptimizerImpl::kFused;
  } else if (o.optimizer_impl == "for-loop") {
    s.optimizer.impl = OptimizerImpl::kForLoop;
  } else {
    return UsageError(
        fmt::format("--optimizer-impl {}: use foreach, fused or for-loop", o.optimizer_impl));
  }
  s.optimizer.weight_decay = o.weight_decay;
  if (o.zero_grad == "set-to-none") {
    s.zero_grad = true;
    s.set_to_none = true;
  } else if (o.zero_grad == "zero") {
    s.zero_grad = true;
    s.set_to_none = false;
  } else if (o.zero_grad == "none") {
    s.zero_grad = false;
  } else {
    return UsageError(fmt::format("--zero-grad {}: use set-to-none, zero or none", o.zero_grad));
  }
  s.grad_accum = o.grad_accum;
  s.steps = o.steps;
  s.max_events = o.max_events;
  s.checkpointing = o.checkpointing;
  RETURN_IF_ERROR(predict_parts::ResolveTechniques(o, s));
  s.lora_rank = o.lora;
  if (o.qlora > 0) {
    if (o.lora > 0) return UsageError("--lora and --qlora: choose one (--qlora is LoRA too)");
    if (o.world_size > 1 || o.zero != 0 || o.fsdp) {
      return UsageError(
          "--qlora is predicted on one GPU (NF4 weights are not sharded here): drop "
          "--world-size/--zero/--fsdp");
    }
    s.lora_rank = o.qlora;
    s.qlora = true;
  }
  if (o.lora_dropout > 0 && s.lora_rank == 0) {
    return UsageError("--lora-dropout is the adapters' dropout: give --lora R with it");
  }
  s.lora_dropout = o.lora_dropout;
  s.freeze = o.freeze;
  s.compile = o.compile;
  if (o.zero != 0 && o.fsdp) return UsageError("--zero and --fsdp: choose one");
  if (o.zero == 1) s.zero = predict::ZeroMode::kZero1;
  if (o.zero == 2) s.zero = predict::ZeroMode::kZero2;
  if (o.zero == 3) s.zero = predict::ZeroMode::kZero3;
  if (o.fsdp) s.zero = predict::ZeroMode::kFsdp;
  s.world_size = o.world_size;
  s.ddp_bucket_cap_bytes = static_cast<uint64_t>(o.ddp_bucket_mb * (1 << 20));
  if (s.zero != predict::ZeroMode::kNone && o.world_size < 2 && o.dp < 2) {
    return UsageError(
        "--zero/--fsdp shard over the GPUs of data parallelism: give --world-size N "
        "(2 or more), or --dp N with a parallel layout");
  }
  if (!o.gpu.empty()) RETURN_IF_ERROR(ApplyTarget(o.gpu, "--gpu", r));
  if (!o.capacity.empty()) {
    ASSIGN_OR_RETURN(r.capacity, ParseCapacity(o.capacity, "--capacity"));
  }
  if (!o.fit.empty()) RETURN_IF_ERROR(ApplyTarget(o.fit, "--fit", r));
  r.torch_version = o.torch_version;
  r.alloc_conf = o.alloc_conf;
  // What the GPU holds outside the allocator: the model's figures for this GPU (an H100's when
  // only a capacity is given), a communicator when data parallelism spans GPUs, the flags' values
  // where given.
  device::OutsideSetup outside;
  if (r.gpu) {
    outside = device::SetupFor(*r.gpu);
  } else {
    outside.gpu_name = "a GPU of sm_90 (no --gpu given)";
  }
  if (o.module_loading != "lazy" && o.module_loading != "eager") {
    return UsageError(fmt::format(
        "--cuda-module-loading {}: use lazy (CUDA_MODULE_LOADING=LAZY, PyTorch's default) or "
        "eager",
        o.module_loading));
  }
  outside.lazy_loading = o.module_loading == "lazy";
  outside.nccl_communicators = o.world_size > 1 ? 1 : 0;
  o.outside.ApplyTo(outside);
  r.outside = device::EstimateOutsideAllocator(outside);
  r.context_bytes = r.outside.Total();
  return r;
}

Result<std::unique_ptr<const Analyzed>> AnalyzeStep(const PredictRequest& r,
                                                    predict::PredictRequest request,
                                                    const predict::LoadedModel& model,
                                                    const std::optional<StepFit>& fit) {
  if (fit) {
    if (fit->dimension == predict::FitDimension::kBatch) {
      request.setup.batch = fit->largest;
    } else {
      request.setup.seq = fit->largest;
    }
  }
  // The stream once: written when asked for, then run through the allocator.
  r.control.Stage("predicting the step's tensors");
  RETURN_IF_ERROR(r.control.CheckCancelled("the prediction"));
  ASSIGN_OR_RETURN(predict::TensorStream stream, predict::PredictStream(model, request, r.control));
  if (!r.emit_stream.empty()) {
    RETURN_IF_ERROR(predict::WriteTensorStream(stream, r.emit_stream, r.force));
  }
  r.control.Stage("placing the step's tensors with the allocator model");
  RETURN_IF_ERROR(r.control.CheckCancelled("the prediction"));
  ASSIGN_OR_RETURN(predict::BuiltTrace built, predict::BuildPrediction(std::move(stream), request));
  // What each technique of the menu saves here: the step predicted again without it.
  if (!predict::ActiveTechniques(request.setup).empty()) {
    r.control.Stage("predicting the step without each technique it uses");
    ASSIGN_OR_RETURN(const std::vector<predict::TechniqueEffect> effects,
                     predict::TechniqueEffects(model, request, r.control));
    for (const predict::TechniqueEffect& e : effects) {
      built.trace.prediction->facts.emplace_back(e.name, predict::EffectText(e));
    }
  }
  if (fit) {
    built.trace.prediction->facts.emplace_back(
        "fit", fmt::format("largest {} that fits: {}",
                           fit->dimension == predict::FitDimension::kBatch ? "batch" : "seq",
                           fit->largest));
  }
  return predict_parts::AnalyzePrediction(std::move(built), r);
}

// --fit on the batch or the sequence length: the size found, or why there is none.
Result<PredictResult> FitStep(const PredictRequest& r, const predict::PredictRequest& request,
                              const predict::LoadedModel& model) {
  predict::FitDimension dim = predict::FitDimension::kBatch;
  if (r.fit_dim == "seq") {
    dim = predict::FitDimension::kSeq;
  } else if (r.fit_dim != "batch") {
    return UsageError(fmt::format("--fit-dim {}: use batch, seq or layout", r.fit_dim));
  }
  const char* what = dim == predict::FitDimension::kBatch ? "batch" : "sequence length";
  if (!request.setup.pack.empty()) {
    return UsageError(fmt::format(
        "--fit sizes the {}; --pack fixes it (one row of the samples given): drop --pack, or "
        "give fewer or shorter samples and predict again",
        what));
  }
  r.control.Stage(
      fmt::format("finding the largest {} that fits (a simulation per size tried)", what));
  ASSIGN_OR_RETURN(const predict::FitResult fit,
                   predict::Fit(model, request, dim, r.fit_max, r.control));
  r.control.Finish();
  PredictResult out;
  if (fit.largest == 0) {
    // The advice comes from the plan at size 1 on the same target: the cheapest set-up where
    // size 1 fits, which --fit then sizes.
    predict::PredictRequest at_one = request;
    (dim == predict::FitDimension::kBatch ? at_one.setup.batch : at_one.setup.seq) = 1;
    predict::PlanBudget budget;
    budget.gpus = std::max(1, request.setup.world_size);
    if (request.gpu) budget.gpu_key = request.gpu->key;
    const std::string plan_budget =
        budget.gpus > 1 ? fmt::format("{}x{}", budget.gpus, r.fit) : r.fit;
    r.control.Stage(fmt::format("searching the techniques for a set-up where {} 1 fits", what));
    Result<predict::PlanResult> plan = predict::Plan(model, at_one, budget, r.control);
    r.control.Finish();
    if (!plan.ok() && plan.status().code() == StatusCode::kInterrupted) return plan.status();
    // A set-up the plan cannot search (a request it refuses) keeps the levers' advice.
    out.kind = PredictResult::Kind::kNoFit;
    out.no_fit = NoFit{what, fit.capacity, fit.needed_allocated, fit.simulations,
                       predict::ExplainNoFit(*model.spec, request, fit,
                                             plan.ok() ? &*plan : nullptr, plan_budget)};
    return out;
  }
  out.fit = StepFit{dim, fit.largest, fit.peak_reserved, fit.capacity, fit.simulations};
  ASSIGN_OR_RETURN(out.report, AnalyzeStep(r, request, model, out.fit));
  return out;
}

// --plan: "[N x]GPU|SIZE" into the request's GPU or capacity and the GPUs of the budget.
Result<PredictResult> PlanStep(const PredictRequest& r, predict::PredictRequest request,
                               const predict::LoadedModel& model) {
  if (!r.emit_stream.empty() || r.role_report) {
    return UsageError(
        "--plan answers with options, not one step: drop -o/--html/--emit-stream, "
        "then predict the option you choose");
  }
  PlanAnswer answer;
  answer.budget = r.plan;
  std::string target = r.plan;
  if (const size_t x = target.find_first_of("xX*");
      x != std::string::npos && x > 0 &&
      std::all_of(target.begin(), target.begin() + static_cast<long>(x),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    answer.gpus = std::stoi(target.substr(0, x).substr(0, 7));
    target = target.substr(x + 1);
    if (answer.gpus < 1 || answer.gpus > (1 << 20)) {
      return UsageError(fmt::format("--plan {}: give 1 to 1048576 GPUs", r.plan));
    }
  }
  if (target.empty()) {
    return UsageError(
        fmt::format("--plan {}: give a GPU or a size, such as 24GiB or 8xh100-80gb", r.plan));
  }
  request.gpu.reset();
  request.capacity = 0;
  RETURN_IF_ERROR(ApplyTarget(target, "--plan", request));
  if (answer.gpus > 1 && request.setup.world_size > 1 && request.setup.world_size != answer.gpus) {
    return UsageError(fmt::format("--plan {} and --world-size {}: give the GPUs once", r.plan,
                                  request.setup.world_size));
  }
  predict::PlanBudget budget;
  budget.gpus = std::max(answer.gpus, request.setup.world_size);
  answer.gpus = budget.gpus;
  if (request.gpu) {
    budget.gpu_key = request.gpu->key;
    answer.gpu_name = request.gpu->name;
  }
  if (!r.host_memory.empty()) {
    ASSIGN_OR_RETURN(budget.host_memory, ParseCapacity(r.host_memory, "--host-memory"));
  }
  answer.gpu_memory = request.TotalMemory();
  r.control.Stage("searching the techniques for set-ups that fit (a simulation per set-up)");
  ASSIGN_OR_RETURN(answer.result, predict::Plan(model, request, budget, r.control));
  r.control.Finish();
  answer.model_label = model.spec->label;
  answer.setup_text = predict::SetupText(*model.spec, request.setup);
  PredictResult out;
  out.kind = PredictResult::Kind::kPlan;
  out.plan = std::move(answer);
  return out;
}

}  // namespace

Result<predict::PredictRequest> ResolvePredictRequest(const PredictRequest& request) {
  return Resolve(request);
}

Result<PredictResult> Predict(const PredictRequest& r) {
  using capture::NeedsTracer;
  if (!r.fsdp_mp.empty() && !NeedsTracer(r.model) && !predict_parts::WantsParallel(r)) {
    return UsageError(
        "--fsdp-mp is for your own model (FILE.py:FUNCTION, hf:config.json) under --fsdp, or a "
        "parallel layout with --zero 3 (per rank role); the built-in families' single-GPU --fsdp "
        "takes its precision from --dtype");
  }
  if (r.jobs > 0 && !r.all_ranks) {
    return UsageError("--jobs is how many ranks --all-ranks traces at once: give --all-ranks");
  }
  if ((r.rank >= 0 || r.all_ranks) && !NeedsTracer(r.model)) {
    return UsageError(fmt::format(
        "{} is for the ranks the tracer runs of your own model (FILE.py:FUNCTION) under "
        "--world-size; the built-in families' ranks are predicted by role (--tp, --pp, ...)",
        r.all_ranks ? "--all-ranks" : "--rank"));
  }
  if (!r.plan.empty() && !r.fit.empty()) return UsageError("--plan and --fit: choose one");
  if (!r.host_memory.empty() && r.plan.empty()) {
    return UsageError("--host-memory bounds what --plan may offload: give --plan with it");
  }
  if (!r.plan.empty() && (NeedsTracer(r.model) || predict::IsTracerStreamFile(r.model))) {
    return UsageError(
        "--plan searches the built-in families' techniques (presets, Hugging Face configs); "
        "your own model's techniques are in its code");
  }
  if (!r.plan.empty() && predict_parts::WantsParallel(r)) {
    return UsageError(
        "--plan searches one GPU or data parallelism (--plan 8xh100-80gb: ZeRO/FSDP over 8); "
        "tensor, pipeline and context parallel layouts are not searched yet: use --fit-dim "
        "layout for those");
  }
  ASSIGN_OR_RETURN(const predict::PredictRequest request, Resolve(r));
  // A Hub id not in the local cache: its config.json downloaded into it, then read like a file.
  RETURN_IF_ERROR(FetchHubConfig(r.model, r.python, r.control));
  const std::string technique = predict_parts::SimulatorOnlyTechnique(r);
  if (!technique.empty() && (NeedsTracer(r.model) || predict::IsTracerStreamFile(r.model))) {
    return UsageError(fmt::format(
        "{} is predicted for the built-in families (presets, Hugging Face configs, layer "
        "lists); your own model runs in the tracer as its code is written: put the technique in "
        "your code (docs/guide/predict.md, \"Techniques\")",
        technique));
  }
  // A parallel layout, or a mixture of experts: the per-rank estimate of the built-in families.
  if (!NeedsTracer(r.model) && !predict::IsTracerStreamFile(r.model)) {
    ASSIGN_OR_RETURN(const predict::LoadedModel loaded, predict::LoadModel(r.model));
    const bool layout = loaded.spec && (predict_parts::WantsParallel(r) ||
                                        loaded.spec->experts > 0 || loaded.spec->Mla());
    if (const std::string outside = predict_parts::TechniqueOutsideLayouts(r);
        loaded.spec && layout && !outside.empty()) {
      return UsageError(fmt::format(
          "{} is predicted on the step simulator (one GPU, DDP or ZeRO/FSDP over "
          "--world-size); the per-rank estimate of parallel layouts and mixtures of experts "
          "does not model it yet",
          outside));
    }
    if (loaded.spec && layout && (r.lora > 0 || !r.freeze.empty())) {
      // The per-rank terms count every parameter as trained (gradients, optimizer state):
      // a frozen weight would be counted wrong, not left out.
      return UsageError(fmt::format(
          "{} freezes weights, which the per-rank estimate of parallel layouts and mixtures of "
          "experts does not model yet (it counts every weight's gradient and optimizer state); "
          "frozen weights are predicted on the step simulator (one GPU, DDP or ZeRO/FSDP over "
          "--world-size) of the dense families",
          r.lora > 0 ? "--lora" : "--freeze"));
    }
    if (loaded.spec && layout && (r.compile || r.cuda_graphs)) {
      return UsageError(fmt::format(
          "{} runs your model through torch.compile in the tracer; give --model FILE.py:FUNCTION "
          "or hf:config.json (the built-in families, {} included, are predicted eager)",
          r.cuda_graphs ? "--cuda-graphs" : "--compile", loaded.spec->label));
    }
    if (loaded.spec && layout && !r.plan.empty()) {
      // The plan searches the step simulator's set-ups (one GPU, ZeRO/FSDP over N); the layouts'
      // per-rank estimate is not searched yet.
      return UsageError(fmt::format(
          "--plan searches set-ups of one GPU or ZeRO/FSDP over N GPUs; {} is predicted per rank "
          "role ({}), which --plan does not search yet: use --fit GPU --fit-dim layout for the "
          "smallest TP x PP whose every rank fits",
          loaded.spec->label,
          loaded.spec->experts > 0 ? "a mixture of experts"
          : loaded.spec->Mla()     ? "latent attention"
                                   : "a parallel layout"));
    }
    if (loaded.spec && layout) return predict_parts::PredictLayout(r, request, *loaded.spec);
  } else if (predict_parts::WantsParallel(r)) {
    return UsageError(
        "--tp/--pp/--cp/--ep/--sp predict the built-in families (presets and Hugging Face "
        "configs); your own model sets its parallelism up itself (init_device_mesh, "
        "fully_shard, parallelize_module): give --world-size N (and --rank) and the tracer runs "
        "one rank of it on a fake process group");
  }
  if (!r.role.empty()) {
    return UsageError(
        "--role picks a rank role of a parallel layout (--tp/--pp/--cp/--ep/--dp of a built-in "
        "family); this prediction has one rank");
  }
  // Your own model: the tracer runs its step on fake tensors, then its stream is the model.
  std::optional<TempFile> traced;
  std::string model_source = r.model;
  if (NeedsTracer(r.model)) {
    if (!r.fit.empty()) {
      return UsageError(
          "--fit resizes the built-in families; for your own model, trace it at a "
          "few sizes and predict each");
    }
    if (r.all_ranks) return predict_parts::PredictAllRanks(r, request);
    traced.emplace("vramscope-stream-", ".jsonl");
    if (traced->path().empty()) return InternalError("cannot make a temporary file for the tracer");
    RETURN_IF_ERROR(predict_parts::TraceModel(r, traced->path()));
    model_source = traced->path();
  } else if (r.cuda_graphs || (r.compile && predict::IsTracerStreamFile(r.model))) {
    return UsageError(
        "--cuda-graphs runs your model through torch.compile in the tracer; give --model "
        "FILE.py:FUNCTION or hf:config.json (a tracer .jsonl says itself whether it was "
        "compiled)");
  }
  ASSIGN_OR_RETURN(const predict::LoadedModel model, predict::LoadModel(model_source));
  if (r.compile && !traced) {
    // A built-in family: the LLaMA family from the compiled step's templates
    // (predict/compiled_step.h).
    const std::string why = model.spec
                                ? predict::CompiledStepUnsupported(*model.spec, request.setup)
                                : std::string(
                                      "--compile is predicted for the LLaMA family from templates; "
                                      "trace your model with --model FILE.py:FUNCTION --compile");
    if (!why.empty()) return UsageError(why);
    if (!r.plan.empty() || !r.fit.empty()) {
      return UsageError(fmt::format(
          "{} searches eager set-ups; --compile is predicted for the set-up given: drop one",
          r.plan.empty() ? "--fit" : "--plan"));
    }
  }
  if (!r.fit.empty()) return FitStep(r, request, model);
  if (!r.plan.empty()) return PlanStep(r, request, model);
  PredictResult out;
  ASSIGN_OR_RETURN(out.report, AnalyzeStep(r, request, model, std::nullopt));
  return out;
}

namespace predict_parts {

Result<std::unique_ptr<const Analyzed>> AnalyzePrediction(predict::BuiltTrace built,
                                                          const PredictRequest& r,
                                                          std::vector<analysis::RankRow> ranks,
                                                          std::vector<std::string> notes) {
  ASSIGN_OR_RETURN(const std::string project_root, ResolveProjectRoot(r.project_root));
  FromTraceRequest from;
  from.project_root = project_root;
  from.control = r.control;
  from.ranks = std::move(ranks);
  from.notes = std::move(notes);
  ASSIGN_OR_RETURN(Loaded loaded, FromTrace(std::move(built.trace), std::move(from)));
  return Analyze(std::move(loaded), {project_root, std::nullopt, r.control});
}

}  // namespace predict_parts

}  // namespace vramscope::pipeline
