#include "analysis/ranks.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "model/bounding.h"

namespace vramscope::analysis {

void FillRankFigures(const Summary& summary, RankRow& row) {
  const DeviceSummary* worst = nullptr;
  for (const DeviceSummary& d : summary.devices) {
    if (worst == nullptr || d.peak_reserved > worst->peak_reserved) worst = &d;
  }
  if (worst == nullptr) return;
  row.device = worst->device;
  row.peak_allocated = worst->peak_allocated;
  row.peak_reserved = worst->peak_reserved;
  row.peak_step = worst->peak_step;
  row.peak_phase = model::PhaseName(worst->peak_phase);
  row.steps = static_cast<int64_t>(worst->iterations.size());
  for (const DeviceSummary& d : summary.devices) row.oom |= !d.ooms.empty();
  row.step_peaks.clear();
  for (const IterationSummary& it : worst->iterations) {
    row.step_peaks.push_back({it.step, it.peak_allocated, model::PhaseName(it.peak_phase)});
  }
  row.at_peak.clear();
  for (const CategoryShare& c : worst->live_at_peak_by_category) {
    row.at_peak.emplace_back(attribution::CategoryName(c.category), static_cast<int64_t>(c.bytes));
  }
  row.owners_at_peak.clear();
  for (const OwnerGroup& o : worst->live_at_peak_by_owner) {
    if (row.owners_at_peak.size() == kRankOwnersKept) break;
    row.owners_at_peak.push_back(
        {attribution::CategoryName(o.category), o.label, static_cast<int64_t>(o.bytes)});
  }
}

namespace {

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];  // the lower median: with two ranks, the lower one
}

}  // namespace

void FillRankPhases(const attribution::Phases& phases, const Timelines& timelines, RankRow& row) {
  row.phase_peaks.clear();
  const DeviceTimeline* timeline = nullptr;
  for (const DeviceTimeline& t : timelines.devices) {
    if (t.device == row.device) timeline = &t;
  }
  if (timeline == nullptr || timeline->allocated.empty()) return;
  std::map<std::pair<int32_t, int>, int64_t> peaks;
  for (const attribution::PhaseSpan& span : phases.spans) {
    if (span.device != row.device || span.step < 1) continue;
    int64_t peak = 0;
    for (size_t e = std::max<size_t>(span.first_event, timeline->begin);
         e <= span.last_event && e < timeline->end; ++e) {
      peak = std::max(peak, timeline->allocated[e - timeline->begin]);
    }
    int64_t& slot = peaks[{span.step, static_cast<int>(span.phase)}];
    slot = std::max(slot, peak);
  }
  for (const auto& [key, peak] : peaks) {
    row.phase_peaks.push_back(
        {key.first, attribution::PhaseName(static_cast<attribution::Phase>(key.second)), peak});
  }
}

namespace {

// Spreads over the ranks of values keyed by (step, phase); the phase empty for whole steps.
std::vector<RankStepSpread> Spreads(
    const std::map<std::pair<int32_t, int>,
                   std::vector<std::tuple<int64_t, const RankRow*, std::string>>>& by_key,
    const std::map<std::pair<int32_t, int>, std::string>& names) {
  std::vector<RankStepSpread> out;
  for (const auto& [key, values] : by_key) {
    RankStepSpread spread;
    spread.step = key.first;
    spread.phase = names.at(key);
    spread.ranks = values.size();
    std::vector<int64_t> peaks;
    const auto* highest = &values.front();
    spread.lowest = std::get<0>(values.front());
    for (const auto& v : values) {
      peaks.push_back(std::get<0>(v));
      spread.lowest = std::min(spread.lowest, std::get<0>(v));
      if (std::get<0>(v) > std::get<0>(*highest)) highest = &v;
    }
    spread.median = Median(std::move(peaks));
    spread.highest = std::get<0>(*highest);
    spread.highest_label = std::get<1>(*highest)->label;
    spread.highest_phase = std::get<2>(*highest);
    out.push_back(std::move(spread));
  }
  return out;
}

}  // namespace

std::vector<RankStepSpread> AlignRanksByPhase(const std::vector<RankRow>& rows) {
  std::map<std::pair<int32_t, int>, std::vector<std::tuple<int64_t, const RankRow*, std::string>>>
      by_key;
  std::map<std::pair<int32_t, int>, std::string> names;
  for (const RankRow& r : rows) {
    for (const RankPhase& p : r.phase_peaks) {
      const auto phase =
          static_cast<int>(model::ParsePhase(p.phase).value_or(model::Phase::kUnknown));
      by_key[{p.step, phase}].emplace_back(p.peak_allocated, &r, p.phase);
      names[{p.step, phase}] = p.phase;
    }
  }
  return Spreads(by_key, names);
}

std::vector<RankStepSpread> AlignRanksByStep(const std::vector<RankRow>& rows) {
  std::map<std::pair<int32_t, int>, std::vector<std::tuple<int64_t, const RankRow*, std::string>>>
      by_key;
  std::map<std::pair<int32_t, int>, std::string> names;
  for (const RankRow& r : rows) {
    for (const RankStep& st : r.step_peaks) {
      by_key[{st.step, -1}].emplace_back(st.peak_allocated, &r, st.peak_phase);
      names[{st.step, -1}] = "";
    }
  }
  return Spreads(by_key, names);
}

RankContrast ContrastBoundingRank(const std::vector<RankRow>& rows, size_t bounding) {
  RankContrast c;
  const RankRow& b = rows[bounding];
  c.label = b.label;
  c.peak_allocated = b.peak_allocated;
  std::vector<int64_t> peaks;
  std::map<std::string, std::vector<int64_t>> by_category;
  std::set<std::pair<std::string, std::string>> others_owners;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i == bounding) continue;
    peaks.push_back(rows[i].peak_allocated);
    for (const auto& [category, bytes] : rows[i].at_peak) by_category[category].push_back(bytes);
    for (const RankOwner& o : rows[i].owners_at_peak) others_owners.insert({o.category, o.owner});
  }
  c.others = peaks.size();
  if (c.others == 0) return c;
  c.others_median = Median(std::move(peaks));
  for (const auto& [category, bytes] : b.at_peak) {
    auto it = by_category.find(category);
    std::vector<int64_t> values = it == by_category.end() ? std::vector<int64_t>() : it->second;
    values.resize(c.others, 0);  // a rank without the category holds none of it
    const int64_t excess = bytes - Median(std::move(values));
    if (excess > 0) c.category_excess.emplace_back(category, excess);
  }
  std::stable_sort(c.category_excess.begin(), c.category_excess.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  for (const RankOwner& o : b.owners_at_peak) {
    if (others_owners.count({o.category, o.owner}) == 0) c.held_alone.push_back(o);
  }
  return c;
}

size_t BoundingRank(const std::vector<RankRow>& rows) {
  return model::BoundingIndex(rows, [](const RankRow& r) {
    return model::RankPeaks{r.peak_reserved, r.peak_allocated};
  });
}

RankComparison CompareRanks(const std::vector<RankRow>& rows) {
  RankComparison c;
  c.bounding = BoundingRank(rows);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].reported) c.bounding = i;  // the rank whose report is shown, where one is marked
  }
  c.by_step = AlignRanksByStep(rows);
  c.by_phase = AlignRanksByPhase(rows);
  c.contrast = ContrastBoundingRank(rows, c.bounding);
  return c;
}

}  // namespace vramscope::analysis
