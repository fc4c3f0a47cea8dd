#include "pipeline/load.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "analysis/analyze.h"
#include "common/mapped_file.h"
#include "common/progress.h"
#include "common/units.h"
#include "pipeline/built_in_example.h"
#include "pipeline/window.h"
#include "pipeline/xla_reservation.h"
#include "sources/load_source.h"
#include "sources/run_output/capture_folder.h"
#include "sources/run_output/capture_sidecar.h"

namespace vramscope::pipeline {

namespace {

namespace fs = std::filesystem;

// One file of any format, by content.
Result<Loaded> ReadFile(const Input& input, const std::string& path, const LoadRequest& request) {
  std::unique_ptr<MappedFile> file;
  if (input.kind == InputKind::kBuiltInExample) {
    file = MappedFile::FromBytes(kBuiltInExampleName, BuiltInExampleSnapshot());
  } else {
    ASSIGN_OR_RETURN(file, MappedFile::Open(path));
  }
  Loaded out;
  out.input = input;
  request.control.Stage(fmt::format("reading {}", file->path()));
  RETURN_IF_ERROR(request.control.CheckCancelled("reading the input"));
  sources::SourceOptions source_options;
  const Control& control = request.control;
  if (control.progress != nullptr || control.cancel != nullptr) {
    source_options.progress = [&control](uint64_t done, uint64_t total) {
      control.Update(done, total);
      return !control.cancelled();
    };
  }
  source_options.limits = request.limits;
  ASSIGN_OR_RETURN(out.trace, sources::LoadTrace(*file, source_options, &out.timings));
  out.trace.source.built_in_example = input.kind == InputKind::kBuiltInExample;
  return out;
}

// The allocator model over the loaded trace: the replay against the recording (whose block sizes
// interpretation adopts), or the model's own run where nothing was recorded to compare with. A
// trace it cannot replay is an error only with require_replay; else the notes say why.
Status Replay(Loaded& loaded, const LoadRequest& options) {
  const model::Trace& trace = loaded.trace;
  if (!trace.facts.has_trace) {
    if (!options.require_replay) return Status::Ok();
    return InvalidInput(fmt::format(
        "{}: the input holds no alloc/free trace, so there is nothing to replay; record one "
        "with torch.cuda.memory._record_memory_history() before the step you want to see",
        loaded.input.Name()));
  }
  options.control.Stage(fmt::format("replaying {} events through the allocator model",
                                    FormatCount(static_cast<int64_t>(trace.events.count()))));
  RETURN_IF_ERROR(options.control.CheckCancelled("reading the input"));
  const auto start = std::chrono::steady_clock::now();
  Result<analysis::Simulations> replayed = analysis::ReplayRecording(trace, options.recorded_conf);
  loaded.replay_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!replayed.ok()) {
    if (options.require_replay) return replayed.status();
    loaded.interpretation.notes.push_back(fmt::format(
        "the allocator model did not replay this trace: {}", replayed.status().message()));
    return Status::Ok();
  }
  loaded.interpretation.replayed_block_units = analysis::TakeReplayedBlockSizes(trace, *replayed);
  loaded.simulations = std::move(*replayed);
  return Status::Ok();
}

// The sidecar `vramscope run` wrote beside a snapshot, when there is one.
Status InterpretSidecar(const fs::path& sidecar_path, Loaded& loaded) {
  ASSIGN_OR_RETURN(std::optional<sources::CaptureSidecar> sidecar,
                   sources::ReadCaptureSidecar(sidecar_path.string()));
  if (sidecar) sources::InterpretCaptureSidecar(*sidecar, loaded.trace, loaded.interpretation);
  return Status::Ok();
}

// One process's capture: its snapshot (else its framework's profile, else its native trace) with
// the sidecar's phases, names and notes.
Result<Loaded> LoadCapture(const Input& folder, const sources::Capture& capture,
                           const LoadRequest& options,
                           std::optional<sources::CaptureSidecar>* sidecar_out) {
  const fs::path& file = capture.Recording();
  ASSIGN_OR_RETURN(Loaded loaded, ReadFile(folder, file.string(), options));
  if (file != capture.native && !capture.sidecar.empty()) {
    ASSIGN_OR_RETURN(std::optional<sources::CaptureSidecar> sidecar,
                     sources::ReadCaptureSidecar(capture.sidecar.string()));
    if (sidecar) {
      sources::InterpretCaptureSidecar(*sidecar, loaded.trace, loaded.interpretation);
      // XLA's pool as its allocator reported it, unless a native trace gives it (below).
      if (sidecar->framework == "jax" && sidecar->framework_allocator &&
          sidecar->framework_allocator->pool_bytes && capture.native.empty()) {
        ApplyXlaAllocatorPool(*sidecar->framework_allocator->pool_bytes, loaded.trace,
                              loaded.interpretation.notes);
      }
    }
    if (sidecar_out != nullptr) *sidecar_out = std::move(sidecar);
  }
  if (file == capture.profile && !capture.native.empty() &&
      file.filename().string().ends_with(".jax.prof")) {
    // XLA's pool, from the driver allocations of the same run: reserved = live + free pool.
    ASSIGN_OR_RETURN(const Loaded native, ReadFile(folder, capture.native.string(), options));
    ApplyXlaReservations(XlaReservations(native.trace), capture.native.string(), loaded.trace,
                         loaded.interpretation.notes);
  }
  if (file != capture.native && !capture.native.empty()) {
    loaded.interpretation.notes.push_back(fmt::format(
        "a native trace was captured too: 'vramscope report {}' shows the driver-level view",
        capture.native.string()));
  }
  if (!capture.snapshot.empty() && !capture.profile.empty()) {
    loaded.interpretation.notes.push_back(fmt::format(
        "the program used another framework too: 'vramscope report {}' shows its memory",
        capture.profile.string()));
  }
  RETURN_IF_ERROR(Replay(loaded, options));
  return loaded;
}

// The figures of a rank's row that its own report gives: peaks, steps, phases, what is live at
// its peak.
Status FillRankRow(const Loaded& loaded, const std::string& project_root, analysis::RankRow& row) {
  const analysis::ProjectRoot root(project_root);
  ASSIGN_OR_RETURN(const std::unique_ptr<const analysis::Analysis> analysis,
                   analysis::Analyze(loaded.view(), root));
  analysis::FillRankFigures(analysis->summary, row);
  analysis::FillRankPhases(analysis->attribution.phases, analysis->timelines, row);
  return Status::Ok();
}

// The row of one rank: the figures its own report gives, and what its sidecar says.
Result<analysis::RankRow> RankRowOf(const Input& folder, const sources::Capture& capture,
                                    const LoadRequest& options) {
  LoadRequest quiet = options;
  quiet.control.progress = nullptr;  // the folder's stage counts the ranks
  std::optional<sources::CaptureSidecar> sidecar;
  ASSIGN_OR_RETURN(const Loaded loaded, LoadCapture(folder, capture, quiet, &sidecar));
  analysis::RankRow row;
  row.label = capture.label;
  row.rank = capture.rank;
  row.file = capture.Recording().lexically_relative(folder.path).string();
  RETURN_IF_ERROR(FillRankRow(loaded, options.project_root, row));
  if (sidecar) {
    row.local_rank = sidecar->local_rank;
    row.host = sidecar->hostname;
    row.device_name = sidecar->device_name;
    if (sidecar->device) row.device = static_cast<int32_t>(*sidecar->device);
    row.end_reason = sidecar->end_reason;
    row.oom |= sidecar->end_reason == "oom";
  }
  return row;
}

// The most ranks read at once (and never more than the CPUs): each holds one rank's trace and
// analysis while it is read.
constexpr size_t kRankReadJobs = 8;

// The captures `vramscope run` wrote. One process: its capture. Several (ranks): a row each,
// and the capture of the rank that bounds the job.
Result<Loaded> LoadCaptureFolder(const Input& input, const LoadRequest& options) {
  const fs::path dir(input.path);
  ASSIGN_OR_RETURN(const std::vector<sources::Capture> captures, sources::FindCaptures(dir));
  if (captures.size() == 1) return LoadCapture(input, captures.front(), options, nullptr);
  // Ranks are read in parallel, each by one worker at a time, so memory holds at most `jobs`
  // ranks' traces plus every rank's small row (analysis/ranks.h).
  const size_t jobs = std::min<size_t>(
      {captures.size(), kRankReadJobs, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::optional<Result<analysis::RankRow>>> results(captures.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<size_t> done{0};
  options.control.Stage(fmt::format("reading {} ranks", captures.size()));
  auto work = [&] {
    for (size_t i = next++; i < captures.size() && !failed; i = next++) {
      results[i] = RankRowOf(input, captures[i], options);
      if (!results[i]->ok()) failed = true;
      options.control.Update(++done, captures.size(), Progress::Unit::kItems);
    }
  };
  std::vector<std::thread> workers;
  for (size_t j = 1; j < jobs; ++j) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
  std::vector<analysis::RankRow> rows;
  rows.reserve(captures.size());
  for (size_t i = 0; i < captures.size(); ++i) {
    // The first failure in rank order is the one reported (workers stop taking new ranks).
    if (!results[i]) continue;
    if (!results[i]->ok()) return results[i]->status().WithPrefix(captures[i].label + ": ");
    rows.push_back(std::move(**results[i]));
  }
  const size_t bounding = analysis::BoundingRank(rows);
  rows[bounding].reported = true;
  ASSIGN_OR_RETURN(Loaded loaded, LoadCapture(input, captures[bounding], options, nullptr));
  loaded.interpretation.notes.push_back(fmt::format(
      "{} of {} processes: the one with the highest reserved peak (the per-rank table has them "
      "all; 'vramscope report {}' reports another)",
      rows[bounding].label, rows.size(), (dir / "<rank>.pickle").string()));
  loaded.ranks = std::move(rows);
  return loaded;
}

}  // namespace

Result<Loaded> Load(const LoadRequest& request) {
  const Input& input = request.input;
  if (input.kind == InputKind::kCaptureFolder) {
    if (request.window.active()) {
      return UsageError(fmt::format(
          "{}: a window (--from/--to/--step-range) cuts one recording; give the rank's snapshot "
          "inside the folder",
          input.Name()));
    }
    return LoadCaptureFolder(input, request);
  }
  ASSIGN_OR_RETURN(Loaded loaded, ReadFile(input, input.path, request));
  // A snapshot `vramscope run` wrote: its sidecar beside it gives phases and names.
  if (input.kind == InputKind::kFile) {
    if (const fs::path sidecar = sources::SidecarBeside(input.path); !sidecar.empty()) {
      RETURN_IF_ERROR(InterpretSidecar(sidecar, loaded));
    }
  }
  if (request.window.active()) RETURN_IF_ERROR(ApplyWindow(request.window, loaded));
  RETURN_IF_ERROR(Replay(loaded, request));
  RETURN_IF_ERROR(request.control.CheckCancelled("reading the input"));
  return loaded;
}

Result<Loaded> FromTrace(model::Trace trace, FromTraceRequest request) {
  Loaded loaded;
  loaded.input = {InputKind::kFile, trace.source.path};
  loaded.trace = std::move(trace);
  LoadRequest replay;
  replay.project_root = request.project_root;
  replay.control = request.control;
  RETURN_IF_ERROR(Replay(loaded, replay));
  loaded.ranks = std::move(request.ranks);
  for (std::string& note : request.notes) loaded.interpretation.notes.push_back(std::move(note));
  return loaded;
}

Result<analysis::RankRow> RankRowOfTrace(model::Trace trace, std::string label, int64_t rank,
                                         const std::string& project_root) {
  ASSIGN_OR_RETURN(
      const Loaded loaded,
      FromTrace(std::move(trace),
                {.project_root = project_root, .control = {}, .ranks = {}, .notes = {}}));
  analysis::RankRow row;
  row.label = std::move(label);
  row.rank = rank;
  RETURN_IF_ERROR(FillRankRow(loaded, project_root, row));
  return row;
}

}  // namespace vramscope::pipeline
