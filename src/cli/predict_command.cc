#include "cli/predict_command.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "analysis/ranks.h"
#include "cli/exit_codes.h"
#include "cli/report_output.h"
#include "cli/run_tracer.h"
#include "common/units.h"
#include "device/non_pytorch_memory.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"
#include "predict/fit_advice.h"
#include "predict/model_description.h"
#include "predict/parallel_layout.h"
#include "predict/predict.h"
#include "predict/tracer_stream.h"
#include "report/parallel_roles_output.h"

namespace vramscope::cli {

namespace {

// --all-ranks traces each rank in a Python process of its own (seconds to minutes each, 812 MiB
// peak RSS for examples/distributed/pp_gpt.py, bench/predict_all_ranks.py): at most this many at
// once, and past kMaxTracedRanks ranks the ones that differ are better traced by name (--rank R).
constexpr size_t kTracerJobs = 8;
constexpr int kMaxTracedRanks = 64;

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

Result<predict::PredictRequest> BuildRequest(const PredictOptions& o) {
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
  } else {
    return UsageError(
        fmt::format("--optimizer {}: use sgd, momentum, adam, adamw or none", o.optimizer));
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
  s.lora_rank = o.lora;
  if (o.lora_dropout > 0 && o.lora == 0) {
    return UsageError("--lora-dropout is the adapters' dropout: give --lora R with it");
  }
  s.lora_dropout = o.lora_dropout;
  s.freeze = o.freeze;
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
  ApplyOutsideAllocatorFlags(o.outside, outside);
  r.outside = device::EstimateOutsideAllocator(outside);
  r.context_bytes = r.outside.Total();
  return r;
}

// The tracer's flags for the same set-up.
Result<std::vector<std::string>> TracerArgs(const PredictOptions& o) {
  if (o.zero != 0 || o.master_weights || o.weight_decay != 0) {
    return UsageError(
        "--zero, --master-weights and --weight-decay are the built-in families' options; the "
        "tracer runs your model's step as it is (with the optimizer's defaults; --fsdp with "
        "--world-size N shards it with FSDP2)");
  }
  std::vector<std::string> a = {"--model", o.model, "--batch", std::to_string(o.batch)};
  if (o.world_size > 1) {
    if (o.model.rfind("hf:", 0) == 0 && !o.fsdp) {
      return UsageError(
          "--world-size with hf:config.json: the tracer runs a Hugging Face model as it is, "
          "unsharded; add --fsdp to shard it with FSDP2, or give a FILE.py:FUNCTION that shards "
          "the model itself (fully_shard, parallelize_module), as examples/distributed/ does");
    }
    if (o.fsdp) a.push_back("--fsdp");
    if (!o.fsdp_mp.empty()) {
      if (!o.fsdp) {
        return UsageError(
            "--fsdp-mp is the mixed precision of the FSDP2 the tracer applies: add --fsdp (or "
            "use --dtype bf16-amp for torch.autocast)");
      }
      a.insert(a.end(), {"--fsdp-mp", o.fsdp_mp});
    }
    const int rank = std::max(o.rank, 0);
    if (rank >= o.world_size) {
      return UsageError(fmt::format("--rank {} is not a rank of --world-size {}: give 0 to {}",
                                    rank, o.world_size, o.world_size - 1));
    }
    a.insert(a.end(),
             {"--world-size", std::to_string(o.world_size), "--rank", std::to_string(rank)});
  } else if (o.rank >= 0) {
    return UsageError("--rank picks the rank of --world-size N that the tracer runs: give both");
  }
  if (!o.fsdp_mp.empty() && o.world_size < 2) {
    return UsageError("--fsdp-mp needs --fsdp and --world-size N (2 or more)");
  }
  if (o.seq > 0) a.insert(a.end(), {"--seq", std::to_string(o.seq)});
  if (o.image_size > 0) a.insert(a.end(), {"--image-size", std::to_string(o.image_size)});
  if (o.dtype == "bf16-amp" || o.dtype == "fp16-amp") {
    a.insert(a.end(), {"--dtype", "fp32", "--amp", o.dtype.substr(0, 4)});
  } else {
    a.insert(a.end(), {"--dtype", o.dtype, "--amp", "none"});
  }
  a.insert(a.end(),
           {"--optimizer", o.optimizer, "--" + o.optimizer_impl, "--zero-grad", o.zero_grad,
            "--steps", std::to_string(o.steps), "--grad-accum", std::to_string(o.grad_accum)});
  if (o.checkpointing) a.push_back("--checkpointing");
  if (o.lora > 0) a.insert(a.end(), {"--lora", std::to_string(o.lora)});
  if (o.lora_dropout > 0) a.insert(a.end(), {"--lora-dropout", fmt::format("{}", o.lora_dropout)});
  for (const std::string& f : o.freeze) a.insert(a.end(), {"--freeze", f});
  if (o.cuda_graphs) {
    a.push_back("--cuda-graphs");  // implies --compile
  } else if (o.compile) {
    a.push_back("--compile");
  }
  return a;
}

// A temporary file that goes with its scope.
class TempFile {
 public:
  TempFile() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "vramscope-stream-XXXXXX.jsonl").string();
    const int fd = mkstemps(pattern.data(), 6);
    if (fd >= 0) {
      close(fd);
      path_ = pattern;
    }
  }
  ~TempFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A predicted trace reported like any input: through the pipeline, to the terminal and to
// -o/--html as the options ask. `ranks` (--all-ranks): every traced rank's row, the one this
// trace is of marked reported, shown as a capture folder's ranks are; `note` says which it is.
Status EmitPredictedReport(predict::BuiltTrace built, const PredictOptions& o, Progress& progress,
                           std::vector<analysis::RankRow> ranks = {},
                           const std::string& note = "") {
  ReportOutputOptions out;
  out.output = o.output;
  out.database_by_default = false;
  out.html = o.html;
  out.force = o.force;
  out.json = o.json;
  out.quiet = o.quiet;
  out.top = o.top;
  ASSIGN_OR_RETURN(PreparedOutputs outputs,
                   PrepareReportOutputs({pipeline::InputKind::kFile, o.model}, out));
  ASSIGN_OR_RETURN(const std::string project_root, pipeline::ResolveProjectRoot(""));
  pipeline::LoadOptions load;
  load.progress = &progress;
  load.project_root = project_root;
  ASSIGN_OR_RETURN(pipeline::Loaded loaded, pipeline::FromTrace(std::move(built.trace), load));
  loaded.ranks = std::move(ranks);
  if (!note.empty()) loaded.interpretation.notes.push_back(note);
  ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Analyzed> analyzed,
                   pipeline::Analyze(std::move(loaded), {project_root, std::nullopt, &progress}));
  return EmitReport(*analyzed, out, outputs, {}, &progress);
}

// One rank's tracer stream read, its step predicted and placed by the allocator model.
Result<predict::BuiltTrace> PlaceTracedStep(const std::string& stream_path,
                                            const predict::PredictRequest& request) {
  ASSIGN_OR_RETURN(const predict::LoadedModel model, predict::LoadModel(stream_path));
  ASSIGN_OR_RETURN(predict::TensorStream stream, predict::PredictStream(model, request));
  return predict::BuildPrediction(std::move(stream), request);
}

// --all-ranks: each rank of the job traced (a tracer process each, as many at once as the CPUs,
// at most kTracerJobs), its step placed by the allocator model and analysed into its row as its
// process ends; the report is the bounding rank's (the highest reserved peak), with every row.
// Each rank's trace goes once its row is made; the ranks' streams stay on disk until the end,
// and the bounding rank's trace is made again from its stream for the report, so memory holds
// one rank's trace and the small rows.
Status RunAllRanks(const PredictOptions& o, const predict::PredictRequest& request) {
  if (o.world_size < 2) {
    return UsageError("--all-ranks traces every rank of --world-size N: give N (2 or more)");
  }
  if (o.rank >= 0) return UsageError("--all-ranks traces every rank: drop --rank R");
  if (o.world_size > kMaxTracedRanks) {
    return UsageError(fmt::format(
        "--all-ranks traces at most {} ranks, and --world-size is {}: trace the ranks that "
        "differ with --rank R",
        kMaxTracedRanks, o.world_size));
  }
  if (!o.emit_stream.empty()) {
    return UsageError("--emit-stream writes one rank's stream: give --rank R, not --all-ranks");
  }
  ASSIGN_OR_RETURN(const std::string project_root, pipeline::ResolveProjectRoot(""));
  pipeline::LoadOptions load;
  load.project_root = project_root;
  const bool chatty = !o.quiet && !o.json;
  const auto ranks = static_cast<size_t>(o.world_size);
  const size_t jobs = o.jobs > 0
                          ? std::min<size_t>(ranks, static_cast<size_t>(o.jobs))
                          : std::min<size_t>({ranks, kTracerJobs,
                                              std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::unique_ptr<TempFile>> streams(ranks);
  std::vector<std::optional<analysis::RankRow>> rows(ranks);
  // The ranks whose tracer runs: (rank, its process).
  std::vector<std::pair<size_t, std::unique_ptr<TracerRun>>> running;
  size_t next = 0, done = 0;
  // A finished rank: its stream placed by the allocator model and analysed into its row.
  auto finish = [&](size_t rank, TracerRun& run) -> Status {
    if (Status traced = run.Wait(); !traced.ok()) {
      return traced.WithPrefix(fmt::format("rank {} of {}: ", rank, o.world_size));
    }
    ASSIGN_OR_RETURN(predict::BuiltTrace built, PlaceTracedStep(streams[rank]->path(), request));
    ASSIGN_OR_RETURN(analysis::RankRow row,
                     pipeline::RankRowOfTrace(std::move(built.trace), fmt::format("rank{}", rank),
                                              static_cast<int64_t>(rank), load));
    row.file = analysis::kTracedRankFile;
    rows[rank] = std::move(row);
    return Status::Ok();
  };
  while (done < ranks) {
    while (next < ranks && running.size() < jobs) {
      PredictOptions one = o;
      one.rank = static_cast<int>(next);
      ASSIGN_OR_RETURN(const std::vector<std::string> args, TracerArgs(one));
      streams[next] = std::make_unique<TempFile>();
      if (streams[next]->path().empty()) {
        return InternalError("cannot make a temporary file for the tracer");
      }
      if (chatty) {
        (void)std::fprintf(stderr, "tracing rank %zu of %d of %s with %s -m vramscope.tracer...\n",
                           next, o.world_size, o.model.c_str(), o.python.c_str());
      }
      ASSIGN_OR_RETURN(std::unique_ptr<TracerRun> run,
                       StartTracer(o.python, args, streams[next]->path()));
      running.emplace_back(next++, std::move(run));
    }
    bool any = false;
    for (size_t i = 0; i < running.size();) {
      if (!running[i].second->Done()) {
        ++i;
        continue;
      }
      // An error returns at once; the other runs' processes are killed as `running` goes.
      RETURN_IF_ERROR(finish(running[i].first, *running[i].second));
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      ++done;
      any = true;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<analysis::RankRow> table;
  table.reserve(ranks);
  for (std::optional<analysis::RankRow>& row : rows) table.push_back(std::move(*row));
  const size_t bounding = analysis::BoundingRank(table);
  table[bounding].reported = true;
  // The bounding rank's step again, from its stream: the same trace its row was made of.
  ASSIGN_OR_RETURN(predict::BuiltTrace built, PlaceTracedStep(streams[bounding]->path(), request));
  const std::string note = fmt::format(
      "rank {} of {}, each traced alone: the one with the highest reserved peak (the per-rank "
      "table has them all; --rank R reports another)",
      bounding, ranks);
  Progress progress(chatty);
  return EmitPredictedReport(std::move(built), o, progress, std::move(table), note);
}

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

// Whether the flags ask for a parallel layout (or the model has experts, which only the
// per-rank estimate models).
bool WantsParallel(const PredictOptions& o) {
  return o.tp > 1 || o.pp > 1 || o.cp > 1 || o.ep > 1 || o.etp > 0 || o.sequence_parallel ||
         o.selective_recompute || o.capacity_factor > 0 || o.micro_batches > 1 ||
         o.schedule != "1f1b" || o.virtual_stages > 1 || o.dp > 0 || o.dp_shard > 0 ||
         o.fit_dim == "layout" || o.dp_impl != "megatron" || o.pp_impl != "megatron" ||
         o.pp_no_outputs || o.reduce_bucket_size > 0 || o.overlap_comm || o.tp_impl != "megatron" ||
         o.loss_parallel;
}

// --tp/--pp/--cp/--ep...: the memory of each rank role, from predict/parallel_layout.h.
Status RunParallel(const PredictOptions& o, const predict::PredictRequest& request,
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
  report::ParallelCapacity capacity;
  const uint64_t total =
      request.capacity ? request.capacity : (request.gpu ? request.gpu->total_memory : 0);
  if (total > request.context_bytes) capacity.allocator_bytes = total - request.context_bytes;
  if (request.gpu) capacity.gpu = request.gpu->name;
  if (request.capacity) capacity.gpu = FormatBytes(static_cast<int64_t>(request.capacity));
  predict::ParallelPrediction prediction;
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
    if (!o.json && !o.quiet) {
      fmt::print(
          "fit: the smallest layout that fits is TP {} x PP {} ({} GPUs per model replica; the "
          "bounding role ({}) needs {} of the {} per rank; {} layouts tried)\n\n",
          fit.best.layout.tp, fit.best.layout.pp, fit.best.layout.tp * fit.best.layout.pp,
          worst.name, FormatBytes(static_cast<int64_t>(worst.total_bytes)),
          FormatBytes(static_cast<int64_t>(capacity.allocator_bytes)), fit.tried);
    }
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
    ASSIGN_OR_RETURN(predict::TensorStream stream,
                     predict::PredictRoleStream(spec, role_request, prediction, i));
    ASSIGN_OR_RETURN(const predict::PeakOnly peaks, predict::SimulatePeaks(stream, settings));
    streams.push_back(std::move(stream));
    predict::RankRole& r = prediction.roles[i];
    r.placed = true;
    r.peak_allocated = peaks.peak_allocated;
    r.peak_reserved = peaks.peak_reserved;
  }
  prediction.bounding = 0;
  for (size_t i = 1; i < prediction.roles.size(); ++i) {
    if (prediction.roles[i].peak_reserved > prediction.roles[prediction.bounding].peak_reserved) {
      prediction.bounding = i;
    }
  }
  ASSIGN_OR_RETURN(const size_t chosen, ChooseRole(prediction, o.role));
  const std::string model =
      fmt::format("{} (built-in family: {})", spec.label, predict::FamilyName(spec.family));
  const std::string setup_text = predict::SetupText(spec, setup);
  if (o.json) {
    fmt::print("{}\n", report::ParallelRolesJson(prediction, model, setup_text, capacity).dump(2));
  } else if (!o.quiet) {
    fmt::print("{}", report::RenderParallelRoles(prediction, model, setup_text, capacity));
  }
  if (o.output.empty() && o.html.empty() && o.emit_stream.empty()) return Status::Ok();
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
  if (o.output.empty() && o.html.empty()) return Status::Ok();
  Progress progress(!o.quiet && !o.json);
  ASSIGN_OR_RETURN(predict::BuiltTrace built,
                   predict::BuildPrediction(std::move(stream), role_request));
  PredictOptions quiet_summary = o;
  if (o.json) {
    // The roles' JSON is stdout's one document; the role's report goes to its files only.
    quiet_summary.json = false;
    quiet_summary.quiet = true;
  } else if (!o.quiet) {
    fmt::print("\n{} (written below; -o/--html hold it whole)\n\n",
               fmt::format("THE STEP OF ONE RANK OF THE {}", prediction.roles[chosen].name));
  }
  return EmitPredictedReport(std::move(built), quiet_summary, progress);
}

Status Run(const PredictOptions& o) {
  if (!o.fsdp_mp.empty() && !NeedsTracer(o.model) && !WantsParallel(o)) {
    return UsageError(
        "--fsdp-mp is for your own model (FILE.py:FUNCTION, hf:config.json) under --fsdp, or a "
        "parallel layout with --zero 3 (per rank role); the built-in families' single-GPU --fsdp "
        "takes its precision from --dtype");
  }
  if (o.jobs > 0 && !o.all_ranks) {
    return UsageError("--jobs is how many ranks --all-ranks traces at once: give --all-ranks");
  }
  if ((o.rank >= 0 || o.all_ranks) && !NeedsTracer(o.model)) {
    return UsageError(fmt::format(
        "{} is for the ranks the tracer runs of your own model (FILE.py:FUNCTION) under "
        "--world-size; the built-in families' ranks are predicted by role (--tp, --pp, ...)",
        o.all_ranks ? "--all-ranks" : "--rank"));
  }
  ASSIGN_OR_RETURN(predict::PredictRequest request, BuildRequest(o));
  // A parallel layout, or a mixture of experts: the per-rank estimate of the built-in families.
  if (!NeedsTracer(o.model) && !predict::IsTracerStreamFile(o.model)) {
    ASSIGN_OR_RETURN(const predict::LoadedModel loaded, predict::LoadModel(o.model));
    if (loaded.spec && (WantsParallel(o) || loaded.spec->experts > 0 || loaded.spec->Mla())) {
      return RunParallel(o, request, *loaded.spec);
    }
  } else if (WantsParallel(o)) {
    return UsageError(
        "--tp/--pp/--cp/--ep/--sp predict the built-in families (presets and Hugging Face "
        "configs); your own model sets its parallelism up itself (init_device_mesh, "
        "fully_shard, parallelize_module): give --world-size N (and --rank) and the tracer runs "
        "one rank of it on a fake process group");
  }
  if (!o.role.empty()) {
    return UsageError(
        "--role picks a rank role of a parallel layout (--tp/--pp/--cp/--ep/--dp of a built-in "
        "family); this prediction has one rank");
  }
  // Your own model: the tracer runs its step on fake tensors, then its stream is the model.
  TempFile traced;
  std::string model_source = o.model;
  if (NeedsTracer(o.model)) {
    if (!o.fit.empty()) {
      return UsageError(
          "--fit resizes the built-in families; for your own model, trace it at a "
          "few sizes and predict each");
    }
    if (o.all_ranks) return RunAllRanks(o, request);
    ASSIGN_OR_RETURN(const std::vector<std::string> args, TracerArgs(o));
    if (traced.path().empty()) return InternalError("cannot make a temporary file for the tracer");
    if (!o.quiet && !o.json) {
      std::fprintf(stderr, "tracing %s with %s -m vramscope.tracer (fake tensors, no GPU)...\n",
                   o.model.c_str(), o.python.c_str());
    }
    RETURN_IF_ERROR(RunTracer(o.python, args, traced.path()));
    model_source = traced.path();
  } else if (o.compile || o.cuda_graphs) {
    return UsageError(
        "--compile and --cuda-graphs run your model through torch.compile in the tracer; give "
        "--model FILE.py:FUNCTION or hf:config.json (a tracer .jsonl says itself whether it was "
        "compiled)");
  }
  ASSIGN_OR_RETURN(const predict::LoadedModel model, predict::LoadModel(model_source));
  Progress progress(!o.quiet);
  std::optional<predict::FitResult> fit;
  if (!o.fit.empty()) {
    predict::FitDimension dim = predict::FitDimension::kBatch;
    if (o.fit_dim == "seq") {
      dim = predict::FitDimension::kSeq;
    } else if (o.fit_dim != "batch") {
      return UsageError(fmt::format("--fit-dim {}: use batch, seq or layout", o.fit_dim));
    }
    const char* what = dim == predict::FitDimension::kBatch ? "batch" : "sequence length";
    progress.Stage(
        fmt::format("finding the largest {} that fits (a simulation per size tried)", what));
    ASSIGN_OR_RETURN(fit, predict::Fit(model, request, dim, o.fit_max));
    progress.Finish();
    if (fit->largest == 0) {
      const predict::NoFitAdvice advice = predict::ExplainNoFit(*model.spec, request, *fit);
      if (o.json) {
        nlohmann::json j = {{"fit",
                             {{"dimension", what},
                              {"largest", 0},
                              {"capacity_bytes", fit->capacity},
                              {"needed_reserved_bytes", advice.needed_reserved},
                              {"needed_allocated_bytes", fit->needed_allocated},
                              {"shortfall_bytes", advice.shortfall},
                              {"levers", advice.levers},
                              {"simulations", fit->simulations}}}};
        fmt::print("{}\n", j.dump(2));
      }
      return InvalidInput("--fit: " + advice.message);
    }
    if (!o.quiet && !o.json) {
      fmt::print(
          "fit: the largest {} that fits is {} (peak reserved {} of the {} the allocator "
          "can have; {} simulations)\n\n",
          what, FormatCount(static_cast<int64_t>(fit->largest)),
          FormatBytes(static_cast<int64_t>(fit->peak_reserved)),
          FormatBytes(static_cast<int64_t>(fit->capacity)), fit->simulations);
    }
    if (dim == predict::FitDimension::kBatch) {
      request.setup.batch = fit->largest;
    } else {
      request.setup.seq = fit->largest;
    }
  }
  // The stream once: written when asked for, then run through the allocator.
  progress.Stage("predicting the step's tensors");
  ASSIGN_OR_RETURN(predict::TensorStream stream, predict::PredictStream(model, request));
  if (!o.emit_stream.empty()) {
    RETURN_IF_ERROR(predict::WriteTensorStream(stream, o.emit_stream, o.force));
  }
  progress.Stage("placing the step's tensors with the allocator model");
  ASSIGN_OR_RETURN(predict::BuiltTrace built, predict::BuildPrediction(std::move(stream), request));
  if (fit) {
    built.trace.prediction->facts.emplace_back(
        "fit", fmt::format("largest {} that fits: {}",
                           fit->dimension == predict::FitDimension::kBatch ? "batch" : "seq",
                           fit->largest));
  }
  return EmitPredictedReport(std::move(built), o, progress);
}

}  // namespace

Result<predict::PredictRequest> BuildPredictRequest(const PredictOptions& options) {
  return BuildRequest(options);
}

void RegisterPredictCommand(CLI::App& app, PredictOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "predict",
      "Predict the GPU memory of training steps without a GPU: a built-in model family (a "
      "preset or a Hugging Face config.json), a layer list, or your own PyTorch model traced on "
      "fake tensors, with a batch, dtype and optimizer. Prints the same summary as 'report' "
      "(marked "
      "predicted); -o writes the report database, --html the viewer, --fit finds the largest "
      "batch that fits a GPU.");
  cmd->add_option("--model", o.model,
                  fmt::format("a preset ({}), a Hugging Face config.json (gpt2, llama, mistral, "
                              "qwen2, mixtral, qwen2_moe, deepseek_v2/v3, bert, roberta, vit, "
                              "resnet), a layer list .json "
                              "(docs/predict-models.md), your own model as FILE.py:FUNCTION or "
                              "hf:config.json (run by the tracer on fake tensors with --python), "
                              "or a tracer .jsonl",
                              fmt::join(predict::PresetNames(), ", ")))
      ->required();
  cmd->add_option("--batch", o.batch, "samples per micro-batch (default: 1)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_option("--seq", o.seq, "tokens per sample (default: the model's context length)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_option("--image-size", o.image_size, "image side in pixels (default: the model's)")
      ->check(CLI::Range(uint64_t{8}, uint64_t{1} << 16));
  cmd->add_option("--dtype", o.dtype,
                  "fp32 (default), bf16, fp16 (weights in that dtype), bf16-amp, fp16-amp (fp32 "
                  "weights, torch.autocast)");
  cmd->add_flag("--master-weights", o.master_weights,
                "keep fp32 master weights in the optimizer (bf16/fp16 weights; 16 B/param Adam)");
  cmd->add_option("--optimizer", o.optimizer, "sgd, momentum, adam, adamw (default), none");
  cmd->add_option("--optimizer-impl", o.optimizer_impl,
                  "foreach (PyTorch's default on CUDA), fused or for-loop");
  cmd->add_option("--weight-decay", o.weight_decay, "Adam's L2 weight decay (default: 0)");
  cmd->add_option("--zero-grad", o.zero_grad,
                  "set-to-none (default, frees gradients), zero (keeps them), none");
  cmd->add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step (default: 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", o.steps, "training steps to simulate (default: 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option(
         "--max-events", o.max_events,
         fmt::format("the most tensor events the simulated steps may hold (default "
                     "{}; steps x micro-batches x layers decide it)",
                     FormatCount(static_cast<int64_t>(predict::kDefaultMaxPredictedEvents))))
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 31))
      ->option_text("N");
  cmd->add_flag("--checkpointing", o.checkpointing,
                "activation checkpointing of every transformer block");
  cmd->add_option("--lora", o.lora, "LoRA rank: freeze the base weights, train adapters")
      ->check(CLI::Range(0, 65536));
  cmd->add_option("--lora-dropout", o.lora_dropout,
                  "dropout on the LoRA adapters' input, as peft's lora_dropout (default 0, "
                  "peft's; LitGPT's finetune/lora.py uses 0.05): its output and mask are kept "
                  "for backward")
      ->check(CLI::Range(0.0, 0.999999))
      ->option_text("P");
  cmd->add_option("--freeze", o.freeze,
                  "freeze the parameters whose name matches this shell pattern (repeatable), "
                  "e.g. 'model.embed_tokens.*' or 'transformer.h.[0-5].*'");
  cmd->add_option("--zero", o.zero, "ZeRO stage 1, 2 or 3 over --world-size GPUs (per-GPU memory)")
      ->check(CLI::Range(0, 3));
  cmd->add_flag("--fsdp", o.fsdp,
                "FSDP full sharding over --world-size GPUs; your own model (FILE.py:FUNCTION, "
                "hf:config.json): FSDP2's fully_shard on each block, then the root, run by the "
                "tracer");
  cmd->add_option("--world-size", o.world_size,
                  "data-parallel GPUs (default: 1); 2 or more without --zero/--fsdp is "
                  "DistributedDataParallel, whose gradient buckets are predicted. Your own model "
                  "(FILE.py:FUNCTION): the ranks of the job, one of which the tracer runs on a "
                  "fake process group (the function wraps or shards the model itself: "
                  "DistributedDataParallel, fully_shard, parallelize_module; or the file's "
                  "vramscope_pipeline_step runs the rank's torch.distributed.pipelining stage)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--fsdp-mp", o.fsdp_mp,
                  "FSDP2's MixedPrecisionPolicy as torchtitan sets it, parameters gathered and "
                  "computed in bf16 or fp16, gradients reduced in fp32: your own model with "
                  "--fsdp, or a parallel layout with --zero 3")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_option("--rank", o.rank,
                  "your own model under --world-size: the rank the tracer runs (default: 0)")
      ->check(CLI::Range(0, (1 << 20) - 1));
  cmd->add_flag("--all-ranks", o.all_ranks,
                fmt::format("your own model under --world-size: the tracer runs every rank (at "
                            "most {}; as many at once as the CPUs, at most {}), a table of their "
                            "peaks says which rank bounds the job and what it holds that the "
                            "others do not, and the report is that rank's",
                            kMaxTracedRanks, kTracerJobs));
  cmd->add_option("--jobs", o.jobs,
                  fmt::format("--all-ranks: tracer processes at once, each a Python with torch "
                              "(0.8 GiB at its peak for examples/distributed/pp_gpt.py; default: "
                              "as many as the CPUs, at most {})",
                              kTracerJobs))
      ->check(CLI::Range(1, 64));
  cmd->add_option("--tp", o.tp,
                  "tensor parallelism: memory per rank role of the layout (GPT-2 and LLaMA "
                  "families, MoE included; model states counted per tensor, activations by "
                  "formula, no report database yet)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--pp", o.pp, "pipeline stages (the layers split evenly)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--cp", o.cp, "context parallelism: the sequence split over this many ranks")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--dp", o.dp,
                  "data-parallel ranks of the layout (default: --world-size / (TP x PP x CP))")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--dp-shard", o.dp_shard,
                  "HSDP: --zero shards over groups of this many data-parallel ranks (times "
                  "--cp), replicated --dp / --dp-shard times (default: all of --dp)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--ep", o.ep, "expert parallelism: the experts split over this many ranks")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--etp", o.etp, "tensor parallelism inside each expert (default: --tp)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_flag("--sp", o.sequence_parallel, "sequence parallelism (with --tp 2 or more)");
  cmd->add_option("--capacity-factor", o.capacity_factor,
                  "mixtures of experts: each expert's capacity as a multiple of its average "
                  "load (Megatron's --moe-expert-capacity-factor; default: dropless, the "
                  "average)")
      ->check(CLI::Range(0.01, 64.0));
  cmd->add_flag("--selective-recompute", o.selective_recompute,
                "recompute the attention core in backward (Megatron's selective recomputation)");
  cmd->add_option("--micro-batches", o.micro_batches,
                  "micro-batches per step and data-parallel rank (the pipeline's in-flight "
                  "bound; default 1)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--schedule", o.schedule,
                  "pipeline schedule: 1f1b (default), interleaved, or gpipe (every forward, then "
                  "every backward; --pp-impl torch's ScheduleGPipe); zero-bubble schedules "
                  "through the tracer only (a model file)");
  cmd->add_option("--reshard-after-forward", o.reshard_after_forward,
                  "with a parallel layout and --zero 3: whether FSDP2 frees a unit's gathered "
                  "weights after its forward (true) or keeps them to the step's last backward "
                  "(false); auto (default): false under --pp, as torchtitan sets it");
  cmd->add_option("--dp-impl", o.dp_impl,
                  "with a parallel layout: how data parallelism holds and reduces gradients: "
                  "megatron (default: in the gradients' own contiguous buffer, ZeRO-2/3 as "
                  "FSDP2), torch (PyTorch's DistributedDataParallel, --zero 0: the .grad tensors "
                  "and a second copy in its buckets) or deepspeed (DeepSpeed's ZeRO-1/2: a "
                  "reduce bucket of --reduce-bucket-size elements in each backward; ZeRO-3: one "
                  "kept, each module gathered with a prefetch bucket of the next)")
      ->check(CLI::IsMember({"megatron", "torch", "deepspeed"}));
  cmd->add_option("--pp-impl", o.pp_impl,
                  "with --pp: how the pipeline's stages hold their tensors: megatron (default: "
                  "Megatron-Core's schedules) or torch (torch.distributed.pipelining's "
                  "Schedule1F1B, or ScheduleInterleaved1F1B under --schedule interleaved, "
                  "torchtitan's: a receive buffer per micro-batch, direction and stage kept for "
                  "the run, each stage output kept to its backward, the last stage's outputs to "
                  "the step's end)")
      ->check(CLI::IsMember({"megatron", "torch"}));
  cmd->add_option("--tp-impl", o.tp_impl,
                  "with --tp: how tensor parallelism holds its activations: megatron (default: "
                  "Megatron-Core's, Korthikanti et al.'s count: under --sp the projections save "
                  "their input sequence-sharded, the loss vocabulary-parallel) or torch "
                  "(DTensor's plans as torchtitan applies them with parallelize_module: under "
                  "--sp the projections save the all-gathered input, and the head's logits are "
                  "gathered to every rank, output_layouts=Replicate(), unless --loss-parallel)")
      ->check(CLI::IsMember({"megatron", "torch"}));
  cmd->add_flag("--loss-parallel", o.loss_parallel,
                "--tp-impl torch: the head's logits kept sharded by vocabulary (Shard(-1)) and "
                "the loss computed under torch's loss_parallel(), torchtitan's default");
  cmd->add_flag("--pp-no-outputs", o.pp_no_outputs,
                "--pp-impl torch: the schedule stepped with return_outputs=False (the last "
                "stage keeps each micro-batch's output only to its backward and merges none)");
  cmd->add_option("--reduce-bucket-size", o.reduce_bucket_size,
                  "--dp-impl deepspeed: DeepSpeed's reduce_bucket_size, in elements (default "
                  "500000000, DeepSpeed's)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd->add_flag("--overlap-comm", o.overlap_comm,
                "--dp-impl deepspeed: DeepSpeed's overlap_comm (two reduce buckets; off by "
                "default for ZeRO-1/2, as DeepSpeed's)");
  cmd->add_option("--role", o.role,
                  "with a parallel layout: the rank role -o, --html and --emit-stream report, by "
                  "name ('last stage') or a stage's number (default: the role that bounds the "
                  "job)");
  cmd->add_option("--virtual-stages", o.virtual_stages,
                  "model chunks per stage under --schedule interleaved")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 10));
  cmd->add_option("--ddp-bucket-mb", o.ddp_bucket_mb,
                  "DistributedDataParallel's bucket_cap_mb, in MiB (default: 25)")
      ->check(CLI::Range(0.001, 1048576.0));
  const auto non_empty = CLI::Validator(
      [](const std::string& v) {
        return v.empty() ? std::string("give a GPU name or a size such as 80GiB") : std::string();
      },
      "GPU|SIZE");
  cmd->add_option("--gpu", o.gpu,
                  "the GPU (capacity, workspace sizes): h200, h100-80gb, a100-80gb, a100-40gb, "
                  "l40s, a10g, l4, rtx4090, rtx3090, v100-32gb, t4, or a size such as 80GiB")
      ->check(non_empty);
  cmd->add_option("--capacity", o.capacity, "GPU memory, e.g. 80GiB (overrides --gpu's)")
      ->check(non_empty);
  cmd->add_option("--fit", o.fit,
                  "find the largest batch (or --fit-dim seq) that fits this GPU or capacity, and "
                  "report that size")
      ->check(non_empty);
  cmd->add_option("--fit-dim", o.fit_dim,
                  "what --fit grows: batch (default) or seq; layout: the smallest TP x PP "
                  "whose every rank fits (the per-rank estimate)");
  cmd->add_option("--fit-max", o.fit_max, "the largest size --fit tries (default: 1048576)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--torch", o.torch_version,
                  "the PyTorch version (workspace rules; default: 2.11)");
  cmd->add_option("--alloc-conf", o.alloc_conf, "PYTORCH_CUDA_ALLOC_CONF of the predicted run");
  AddOutsideAllocatorFlags(*cmd, o.outside,
                           "with --world-size 2 or more, NCCL's 564 MiB per process + one "
                           "communicator: 16 channels x (ring + tree) x 12 MiB = 948 MiB");
  cmd->add_option("--cuda-module-loading", o.module_loading,
                  "lazy (default, as PyTorch sets CUDA_MODULE_LOADING) or eager (adds 640 MiB "
                  "to the context on sm_90, 362 MiB elsewhere)");
  cmd->add_option("--python", o.python,
                  "the Python (with PyTorch) that runs the tracer for --model FILE.py:FUNCTION "
                  "or hf:config.json (default: python3)");
  cmd->add_flag("--compile", o.compile,
                "traced models: the step as torch.compile(model) runs it (AOTAutograd's "
                "partitioner decides what is saved for backward, Inductor's lowering which "
                "intermediates are allocated)");
  cmd->add_flag("--cuda-graphs", o.cuda_graphs,
                "traced models: torch.compile(model, mode=\"reduce-overhead\"): --compile, with "
                "the compiled graphs' memory in a CUDA graph pool held for their lifetime");
  cmd->add_option("--emit-stream", o.emit_stream,
                  "also write the predicted tensor stream (every allocation and free, with "
                  "category, name and operation) as JSON Lines, the tracer's format");
  cmd->add_option("-o,--output", o.output, "write the report database here (default: none)");
  cmd->add_option("--html", o.html, "write the interactive HTML viewer here");
  cmd->add_flag("--force", o.force, "overwrite outputs that exist");
  cmd->add_flag("--json", o.json, "print the summary as JSON");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_option("--top", o.top, "owners and sites to list (default: 10)")
      ->check(CLI::Range(0, 1000000));
}

int RunPredictCommand(const PredictOptions& options) {
  return RunAndReport(options.model, [&] { return Run(options); });
}

}  // namespace vramscope::cli
