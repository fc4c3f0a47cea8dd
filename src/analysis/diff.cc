#include "analysis/diff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "model/category.h"

namespace vramscope::analysis {

namespace {

// Whether every value rises from one step to the next; at least two rises.
bool RisesEveryStep(const std::vector<int64_t>& values) {
  if (values.size() < 3) return false;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] <= values[i - 1]) return false;
  }
  return true;
}

int64_t PerStep(const std::vector<int64_t>& values) {
  return (values.back() - values.front()) / static_cast<int64_t>(values.size() - 1);
}

// Every key of either map whose values differ, largest |delta| first (then by name).
template <typename Key, typename Name>
std::vector<Change> MapChanges(const std::map<Key, int64_t>& a, const std::map<Key, int64_t>& b,
                               Name name) {
  std::vector<Change> out;
  auto add = [&](const Key& key, std::optional<int64_t> va, std::optional<int64_t> vb) {
    if (va.value_or(0) == vb.value_or(0)) return;
    out.push_back({name(key), va, vb});
  };
  for (const auto& [key, bytes] : a) {
    const auto other = b.find(key);
    add(key, bytes, other == b.end() ? std::nullopt : std::optional<int64_t>(other->second));
  }
  for (const auto& [key, bytes] : b) {
    if (a.find(key) == a.end()) add(key, std::nullopt, bytes);
  }
  std::stable_sort(out.begin(), out.end(), [](const Change& x, const Change& y) {
    const int64_t dx = std::llabs(x.Delta()), dy = std::llabs(y.Delta());
    return dx != dy ? dx > dy : x.what < y.what;
  });
  return out;
}

DeviceDiff CompareDevices(const DiffDevice& a, const DiffDevice& b) {
  DeviceDiff d;
  d.device_a = a.device;
  d.device_b = b.device;
  d.peak_allocated = {"peak allocated", a.peak_allocated, b.peak_allocated};
  d.peak_reserved = {"peak reserved", a.peak_reserved, b.peak_reserved};
  for (int c = 0; c < model::kCategoryCount; ++c) {
    const std::string name = model::CategoryName(static_cast<model::Category>(c));
    const auto in = [&](const DiffDevice& side) {
      const auto it = side.categories.find(name);
      return it == side.categories.end() ? 0 : it->second;
    };
    d.categories.push_back({name, in(a), in(b)});
  }
  d.owners = MapChanges(a.owners, b.owners, [](const std::pair<std::string, std::string>& key) {
    return fmt::format("{}: {}", key.first, key.second);
  });
  d.sites = MapChanges(a.sites, b.sites, [](const std::string& key) { return key; });
  std::map<int32_t, std::pair<std::optional<int64_t>, std::optional<int64_t>>> steps;
  for (const DiffStep& s : a.steps) steps[s.step].first = s.peak_allocated;
  for (const DiffStep& s : b.steps) steps[s.step].second = s.peak_allocated;
  for (const auto& [step, peaks] : steps) {
    d.steps.push_back({fmt::format("step {}", step), peaks.first, peaks.second});
  }
  d.growth_a = FindGrowth(a);
  d.growth_b = FindGrowth(b);
  return d;
}

}  // namespace

std::optional<Growth> FindGrowth(const DiffDevice& device) {
  if (device.steps.size() < 2) return std::nullopt;
  // From the second step on: the first one's start precedes the warm-up.
  const std::vector<DiffStep> steps(device.steps.begin() + 1, device.steps.end());
  std::vector<int64_t> totals;
  for (const DiffStep& s : steps) totals.push_back(s.live_at_start);
  if (!RisesEveryStep(totals)) return std::nullopt;
  Growth g;
  g.first_step = steps.front().step;
  g.last_step = steps.back().step;
  g.per_step = PerStep(totals);
  // An owner grows when its own bytes at each start rise at every step (absent: 0 bytes).
  std::map<std::string, std::vector<int64_t>> by_owner;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const auto& [owner, bytes] : steps[i].owners_at_start) {
      auto& values = by_owner[owner];
      values.resize(steps.size(), 0);
      values[i] = bytes;
    }
  }
  for (const auto& [owner, values] : by_owner) {
    if (RisesEveryStep(values)) g.owners.emplace_back(owner, PerStep(values));
  }
  std::stable_sort(g.owners.begin(), g.owners.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  return g;
}

Result<Diff> CompareReports(const DiffSide& a, const DiffSide& b, std::optional<int32_t> device) {
  Diff diff;
  diff.a = a.name;
  diff.b = b.name;
  diff.predicted_a = a.predicted;
  diff.predicted_b = b.predicted;
  diff.device_type_a = a.device_type;
  diff.device_type_b = b.device_type;
  const auto find = [](const DiffSide& side, int32_t ordinal) -> const DiffDevice* {
    for (const DiffDevice& d : side.devices) {
      if (d.device == ordinal) return &d;
    }
    return nullptr;
  };
  if (a.devices.empty() || b.devices.empty()) {
    return InvalidInput(
        fmt::format("{}: the report has no device with memory events; nothing "
                    "to compare",
                    a.devices.empty() ? a.name : b.name));
  }
  if (device) {
    const DiffDevice* da = find(a, *device);
    const DiffDevice* db = find(b, *device);
    if (da == nullptr || db == nullptr) {
      return UsageError(fmt::format("--device {}: {} has no such device", *device,
                                    da == nullptr ? a.name : b.name));
    }
    diff.devices.push_back(CompareDevices(*da, *db));
  } else if (a.devices.size() == 1 && b.devices.size() == 1) {
    diff.devices.push_back(CompareDevices(a.devices.front(), b.devices.front()));
  } else {
    for (const DiffDevice& da : a.devices) {
      if (const DiffDevice* db = find(b, da.device))
        diff.devices.push_back(CompareDevices(da, *db));
    }
    if (diff.devices.empty()) {
      return InvalidInput(
          fmt::format("{} and {} share no device ordinal; pick one with --device", a.name, b.name));
    }
  }
  return diff;
}

}  // namespace vramscope::analysis
