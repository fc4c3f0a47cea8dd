#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "capture/tracer_process.h"
#include "common/temp_dir.h"
#include "pipeline/load.h"
#include "pipeline/predict_parts.h"

namespace vramscope::pipeline::predict_parts {

namespace {

// One rank's tracer stream read, its step predicted and placed by the allocator model.
Result<predict::BuiltTrace> PlaceTracedStep(const std::string& stream_path,
                                            const predict::PredictRequest& request) {
  ASSIGN_OR_RETURN(const predict::LoadedModel model, predict::LoadModel(stream_path));
  ASSIGN_OR_RETURN(predict::TensorStream stream, predict::PredictStream(model, request));
  return predict::BuildPrediction(std::move(stream), request);
}

}  // namespace

Result<std::vector<std::string>> TracerArgs(const PredictRequest& o) {
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

Status TraceModel(const PredictRequest& r, const std::string& stream_path) {
  ASSIGN_OR_RETURN(const std::vector<std::string> args, TracerArgs(r));
  r.control.Note(fmt::format("tracing {} with {} -m vramscope.tracer (fake tensors, no GPU)...",
                             r.model, r.python));
  return capture::RunTracer(r.python, args, stream_path);
}

// --all-ranks: each rank of the job traced (a tracer process each, as many at once as the CPUs,
// at most kTracerJobs), its step placed by the allocator model and analysed into its row as its
// process ends; the report is the bounding rank's (the highest reserved peak), with every row.
// Each rank's trace goes once its row is made; the ranks' streams stay on disk until the end,
// and the bounding rank's trace is made again from its stream for the report, so memory holds
// one rank's trace and the small rows.
Result<PredictResult> PredictAllRanks(const PredictRequest& o,
                                      const predict::PredictRequest& request) {
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
  ASSIGN_OR_RETURN(const std::string project_root, ResolveProjectRoot(o.project_root));
  const auto ranks = static_cast<size_t>(o.world_size);
  const size_t jobs = o.jobs > 0
                          ? std::min<size_t>(ranks, static_cast<size_t>(o.jobs))
                          : std::min<size_t>({ranks, kTracerJobs,
                                              std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::unique_ptr<TempFile>> streams(ranks);
  std::vector<std::optional<analysis::RankRow>> rows(ranks);
  // The ranks whose tracer runs: (rank, its process).
  std::vector<std::pair<size_t, std::unique_ptr<capture::TracerRun>>> running;
  size_t next = 0, done = 0;
  // A finished rank: its stream placed by the allocator model and analysed into its row.
  auto finish = [&](size_t rank, capture::TracerRun& run) -> Status {
    if (Status traced = run.Wait(); !traced.ok()) {
      return traced.WithPrefix(fmt::format("rank {} of {}: ", rank, o.world_size));
    }
    ASSIGN_OR_RETURN(predict::BuiltTrace built, PlaceTracedStep(streams[rank]->path(), request));
    ASSIGN_OR_RETURN(analysis::RankRow row,
                     RankRowOfTrace(std::move(built.trace), fmt::format("rank{}", rank),
                                    static_cast<int64_t>(rank), project_root));
    row.file = analysis::kTracedRankFile;
    rows[rank] = std::move(row);
    return Status::Ok();
  };
  while (done < ranks) {
    while (next < ranks && running.size() < jobs) {
      PredictRequest one = o;
      one.rank = static_cast<int>(next);
      ASSIGN_OR_RETURN(const std::vector<std::string> args, TracerArgs(one));
      streams[next] = std::make_unique<TempFile>("vramscope-stream-", ".jsonl");
      if (streams[next]->path().empty()) {
        return InternalError("cannot make a temporary file for the tracer");
      }
      o.control.Note(fmt::format("tracing rank {} of {} of {} with {} -m vramscope.tracer...", next,
                                 o.world_size, o.model, o.python));
      ASSIGN_OR_RETURN(std::unique_ptr<capture::TracerRun> run,
                       capture::StartTracer(o.python, args, streams[next]->path()));
      running.emplace_back(next++, std::move(run));
    }
    RETURN_IF_ERROR(o.control.CheckCancelled("tracing the ranks"));
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
  PredictResult out;
  out.kind = PredictResult::Kind::kAllRanks;
  ASSIGN_OR_RETURN(out.report, AnalyzePrediction(std::move(built), o, std::move(table), {note}));
  return out;
}

}  // namespace vramscope::pipeline::predict_parts
