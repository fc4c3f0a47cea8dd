#include "analysis/ranks.h"

#include <tuple>

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
}

size_t BoundingRank(const std::vector<RankRow>& rows) {
  size_t best = 0;
  for (size_t i = 1; i < rows.size(); ++i) {
    const RankRow& a = rows[i];
    const RankRow& b = rows[best];
    if (std::tie(a.peak_reserved, a.peak_allocated) > std::tie(b.peak_reserved, b.peak_allocated)) {
      best = i;
    }
  }
  return best;
}

}  // namespace vramscope::analysis
