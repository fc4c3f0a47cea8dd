// Load: the first half of the pipeline every verb runs. Reads any input — a file of any format
// (picked by content), a snapshot with the capture sidecar beside it, a folder of captures, the
// built-in example, or a trace the predictor made — into an immutable model::Trace, and puts what
// interpretation adds beside it (model::Interpretation): the sidecar's phases and tensor names,
// and the block sizes the allocator model's replay against the recording establishes. A Loaded is
// complete when Load (or FromTrace) returns it: nothing rewrites it afterwards, and Analyze takes
// it by value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis/ranks.h"
#include "analysis/simulation.h"
#include "common/progress.h"
#include "common/status.h"
#include "model/interpretation.h"
#include "model/trace.h"
#include "pipeline/input.h"
#include "sources/input_limits.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::pipeline {

struct LoadRequest {
  Input input;
  // Only this part of the recording is reported (applied after reading, before the replay).
  WindowRequest window;
  // Reading and replaying are stages on control.progress; control.cancel stops the parse between
  // chunks and the request between stages.
  Control control;
  // The PYTORCH_CUDA_ALLOC_CONF the recorded run used, for snapshots that do not record their
  // settings (before torch 2.3); it decides the replay, hence the block sizes the report adopts.
  std::optional<std::string> recorded_conf;
  // A trace the model cannot replay is an error (simulate), not a note (report).
  bool require_replay = false;
  // For the per-rank figures of a capture folder (each rank is analysed). Absolute.
  std::string project_root;
  // What a legitimate input may cost beyond the defaults (--max-inflate-ratio).
  sources::InputLimits limits;
};

struct Loaded {
  Input input;
  model::Trace trace;  // as its source read it
  model::Interpretation interpretation;
  // The allocator model's runs: runs[0] of each device is the replay, against the recording when
  // the source holds the allocator's state (a snapshot), else the model's own run over the
  // recorded requests (profiler traces, memory timelines). nullopt when there was nothing to
  // replay.
  std::optional<analysis::Simulations> simulations;
  // A capture folder with several processes: one row each, in rank order; `trace` is the one
  // that bounds the job (the highest reserved peak). Empty otherwise.
  std::vector<analysis::RankRow> ranks;
  snapshot::LoadTimings timings;  // parse and model-building time of the file read
  double replay_s = 0;            // the allocator model's replay

  model::TraceView view() const { return {trace, interpretation}; }
};

// Reads request.input. Errors are one line naming the file (or folder) and what to do.
Result<Loaded> Load(const LoadRequest& request);

// A trace made elsewhere — by the predictor (`vramscope predict`), or by a test or fuzz target from
// bytes — interpreted like any input read from a file, with what its maker knows beside it.
struct FromTraceRequest {
  std::string project_root;  // absolute
  Control control;
  // `predict --all-ranks`: every traced rank's row, the one this trace is of marked reported.
  std::vector<analysis::RankRow> ranks;
  // Said among the report's notes (which rank this is, ...).
  std::vector<std::string> notes;
};
Result<Loaded> FromTrace(model::Trace trace, FromTraceRequest request);

// The per-rank row (analysis/ranks.h) of one rank's trace made elsewhere (`vramscope predict
// --all-ranks`: each rank traced in turn): the figures its own report would give.
Result<analysis::RankRow> RankRowOfTrace(model::Trace trace, std::string label, int64_t rank,
                                         const std::string& project_root);

}  // namespace vramscope::pipeline
