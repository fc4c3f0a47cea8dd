#include "analysis/skyline_entries.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "analysis/timeline.h"

namespace vramscope::analysis {

using attribution::Category;

namespace {

// The event after which the most activation bytes of `device` are live (kNoEvent: the start).
int64_t ActivationPeakEvent(const model::TraceView& view,
                            const attribution::Attribution& attribution, int32_t device) {
  const model::Trace& trace = view.trace;
  std::vector<std::pair<int64_t, int64_t>> changes;  // (event, delta)
  int64_t live = 0;
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (a.device != device || attribution.allocations[i].category != Category::kActivation) {
      continue;
    }
    const auto size = static_cast<int64_t>(view.BlockSize(i));
    if (a.alloc_event == model::kNoEvent) {
      live += size;
    } else {
      changes.emplace_back(a.alloc_event, size);
    }
    if (a.ReleaseEvent() != model::kNoEvent) changes.emplace_back(a.ReleaseEvent(), -size);
  }
  std::sort(changes.begin(), changes.end());
  int64_t best = live, best_event = model::kNoEvent;
  for (size_t k = 0; k < changes.size(); ++k) {
    live += changes[k].second;
    // Compare once all changes of one event are in.
    if ((k + 1 == changes.size() || changes[k + 1].first != changes[k].first) && live > best) {
      best = live;
      best_event = changes[k].first;
    }
  }
  return best_event;
}

}  // namespace

SkylineEntries BuildSkylineEntries(const model::TraceView& view, const Summary& summary,
                                   const attribution::Attribution& attribution, SiteNamer& sites) {
  const model::Trace& trace = view.trace;
  SkylineEntries out;
  // Gradient sizes by requested size, consumed one per weight.
  std::map<uint64_t, std::vector<uint64_t>> gradients;
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    if (attribution.allocations[i].category == Category::kGradient) {
      gradients[trace.allocations[i].requested_size].push_back(view.BlockSize(i));
    }
  }
  std::map<std::string, uint64_t, std::less<>> named_gradients;
  if (view.HasTensorNames()) {
    for (size_t i = 0; i < trace.allocations.size(); ++i) {
      const model::Allocation& a = trace.allocations[i];
      if (a.alloc_event == model::kNoEvent) continue;
      const auto event = static_cast<uint32_t>(a.alloc_event);
      const std::string_view name = view.TensorName(event);
      if (!name.empty() && view.RecordedCategory(event) == Category::kGradient) {
        named_gradients[std::string(name)] = view.BlockSize(i);
      }
    }
  }
  for (const DeviceSummary& d : summary.devices) {
    std::map<std::string, int> seen;  // name -> count, to number repeated sites
    for (const size_t i : LiveAfter(trace, d.device, d.peak_allocated_event)) {
      if (attribution.allocations[i].category == Category::kActivation) continue;
      const model::Allocation& a = trace.allocations[i];
      const attribution::AllocationInfo& info = attribution.allocations[i];
      if (info.category == Category::kWeight) {
        // A weight the source named ("h.0.attn.c_attn.weight") keeps its name, and its gradient
        // is the allocation named "<name>.grad".
        const std::string_view named = a.alloc_event == model::kNoEvent
                                           ? std::string_view()
                                           : view.TensorName(static_cast<uint32_t>(a.alloc_event));
        if (!named.empty()) {
          WeightEntry w;
          w.name = std::string(named);
          w.size_bytes = view.BlockSize(i);
          w.stack = a.alloc_stack;
          if (auto g = named_gradients.find(w.name + ".grad"); g != named_gradients.end()) {
            w.grad_size_bytes = g->second;
          }
          out.weights.push_back(std::move(w));
          continue;
        }
        std::string base = sites.Label(sites.Site(a.alloc_stack));
        if (info.module_kind != model::kEmptyString) {
          base = fmt::format("{} @ {}", attribution.Name(info.module_kind), base);
        }
        const int n = seen[base]++;
        WeightEntry w;
        w.name = fmt::format("{}#{}", base, n);
        w.size_bytes = view.BlockSize(i);
        w.stack = a.alloc_stack;
        auto it = gradients.find(a.requested_size);
        if (it != gradients.end() && !it->second.empty()) {
          w.grad_size_bytes = it->second.back();
          it->second.pop_back();
        }
        out.weights.push_back(std::move(w));
      }
    }
    for (const size_t i :
         LiveAfter(trace, d.device, ActivationPeakEvent(view, attribution, d.device))) {
      const model::Allocation& a = trace.allocations[i];
      const attribution::AllocationInfo& info = attribution.allocations[i];
      if (info.category == Category::kActivation) {
        ActivationEntry e;
        e.operation_name = info.operation != model::kEmptyString
                               ? std::string(attribution.Name(info.operation))
                               : std::string("unknown");
        e.size_bytes = view.BlockSize(i);
        e.stack = a.alloc_stack;
        out.activations.push_back(std::move(e));
      }
    }
  }
  return out;
}

}  // namespace vramscope::analysis
