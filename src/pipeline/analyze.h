// Analyze: the second half of the pipeline. Runs the analysis stage once over a loaded input
// (attribution, curves, peaks, breakdowns, out-of-memory explanations, Skyline's entries, every
// site and owner named), the allocator model's what-if runs when asked, and the comparison of the
// ranks of a capture folder. The result is everything a reporter renders, complete and read-only
// when Analyze returns it; every verb renders from it, so one input gives one answer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "analysis/analyze.h"
#include "analysis/ranks.h"
#include "analysis/simulation.h"
#include "common/progress.h"
#include "common/status.h"
#include "pipeline/load.h"

namespace vramscope::pipeline {

struct AnalyzeRequest {
  std::string project_root;  // absolute (ResolveProjectRoot)
  // What-if runs of the allocator model (`simulate --capacity/--alloc-conf/--compare`).
  std::optional<analysis::WhatIfRequest> what_if;
  // Attribution, analysis and what-if runs are stages on control.progress; control.cancel is
  // checked between them.
  Control control;
};

// Not movable: the analysis refers to the loaded trace and the project root it holds. Analyze
// hands it out as a pointer to const.
struct Analyzed {
  Analyzed(Loaded l, std::string project_root)
      : loaded(std::move(l)), root(std::move(project_root)) {}
  Analyzed(const Analyzed&) = delete;
  Analyzed& operator=(const Analyzed&) = delete;

  Loaded loaded;  // its `simulations` moved into `simulations` below
  analysis::ProjectRoot root;
  // The allocator model's runs: the replay first, then the what-if runs asked for; nullopt when
  // there was nothing to replay.
  std::optional<analysis::Simulations> simulations;
  std::unique_ptr<const analysis::Analysis> analysis;
  // The ranks of a capture folder (or of `predict --all-ranks`) compared: which one bounds the
  // job, the ranks aligned by step and phase, what the bounding one holds alone. nullopt without
  // ranks.
  std::optional<analysis::RankComparison> ranks_compared;

  const model::Trace& trace() const { return loaded.trace; }
  model::TraceView view() const { return loaded.view(); }
  const std::vector<analysis::RankRow>& ranks() const { return loaded.ranks; }
  // The allocator model's runs (replay first, then what-if runs); null when none were made.
  const analysis::Simulations* sims() const { return simulations ? &*simulations : nullptr; }
};

Result<std::unique_ptr<const Analyzed>> Analyze(Loaded loaded, const AnalyzeRequest& request);

}  // namespace vramscope::pipeline
