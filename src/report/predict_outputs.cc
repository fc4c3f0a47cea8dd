#include "report/predict_outputs.h"

#include <fmt/format.h>

#include "common/units.h"
#include "report/parallel_roles_output.h"

namespace vramscope::report {

std::string StepFitText(const pipeline::StepFit& fit) {
  const char* what = fit.dimension == predict::FitDimension::kBatch ? "batch" : "sequence length";
  return fmt::format(
      "fit: the largest {} that fits is {} (peak reserved {} of the {} the allocator "
      "can have; {} simulations)\n\n",
      what, FormatCount(static_cast<int64_t>(fit.largest)),
      FormatBytes(static_cast<int64_t>(fit.peak_reserved)),
      FormatBytes(static_cast<int64_t>(fit.capacity)), fit.simulations);
}

nlohmann::json NoFitJson(const pipeline::NoFit& f) {
  return {{"schema_version", kPredictJsonVersion},
          {"fit",
           {{"dimension", f.dimension},
            {"largest", 0},
            {"capacity_bytes", f.capacity},
            {"needed_reserved_bytes", f.advice.needed_reserved},
            {"needed_allocated_bytes", f.needed_allocated},
            {"shortfall_bytes", f.advice.shortfall},
            {"levers", f.advice.levers},
            {"simulations", f.simulations}}}};
}

std::string LayoutFitText(const pipeline::LayoutResult& layout) {
  if (!layout.fit) return "";
  const model::ParallelLayout& l = layout.prediction.layout;
  return fmt::format(
      "fit: the smallest layout that fits is TP {} x PP {} ({} GPUs per model replica; the "
      "bounding role ({}) needs {} of the {} per rank; {} layouts tried)\n\n",
      l.tp, l.pp, l.tp * l.pp, layout.fit->bounding_role,
      FormatBytes(static_cast<int64_t>(layout.fit->bounding_bytes)),
      FormatBytes(static_cast<int64_t>(layout.capacity.allocator_bytes)), layout.fit->tried);
}

std::string LayoutText(const pipeline::LayoutResult& layout) {
  return RenderParallelRoles(layout.prediction, layout.model_label, layout.setup_text,
                             layout.capacity);
}

nlohmann::json LayoutJson(const pipeline::LayoutResult& layout) {
  nlohmann::json json =
      ParallelRolesJson(layout.prediction, layout.model_label, layout.setup_text, layout.capacity);
  json["schema_version"] = kPredictJsonVersion;
  return json;
}

std::string RoleReportHeader(const pipeline::LayoutResult& layout) {
  return fmt::format(
      "\nTHE STEP OF ONE RANK OF THE {} (written below; -o/--html hold it whole)\n\n",
      layout.prediction.roles[layout.chosen].name);
}

}  // namespace vramscope::report
