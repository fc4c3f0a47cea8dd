#include "report/predict_outputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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

namespace {

nlohmann::json OptionsJson(const std::vector<predict::PlanOption>& options) {
  nlohmann::json out = nlohmann::json::array();
  for (const predict::PlanOption& o : options) {
    out.push_back({{"techniques", o.techniques},
                   {"flags", o.flags},
                   {"peak_reserved_bytes", o.peak_reserved},
                   {"host_bytes", o.host_bytes},
                   {"added_seconds", o.added_seconds},
                   {"changes_training", o.changes_training}});
  }
  return out;
}

}  // namespace

nlohmann::json NoFitJson(const pipeline::NoFit& f) {
  nlohmann::json fit = {{"dimension", f.dimension},
                        {"largest", 0},
                        {"capacity_bytes", f.capacity},
                        {"needed_reserved_bytes", f.advice.needed_reserved},
                        {"needed_allocated_bytes", f.needed_allocated},
                        {"shortfall_bytes", f.advice.shortfall},
                        {"levers", f.advice.levers},
                        {"simulations", f.simulations}};
  // The plan at size 1, when one ran: the set-ups where size 1 fits, as --plan's options.
  if (!f.advice.plan_command.empty()) {
    fit["plan"] = {{"command", f.advice.plan_command},
                   {"options", OptionsJson(f.advice.options)},
                   {"nothing_fits", f.advice.nothing_fits}};
  }
  return {{"schema_version", kPredictJsonVersion}, {"fit", fit}};
}

namespace {

std::string Seconds(double s) {
  if (s < 1e-3) return "+0 ms";
  if (s < 1) return fmt::format("+{:.0f} ms", s * 1e3);
  return fmt::format("+{:.2f} s", s);
}

std::string BudgetText(const pipeline::PlanAnswer& p) {
  std::string gpu =
      p.gpu_name.empty()
          ? FormatBytes(static_cast<int64_t>(p.gpu_memory))
          : fmt::format("{} ({})", p.gpu_name, FormatBytes(static_cast<int64_t>(p.gpu_memory)));
  return p.gpus > 1 ? fmt::format("{} x {}", p.gpus, gpu) : gpu;
}

}  // namespace

std::string PlanText(const pipeline::PlanAnswer& p) {
  const predict::PlanResult& r = p.result;
  std::string out =
      fmt::format("plan: {} on {}\n  set-up    {}\n", p.model_label, BudgetText(p), p.setup_text);
  out += fmt::format("  as asked: peak reserved {} per GPU, of the {} the allocator may use: {}\n",
                     FormatBytes(static_cast<int64_t>(r.baseline_peak)),
                     FormatBytes(static_cast<int64_t>(r.capacity)),
                     r.baseline_fits ? "it fits as it is" : "it does not fit");
  if (r.baseline_fits) return out;
  if (!r.nothing_fits.empty()) {
    return out +
           fmt::format("  nothing fits: {} ({} simulations)\n\n", r.nothing_fits, r.simulations);
  }
  out += fmt::format(
      "  {} that {}, cheapest first (the step's compute by the cost model: {:.2f} s; "
      "{} simulations):\n",
      r.options.size() == 1 ? std::string("1 option") : fmt::format("{} options", r.options.size()),
      r.options.size() == 1 ? "fits" : "fit", r.step_seconds, r.simulations);
  int n = 0;
  for (const predict::PlanOption& o : r.options) {
    std::string what;
    for (size_t i = 0; i < o.techniques.size(); ++i) what += (i ? " + " : "") + o.techniques[i];
    if (what.empty()) what = "as asked";
    out += fmt::format("  {}. {}{}\n", ++n, what,
                       o.changes_training ? " (changes what is trained)" : "");
    std::string host;
    if (o.host_bytes > 0) {
      host = fmt::format(", host {}", FormatBytes(static_cast<int64_t>(o.host_bytes)));
    }
    out += fmt::format("     peak reserved {}{}, time {} per step\n",
                       FormatBytes(static_cast<int64_t>(o.peak_reserved)), host,
                       Seconds(o.added_seconds));
    out += fmt::format("     flags: {}\n", fmt::join(o.flags, " "));
  }
  return out;
}

nlohmann::json PlanJson(const pipeline::PlanAnswer& p) {
  const predict::PlanResult& r = p.result;
  const nlohmann::json options = OptionsJson(r.options);
  return {{"schema_version", kPredictJsonVersion},
          {"plan",
           {{"budget", p.budget},
            {"gpus", p.gpus},
            {"gpu", p.gpu_name},
            {"gpu_memory_bytes", p.gpu_memory},
            {"capacity_bytes", r.capacity},
            {"model", p.model_label},
            {"setup", p.setup_text},
            {"baseline_peak_reserved_bytes", r.baseline_peak},
            {"baseline_fits", r.baseline_fits},
            {"step_seconds", r.step_seconds},
            {"options", options},
            {"nothing_fits", r.nothing_fits},
            {"simulations", r.simulations},
            {"speeds", r.speed_source}}}};
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
