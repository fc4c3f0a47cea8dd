// Whether a prediction fits the GPU it was made for: one verdict that the terminal summary, the
// JSON summary and the report database all give. Internal to the report library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "report/report_input.h"

namespace vramscope::report {

inline bool IsPredictedTrace(const model::Trace& t) {
  return t.facts.predicted || t.prediction.has_value();
}

struct PredictionFit {
  int64_t capacity = 0;       // bytes the allocator may reserve
  int64_t peak_reserved = 0;  // the highest over the devices
  // The first request the allocator could not place (the prediction stops there).
  bool oom = false;
  int32_t oom_device = 0;
  int64_t oom_event = model::kNoEvent;  // index into Trace::events
  int64_t oom_requested = 0;
  int64_t reserved_at_oom = 0;
  // At least what the run needs: the peak reserved, or what was reserved at the out-of-memory
  // plus the request that failed.
  int64_t needed = 0;
  bool fits = false;
  // capacity - needed; never above 0 when the prediction ran out of memory.
  int64_t headroom = 0;
};

// The verdict against the prediction's capacity; nothing when it has none (unlimited) or the
// trace is not a prediction. `device`: only that device (the terminal's --device).
inline std::optional<PredictionFit> FitOfPrediction(const ReportInput& in,
                                                    std::optional<int32_t> device = {}) {
  const model::Trace& t = in.trace;
  if (!t.prediction || t.prediction->capacity == 0) return std::nullopt;
  PredictionFit fit;
  fit.capacity = static_cast<int64_t>(t.prediction->capacity);
  for (const analysis::DeviceSummary& d : in.summary.devices) {
    if (device && *device != d.device) continue;
    fit.peak_reserved = std::max(fit.peak_reserved, d.peak_reserved);
  }
  for (size_t i = 0; i < t.events.count() && !fit.oom; ++i) {
    if (t.events.action[i] != model::Action::kOom) continue;
    if (device && *device != t.events.device[i]) continue;
    fit.oom = true;
    fit.oom_device = t.events.device[i];
    fit.oom_event = static_cast<int64_t>(i);
    fit.oom_requested = static_cast<int64_t>(t.events.size[i]);
    for (const analysis::DeviceTimeline& tl : in.timelines.devices) {
      if (tl.device == fit.oom_device && tl.begin <= i && i < tl.end) {
        fit.reserved_at_oom = tl.ReservedAfter(i);
      }
    }
  }
  fit.needed =
      std::max(fit.peak_reserved, fit.oom ? fit.reserved_at_oom + fit.oom_requested : int64_t{0});
  fit.fits = !fit.oom && fit.needed <= fit.capacity;
  fit.headroom = fit.capacity - fit.needed;
  if (fit.oom) fit.headroom = std::min<int64_t>(fit.headroom, 0);
  return fit;
}

}  // namespace vramscope::report
