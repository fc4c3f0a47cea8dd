// Analyze: the second half of the pipeline. Runs the analysis stage once over a loaded input
// (attribution, curves, peaks, breakdowns, out-of-memory explanations, Skyline's entries) and,
// when asked, the allocator model's what-if runs. The result is everything a reporter renders;
// every verb renders from it, so one input gives one answer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "analysis/analyze.h"
#include "analysis/simulation.h"
#include "common/status.h"
#include "pipeline/load.h"

namespace vramscope::pipeline {

struct AnalyzeOptions {
  std::string project_root;  // absolute (ResolveProjectRoot)
  // What-if runs of the allocator model (`simulate --capacity/--alloc-conf/--compare`).
  std::optional<analysis::WhatIfRequest> what_if;
  // The verb's progress line: attribution, analysis and what-if runs are stages on it. Null: none.
  Progress* progress = nullptr;
};

// Not movable: the analysis refers to the loaded trace and the project root it holds.
struct Analyzed {
  Analyzed(Loaded l, std::string project_root)
      : loaded(std::move(l)), root(std::move(project_root)) {}
  Analyzed(const Analyzed&) = delete;
  Analyzed& operator=(const Analyzed&) = delete;

  Loaded loaded;
  analysis::ProjectRoot root;
  std::unique_ptr<analysis::Analysis> analysis;

  const model::Trace& trace() const { return loaded.trace; }
  model::TraceView view() const { return loaded.view(); }
  // The allocator model's runs (replay first, then what-if runs); null when none were made.
  const analysis::Simulations* simulations() const {
    return loaded.simulations ? &*loaded.simulations : nullptr;
  }
};

Result<std::unique_ptr<Analyzed>> Analyze(Loaded loaded, const AnalyzeOptions& options);

}  // namespace vramscope::pipeline
