// The ranks of a multi-process capture (`vramscope run` under torchrun, `vramscope report
// FOLDER`): one row per process with the figures its own report gives, which one bounds the job
// (its full report is the one shown), the ranks aligned step by step, and what the bounding rank
// holds at its peak that the others do not. The pipeline fills the rows; reporters render them.
// A row keeps only these figures (a few KiB), so a folder of hundreds of ranks stays small.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "attribution/phases.h"

namespace vramscope::analysis {

// One step of one rank: its peak and the phase it fell in.
struct RankStep {
  int32_t step = 0;
  int64_t peak_allocated = 0;
  std::string peak_phase;
};

// One phase of one step of one rank: the highest allocated memory inside it.
struct RankPhase {
  int32_t step = 0;
  std::string phase;
  int64_t peak_allocated = 0;
};

// What was live at a rank's peak, grouped by owner (OwnerNamer's labels).
struct RankOwner {
  std::string category;
  std::string owner;
  int64_t bytes = 0;
};

// RankRow::file of a rank that `predict --all-ranks` traced rather than a capture read.
inline constexpr std::string_view kTracedRankFile = "(traced)";

// The owners a row keeps: the largest at its peak.
inline constexpr size_t kRankOwnersKept = 32;

struct RankRow {
  std::string label;  // rank3, pid1234
  std::optional<int64_t> rank;
  std::optional<int64_t> local_rank;
  std::string host;
  int32_t device = 0;
  std::string device_name;
  std::string file;  // the capture read, relative to the folder; kTracedRankFile: not a capture
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  int32_t peak_step = 0;
  std::string peak_phase;
  int64_t steps = 0;                   // iterations the trace holds
  std::string end_reason;              // exit, steps, oom, exception, signal (empty: unknown)
  bool oom = false;                    // an allocation failed
  bool reported = false;               // the rank whose full report follows
  std::vector<RankStep> step_peaks;    // in step order
  std::vector<RankPhase> phase_peaks;  // in step, then phase order
  std::vector<std::pair<std::string, int64_t>> at_peak;  // bytes by category, fixed order
  std::vector<RankOwner> owners_at_peak;                 // largest first, kRankOwnersKept
};

// One step (or one phase of a step) across the ranks whose trace holds it: the lowest, median
// and highest peak, and where the highest fell.
struct RankStepSpread {
  int32_t step = 0;
  std::string phase;  // empty: the whole step
  size_t ranks = 0;
  int64_t lowest = 0, median = 0, highest = 0;
  std::string highest_label, highest_phase;
};

// Why the bounding rank bounds the job: its peak against the median of the other ranks' peaks,
// the categories where it holds more at its peak than their median does at theirs, and the
// owners live at its peak that are among no other rank's kRankOwnersKept largest at its peak.
struct RankContrast {
  std::string label;
  int64_t peak_allocated = 0;
  int64_t others_median = 0;
  size_t others = 0;
  std::vector<std::pair<std::string, int64_t>> category_excess;  // largest first, > 0 only
  std::vector<RankOwner> held_alone;                             // largest first
};

// The figures of a rank's row from its summary: the device with the highest reserved peak.
void FillRankFigures(const Summary& summary, RankRow& row);
// Each phase's peak in each step (step 1 on) of the row's device, from the phases the attribution
// found and the allocated curve.
void FillRankPhases(const attribution::Phases& phases, const Timelines& timelines, RankRow& row);

// The index of the rank that bounds the job (model/bounding.h's rule).
size_t BoundingRank(const std::vector<RankRow>& rows);

// The ranks aligned by step (the steps the captures mark: `vramscope run` counts them the same
// way on every rank).
std::vector<RankStepSpread> AlignRanksByStep(const std::vector<RankRow>& rows);
// The same per (step, phase), in step order and then the order of a training step's phases.
std::vector<RankStepSpread> AlignRanksByPhase(const std::vector<RankRow>& rows);

RankContrast ContrastBoundingRank(const std::vector<RankRow>& rows, size_t bounding);

// The ranks compared, once per result (pipeline::Analyzed::ranks_compared): the bounding rank
// (the one marked reported, else BoundingRank's), the ranks aligned by step and by phase, and the
// bounding rank's contrast with the others. Every renderer (terminal, JSON, the viewer's data)
// shows this.
struct RankComparison {
  size_t bounding = 0;
  std::vector<RankStepSpread> by_step;
  std::vector<RankStepSpread> by_phase;
  RankContrast contrast;
};
RankComparison CompareRanks(const std::vector<RankRow>& rows);

}  // namespace vramscope::analysis
