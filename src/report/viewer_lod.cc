#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "report/viewer_data.h"

// BuildViewerLod: the level-of-detail pyramids of the page's timeline (docs/design/viewer.md).
namespace vramscope::report {

void BuildViewerLod(ViewerReport& report) {
  for (ViewerDevice& d : report.devices) {
    d.levels.clear();
    const int64_t num_events = d.events;
    const size_t num_series = d.owner_series.size();
    const ViewerAllocations& a = d.allocations;
    // Finest level: buckets of one event up to 16,384 events, else the smallest power of 4
    // that keeps 16,384 buckets or fewer (the page replays the exact curve within a bucket).
    int64_t bucket = 1;
    while ((num_events + bucket - 1) / bucket > 16384) bucket *= 4;
    ViewerLevel& fine = d.levels.emplace_back();
    fine.bucket = bucket;
    const size_t num_buckets =
        static_cast<size_t>(std::max<int64_t>(1, (num_events + bucket - 1) / bucket));
    fine.peak_event.assign(num_buckets, 0);
    fine.allocated.assign(num_buckets, 0);
    fine.reserved.assign(num_buckets, 0);
    fine.category.assign(num_buckets * kViewerCategories, 0);
    fine.owner.assign(num_buckets * num_series, 0);
    fine.category_start.assign(num_buckets * kViewerCategories, 0);
    fine.owner_start.assign(num_buckets * num_series, 0);
    // Running values; allocations live before the first event start them.
    std::vector<double> cat(kViewerCategories, 0), own(num_series, 0);
    double total = 0;
    for (size_t i = 0; i < a.count(); ++i) {
      if (a.start[i] < 0) {
        cat[a.category[i]] += a.size[i];
        if (num_series > 0) own[a.owner_group[i]] += a.size[i];
        total += a.size[i];
      }
    }
    size_t reserved_step = 0;
    double reserved = 0;
    for (size_t b = 0; b < num_buckets; ++b) {
      const int64_t first = static_cast<int64_t>(b) * bucket;
      const int64_t last = std::min<int64_t>(num_events, first + bucket);
      std::copy(cat.begin(), cat.end(), fine.category_start.begin() + b * kViewerCategories);
      std::copy(own.begin(), own.end(), fine.owner_start.begin() + b * num_series);
      double best = -1;
      double best_reserved = 0;
      for (int64_t e = first; e < last; ++e) {
        const int32_t alloc = d.ev_alloc[e];
        if (alloc >= 0) {
          const double delta = d.ev_sign[e] * a.size[alloc];
          cat[a.category[alloc]] += delta;
          if (num_series > 0) own[a.owner_group[alloc]] += delta;
          total += delta;
        }
        while (reserved_step < d.reserved.event.size() && d.reserved.event[reserved_step] <= e) {
          reserved = d.reserved.value[reserved_step++];
        }
        best_reserved = std::max(best_reserved, reserved);
        if (total > best) {
          best = total;
          fine.peak_event[b] = static_cast<int32_t>(e);
          std::copy(cat.begin(), cat.end(), fine.category.begin() + b * kViewerCategories);
          std::copy(own.begin(), own.end(), fine.owner.begin() + b * num_series);
        }
      }
      fine.allocated[b] = std::max(best, 0.0);
      fine.reserved[b] = best_reserved;
    }
    // Coarser levels: each bucket is four of the level below; keep the child with the highest
    // allocated total (its values are the values at that moment).
    while (d.levels.back().count() > 1024) {
      const ViewerLevel& below = d.levels.back();
      ViewerLevel up;
      up.bucket = below.bucket * 4;
      const size_t n = (below.count() + 3) / 4;
      up.peak_event.resize(n);
      up.allocated.resize(n);
      up.reserved.resize(n);
      up.category.resize(n * kViewerCategories);
      up.owner.resize(n * num_series);
      for (size_t b = 0; b < n; ++b) {
        size_t pick = 4 * b;
        double res = 0;
        for (size_t c = 4 * b; c < std::min(below.count(), 4 * b + 4); ++c) {
          if (below.allocated[c] > below.allocated[pick]) pick = c;
          res = std::max(res, below.reserved[c]);
        }
        up.peak_event[b] = below.peak_event[pick];
        up.allocated[b] = below.allocated[pick];
        up.reserved[b] = res;
        std::copy_n(below.category.begin() + pick * kViewerCategories, kViewerCategories,
                    up.category.begin() + b * kViewerCategories);
        std::copy_n(below.owner.begin() + pick * num_series, num_series,
                    up.owner.begin() + b * num_series);
      }
      d.levels.push_back(std::move(up));
    }
  }
}

}  // namespace vramscope::report
