// `vramscope predict` as a library: a model and a training set-up in, the predicted trace out
// (through the step simulator or a tracer file, the GPU's workspace rules and the allocator
// model), and the largest batch or sequence length that fits a capacity.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/progress.h"
#include "common/status.h"
#include "device/non_pytorch_memory.h"
#include "model/parallel_prediction.h"
#include "predict/build_trace.h"
#include "predict/device_rules.h"
#include "predict/model_spec.h"

namespace vramscope::predict {

struct PredictRequest {
  std::string model;  // preset, config.json, layer list, or a tracer .jsonl file
  TrainingSetup setup;
  std::optional<GpuSpec> gpu;
  uint64_t capacity = 0;  // explicit capacity (bytes of GPU memory); 0: the GPU's, or unlimited
  std::string torch_version = "2.11";
  std::string alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF of the predicted run
  // Outside the allocator (CUDA context, libraries' kernels, NCCL): what the allocator cannot
  // reserve of the GPU. `outside` says what it is made of (its Total() is context_bytes); empty
  // when the caller gave only a total.
  uint64_t context_bytes = 500ull << 20;
  device::OutsideMemory outside;

  // The GPU's memory: `capacity` when given, else the GPU's; 0: unlimited.
  uint64_t TotalMemory() const { return capacity ? capacity : (gpu ? gpu->total_memory : 0); }
  // What the allocator may reserve of it (device::LeftToAllocator); 0: unlimited or nothing left.
  uint64_t AllocatorCapacity() const {
    return device::LeftToAllocator(TotalMemory(), context_bytes);
  }
};

// The model, loaded once (a preset, a config, a layer list or a tracer stream).
struct LoadedModel {
  std::optional<ModelSpec> spec;
  std::string traced;  // a tracer file, read by PredictStream
};
Result<LoadedModel> LoadModel(const std::string& model);

// The set-up in words, as the report's `setup` line: "batch 8, seq 512, float32 weights, ...".
std::string SetupText(const ModelSpec& model, const TrainingSetup& setup);

// The stream of the request (with workspaces) and its description; no allocator yet. `control`'s
// token stops a long simulation (SimulateTraining).
Result<TensorStream> PredictStream(const LoadedModel& model, const PredictRequest& request,
                                   const Control& control = {});

// The stream of one rank role of a parallel layout (predict/role_stream.h) with its workspaces
// and description, for the allocator model to place; `prediction` is PredictParallel's for
// `model` and request.setup.
Result<TensorStream> PredictRoleStream(const ModelSpec& model, const PredictRequest& request,
                                       const model::ParallelPrediction& prediction, size_t role);

// The allocator settings of the request, with the capacity the allocator may reserve.
Result<allocator::AllocatorSettings> SettingsFor(const PredictRequest& request);

// The allocator run over a stream PredictStream made for `request`.
Result<BuiltTrace> BuildPrediction(TensorStream stream, const PredictRequest& request);

// PredictStream, then BuildPrediction.
Result<BuiltTrace> Predict(const LoadedModel& model, const PredictRequest& request);

enum class FitDimension : uint8_t { kBatch, kSeq };
struct FitResult {
  FitDimension dimension = FitDimension::kBatch;
  uint64_t largest = 0;  // 0: not even 1 fits
  uint64_t peak_reserved = 0;
  uint64_t peak_allocated = 0;
  uint64_t capacity = 0;  // what the allocator may reserve
  int simulations = 0;
  std::vector<std::pair<uint64_t, bool>> tried;  // (size, fits), in the order tried
  // When not even size 1 fits (largest == 0): size 1's peaks with no capacity limit, i.e. what
  // the step would need (fit_advice.h says by how much it misses and what is left to try).
  uint64_t needed_reserved = 0;
  uint64_t needed_allocated = 0;
};
// Searches the largest batch (or sequence length) whose predicted step fits, with the full
// simulation at each size: doubling, then bisection. `limit` bounds the search.
Result<FitResult> Fit(const LoadedModel& model, const PredictRequest& request,
                      FitDimension dimension, uint64_t limit, const Control& control = {});

}  // namespace vramscope::predict
