#include "report/diff_outputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/units.h"
#include "report/diff_side_reader.h"
#include "report/input_reports.h"

namespace vramscope::report {

namespace {

using analysis::Change;

std::string Signed(int64_t bytes) {
  if (bytes == 0) return "0 B";
  return (bytes > 0 ? "+" : "-") + FormatBytes(bytes > 0 ? bytes : -bytes);
}

std::string Side(const std::optional<int64_t>& v) { return v ? FormatBytes(*v) : std::string("-"); }

std::string Percent(const Change& c) {
  if (!c.a || !c.b || *c.a == 0) return "";
  return fmt::format(" ({:+.1f}%)",
                     100.0 * static_cast<double>(*c.b - *c.a) / static_cast<double>(*c.a));
}

// The change first, then A -> B, then what changed: names (owners, sites) may be long.
void ChangeLine(std::string& out, const Change& c) {
  out += fmt::format("    {:>12}  {:>11} -> {:<11}  {}{}\n", Signed(c.Delta()), Side(c.a),
                     Side(c.b), c.what, Percent(c));
}

// `order`: how the list is sorted ("largest first", "in step order").
void ChangeList(std::string& out, const std::string& title, const char* order,
                const std::vector<Change>& changes, size_t top) {
  if (changes.empty()) {
    out += fmt::format("  {}: no change\n", title);
    return;
  }
  out += fmt::format("  {} ({} changed, {}):\n", title, changes.size(), order);
  const size_t shown = std::min(top, changes.size());
  for (size_t i = 0; i < shown; ++i) ChangeLine(out, changes[i]);
  if (shown < changes.size())
    out += fmt::format("    ... {} more (--top)\n", changes.size() - shown);
}

std::string GrowthText(const std::optional<analysis::Growth>& g, size_t top) {
  if (!g) return "no memory grows at every step";
  std::string out = fmt::format("grows {} per step (live as steps {} to {} begin)",
                                FormatBytes(g->per_step), g->first_step, g->last_step);
  for (size_t i = 0; i < g->owners.size() && i < top; ++i) {
    out += fmt::format("\n      {} per step: {}", FormatBytes(g->owners[i].second),
                       g->owners[i].first);
  }
  return out;
}

nlohmann::json ChangeJson(const Change& c) {
  return {{"what", c.what},
          {"a_bytes", c.a ? nlohmann::json(*c.a) : nlohmann::json(nullptr)},
          {"b_bytes", c.b ? nlohmann::json(*c.b) : nlohmann::json(nullptr)},
          {"delta_bytes", c.Delta()}};
}

nlohmann::json ChangesJson(const std::vector<Change>& changes) {
  nlohmann::json out = nlohmann::json::array();
  for (const Change& c : changes) out.push_back(ChangeJson(c));
  return out;
}

nlohmann::json GrowthJson(const std::optional<analysis::Growth>& g) {
  if (!g) return nullptr;
  nlohmann::json owners = nlohmann::json::array();
  for (const auto& [owner, bytes] : g->owners) {
    owners.push_back({{"owner", owner}, {"bytes_per_step", bytes}});
  }
  return {{"first_step", g->first_step},
          {"last_step", g->last_step},
          {"bytes_per_step", g->per_step},
          {"owners", owners}};
}

const char* OpText(analysis::Gate::Op op) {
  switch (op) {
    case analysis::Gate::Op::kGreater:
      return ">";
    case analysis::Gate::Op::kGreaterEqual:
      return ">=";
    case analysis::Gate::Op::kLess:
      return "<";
    case analysis::Gate::Op::kLessEqual:
      return "<=";
  }
  return "?";
}

}  // namespace

bool DiffResult::Failed() const {
  return std::any_of(gates.begin(), gates.end(), [](const auto& g) { return g.failed; });
}

Result<DiffResult> RunDiff(const DiffRequest& request) {
  std::vector<analysis::Gate> gates;
  for (const std::string& text : request.gates) {
    ASSIGN_OR_RETURN(analysis::Gate gate, analysis::ParseGate(text));
    gates.push_back(std::move(gate));
  }
  InputReports reports;
  const InputReportsRequest each{
      request.project_root, request.limits, request.control, "the comparison", {}};
  RETURN_IF_ERROR(reports.Add(request.a, each));
  RETURN_IF_ERROR(reports.Add(request.b, each));
  request.control.Stage("comparing the reports");
  ASSIGN_OR_RETURN(const analysis::DiffSide a,
                   ReadDiffSide(reports.databases()[0], request.a, request.control));
  ASSIGN_OR_RETURN(const analysis::DiffSide b,
                   ReadDiffSide(reports.databases()[1], request.b, request.control));
  DiffResult result;
  ASSIGN_OR_RETURN(result.diff, analysis::CompareReports(a, b, request.device));
  result.gates = analysis::EvaluateGates(gates, result.diff);
  request.control.Finish();
  return result;
}

std::string DiffText(const DiffResult& result, size_t top) {
  const analysis::Diff& d = result.diff;
  std::string out =
      fmt::format("vramscope diff: A = {}{}\n                B = {}{}\n", d.a,
                  d.predicted_a ? " (predicted)" : "", d.b, d.predicted_b ? " (predicted)" : "");
  for (const analysis::DeviceDiff& dev : d.devices) {
    out += dev.device_a == dev.device_b && d.device_type_a == d.device_type_b
               ? fmt::format("\n{}:{}\n", d.device_type_a, dev.device_a)
               : fmt::format("\nA {}:{} against B {}:{}\n", d.device_type_a, dev.device_a,
                             d.device_type_b, dev.device_b);
    ChangeLine(out, dev.peak_allocated);
    ChangeLine(out, dev.peak_reserved);
    std::vector<Change> categories;
    for (const Change& c : dev.categories) {
      if (c.Delta() != 0) categories.push_back(c);
    }
    ChangeList(out, "by category at the peak", "in the report's order", categories, top);
    ChangeList(out, "by owner at the peak", "largest first", dev.owners, top);
    ChangeList(out, "by allocation site at the peak", "largest first", dev.sites, top);
    std::vector<Change> steps;
    for (const Change& c : dev.steps) {
      if (c.Delta() != 0) steps.push_back(c);
    }
    ChangeList(out, "peak of each step", "in step order", steps, top);
    out += fmt::format("  A: {}\n  B: {}\n", GrowthText(dev.growth_a, top),
                       GrowthText(dev.growth_b, top));
  }
  if (!result.gates.empty()) out += "\n";
  for (const analysis::GateOutcome& g : result.gates) {
    out += fmt::format("{} {}: B {} {} {} (A {}) on cuda:{}\n", g.failed ? "FAILED" : "passed",
                       g.gate.text, FormatBytes(g.b), OpText(g.gate.op), FormatBytes(g.limit),
                       FormatBytes(g.a), g.device);
  }
  return out;
}

nlohmann::json DiffJson(const DiffResult& result) {
  const analysis::Diff& d = result.diff;
  nlohmann::json devices = nlohmann::json::array();
  for (const analysis::DeviceDiff& dev : d.devices) {
    devices.push_back({{"device_a", dev.device_a},
                       {"device_b", dev.device_b},
                       {"peak_allocated", ChangeJson(dev.peak_allocated)},
                       {"peak_reserved", ChangeJson(dev.peak_reserved)},
                       {"categories_at_peak", ChangesJson(dev.categories)},
                       {"owners_at_peak", ChangesJson(dev.owners)},
                       {"sites_at_peak", ChangesJson(dev.sites)},
                       {"step_peaks", ChangesJson(dev.steps)},
                       {"growth_a", GrowthJson(dev.growth_a)},
                       {"growth_b", GrowthJson(dev.growth_b)}});
  }
  nlohmann::json gates = nlohmann::json::array();
  for (const analysis::GateOutcome& g : result.gates) {
    gates.push_back({{"gate", g.gate.text},
                     {"metric", g.gate.metric},
                     {"device", g.device},
                     {"a", g.a},
                     {"b", g.b},
                     {"limit", g.limit},
                     {"failed", g.failed}});
  }
  return {{"schema_version", kDiffJsonVersion},
          {"a", {{"input", d.a}, {"predicted", d.predicted_a}}},
          {"b", {{"input", d.b}, {"predicted", d.predicted_b}}},
          {"devices", devices},
          {"gates", gates},
          {"failed", result.Failed()}};
}

}  // namespace vramscope::report
