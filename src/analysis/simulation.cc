#include "analysis/simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "analysis/timeline.h"

namespace vramscope::analysis {
namespace {

std::vector<int32_t> DevicesWithEvents(const model::Trace& trace) {
  std::vector<int32_t> out;
  for (const int32_t d : trace.devices) {
    const auto [begin, end] = trace.EventRange(d);
    for (size_t i = begin; i < end; ++i) {
      const model::Action a = trace.events.action[i];
      if (a == model::Action::kAlloc) {  // frees alone (a trace cut short) replay nothing
        out.push_back(d);
        break;
      }
    }
  }
  return out;
}

// Who held memory right before the failed request: live allocations by site, largest first.
std::vector<SiteBytes> LiveBySite(const model::TraceView& view, SiteNamer& sites, int32_t device,
                                  int64_t event, size_t top, uint64_t* total) {
  std::unordered_map<uint32_t, SiteBytes> by_site;
  *total = 0;
  for (const size_t a : LiveAfter(view.trace, device, event - 1)) {
    const uint32_t site = sites.Site(view.trace.allocations[a].alloc_stack);
    SiteBytes& s = by_site[site];
    s.bytes += view.BlockSize(a);
    s.allocations += 1;
    *total += view.BlockSize(a);
  }
  std::vector<std::pair<uint32_t, SiteBytes>> sorted(by_site.begin(), by_site.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    return x.second.bytes != y.second.bytes ? x.second.bytes > y.second.bytes : x.first < y.first;
  });
  std::vector<SiteBytes> out;
  for (auto& [site, s] : sorted) {
    if (out.size() >= top) break;
    s.site = site == SiteNamer::kNoSite ? std::string("(no stack recorded)") : sites.Label(site);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

Result<Simulations> ReplayRecording(const model::Trace& trace,
                                    const std::optional<std::string>& recorded_conf,
                                    bool record_curves) {
  Simulations out;
  if (!trace.facts.has_trace) {
    return InvalidInput(fmt::format(
        "{}: the input holds no alloc/free trace, so there is nothing to replay; record one "
        "with torch.cuda.memory._record_memory_history() before the step you want to see",
        trace.source.path));
  }
  // Settings, checked before any work.
  allocator::AllocatorSettings recorded;
  std::string source;
  if (recorded_conf) {
    ASSIGN_OR_RETURN(recorded, allocator::ParseAllocConf(*recorded_conf));
    source = "given with --recorded-conf";
  } else if (!trace.allocator_settings.empty()) {
    ASSIGN_OR_RETURN(recorded, allocator::SettingsFromSnapshot(trace.allocator_settings));
    source = "as recorded in the snapshot";
  } else {
    source = trace.facts.has_allocator_state
                 ? "not recorded in the snapshot (torch before 2.3), so torch's defaults are "
                   "assumed; pass --recorded-conf if the run set PYTORCH_CUDA_ALLOC_CONF"
                 : "not recorded by this source, so torch's defaults are assumed; pass "
                   "--recorded-conf if the run set PYTORCH_CUDA_ALLOC_CONF";
  }
  const std::vector<int32_t> devices = DevicesWithEvents(trace);
  if (devices.empty()) {
    return InvalidInput(fmt::format(
        "{}: the trace holds no allocation on any device, so there is nothing to replay; record "
        "one with torch.cuda.memory._record_memory_history() before the step you want to see",
        trace.source.path));
  }
  // The reserved curve of a source without an allocator state (a profiler's totals, driver
  // allocations) is the event model's; block sizes do not enter it.
  std::optional<Timelines> recorded_curves;
  if (!trace.facts.has_allocator_state && trace.facts.reserved_known) {
    const model::Interpretation nothing;
    recorded_curves = ComputeTimelines(model::TraceView{trace, nothing});
  }
  for (const int32_t d : devices) {
    DeviceSimulation dev;
    dev.device = d;
    dev.recorded_settings = recorded;
    dev.settings_source = source;
    const size_t begin = trace.EventRange(d).first;
    if (recorded_curves) {
      for (const DeviceTimeline& t : recorded_curves->devices) {
        if (t.device != d) continue;
        dev.recorded_peak_reserved = static_cast<uint64_t>(t.peak_reserved);
        dev.recorded_peak_event = t.peak_reserved_event == model::kNoEvent
                                      ? static_cast<int64_t>(begin)
                                      : t.peak_reserved_event;
      }
    }
    if (trace.facts.has_allocator_state) {
      const allocator::ReservedPeak peak = allocator::RecordedPeakReserved(trace, d);
      dev.recorded_peak_reserved = peak.bytes;
      dev.recorded_peak_event = peak.event;
    }
    allocator::ReplayOptions options;
    options.settings = recorded;
    dev.compared = trace.facts.has_allocator_state;
    options.follow_recording = dev.compared;
    options.record_curves = record_curves;
    ASSIGN_OR_RETURN(allocator::ReplayResult r, allocator::Replay(trace, d, options));
    // The state before the first event counts too (a trace may start by releasing memory).
    if (r.initial_reserved > dev.recorded_peak_reserved) {
      dev.recorded_peak_reserved = r.initial_reserved;
      dev.recorded_peak_event = static_cast<int64_t>(begin);
    }
    dev.runs.push_back(
        {dev.compared ? "replay" : "model", recorded.ToAllocConf(), std::move(r), {}, 0});
    out.devices.push_back(std::move(dev));
  }
  return out;
}

Status AddWhatIfRuns(const model::TraceView& view, SiteNamer& sites, const WhatIfRequest& request,
                     Simulations& sims) {
  const model::Trace& trace = view.trace;
  if (request.device) {
    std::vector<std::string> names;
    bool found = false;
    for (const DeviceSimulation& dev : sims.devices) {
      names.push_back(std::to_string(dev.device));
      found |= dev.device == *request.device;
    }
    if (!found) {
      return UsageError(fmt::format(
          "--device {}: no allocation was recorded on it; devices with allocations: {}",
          *request.device,
          names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))));
    }
  }
  for (DeviceSimulation& dev : sims.devices) {
    if (request.device && dev.device != *request.device) continue;
    for (const auto& conf : request.what_if) {
      allocator::AllocatorSettings s = dev.recorded_settings;
      if (conf) {
        ASSIGN_OR_RETURN(s, allocator::ParseAllocConf(*conf));
      }
      s.capacity = request.capacity;
      s.memory_fraction = request.memory_fraction;
      allocator::ReplayOptions options;
      options.settings = s;
      options.follow_recording = false;
      options.record_curves = request.record_curves;
      options.pools = request.pools;
      ASSIGN_OR_RETURN(allocator::ReplayResult r, allocator::Replay(trace, dev.device, options));
      SimulationRun run{"what-if", s.ToAllocConf(), std::move(r), {}, 0};
      if (run.result.oom) {
        run.live_at_oom = LiveBySite(view, sites, dev.device, run.result.oom->event,
                                     request.top_sites, &run.live_at_oom_total);
      }
      dev.runs.push_back(std::move(run));
    }
  }
  return Status::Ok();
}

std::vector<uint32_t> TakeReplayedBlockSizes(const model::Trace& trace, Simulations& sims) {
  constexpr uint64_t kUnit = model::Interpretation::kReplayedBlockUnit;
  std::vector<uint32_t> out;
  for (DeviceSimulation& device : sims.devices) {
    if (!device.compared || device.runs.empty()) continue;
    // Moved out: 16 bytes an allocation that nothing else reads.
    const auto confirmed = std::move(device.runs.front().result.confirmed_block_sizes);
    device.runs.front().result.confirmed_block_sizes = {};
    for (const auto& [index, size] : confirmed) {
      if (index < 0 || static_cast<size_t>(index) >= trace.allocations.size()) continue;
      const model::Allocation& a = trace.allocations[index];
      // The model's block always holds the request; anything else is not this allocation.
      if (a.size_exact || size < a.requested_size) continue;
      // Not a size the caching allocator makes: left estimated rather than stored wrong.
      if (size % kUnit != 0 || size / kUnit > UINT32_MAX) continue;
      if (out.empty()) out.assign(trace.allocations.size(), 0);
      out[index] = static_cast<uint32_t>(size / kUnit);
    }
  }
  return out;
}

}  // namespace vramscope::analysis
