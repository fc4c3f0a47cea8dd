#include "analysis/diff_gate.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "common/units.h"
#include "model/category.h"

namespace vramscope::analysis {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool KnownMetric(const std::string& name) {
  for (const auto& [metric, _] : GateMetrics()) {
    if (metric == name) return true;
  }
  return false;
}

std::string MetricList() {
  std::string out;
  for (const auto& [metric, _] : GateMetrics()) out += (out.empty() ? "" : ", ") + metric;
  return out;
}

// The value of `metric` on one side of a device pair.
int64_t Value(const DeviceDiff& d, const std::string& metric, bool side_b) {
  const auto pick = [&](const Change& c) { return (side_b ? c.b : c.a).value_or(0); };
  if (metric == "peak_allocated") return pick(d.peak_allocated);
  if (metric == "peak_reserved") return pick(d.peak_reserved);
  if (metric == "growth_per_step") {
    const auto& g = side_b ? d.growth_b : d.growth_a;
    return g ? g->per_step : 0;
  }
  for (const Change& c : d.categories) {
    if (c.what == metric) return pick(c);
  }
  return 0;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& GateMetrics() {
  static const auto* metrics = [] {
    auto* m = new std::vector<std::pair<std::string, std::string>>{
        {"peak_allocated", "the peak of allocated memory"},
        {"peak_reserved", "the peak of reserved memory"},
        {"growth_per_step",
         "the bytes live as each step begins rise at every step by this much (0: no growth)"},
    };
    for (int c = 0; c < model::kCategoryCount; ++c) {
      const char* name = model::CategoryName(static_cast<model::Category>(c));
      m->emplace_back(name, fmt::format("the bytes of {} live at the peak", name));
    }
    return m;
  }();
  return *metrics;
}

Result<Gate> ParseGate(const std::string& text) {
  const std::string_view s = Trim(text);
  const auto usage = [&](const std::string& why) {
    return UsageError(fmt::format(
        "--fail-if \"{}\": {}; write METRIC OP LIMIT, e.g. \"peak_allocated > +10%\" or "
        "\"peak_reserved > 40GiB\" (metrics: {})",
        ForMessage(text), why, MetricList()));
  };
  size_t op_at = s.find_first_of("<>");
  if (op_at == std::string_view::npos) return usage("no comparison (>, >=, <, <=)");
  Gate g;
  g.text = std::string(s);
  g.metric = std::string(Trim(s.substr(0, op_at)));
  size_t after = op_at + 1;
  const bool equal = after < s.size() && s[after] == '=';
  if (equal) ++after;
  g.op = s[op_at] == '>' ? (equal ? Gate::Op::kGreaterEqual : Gate::Op::kGreater)
                         : (equal ? Gate::Op::kLessEqual : Gate::Op::kLess);
  if (g.metric.empty()) return usage("no metric before the comparison");
  if (!KnownMetric(g.metric))
    return usage(fmt::format("unknown metric '{}'", ForMessage(g.metric)));
  std::string_view limit = Trim(s.substr(after));
  if (limit.empty()) return usage("no limit after the comparison");
  double sign = 1;
  bool relative = false;
  if (limit.front() == '+' || limit.front() == '-') {
    relative = true;
    sign = limit.front() == '-' ? -1 : 1;
    limit = Trim(limit.substr(1));
  }
  if (!limit.empty() && limit.back() == '%') {
    if (!relative) return usage("a percentage needs a sign: +10% or -5% (of A's value)");
    const std::string number(Trim(limit.substr(0, limit.size() - 1)));
    char* end = nullptr;
    const double percent = std::strtod(number.c_str(), &end);
    if (number.empty() || end != number.c_str() + number.size() || !std::isfinite(percent) ||
        percent < 0 || percent > 1e6) {
      return usage(fmt::format("'{}' is not a percentage", ForMessage(std::string(limit))));
    }
    g.limit = Gate::Limit::kPercentOfA;
    g.value = sign * percent;
    return g;
  }
  const int64_t bytes = ParseBytes(std::string(limit));
  if (bytes < 0) {
    return usage(fmt::format("'{}' is not a size (24GiB, 512MiB, 1.5GB, bytes)",
                             ForMessage(std::string(limit))));
  }
  g.limit = relative ? Gate::Limit::kBytesOverA : Gate::Limit::kBytes;
  g.value = sign * static_cast<double>(bytes);
  return g;
}

std::vector<GateOutcome> EvaluateGates(const std::vector<Gate>& gates, const Diff& diff) {
  std::vector<GateOutcome> out;
  for (const Gate& gate : gates) {
    for (const DeviceDiff& d : diff.devices) {
      GateOutcome o;
      o.gate = gate;
      o.device = d.device_b;
      o.a = Value(d, gate.metric, false);
      o.b = Value(d, gate.metric, true);
      double limit = gate.value;
      if (gate.limit == Gate::Limit::kPercentOfA) {
        limit = static_cast<double>(o.a) * (1.0 + gate.value / 100.0);
      } else if (gate.limit == Gate::Limit::kBytesOverA) {
        limit = static_cast<double>(o.a) + gate.value;
      }
      const double b = static_cast<double>(o.b);
      switch (gate.op) {
        case Gate::Op::kGreater:
          o.failed = b > limit;
          break;
        case Gate::Op::kGreaterEqual:
          o.failed = b >= limit;
          break;
        case Gate::Op::kLess:
          o.failed = b < limit;
          break;
        case Gate::Op::kLessEqual:
          o.failed = b <= limit;
          break;
      }
      o.limit = static_cast<int64_t>(std::llround(limit));
      out.push_back(std::move(o));
    }
  }
  return out;
}

}  // namespace vramscope::analysis
