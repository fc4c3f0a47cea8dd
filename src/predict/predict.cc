#include "predict/predict.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "predict/model_description.h"
#include "predict/role_stream.h"
#include "predict/tracer_stream.h"

namespace vramscope::predict {

namespace {

const char* OptimizerName(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kNone:
      return "no optimizer";
    case OptimizerKind::kSgd:
      return "SGD";
    case OptimizerKind::kMomentum:
      return "SGD with momentum";
    case OptimizerKind::kAdam:
      return "Adam";
    case OptimizerKind::kAdamW:
      return "AdamW";
  }
  return "?";
}

const char* ImplName(OptimizerImpl i) {
  switch (i) {
    case OptimizerImpl::kForeach:
      return "foreach";
    case OptimizerImpl::kFused:
      return "fused";
    case OptimizerImpl::kForLoop:
      return "for-loop";
  }
  return "?";
}

}  // namespace

std::string SetupText(const ModelSpec& m, const TrainingSetup& s) {
  std::string text = fmt::format("batch {}", s.batch);
  const bool lm =
      m.family == Family::kGpt2 || m.family == Family::kLlama || m.family == Family::kBert;
  if (lm) text += fmt::format(", seq {}", s.seq ? s.seq : m.default_seq);
  if (s.pack.size() > 8) {
    const auto [shortest, longest] = std::minmax_element(s.pack.begin(), s.pack.end());
    text +=
        fmt::format(" (packed: {} samples of {} to {} tokens)", s.pack.size(), *shortest, *longest);
  } else if (!s.pack.empty()) {
    text += fmt::format(" (packed: {} tokens)", fmt::join(s.pack, "+"));
  }
  if (m.family == Family::kVit || m.family == Family::kResnet) {
    text += fmt::format(", image {}", s.image_size ? s.image_size : m.image_size);
  }
  text += fmt::format(", {} weights", DTypeName(s.precision.param));
  if (s.precision.autocast) text += fmt::format(", {} autocast", DTypeName(*s.precision.autocast));
  static const char* kStates[] = {"",
                                  "8-bit states (bitsandbytes)",
                                  "paged 8-bit states (bitsandbytes)",
                                  "8-bit states (torchao)",
                                  "4-bit states (torchao)",
                                  "FP8 states (torchao)"};
  if (s.optimizer.states != StateFormat::kNative) {
    text += fmt::format(", {} {}", OptimizerName(s.optimizer.kind),
                        kStates[static_cast<int>(s.optimizer.states)]);
  } else {
    text += fmt::format(", {} ({})", OptimizerName(s.optimizer.kind), ImplName(s.optimizer.impl));
  }
  if (s.optimizer.offload) {
    text += s.optimizer.offload_gradients ? " on the host, gradients offloaded" : " on the host";
  }
  if (s.optimizer_in_backward) text += ", stepped in backward";
  if (s.optimizer.master_weights) text += ", fp32 master weights";
  if (s.checkpointing) {
    text += s.checkpoint_every > 1
                ? fmt::format(", activation checkpointing every {} blocks", s.checkpoint_every)
                : std::string(", activation checkpointing");
    if (s.checkpoint_ops) text += " (op-level selective)";
    if (s.offload_checkpoints) text += " (inputs on the host)";
  }
  if (s.offload_activations) text += ", activations offloaded";
  if (s.loss_chunks > 1) text += fmt::format(", cross-entropy in {} chunks", s.loss_chunks);
  if (s.fused_linear_ce) text += ", fused linear cross-entropy";
  if (s.float8) text += ", float8 linears (torchao, tensorwise)";
  if (s.lora_rank > 0) {
    text += s.qlora ? fmt::format(", QLoRA r={} (NF4 base weights)", s.lora_rank)
                    : fmt::format(", LoRA r={}", s.lora_rank);
  }
  if (s.lora_rank > 0 && s.lora_dropout > 0) text += fmt::format(" dropout {}", s.lora_dropout);
  if (!s.freeze.empty()) text += fmt::format(", frozen: {}", fmt::join(s.freeze, " "));
  if (s.grad_accum > 1) text += fmt::format(", {} micro-batches", s.grad_accum);
  if (!s.set_to_none) text += ", zero_grad(set_to_none=False)";
  if (s.zero != ZeroMode::kNone) {
    static const char* kNames[] = {"", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP"};
    text +=
        fmt::format(", {} over {} GPUs (per GPU)", kNames[static_cast<int>(s.zero)], s.world_size);
  } else if (s.world_size >= 2) {
    text += fmt::format(", DDP over {} GPUs (per GPU; buckets of {})", s.world_size,
                        FormatBytes(static_cast<int64_t>(s.ddp_bucket_cap_bytes)));
  }
  text += fmt::format(", {} step{}", s.steps, s.steps == 1 ? "" : "s");
  return text;
}

Result<LoadedModel> LoadModel(const std::string& model) {
  LoadedModel out;
  if (IsTracerStreamFile(model)) {
    out.traced = model;  // read (and checked) by PredictStream
    return out;
  }
  ASSIGN_OR_RETURN(ModelSpec spec, LoadModelSpec(model));
  out.spec = std::move(spec);
  return out;
}

Result<allocator::AllocatorSettings> SettingsFor(const PredictRequest& request) {
  ASSIGN_OR_RETURN(allocator::AllocatorSettings settings,
                   allocator::ParseAllocConf(request.alloc_conf));
  const uint64_t total = request.TotalMemory();
  if (total > 0) {
    if (request.AllocatorCapacity() == 0) {
      return UsageError(fmt::format(
          "the GPU's {} (--gpu/--capacity/--fit) leave nothing for the allocator after the "
          "CUDA context's {} (--cuda-context): give a larger capacity or a smaller --cuda-context",
          FormatBytes(static_cast<int64_t>(total)),
          FormatBytes(static_cast<int64_t>(request.context_bytes))));
    }
    settings.capacity = request.AllocatorCapacity();
    settings.total_memory = total;
  }
  return settings;
}

namespace {

// What every predicted stream carries beside its tensors: the torch version, the GPU and its
// capacity, the workspaces and what is outside the allocator, as facts and assumptions; and the
// workspaces themselves, from the stream's matmul markers.
Status DescribeAndAddWorkspaces(TensorStream& stream, const PredictRequest& request,
                                const ModelSpec* spec) {
  const int sm = request.gpu ? request.gpu->sm : 90;
  const device::Vendor vendor = request.gpu ? request.gpu->vendor : device::Vendor::kNvidia;
  ASSIGN_OR_RETURN(DeviceRules rules, RulesFor(sm, request.torch_version, vendor));
  model::PredictionInfo& info = stream.info;
  info.torch_version = rules.torch_version;
  info.gpu =
      request.gpu
          ? fmt::format("{} ({})", request.gpu->name,
                        FormatBytes(static_cast<int64_t>(request.gpu->total_memory)))
          : (request.capacity
                 ? fmt::format("a GPU with {}", FormatBytes(static_cast<int64_t>(request.capacity)))
                 : std::string("any (no capacity given)"));
  info.capacity = request.AllocatorCapacity();
  auto bytes = [](uint64_t b) {
    return fmt::format("{} ({} B)", FormatBytes(static_cast<int64_t>(b)),
                       FormatCount(static_cast<int64_t>(b)));
  };
  const bool amd = vendor == device::Vendor::kAmd;
  info.facts.emplace_back(amd ? "hipBLAS workspace" : "cuBLAS workspace",
                          bytes(rules.cublas_workspace));
  info.facts.emplace_back(amd ? "hipBLASLt workspace" : "cuBLASLt workspace",
                          bytes(rules.cublaslt_workspace));
  if (request.outside.figures.empty()) {
    info.facts.emplace_back("CUDA context", bytes(request.context_bytes));
    info.assumptions.push_back(fmt::format(
        "the CUDA context and library handles take {} outside the allocator (--cuda-context)",
        FormatBytes(static_cast<int64_t>(request.context_bytes))));
  } else {
    for (const device::OutsideFigure& f : request.outside.figures) {
      info.facts.emplace_back(
          f.item + " (outside the allocator)",
          fmt::format("{}, {}", bytes(f.bytes), device::EvidenceName(f.evidence)));
      info.assumptions.push_back(fmt::format("{}: {} outside the allocator ({}: {}; {})", f.item,
                                             FormatBytes(static_cast<int64_t>(f.bytes)),
                                             device::EvidenceName(f.evidence), f.source, f.flag));
    }
  }
  if (!request.alloc_conf.empty()) info.facts.emplace_back("alloc_conf", request.alloc_conf);
  info.assumptions.push_back(
      fmt::format("{} keeps one {} workspace per thread (main, autograd) for torch {} on {}{}",
                  vendor == device::Vendor::kAmd ? "hipBLAS" : "cuBLAS",
                  FormatBytes(static_cast<int64_t>(rules.cublas_workspace)), rules.torch_version,
                  vendor == device::Vendor::kAmd ? "gfx" : "sm_", sm));
  if (spec != nullptr && spec->family == Family::kResnet) {
    info.assumptions.push_back(
        "cuDNN's per-call convolution workspaces depend on the algorithm cuDNN picks at run "
        "time and are not predicted");
  }
  AddWorkspaces(stream, rules);
  return Status::Ok();
}

}  // namespace

Result<TensorStream> PredictStream(const LoadedModel& model, const PredictRequest& request,
                                   const Control& control) {
  // The rules are checked first: an unknown torch version is refused before any simulation.
  const int sm = request.gpu ? request.gpu->sm : 90;
  const device::Vendor vendor = request.gpu ? request.gpu->vendor : device::Vendor::kNvidia;
  RETURN_IF_ERROR(RulesFor(sm, request.torch_version, vendor).status());
  TensorStream stream;
  if (!model.traced.empty()) {
    ASSIGN_OR_RETURN(stream, ReadTracerStream(model.traced));
  } else {
    const ModelSpec& m = *model.spec;
    ASSIGN_OR_RETURN(stream, SimulateTraining(m, request.setup, control));
    model::PredictionInfo& info = stream.info;
    info.model = m.family == Family::kLayerList
                     ? m.label
                     : fmt::format("{} (built-in family: {})", m.label, FamilyName(m.family));
    info.setup = SetupText(m, request.setup);
  }
  RETURN_IF_ERROR(DescribeAndAddWorkspaces(stream, request, model.spec ? &*model.spec : nullptr));
  return stream;
}

Result<TensorStream> PredictRoleStream(const ModelSpec& model, const PredictRequest& request,
                                       const model::ParallelPrediction& prediction, size_t role) {
  ASSIGN_OR_RETURN(TensorStream stream, RoleStream(model, request.setup, prediction, role));
  stream.info.model =
      fmt::format("{} (built-in family: {}), {} of the parallel layout", model.label,
                  FamilyName(model.family), prediction.roles[role].name);
  stream.info.setup = SetupText(model, request.setup);
  RETURN_IF_ERROR(DescribeAndAddWorkspaces(stream, request, &model));
  return stream;
}

Result<BuiltTrace> BuildPrediction(TensorStream stream, const PredictRequest& request) {
  ASSIGN_OR_RETURN(allocator::AllocatorSettings settings, SettingsFor(request));
  BuildOptions options;
  options.settings = settings;
  return BuildPredictedTrace(std::move(stream), options);
}

Result<BuiltTrace> Predict(const LoadedModel& model, const PredictRequest& request) {
  ASSIGN_OR_RETURN(TensorStream stream, PredictStream(model, request));
  return BuildPrediction(std::move(stream), request);
}

Result<FitResult> Fit(const LoadedModel& model, const PredictRequest& request,
                      FitDimension dimension, uint64_t limit, const Control& control) {
  if (!model.traced.empty()) {
    return UsageError(
        "--fit needs a model vramscope can resize (a preset, a config or a layer "
        "list); a tracer file is one fixed size: trace it at other sizes instead");
  }
  ASSIGN_OR_RETURN(allocator::AllocatorSettings settings, SettingsFor(request));
  if (settings.capacity == allocator::kUnlimited) {
    return UsageError("--fit needs a GPU (--gpu) or a capacity to fit into");
  }
  FitResult out;
  out.dimension = dimension;
  out.capacity = settings.capacity;
  auto fits = [&](uint64_t size, PeakOnly* peaks) -> Result<bool> {
    RETURN_IF_ERROR(control.CheckCancelled("the fit"));
    PredictRequest r = request;
    if (dimension == FitDimension::kBatch) {
      r.setup.batch = size;
    } else {
      r.setup.seq = size;
    }
    ASSIGN_OR_RETURN(TensorStream stream, PredictStream(model, r));
    ASSIGN_OR_RETURN(PeakOnly p, SimulatePeaks(stream, settings));
    ++out.simulations;
    out.tried.emplace_back(size, !p.oom);
    if (peaks) *peaks = p;
    return !p.oom;
  };
  // Doubling from 1 to the first size that does not fit, then bisection.
  uint64_t good = 0, bad = 0;
  PeakOnly best;
  for (uint64_t size = 1; size <= limit; size *= 2) {
    PeakOnly p;
    ASSIGN_OR_RETURN(const bool ok, fits(size, &p));
    if (!ok) {
      bad = size;
      break;
    }
    good = size;
    best = p;
    if (size > limit / 2) break;
  }
  if (bad == 0) bad = std::min(limit, good * 2) + 1;
  while (bad - good > 1) {
    const uint64_t mid = good + (bad - good) / 2;
    PeakOnly p;
    ASSIGN_OR_RETURN(const bool ok, fits(mid, &p));
    if (ok) {
      good = mid;
      best = p;
    } else {
      bad = mid;
    }
  }
  out.largest = good;
  out.peak_reserved = best.peak_reserved;
  out.peak_allocated = best.peak_allocated;
  if (good == 0) {
    // Size 1 once more with no limit: what the step would need.
    PredictRequest r = request;
    if (dimension == FitDimension::kBatch) {
      r.setup.batch = 1;
    } else {
      r.setup.seq = 1;
    }
    allocator::AllocatorSettings unlimited = settings;
    unlimited.capacity = allocator::kUnlimited;
    unlimited.memory_fraction = 0;
    ASSIGN_OR_RETURN(TensorStream stream, PredictStream(model, r));
    ASSIGN_OR_RETURN(PeakOnly p, SimulatePeaks(stream, unlimited));
    ++out.simulations;
    out.needed_reserved = p.peak_reserved;
    out.needed_allocated = p.peak_allocated;
  }
  return out;
}

}  // namespace vramscope::predict
