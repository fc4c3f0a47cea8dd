// What every fuzz target of a source checks once the source has read its input: the rest of the
// pipeline a user's input takes (src/pipeline: the allocator model's replay, then every analysis)
// runs to the end, and what holds for every input holds for this one. Aborts (for libFuzzer) on a
// violation.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "pipeline/analyze.h"
#include "pipeline/load.h"

namespace vramscope::testing {

// What a source's refusal must be (docs/design/resource-contract.md): an input error, one line,
// naming the input (every fuzz target passes the path "fuzz"). Aborts otherwise.
inline void CheckRefusal(const Status& status) {
  const std::string& message = status.message();
  if (!status.IsInputError()) std::abort();
  if (message.rfind("fuzz: ", 0) != 0) std::abort();
  if (message.find('\n') != std::string::npos) std::abort();
}

inline std::unique_ptr<const pipeline::Analyzed> ThroughPipeline(model::Trace trace) {
  const size_t allocations = trace.allocations.size();
  auto loaded = pipeline::FromTrace(std::move(trace), {});
  if (!loaded.ok()) std::abort();  // a trace a source accepted always loads
  auto analyzed = pipeline::Analyze(std::move(*loaded), {"/proj", std::nullopt});
  if (!analyzed.ok()) std::abort();
  const analysis::Analysis& a = *(*analyzed)->analysis;
  if (a.attribution.allocations.size() != allocations) std::abort();
  if (a.timelines.devices.size() != (*analyzed)->trace().devices.size()) std::abort();
  // Every byte live at a peak has exactly one category.
  for (const auto& device : a.summary.devices) {
    uint64_t by_category = 0;
    for (const auto& share : device.live_at_peak_by_category) by_category += share.bytes;
    if (by_category != device.live_at_peak_bytes) std::abort();
  }
  // ... and exactly one region of each kind the device records (analysis/regions.h).
  for (const auto& device : a.summary.devices) {
    uint64_t by_kind[analysis::kRegionKindCount] = {};
    bool recorded[analysis::kRegionKindCount] = {};
    for (const auto& r : a.regions.regions) {
      if (r.device != device.device) continue;
      by_kind[static_cast<int>(r.kind)] += r.live_at_peak_bytes;
      recorded[static_cast<int>(r.kind)] = true;
    }
    for (int k = 0; k < analysis::kRegionKindCount; ++k) {
      if (recorded[k] && by_kind[k] != device.live_at_peak_bytes) std::abort();
    }
  }
  return std::move(*analyzed);
}

}  // namespace vramscope::testing
