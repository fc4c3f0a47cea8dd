#include "model/category.h"

namespace vramscope::model {

const char* CategoryName(Category category) {
  switch (category) {
    case Category::kWeight:
      return "weight";
    case Category::kGradient:
      return "gradient";
    case Category::kOptimizerState:
      return "optimizer_state";
    case Category::kActivation:
      return "activation";
    case Category::kInput:
      return "input";
    case Category::kWorkspace:
      return "workspace";
    case Category::kTemporary:
      return "temporary";
    case Category::kUnknown:
      return "unknown";
  }
  return "?";
}

std::optional<Category> ParseCategory(std::string_view name) {
  for (int c = 0; c < kCategoryCount; ++c) {
    if (name == CategoryName(static_cast<Category>(c))) return static_cast<Category>(c);
  }
  return std::nullopt;
}

}  // namespace vramscope::model
