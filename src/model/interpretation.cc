#include "model/interpretation.h"

namespace vramscope::model {

const char* SizeEvidenceName(SizeEvidence evidence) {
  switch (evidence) {
    case SizeEvidence::kRecorded:
      return "recorded";
    case SizeEvidence::kReplayed:
      return "replayed";
    case SizeEvidence::kEstimated:
      return "estimated";
  }
  return "estimated";
}

const Interpretation& NoInterpretation() {
  static const Interpretation* const kNone = new Interpretation();
  return *kNone;
}

std::optional<Category> TraceView::RecordedCategory(uint32_t event) const {
  if (const auto it = interpretation.category.find(event); it != interpretation.category.end()) {
    return it->second;
  }
  if (const auto it = trace.events.category.find(event); it != trace.events.category.end()) {
    return it->second;
  }
  return std::nullopt;
}

std::string_view TraceView::TensorName(uint32_t event) const {
  if (const auto it = interpretation.tensor_name.find(event);
      it != interpretation.tensor_name.end()) {
    return it->second;
  }
  if (const auto it = trace.events.tensor_name.find(event); it != trace.events.tensor_name.end()) {
    return trace.strings.Get(it->second);
  }
  return {};
}

std::vector<std::string> TraceView::Notes() const {
  std::vector<std::string> out = trace.facts.notes;
  out.insert(out.end(), interpretation.notes.begin(), interpretation.notes.end());
  return out;
}

}  // namespace vramscope::model
