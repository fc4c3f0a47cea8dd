#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>

#include "allocator/allocator_settings.h"
#include "common/units.h"
#include "model/bounding.h"
#include "pipeline/predict_parts.h"
#include "predict/parallel_layout.h"
#include "predict/tracer_stream.h"

namespace vramscope::pipeline::predict_parts {

namespace {

// The role -o/--html report: --role's name or stage number, else the bounding role.
Result<size_t> ChooseRole(const model::ParallelPrediction& p, const std::string& role) {
  if (role.empty()) return p.bounding;
  for (size_t i = 0; i < p.roles.size(); ++i) {
    if (p.roles[i].name == role) return i;
  }
  if (std::all_of(role.begin(), role.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    const uint64_t stage = role.size() > 9 ? UINT64_MAX : std::stoull(role);
    for (size_t i = 0; i < p.roles.size(); ++i) {
      const std::vector<uint64_t>& st = p.roles[i].stages;
      if (std::find(st.begin(), st.end(), stage) != st.end()) return i;
    }
    return UsageError(
        fmt::format("--role {}: the layout has stages 0 to {}", role, p.layout.pp - 1));
  }
  std::vector<std::string> names;
  for (const model::RankRole& r : p.roles) names.push_back("'" + r.name + "'");
  return UsageError(fmt::format("--role {}: the layout's roles are {} (or give a stage number)",
                                role, fmt::join(names, ", ")));
}

}  // namespace

// Whether the flags ask for a parallel layout (or the model has experts, which only the
// per-rank estimate models).
bool WantsParallel(const PredictRequest& o) {
  return o.tp > 1 || o.pp > 1 || o.cp > 1 || o.ep > 1 || o.etp > 0 || o.sequence_parallel ||
         o.selective_recompute || o.capacity_factor > 0 || o.micro_batches > 1 ||
         o.schedule != "1f1b" || o.virtual_stages > 1 || o.dp > 0 || o.dp_shard > 0 ||
         o.fit_dim == "layout" || o.dp_impl != "megatron" || o.pp_impl != "megatron" ||
         o.pp_no_outputs || o.reduce_bucket_size > 0 || o.overlap_comm || o.tp_impl != "megatron" ||
         o.loss_parallel;
}

// --tp/--pp/--cp/--ep...: the memory of each rank role, from predict/parallel_layout.h.
Result<PredictResult> PredictLayout(const PredictRequest& o, const predict::PredictRequest& request,
                                    const predict::ModelSpec& spec) {
  const bool fit_layout = o.fit_dim == "layout";
  if (fit_layout && o.fit.empty()) {
    return UsageError("--fit-dim layout needs --fit GPU|CAPACITY (what each rank may hold)");
  }
  if (fit_layout && (o.tp > 1 || o.pp > 1)) {
    return UsageError("--fit-dim layout chooses --tp and --pp: leave them out");
  }
  for (const auto& [given, flag] :
       {std::pair{!o.fit.empty() && !fit_layout, "--fit (use --fit-dim layout)"},
        {o.fsdp, "--fsdp (use --zero 3)"}}) {
    if (given) {
      return UsageError(fmt::format(
          "{} with a parallel layout (--tp/--pp/--cp/--ep/--sp, or a mixture-of-experts model)",
          flag));
    }
  }
  predict::ParallelLayout l;
  l.tp = o.tp;
  l.pp = o.pp;
  l.cp = o.cp;
  l.ep = o.ep;
  l.etp = o.etp;
  l.dp_shard = o.dp_shard;
  l.sequence_parallel = o.sequence_parallel;
  l.selective_recompute = o.selective_recompute;
  l.capacity_factor = o.capacity_factor;
  l.micro_batches = o.micro_batches;
  l.virtual_stages = o.virtual_stages;
  if (o.schedule == "interleaved") {
    l.schedule = predict::PipelineSchedule::kInterleaved;
  } else if (o.schedule == "gpipe") {
    l.schedule = predict::PipelineSchedule::kGPipe;
  } else if (o.schedule == "zbv" || o.schedule == "zb" || o.schedule == "interleaved-zb" ||
             o.schedule == "dualpipev") {
    // Zero-bubble schedules split the backward; the tracer runs torch's own (pipeline.py).
    return UsageError(fmt::format(
        "--schedule {}: the built-in estimate has no zero-bubble schedule; trace the model "
        "file that makes the schedule instead (--model FILE.py:build --world-size N --rank R, "
        "as examples/distributed/pp_zbv_gpt.py), or use 1f1b, interleaved or gpipe",
        o.schedule));
  } else if (o.schedule != "1f1b") {
    return UsageError(fmt::format("--schedule {}: use 1f1b, interleaved or gpipe", o.schedule));
  }
  if (l.schedule != predict::PipelineSchedule::kInterleaved && o.virtual_stages > 1) {
    return UsageError("--virtual-stages needs --schedule interleaved");
  }
  if (o.reshard_after_forward == "auto") {
    l.reshard_after_forward.reset();  // torchtitan's: kept gathered under PP
  } else if (o.reshard_after_forward == "true" || o.reshard_after_forward == "false") {
    if (request.setup.zero != predict::ZeroMode::kZero3) {
      return UsageError(
          "--reshard-after-forward is FSDP2's choice for ZeRO-3: give --zero 3 with it");
    }
    l.reshard_after_forward = o.reshard_after_forward == "true";
  } else {
    return UsageError(fmt::format("--reshard-after-forward {}: use auto, true or false",
                                  o.reshard_after_forward));
  }
  if (o.dp_impl == "torch") {
    l.data_parallel_impl = model::DataParallelImpl::kTorch;
  } else if (o.dp_impl == "deepspeed") {
    l.data_parallel_impl = model::DataParallelImpl::kDeepSpeed;
  } else if (o.dp_impl != "megatron") {
    return UsageError(fmt::format("--dp-impl {}: use megatron, torch or deepspeed", o.dp_impl));
  }
  if (o.pp_impl == "torch") {
    l.pipeline_impl = model::PipelineImpl::kTorch;
  } else if (o.pp_impl != "megatron") {
    return UsageError(fmt::format("--pp-impl {}: use megatron or torch", o.pp_impl));
  }
  if (l.pipeline_impl == model::PipelineImpl::kTorch && l.pp < 2 && !fit_layout) {
    return UsageError(
        "--pp-impl torch is torch.distributed.pipelining's schedule: give --pp 2 or more");
  }
  if (l.schedule == predict::PipelineSchedule::kGPipe &&
      l.pipeline_impl != model::PipelineImpl::kTorch) {
    return UsageError(
        "--schedule gpipe is torch.distributed.pipelining's ScheduleGPipe: give --pp-impl torch "
        "with it (Megatron-Core has no GPipe schedule)");
  }
  if (o.tp_impl == "torch") {
    l.tensor_parallel_impl = model::TensorParallelImpl::kTorch;
  } else if (o.tp_impl != "megatron") {
    return UsageError(fmt::format("--tp-impl {}: use megatron or torch", o.tp_impl));
  }
  if (l.tensor_parallel_impl == model::TensorParallelImpl::kTorch && l.tp < 2 && !fit_layout) {
    return UsageError(
        "--tp-impl torch is DTensor's tensor parallelism (parallelize_module): give --tp 2 or "
        "more");
  }
  if (o.loss_parallel) {
    if (l.tensor_parallel_impl != model::TensorParallelImpl::kTorch) {
      return UsageError(
          "--loss-parallel is torch's loss_parallel() over Shard(-1) logits: give --tp-impl "
          "torch with it (Megatron-Core's loss is always vocabulary-parallel)");
    }
    l.loss_parallel = true;
  }
  if (o.pp_no_outputs) {
    if (l.pipeline_impl != model::PipelineImpl::kTorch) {
      return UsageError(
          "--pp-no-outputs is torch.distributed.pipelining's schedule.step(return_outputs=False): "
          "give --pp-impl torch with it");
    }
    l.pipeline_return_outputs = false;
  }
  if ((o.reduce_bucket_size > 0 || o.overlap_comm) &&
      l.data_parallel_impl != model::DataParallelImpl::kDeepSpeed) {
    return UsageError(
        "--reduce-bucket-size and --overlap-comm are DeepSpeed's settings: give --dp-impl "
        "deepspeed with them");
  }
  if (o.reduce_bucket_size > 0) l.reduce_bucket_elements = o.reduce_bucket_size;
  l.fsdp_mixed_precision = !o.fsdp_mp.empty();
  l.overlap_comm = o.overlap_comm;
  const uint64_t model_parallel = o.tp * o.pp * o.cp;
  if (o.dp > 0) {
    l.dp = o.dp;
    if (o.world_size > 1 && static_cast<uint64_t>(o.world_size) != model_parallel * o.dp) {
      return UsageError(fmt::format(
          "--world-size {} is not --tp {} x --pp {} x --cp {} x --dp {} = {}: give one of them",
          o.world_size, o.tp, o.pp, o.cp, o.dp, model_parallel * o.dp));
    }
  } else {
    if (o.world_size > 1 && static_cast<uint64_t>(o.world_size) % model_parallel != 0) {
      return UsageError(
          fmt::format("--world-size {} is not a multiple of --tp {} x --pp {} x --cp {} = {}",
                      o.world_size, o.tp, o.pp, o.cp, model_parallel));
    }
    l.dp = std::max<uint64_t>(1, static_cast<uint64_t>(o.world_size) / model_parallel);
  }
  predict::TrainingSetup setup = request.setup;
  // FSDP2's param_dtype: the unit computes in it, as autocast would (16-bit activations).
  if (l.fsdp_mixed_precision && !setup.precision.autocast) {
    setup.precision.autocast = o.fsdp_mp == "fp16" ? predict::DType::kF16 : predict::DType::kBF16;
  }
  // The setup line names ZeRO's group (the data-parallel x context-parallel ranks); the layout
  // line says the rest (DDP's buckets are not in the per-rank estimate).
  if (l.dp_shard > 0 && setup.zero == predict::ZeroMode::kNone) {
    return UsageError("--dp-shard is the group --zero shards over (HSDP): give --zero too");
  }
  const uint64_t zero_group = (l.dp_shard > 0 ? l.dp_shard : l.dp) * l.cp;
  setup.world_size = setup.zero == predict::ZeroMode::kNone
                         ? 1
                         : static_cast<int>(std::min<uint64_t>(zero_group, 1 << 20));
  if (setup.zero != predict::ZeroMode::kNone && zero_group < 2) {
    return UsageError(
        "--zero shards over data parallelism: give --dp 2 or more (or --world-size), and a "
        "--dp-shard of 2 or more");
  }
  model::ParallelCapacity capacity;
  capacity.allocator_bytes = request.AllocatorCapacity();
  if (request.gpu) capacity.gpu = request.gpu->name;
  if (request.capacity) capacity.gpu = FormatBytes(static_cast<int64_t>(request.capacity));
  predict::ParallelPrediction prediction;
  std::optional<LayoutFitFound> layout_fit;
  if (fit_layout) {
    if (capacity.allocator_bytes == 0) {
      return UsageError(fmt::format("--fit {}: nothing is left for the allocator", o.fit));
    }
    // --world-size fixes the ranks (DP follows each TP x PP); --dp fixes DP instead.
    const uint64_t world = o.dp == 0 && o.world_size > 1 ? static_cast<uint64_t>(o.world_size) : 0;
    predict::LayoutFit fit = predict::FitLayout(spec, setup, l, capacity.allocator_bytes, world);
    if (fit.tried == 0) {
      return UsageError(fmt::format(
          "--fit-dim layout: no TP x PP layout of {} is possible with these flags", spec.label));
    }
    const predict::RankRole& worst = fit.best.roles[fit.best.bounding];
    if (!fit.found) {
      return InvalidInput(fmt::format(
          "--fit {}: no TP x PP layout fits {} per rank ({} layouts tried); the closest, TP {} x "
          "PP {}, needs {} on its {}: add ranks (--world-size, --cp, --ep), ZeRO, --sp, "
          "checkpointing or a smaller batch",
          o.fit, FormatBytes(static_cast<int64_t>(capacity.allocator_bytes)), fit.tried,
          fit.best.layout.tp, fit.best.layout.pp,
          FormatBytes(static_cast<int64_t>(worst.total_bytes)), worst.name));
    }
    layout_fit = LayoutFitFound{fit.tried, worst.name, worst.total_bytes};
    prediction = std::move(fit.best);
    // The setup line names ZeRO's group of the layout found, not of the TP 1 x PP 1 start.
    if (setup.zero != predict::ZeroMode::kNone) {
      setup.world_size = static_cast<int>(std::min<uint64_t>(
          prediction.layout.DpShard() * prediction.layout.cp, uint64_t{1} << 20));
    }
  } else {
    ASSIGN_OR_RETURN(prediction, predict::PredictParallel(spec, setup, l));
  }
  // Each role's step placed by the allocator model, without a capacity: what it would reserve.
  predict::PredictRequest role_request = request;
  role_request.setup = setup;
  predict::PredictRequest unlimited = role_request;
  unlimited.capacity = 0;
  unlimited.gpu.reset();
  ASSIGN_OR_RETURN(allocator::AllocatorSettings settings, predict::SettingsFor(unlimited));
  // Kept: the one -o/--html/--emit-stream report is taken from them, not made again.
  std::vector<predict::TensorStream> streams;
  streams.reserve(prediction.roles.size());
  for (size_t i = 0; i < prediction.roles.size(); ++i) {
    RETURN_IF_ERROR(o.control.CheckCancelled("the prediction"));
    ASSIGN_OR_RETURN(predict::TensorStream stream,
                     predict::PredictRoleStream(spec, role_request, prediction, i));
    ASSIGN_OR_RETURN(const predict::PeakOnly peaks, predict::SimulatePeaks(stream, settings));
    streams.push_back(std::move(stream));
    predict::RankRole& r = prediction.roles[i];
    r.placed = true;
    r.peak_allocated = peaks.peak_allocated;
    r.peak_reserved = peaks.peak_reserved;
  }
  prediction.bounding = model::BoundingIndex(prediction.roles, [](const predict::RankRole& r) {
    return model::RankPeaks{static_cast<int64_t>(r.peak_reserved),
                            static_cast<int64_t>(r.peak_allocated)};
  });
  ASSIGN_OR_RETURN(const size_t chosen, ChooseRole(prediction, o.role));
  PredictResult out;
  out.kind = PredictResult::Kind::kLayout;
  LayoutResult& layout = out.layout.emplace();
  layout.model_label =
      fmt::format("{} (built-in family: {})", spec.label, predict::FamilyName(spec.family));
  layout.setup_text = predict::SetupText(spec, setup);
  layout.capacity = capacity;
  layout.fit = layout_fit;
  layout.chosen = chosen;
  if (o.emit_stream.empty() && !o.role_report) {
    layout.prediction = std::move(prediction);
    return out;
  }
  // The chosen role's step as a report: the same pipeline as any prediction.
  predict::TensorStream stream = std::move(streams[chosen]);
  const model::ParallelLayout& pl = prediction.layout;
  stream.info.facts.emplace_back(
      "parallel layout",
      fmt::format("TP {} x PP {} x CP {} x DP {}; this report: {} (stages {}), one of {} ranks",
                  pl.tp, pl.pp, pl.cp, pl.dp, prediction.roles[chosen].name,
                  fmt::join(prediction.roles[chosen].stages, ","), prediction.roles[chosen].ranks));
  if (!o.emit_stream.empty()) {
    RETURN_IF_ERROR(predict::WriteTensorStream(stream, o.emit_stream, o.force));
  }
  layout.prediction = std::move(prediction);
  if (!o.role_report) return out;
  ASSIGN_OR_RETURN(predict::BuiltTrace built,
                   predict::BuildPrediction(std::move(stream), role_request));
  ASSIGN_OR_RETURN(out.report, AnalyzePrediction(std::move(built), o));
  return out;
}

}  // namespace vramscope::pipeline::predict_parts
