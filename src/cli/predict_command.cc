#include "cli/predict_command.h"

#include <fmt/format.h>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/report_output.h"
#include "cli/terminal_progress.h"
#include "report/predict_outputs.h"

namespace vramscope::cli {

namespace {

Status Run(PredictFlags o) {
  pipeline::PredictRequest& request = o.request;
  request.force = o.force;
  // -o and --html hold a layout's chosen role whole, as they hold any predicted step.
  request.role_report = !o.output.empty() || !o.html.empty();
  ReportOutputFlags out;
  out.files.output = o.output;
  out.files.database_by_default = false;
  out.files.html = o.html;
  out.files.force = o.force;
  out.files.json = o.json;
  out.quiet = o.quiet;
  out.top = o.top;
  // Checked before any prediction, so that "already exists" comes at once.
  ASSIGN_OR_RETURN(
      report::PreparedOutputs outputs,
      report::PrepareReportOutputs({pipeline::InputKind::kFile, request.model}, out.files));
  TerminalProgress progress(!o.quiet, /*notes=*/!o.quiet && !o.json);
  request.control = {&progress, &InterruptToken()};
  ASSIGN_OR_RETURN(const pipeline::PredictResult result, pipeline::Predict(request));
  const bool chatty = !o.quiet && !o.json;
  switch (result.kind) {
    case pipeline::PredictResult::Kind::kNoFit:
      if (o.json) fmt::print("{}\n", report::NoFitJson(*result.no_fit).dump(2));
      return InvalidInput("--fit: " + result.no_fit->advice.message);
    case pipeline::PredictResult::Kind::kPlan: {
      const pipeline::PlanAnswer& plan = *result.plan;
      if (o.json) {
        fmt::print("{}\n", report::PlanJson(plan).dump(2));
      } else if (!o.quiet) {
        fmt::print("{}", report::PlanText(plan));
      }
      if (!plan.result.nothing_fits.empty()) {
        return InvalidInput("--plan: nothing fits: " + plan.result.nothing_fits);
      }
      return Status::Ok();
    }
    case pipeline::PredictResult::Kind::kStep:
    case pipeline::PredictResult::Kind::kAllRanks:
      if (result.fit && chatty) fmt::print("{}", report::StepFitText(*result.fit));
      return EmitReport(*result.report, out, outputs, {}, progress);
    case pipeline::PredictResult::Kind::kLayout:
      break;
  }
  const pipeline::LayoutResult& layout = *result.layout;
  if (chatty) fmt::print("{}", report::LayoutFitText(layout));
  if (o.json) {
    fmt::print("{}\n", report::LayoutJson(layout).dump(2));
  } else if (!o.quiet) {
    fmt::print("{}", report::LayoutText(layout));
  }
  if (result.report == nullptr) return Status::Ok();
  if (o.json) {
    // The roles' JSON is stdout's one document; the role's report goes to its files only.
    out.files.json = false;
    out.quiet = true;
  } else if (!o.quiet) {
    fmt::print("{}", report::RoleReportHeader(layout));
  }
  return EmitReport(*result.report, out, outputs, {}, progress);
}

}  // namespace

int RunPredictCommand(const PredictFlags& flags) {
  return RunAndReport(flags.request.model, [&] { return Run(flags); });
}

}  // namespace vramscope::cli
