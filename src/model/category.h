// The categories every byte of a training step is attributed to (see the shared spec,
// training-memory.md). They live in the event model because some sources record them themselves
// (PyTorch's memory profiler, a capture sidecar naming tensors); attribution fills in the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace vramscope::model {

enum class Category : uint8_t {
  kWeight,          // parameters and buffers
  kGradient,        // .grad of a trainable weight
  kOptimizerState,  // momentum, Adam's exp_avg/exp_avg_sq, fp32 master copies
  kActivation,      // tensors saved by forward for backward
  kInput,           // the batch moved to the device
  kWorkspace,       // cuBLAS/cuBLASLt/cuDNN scratch
  kTemporary,       // op outputs not saved for backward, activation gradients, step scratch
  kUnknown,
};
inline constexpr int kCategoryCount = 8;

// "weight", "gradient", "optimizer_state", ... (stable: used in JSON and the report database).
const char* CategoryName(Category category);
// The inverse of CategoryName.
std::optional<Category> ParseCategory(std::string_view name);

}  // namespace vramscope::model
