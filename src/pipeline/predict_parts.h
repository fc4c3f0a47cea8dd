// The parts of pipeline::Predict, one file each (internal to src/pipeline): the request resolved
// (predict.cc), a parallel layout's roles (predict_layout.cc), the user's own model through the
// tracer, one rank or all of them (predict_traced.cc).
#pragma once

#include <string>
#include <vector>

#include "pipeline/predict.h"

namespace vramscope::pipeline::predict_parts {

// The menu's techniques of the request (checkpointing policies, chunked or fused loss, the
// optimizer in backward, 8-bit optimizers, offloading) onto the set-up, each checked
// (predict_techniques.cc); `optimizer` is the --optimizer value, which may name a quantised one.
Status ResolveTechniques(const PredictRequest& r, predict::TrainingSetup& s);
// The techniques of the request that only the built-in families model (flags as written), and
// the first of them ("" for none).
std::vector<std::string> SimulatorOnlyTechniques(const PredictRequest& r);
std::string SimulatorOnlyTechnique(const PredictRequest& r);
// Of those, the first the per-rank estimate of parallel layouts does not model yet ("" when it
// models every technique asked for: today the quantised optimizers but the paged one, and
// --checkpointing-every).
std::string TechniqueOutsideLayouts(const PredictRequest& r);

// Whether the request asks for a parallel layout (or the model has experts, which only the
// per-rank estimate models).
bool WantsParallel(const PredictRequest& r);

// A parallel layout of a built-in family: every rank role placed by the allocator model.
Result<PredictResult> PredictLayout(const PredictRequest& r, const predict::PredictRequest& request,
                                    const predict::ModelSpec& spec);

// The tracer's arguments for the request's set-up.
Result<std::vector<std::string>> TracerArgs(const PredictRequest& r);

// The user's model traced (one rank under world_size): the tracer's stream, written to
// `stream_path`.
Status TraceModel(const PredictRequest& r, const std::string& stream_path);

// Every rank of the user's job traced: the bounding rank's report with every rank's row.
Result<PredictResult> PredictAllRanks(const PredictRequest& r,
                                      const predict::PredictRequest& request);

// A predicted trace through the pipeline like any input (`ranks`, `notes`: FromTraceRequest's).
Result<std::unique_ptr<const Analyzed>> AnalyzePrediction(predict::BuiltTrace built,
                                                          const PredictRequest& r,
                                                          std::vector<analysis::RankRow> ranks = {},
                                                          std::vector<std::string> notes = {});

}  // namespace vramscope::pipeline::predict_parts
