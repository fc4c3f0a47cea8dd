// `vramscope predict --model M --batch N ...`: the memory of a training step before you have the
// GPU. Flags -> pipeline::PredictRequest -> pipeline::Predict -> the report of the predicted step
// (report/report_outputs.h) or a layout's roles (report/predict_outputs.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "pipeline/predict.h"

namespace vramscope::cli {

struct PredictFlags {
  pipeline::PredictRequest request;  // the set-up, the layout, the fit, the tracer
  // The outputs, as `report`'s: -o the database, --html the viewer page (of a layout's chosen
  // role), --force, --json, -q, --top.
  std::string output;
  std::string html;
  bool force = false;
  bool json = false;
  bool quiet = false;
  int top = 10;
};

// predict_flags.cc: the flags, bound to `flags`.
void RegisterPredictCommand(CLI::App& app, PredictFlags& flags);
int RunPredictCommand(const PredictFlags& flags);

}  // namespace vramscope::cli
