// `vramscope predict`'s own outputs (and the Python API's), beside the report of the predicted
// step that report_outputs.h renders like any other: the line of a fit, the document of a fit
// that found nothing, and a parallel layout's roles as terminal text and as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "pipeline/predict.h"

namespace vramscope::report {

// The version of the documents below (`predict --json` of a layout's roles and of a fit that
// found nothing); a predicted step's own document is report_outputs.h's (kReportJsonVersion).
inline constexpr int kPredictJsonVersion = 1;

// "fit: the largest batch that fits is 12 (peak reserved ...)\n\n"
std::string StepFitText(const pipeline::StepFit& fit);
// {"fit": {"dimension", "largest": 0, ...}}: --fit that found no size, with the levers left.
nlohmann::json NoFitJson(const pipeline::NoFit& no_fit);

// --plan's answer: the set-up's peak against the budget, then each option that fits (its
// techniques, peak, host memory, cost to the step's time and the flags to add), cheapest first.
std::string PlanText(const pipeline::PlanAnswer& plan);
nlohmann::json PlanJson(const pipeline::PlanAnswer& plan);

// "fit: the smallest layout that fits is TP 2 x PP 4 (...)\n\n" (--fit-dim layout).
std::string LayoutFitText(const pipeline::LayoutResult& layout);
// The roles' table, and the same as JSON.
std::string LayoutText(const pipeline::LayoutResult& layout);
nlohmann::json LayoutJson(const pipeline::LayoutResult& layout);
// The line above the chosen role's report on the terminal.
std::string RoleReportHeader(const pipeline::LayoutResult& layout);

}  // namespace vramscope::report
