// The breakdown users ask for: bytes by category over time, at the peak of each iteration, and
// by owner at the peak. Pure functions of (trace, timelines, attribution).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/sites.h"
#include "analysis/timeline.h"
#include "attribution/attribution.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

using CategoryBytes = std::array<int64_t, attribution::kCategoryCount>;

struct SiteGroup {
  std::string label;
  uint64_t bytes = 0;
  uint64_t count = 0;
  attribution::Category category = attribution::Category::kUnknown;  // the site's largest share
};

struct CategoryShare {
  attribution::Category category;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// Live bytes grouped by (category, owner label); see OwnerNamer.
struct OwnerGroup {
  attribution::Category category = attribution::Category::kUnknown;
  std::string label;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

// What was live right after one event of a device (or at the start of the trace), grouped three
// ways: by allocation site, by category and by (category, owner). The breakdown at the peak and
// at an out-of-memory are both this.
struct LiveBreakdown {
  uint64_t bytes = 0, count = 0;
  std::vector<SiteGroup> by_site;          // largest first, all of them
  std::vector<CategoryShare> by_category;  // every category, fixed order
  std::vector<OwnerGroup> by_owner;        // largest first, all of them
  // Bytes by the confidence of the rule that categorised them (low..high).
  std::array<uint64_t, 3> by_confidence{};
};

class OwnerNamer;

// The allocations of `device` live right after `event` (kNoEvent: at the start of the trace), as
// LiveAfter gives them, grouped.
LiveBreakdown BreakdownAfter(const model::TraceView& view,
                             const attribution::Attribution& attribution, SiteNamer& sites,
                             OwnerNamer& owners, int32_t device, int64_t event);

// Live bytes by category right after each of `events` (ascending indices into Trace::events of
// `device`; kNoEvent first means "at the start of the trace"). One sweep over the allocations.
std::vector<CategoryBytes> CategoriesAfter(const model::TraceView& view,
                                           const attribution::Attribution& attribution,
                                           int32_t device, const std::vector<int64_t>& events);

struct CategoryPoint {
  int64_t event = model::kNoEvent;  // kNoEvent: the start of the trace
  CategoryBytes bytes{};
};

// Per device, the category stack at the points of the reduced allocated curve (ReduceTimeline),
// so the extremes of every category's sum survive. Parallel to Timelines::devices.
std::vector<std::vector<CategoryPoint>> CategoryTimelines(
    const model::TraceView& view, const Timelines& timelines,
    const attribution::Attribution& attribution, size_t max_points);

struct IterationSummary {
  int32_t step = 0;
  uint32_t first_event = 0, last_event = 0;
  int64_t start_time_us = model::kNoTime, end_time_us = model::kNoTime;
  bool has_forward = false, has_backward = false, has_optimizer = false;
  int64_t forward_begin = model::kNoEvent, backward_begin = model::kNoEvent,
          optimizer_begin = model::kNoEvent;
  int64_t peak_allocated = 0;
  int64_t peak_event = model::kNoEvent;
  attribution::Phase peak_phase = attribution::Phase::kUnknown;
  CategoryBytes at_peak{};  // live bytes by category at the iteration's peak
};

// One summary per detected iteration of `device`, in order.
std::vector<IterationSummary> SummarizeIterations(const model::TraceView& view,
                                                  const DeviceTimeline& timeline,
                                                  const attribution::Attribution& attribution);

// Who the bytes of an allocation belong to, for grouping: "linear @ model.py:57 __init__" for a
// weight, "aten::addmm @ modeling_llama.py:216 forward" for an activation, the site alone when
// nothing names an operation, "(no stack recorded)" without a stack. Labels are built once per
// distinct (stack, name) and handed out as ids: a million allocations share a few thousand.
class OwnerNamer {
 public:
  OwnerNamer(const model::TraceView& view, const attribution::Attribution& attribution,
             SiteNamer& sites)
      : view_(view), attribution_(attribution), sites_(sites) {}
  // The owner of allocation `i` (an index into Trace::allocations). Ids are handed out in the
  // order of first use while the analysis runs; the const overload reads what NameAll() gave
  // every allocation.
  uint32_t Id(size_t i);
  uint32_t Id(size_t i) const { return owner_of_[i]; }
  // Names the owner of every allocation, in allocation order after those already asked for
  // (Analyze calls it before the namer becomes part of its read-only result).
  void NameAll();
  const std::string& Label(uint32_t id) const { return labels_[id]; }
  size_t size() const { return labels_.size(); }

 private:
  const model::TraceView view_;
  const attribution::Attribution& attribution_;
  SiteNamer& sites_;
  // (stack << 32 | name) -> id, apart for allocations made before the trace and in it.
  std::unordered_map<uint64_t, uint32_t> by_key_[2];
  // A tensor name the source gave (by the address and length of its bytes, which the trace or
  // its interpretation holds for the namer's life) and the operation shown with it -> id.
  struct NamedKey {
    const char* data;
    size_t size;
    model::StringId operation;
    bool operator==(const NamedKey&) const = default;
  };
  struct NamedKeyHash {
    size_t operator()(const NamedKey& k) const {
      return std::hash<const void*>()(k.data) ^ (k.size * 0x9e3779b97f4a7c15ull) ^
             (static_cast<size_t>(k.operation) << 17);
    }
  };
  std::unordered_map<NamedKey, uint32_t, NamedKeyHash> by_name_;
  std::unordered_map<std::string, uint32_t> by_label_;
  std::vector<std::string> labels_;
  std::vector<uint32_t> owner_of_;  // by allocation, after NameAll()
};

}  // namespace vramscope::analysis
