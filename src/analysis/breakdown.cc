#include "analysis/breakdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace vramscope::analysis {

using model::kNoEvent;

std::vector<CategoryBytes> CategoriesAfter(const model::TraceView& view,
                                           const attribution::Attribution& attribution,
                                           int32_t device, const std::vector<int64_t>& events) {
  const model::Trace& trace = view.trace;
  // The allocation each event of the device begins or ends, 4 bytes an event, swept in event
  // order (a list of (event, category, delta) changes, sorted, cost ten times that). An event
  // that two allocations claim, or one outside the device's range (neither happens in a trace
  // BuildAllocations made), goes to `others`, merged in by event.
  // Plain names, not a structured binding: clang 14 cannot capture bindings in a lambda.
  const auto range = trace.EventRange(device);
  const size_t begin = range.first, end = range.second;
  std::vector<int32_t> allocation_at(end - begin, -1);
  std::vector<std::pair<int64_t, size_t>> others;
  CategoryBytes running{};
  auto claim = [&](int64_t event, size_t i) {
    const auto e = static_cast<size_t>(event);
    if (e >= begin && e < end && allocation_at[e - begin] < 0) {
      allocation_at[e - begin] = static_cast<int32_t>(i);
    } else {
      others.emplace_back(event, i);
    }
  };
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (a.device != device) continue;
    if (a.alloc_event == kNoEvent) {
      running[static_cast<size_t>(attribution.allocations[i].category)] +=
          static_cast<int64_t>(view.BlockSize(i));
    } else {
      claim(a.alloc_event, i);
    }
    if (a.ReleaseEvent() != kNoEvent) claim(a.ReleaseEvent(), i);
  }
  std::sort(others.begin(), others.end());
  auto apply = [&](int64_t event, size_t i) {
    const model::Allocation& a = trace.allocations[i];
    const auto size = static_cast<int64_t>(view.BlockSize(i));
    running[static_cast<size_t>(attribution.allocations[i].category)] +=
        a.alloc_event == event ? size : -size;
  };
  std::vector<CategoryBytes> out;
  out.reserve(events.size());
  size_t next = begin, next_other = 0;
  for (const int64_t event : events) {
    if (event != kNoEvent) {
      for (; next < end && static_cast<int64_t>(next) <= event; ++next) {
        if (allocation_at[next - begin] >= 0) {
          apply(static_cast<int64_t>(next), static_cast<size_t>(allocation_at[next - begin]));
        }
      }
      for (; next_other < others.size() && others[next_other].first <= event; ++next_other) {
        apply(others[next_other].first, others[next_other].second);
      }
    }
    out.push_back(running);
  }
  return out;
}

std::vector<std::vector<CategoryPoint>> CategoryTimelines(
    const model::TraceView& view, const Timelines& timelines,
    const attribution::Attribution& attribution, size_t max_points) {
  std::vector<std::vector<CategoryPoint>> out;
  for (const DeviceTimeline& t : timelines.devices) {
    std::vector<int64_t> events = {kNoEvent};
    for (const size_t e : ReduceTimeline(t, max_points)) events.push_back(static_cast<int64_t>(e));
    const std::vector<CategoryBytes> sums = CategoriesAfter(view, attribution, t.device, events);
    std::vector<CategoryPoint> points;
    points.reserve(events.size());
    for (size_t i = 0; i < events.size(); ++i) points.push_back({events[i], sums[i]});
    out.push_back(std::move(points));
  }
  return out;
}

std::vector<IterationSummary> SummarizeIterations(const model::TraceView& view,
                                                  const DeviceTimeline& timeline,
                                                  const attribution::Attribution& attribution) {
  const model::Trace& trace = view.trace;
  std::vector<IterationSummary> out;
  for (const attribution::Iteration& it : attribution.phases.iterations) {
    if (it.device != timeline.device) continue;
    IterationSummary s;
    s.step = it.step;
    s.first_event = it.first_event;
    s.last_event = it.last_event;
    s.start_time_us = trace.events.time_us[it.first_event];
    s.end_time_us = trace.events.time_us[it.last_event];
    s.has_forward = it.has_forward;
    s.has_backward = it.has_backward;
    s.has_optimizer = it.has_optimizer;
    s.forward_begin = it.forward_begin;
    s.backward_begin = it.backward_begin;
    s.optimizer_begin = it.optimizer_begin;
    s.peak_allocated = -1;
    for (uint32_t e = it.first_event; e <= it.last_event; ++e) {
      const int64_t level = timeline.allocated[e - timeline.begin];
      if (level > s.peak_allocated) {
        s.peak_allocated = level;
        s.peak_event = e;
      }
    }
    s.peak_phase = attribution.phases.At(s.peak_event);
    out.push_back(s);
  }
  std::vector<int64_t> peaks;
  for (const IterationSummary& s : out) peaks.push_back(s.peak_event);
  const std::vector<CategoryBytes> at = CategoriesAfter(view, attribution, timeline.device, peaks);
  for (size_t i = 0; i < out.size(); ++i) out[i].at_peak = at[i];
  return out;
}

LiveBreakdown BreakdownAfter(const model::TraceView& view,
                             const attribution::Attribution& attribution, SiteNamer& sites,
                             OwnerNamer& owners, int32_t device, int64_t event) {
  const model::Trace& trace = view.trace;
  using attribution::Category;
  LiveBreakdown out;
  for (int c = 0; c < attribution::kCategoryCount; ++c) {
    out.by_category.push_back({static_cast<Category>(c), 0, 0});
  }
  std::unordered_map<uint32_t, size_t> group_of_site;
  std::vector<std::array<uint64_t, attribution::kCategoryCount>> site_categories;
  std::unordered_map<uint64_t, size_t> owner_group;  // (category, owner id) -> group
  for (const size_t i : LiveAfter(trace, device, event)) {
    const model::Allocation& a = trace.allocations[i];
    const attribution::AllocationInfo& info = attribution.allocations[i];
    const uint64_t size = view.BlockSize(i);
    const uint32_t owner = owners.Id(i);
    auto [owner_it, new_owner] = owner_group.emplace(
        (static_cast<uint64_t>(info.category) << 32) | owner, out.by_owner.size());
    if (new_owner) out.by_owner.push_back({info.category, owners.Label(owner), 0, 0});
    out.by_owner[owner_it->second].bytes += size;
    ++out.by_owner[owner_it->second].count;
    out.by_confidence[static_cast<int>(info.confidence)] += size;
    const uint32_t site = sites.Site(a.alloc_stack);
    auto [it, inserted] = group_of_site.emplace(site, out.by_site.size());
    if (inserted) {
      out.by_site.push_back({sites.Label(site), 0, 0, Category::kUnknown});
      site_categories.push_back({});
    }
    SiteGroup& g = out.by_site[it->second];
    g.bytes += size;
    ++g.count;
    site_categories[it->second][static_cast<int>(info.category)] += size;
    CategoryShare& share = out.by_category[static_cast<int>(info.category)];
    share.bytes += size;
    ++share.count;
    out.bytes += size;
    ++out.count;
  }
  for (size_t g = 0; g < out.by_site.size(); ++g) {
    const auto& cats = site_categories[g];
    out.by_site[g].category =
        static_cast<Category>(std::max_element(cats.begin(), cats.end()) - cats.begin());
  }
  std::stable_sort(out.by_site.begin(), out.by_site.end(),
                   [](const SiteGroup& x, const SiteGroup& y) { return x.bytes > y.bytes; });
  std::stable_sort(out.by_owner.begin(), out.by_owner.end(),
                   [](const OwnerGroup& x, const OwnerGroup& y) { return x.bytes > y.bytes; });
  return out;
}

void OwnerNamer::NameAll() {
  const size_t n = view_.trace.allocations.size();
  owner_of_.resize(n);
  by_name_.reserve(n);
  for (size_t i = 0; i < n; ++i) owner_of_[i] = Id(i);
}

uint32_t OwnerNamer::Id(size_t i) {
  const model::Allocation& allocation = view_.trace.allocations[i];
  const attribution::AllocationInfo& info = attribution_.allocations[i];
  const model::StringId name =
      info.category == attribution::Category::kWeight
          ? info.module_kind
          : (info.operation != model::kEmptyString ? info.operation : info.module_kind);
  const bool before_trace = allocation.alloc_event == kNoEvent;
  // A name the source gave the tensor (the predictor, a capture sidecar) is its owner.
  if (!before_trace) {
    if (const std::string_view tensor =
            view_.TensorName(static_cast<uint32_t>(allocation.alloc_event));
        !tensor.empty()) {
      const bool state = info.category == attribution::Category::kWeight ||
                         info.category == attribution::Category::kGradient ||
                         info.category == attribution::Category::kOptimizerState ||
                         info.category == attribution::Category::kInput ||
                         info.category == attribution::Category::kWorkspace;
      const model::StringId operation = state ? model::kEmptyString : info.operation;
      // The same name (the same interned bytes) with the same operation has the same label:
      // built once (a predicted step names every tensor, and repeats its names every step).
      const NamedKey named{tensor.data(), tensor.size(), operation};
      if (const auto it = by_name_.find(named); it != by_name_.end()) return it->second;
      std::string label = operation == model::kEmptyString
                              ? std::string(tensor)
                              : fmt::format("{} @ {}", attribution_.Name(operation), tensor);
      auto [it, inserted] =
          by_label_.emplace(std::move(label), static_cast<uint32_t>(labels_.size()));
      if (inserted) labels_.push_back(it->first);
      by_name_.emplace(named, it->second);
      return it->second;
    }
  }
  auto& by_key = by_key_[before_trace ? 1 : 0];
  const uint64_t key = (static_cast<uint64_t>(allocation.alloc_stack) << 32) | name;
  if (const auto it = by_key.find(key); it != by_key.end()) return it->second;
  std::string label;
  const uint32_t site = sites_.Site(allocation.alloc_stack);
  if (site == SiteNamer::kNoSite) {
    label = before_trace ? "(no stack; allocated before the trace)" : "(no stack recorded)";
  } else {
    label = sites_.Label(site);
    if (name != model::kEmptyString) {
      const std::string_view what = attribution_.Name(name);
      if (label != what) label = fmt::format("{} @ {}", what, label);
    }
  }
  auto [it, inserted] = by_label_.emplace(std::move(label), static_cast<uint32_t>(labels_.size()));
  if (inserted) labels_.push_back(it->first);
  by_key.emplace(key, it->second);
  return it->second;
}

}  // namespace vramscope::analysis
