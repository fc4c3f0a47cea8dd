// Attribution: every allocation gets one category, the rule that decided it, how sure that rule
// is, and the operation that produced it where one can be named. This is the first cut, driven by
// the allocation's stack and its lifetime; it never edits the trace.
#pragma once

#include <cstdint>
#include <vector>

#include "attribution/stack_facts.h"
#include "model/trace.h"

namespace vramscope::attribution {

enum class Category : uint8_t {
  kWeight,
  kGradient,
  kOptimizerState,
  kActivation,
  kInput,
  kWorkspace,
  kTemporary,
  kUnknown,
};
inline constexpr int kCategoryCount = 8;
const char* CategoryName(Category category);

enum class Confidence : uint8_t { kLow, kMedium, kHigh };
const char* ConfidenceName(Confidence confidence);

struct AllocationInfo {
  Category category = Category::kUnknown;
  Confidence confidence = Confidence::kLow;
  uint8_t rule_id = 0;  // RuleText(rule_id): a sentence a user can read, why this category
  model::StringId operation = model::kEmptyString;
  model::StringId module_kind = model::kEmptyString;
};

// The sentence of a rule id (ids are handed out by Attribute, one per distinct rule).
const char* RuleText(uint8_t rule_id);
static_assert(sizeof(AllocationInfo) == 12, "one per tensor allocation: keep it small");

struct Attribution {
  std::vector<AllocationInfo> allocations;  // parallel to Trace::allocations
};

Attribution Attribute(model::Trace& trace);

}  // namespace vramscope::attribution
