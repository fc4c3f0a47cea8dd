#include "report/simulation_summary.h"

#include <fmt/format.h>

#include "common/units.h"

namespace vramscope::report {
namespace {

using allocator::ReplayComparison;
using allocator::ReplayResult;

std::string Bytes(uint64_t b) { return FormatBytes(static_cast<int64_t>(b)); }
std::string Count(uint64_t n) { return FormatCount(static_cast<int64_t>(n)); }

std::string Ratio(uint64_t part, uint64_t whole) {
  if (whole == 0) return "-";
  return fmt::format("{:.2f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string ConfLabel(const std::string& conf) { return conf.empty() ? "defaults" : conf; }

// "event 5,123 (12.345 s into the trace)" when times were recorded.
std::string EventAt(const model::Trace& trace, int64_t event, int64_t begin) {
  std::string out = fmt::format("event {}", Count(static_cast<uint64_t>(event)));
  if (event >= 0 && static_cast<size_t>(event) < trace.events.count() &&
      trace.events.time_us[event] != model::kNoTime &&
      trace.events.time_us[begin] != model::kNoTime) {
    out += fmt::format(
        " ({:.3f} s into the trace)",
        static_cast<double>(trace.events.time_us[event] - trace.events.time_us[begin]) / 1e6);
  }
  return out;
}

std::string Capacity(const allocator::AllocatorSettings& s) {
  if (s.AllowedMaximum() == allocator::kUnlimited) return "unlimited";
  std::string out = Bytes(s.AllowedMaximum());
  if (s.memory_fraction > 0) out += fmt::format(" (fraction {})", s.memory_fraction);
  return out;
}

uint64_t EmptyCacheBursts(const ReplayComparison& c) {
  uint64_t n = 0;
  for (const auto& b : c.bursts) n += b.cause == allocator::ReleaseBurst::Cause::kEmptyCache;
  return n;
}

std::string PoolLabel(allocator::MemPoolId id) {
  // CUDAGraph.cpp: a graph's own pool is {uuid, 0}; graph_pool_handle() and MemPool are {0, uid}.
  return fmt::format(
      "({}, {}) {}", id.first, id.second,
      id.first != 0 ? "a CUDA graph's own pool" : "graph_pool_handle() or torch.cuda.MemPool");
}

// The private pools of a run, one line each.
void RenderPools(std::string& out, const ReplayResult& r) {
  if (r.pools.empty()) return;
  out += fmt::format("    private pools: {} reserved at the peak of the pools, {} at the end\n",
                     Bytes(r.stats.peak_reserved_private), Bytes(r.stats.reserved_private));
  for (const allocator::PoolResult& p : r.pools) {
    out += fmt::format(
        "      pool {}: {} requests, peak reserved {}, at the end {} reserved, {} allocated, {} "
        "cached\n",
        PoolLabel(p.id), Count(p.allocations), Bytes(p.peak_reserved), Bytes(p.reserved_at_end),
        Bytes(p.allocated_at_end), Bytes(p.cached_at_end));
  }
}

void RenderReplay(std::string& out, const model::Trace& trace,
                  const analysis::DeviceSimulation& dev, const analysis::SimulationRun& run) {
  const ReplayResult& r = run.result;
  const ReplayComparison& c = r.comparison;
  if (!dev.compared) {
    out += fmt::format(
        "  this source records no allocator state (segments, blocks), so there is nothing to "
        "compare against; the model's own run over the recorded requests:\n"
        "    peak reserved {}, peak allocated {}, fragmentation at the peak {:.1f}%, {} cudaMalloc "
        "/ {} cudaFree\n",
        Bytes(r.stats.peak_reserved), Bytes(r.stats.peak_allocated),
        100.0 * r.FragmentationAtPeak(), Count(r.stats.cuda_mallocs), Count(r.stats.cuda_frees));
    if (trace.facts.reserved_known) {
      out += fmt::format("    recorded peak reserved ({}): {}\n",
                         trace.facts.synthetic_segment_addresses ? "the profiler's Total Reserved"
                                                                 : "driver-level allocations",
                         Bytes(dev.recorded_peak_reserved));
    }
    out +=
        "    memory allocated before recording began is not among the requests, so the model "
        "starts empty\n";
    return;
  }
  out += "  replay against the recording\n";
  if (r.initial_segments > 0 || r.initial_blocks > 0) {
    out += fmt::format(
        "    the trace starts mid-run: {} segments ({}) and {} allocations rebuilt from the "
        "recording\n",
        Count(r.initial_segments), Bytes(r.initial_reserved), Count(r.initial_blocks));
  }
  out += fmt::format("    allocations at the recorded address  {:>9} of {:<9} {}\n",
                     Count(c.allocs_at_recorded_address), Count(c.allocs),
                     Ratio(c.allocs_at_recorded_address, c.allocs));
  out += fmt::format("    segment_alloc, same size and order   {:>9} of {:<9} {}\n",
                     Count(c.segment_allocs_matched), Count(c.recorded_segment_allocs),
                     c.recorded_segment_allocs == 0 && c.model_segment_allocs == 0
                         ? std::string("(none recorded, none made)")
                         : Ratio(c.segment_allocs_matched,
                                 std::max(c.recorded_segment_allocs, c.model_segment_allocs)));
  if (c.recorded_segment_frees > 0) {
    out += fmt::format(
        "    segment_free, as the rule releases   {:>9} of {:<9} {} ({} empty_cache call(s), {} "
        "release(s) after a failed cudaMalloc)\n",
        Count(c.segment_frees_matched), Count(c.recorded_segment_frees),
        Ratio(c.segment_frees_matched, c.recorded_segment_frees), Count(EmptyCacheBursts(c)),
        Count(c.bursts.size() - EmptyCacheBursts(c)));
  }
  if (c.recorded_maps + c.recorded_unmaps > 0) {
    out += fmt::format("    recorded segment_map / unmap         {:>9} / {}\n",
                       Count(c.recorded_maps), Count(c.recorded_unmaps));
  }
  out +=
      fmt::format("    reserved equal to the recording      {:>9} of {:<9} {} of alloc/free events",
                  Count(c.reserved_equal_points), Count(c.compared_points),
                  Ratio(c.reserved_equal_points, c.compared_points));
  out += c.max_reserved_difference > 0
             ? fmt::format(" (largest difference {})\n", Bytes(c.max_reserved_difference))
             : "\n";
  out += fmt::format(
      "    final state as in the snapshot       {:>9} of {:<9} segments, {} of {} blocks\n",
      Count(c.final_segments_matched), Count(c.final_segments_recorded),
      Count(c.final_blocks_matched), Count(c.final_blocks_recorded));
  out += fmt::format(
      "    peak reserved {} at {} (recorded {}), allocated then {}: fragmentation {:.1f}%\n",
      Bytes(r.stats.peak_reserved), EventAt(trace, r.peak_reserved_event, r.begin_event),
      Bytes(dev.recorded_peak_reserved), Bytes(r.allocated_at_peak_reserved),
      100.0 * r.FragmentationAtPeak());
  if (c.divergence_count == 0) {
    out += "    no divergence: the model made every decision the recorded allocator made\n";
  } else {
    out += fmt::format("    {} divergence(s); the model followed the recording after each:\n",
                       Count(c.divergence_count));
    for (const std::string& d : c.divergences) out += "      " + d + "\n";
    if (c.divergence_count > c.divergences.size()) {
      out +=
          fmt::format("      ... and {} more\n", Count(c.divergence_count - c.divergences.size()));
    }
  }
  RenderPools(out, r);
  for (const std::string& n : r.notes) out += "    note: " + n + "\n";
}

void RenderWhatIf(std::string& out, const model::Trace& trace,
                  const analysis::DeviceSimulation& dev, const analysis::DeviceSummary* recorded) {
  std::vector<const analysis::SimulationRun*> runs;
  for (const auto& run : dev.runs) {
    if (run.label == "what-if") runs.push_back(&run);
  }
  if (runs.empty()) return;
  constexpr int kLabel = 28;
  constexpr int kCol = 26;
  auto row = [&](std::string_view name, std::string recorded, auto cell) {
    out += fmt::format("    {:<{}}{:>{}}", name, kLabel, recorded, kCol);
    for (const auto* run : runs) out += fmt::format("{:>{}}", cell(*run), kCol);
    out += "\n";
  };
  const ReplayResult& replay = dev.runs.front().result;
  out += "  what if\n";
  row("settings", "recorded", [](const analysis::SimulationRun& r) {
    std::string label = ConfLabel(r.alloc_conf);
    if (r.result.pool_mapping != allocator::PoolMapping::kRecorded) {
      label += fmt::format(", pools {}", allocator::PoolMappingName(r.result.pool_mapping));
    }
    if (label.size() > kCol - 2) label = label.substr(0, kCol - 5) + "...";
    return label;
  });
  row("device memory for PyTorch", "-",
      [](const analysis::SimulationRun& r) { return Capacity(r.result.settings); });
  row("peak reserved", Bytes(dev.recorded_peak_reserved),
      [](const analysis::SimulationRun& r) { return Bytes(r.result.stats.peak_reserved); });
  row("peak allocated",
      Bytes(recorded != nullptr ? static_cast<uint64_t>(recorded->peak_allocated)
                                : replay.stats.peak_allocated),
      [](const analysis::SimulationRun& r) { return Bytes(r.result.stats.peak_allocated); });
  row("fragmentation at peak", fmt::format("{:.1f}%", 100.0 * replay.FragmentationAtPeak()),
      [](const analysis::SimulationRun& r) {
        return fmt::format("{:.1f}%", 100.0 * r.result.FragmentationAtPeak());
      });
  row("cudaMalloc / cudaFree",
      fmt::format("{} / {}", Count(replay.comparison.recorded_segment_allocs),
                  Count(replay.comparison.recorded_segment_frees)),
      [](const analysis::SimulationRun& r) {
        return fmt::format("{} / {}", Count(r.result.stats.cuda_mallocs),
                           Count(r.result.stats.cuda_frees));
      });
  if (!replay.pools.empty()) {
    row("peak reserved, private pools", Bytes(replay.stats.peak_reserved_private),
        [](const analysis::SimulationRun& r) {
          return Bytes(r.result.stats.peak_reserved_private);
        });
  }
  row("cache released to retry", "-",
      [](const analysis::SimulationRun& r) { return Count(r.result.stats.alloc_retries); });
  row("result", "ran", [](const analysis::SimulationRun& r) {
    return r.result.oom
               ? fmt::format("OOM at event {}", Count(static_cast<uint64_t>(r.result.oom->event)))
               : std::string("fits");
  });
  for (const auto* run : runs) {
    if (!run->result.oom) continue;
    const allocator::OomPoint& oom = *run->result.oom;
    out += fmt::format(
        "\n  out of memory with {} ({} for PyTorch) at {}: a request of {} (rounded {}) with {} "
        "reserved and {} allocated\n",
        ConfLabel(run->alloc_conf), Capacity(run->result.settings),
        EventAt(trace, oom.event, run->result.begin_event), Bytes(oom.requested),
        Bytes(oom.rounded), Bytes(oom.reserved), Bytes(oom.allocated));
    out += fmt::format("    live then: {}{}\n", Bytes(run->live_at_oom_total),
                       run->live_at_oom.empty() ? "" : "; by allocation site:");
    for (const auto& s : run->live_at_oom) {
      out += fmt::format("    {:>12}  {:>7} allocs  {}\n", Bytes(s.bytes), Count(s.allocations),
                         s.site);
    }
  }
}

nlohmann::json SettingsJson(const allocator::AllocatorSettings& s) {
  nlohmann::json j = {{"alloc_conf", s.ToAllocConf()},
                      {"max_split_size", s.max_split_size == allocator::kUnlimited
                                             ? nlohmann::json(nullptr)
                                             : nlohmann::json(s.max_split_size)},
                      {"max_non_split_rounding", s.max_non_split_rounding},
                      {"roundup_power2_divisions", s.roundup_power2_divisions},
                      {"garbage_collection_threshold", s.garbage_collection_threshold},
                      {"expandable_segments", s.expandable_segments}};
  j["capacity"] =
      s.capacity == allocator::kUnlimited ? nlohmann::json(nullptr) : nlohmann::json(s.capacity);
  j["memory_fraction"] =
      s.memory_fraction > 0 ? nlohmann::json(s.memory_fraction) : nlohmann::json(nullptr);
  return j;
}

// null when there was nothing to compare.
nlohmann::json Rate(uint64_t part, uint64_t whole) {
  if (whole == 0) return nullptr;
  return static_cast<double>(part) / static_cast<double>(whole);
}

nlohmann::json PoolsJson(const ReplayResult& r) {
  nlohmann::json pools = nlohmann::json::array();
  for (const allocator::PoolResult& p : r.pools) {
    pools.push_back({{"pool_id", {p.id.first, p.id.second}},
                     {"requests", p.allocations},
                     {"peak_reserved_bytes", p.peak_reserved},
                     {"reserved_at_end_bytes", p.reserved_at_end},
                     {"allocated_at_end_bytes", p.allocated_at_end},
                     {"cached_at_end_bytes", p.cached_at_end}});
  }
  return {{"mapping", allocator::PoolMappingName(r.pool_mapping)},
          {"peak_reserved_bytes", r.stats.peak_reserved_private},
          {"reserved_at_end_bytes", r.stats.reserved_private},
          {"pools", pools}};
}

nlohmann::json RunJson(const analysis::SimulationRun& run) {
  const ReplayResult& r = run.result;
  nlohmann::json j = {{"kind", run.label},
                      {"settings", SettingsJson(r.settings)},
                      {"events_replayed", r.events_replayed},
                      {"peak_reserved_bytes", r.stats.peak_reserved},
                      {"peak_reserved_event", r.peak_reserved_event},
                      {"peak_allocated_bytes", r.stats.peak_allocated},
                      {"allocated_at_peak_reserved_bytes", r.allocated_at_peak_reserved},
                      {"fragmentation_at_peak", r.FragmentationAtPeak()},
                      {"reserved_at_end_bytes", r.stats.reserved},
                      {"allocated_at_end_bytes", r.stats.allocated},
                      {"cuda_mallocs", r.stats.cuda_mallocs},
                      {"cuda_frees", r.stats.cuda_frees},
                      {"alloc_retries", r.stats.alloc_retries},
                      {"gc_releases", r.stats.gc_releases},
                      {"oversize_releases", r.stats.oversize_releases},
                      {"empty_cache_calls_applied", r.empty_cache_calls},
                      {"private_pools", PoolsJson(r)},
                      {"initial_state",
                       {{"segments", r.initial_segments},
                        {"reserved_bytes", r.initial_reserved},
                        {"allocations", r.initial_blocks},
                        {"allocated_bytes", r.initial_allocated}}},
                      {"notes", r.notes}};
  if (r.oom) {
    nlohmann::json sites = nlohmann::json::array();
    for (const auto& s : run.live_at_oom) {
      sites.push_back({{"site", s.site}, {"bytes", s.bytes}, {"allocations", s.allocations}});
    }
    j["oom"] = {{"event", r.oom->event},
                {"requested_bytes", r.oom->requested},
                {"rounded_bytes", r.oom->rounded},
                {"stream", r.oom->stream},
                {"reserved_bytes", r.oom->reserved},
                {"allocated_bytes", r.oom->allocated},
                {"allowed_bytes", r.oom->allowed},
                {"live_bytes", run.live_at_oom_total},
                {"live_by_site", sites}};
  } else {
    j["oom"] = nullptr;
  }
  if (r.follow_recording) {
    const ReplayComparison& c = r.comparison;
    nlohmann::json bursts = nlohmann::json::array();
    for (const auto& b : c.bursts) {
      bursts.push_back(
          {{"first_event", b.first_event},
           {"segments", b.segments},
           {"bytes", b.bytes},
           {"cause", b.cause == allocator::ReleaseBurst::Cause::kEmptyCache ? "empty_cache"
                                                                            : "cudaMalloc failed"},
           {"matches_rule", b.matches_rule},
           {"same_order", b.same_order}});
    }
    j["comparison"] = {
        {"allocs", c.allocs},
        {"allocs_at_recorded_address", c.allocs_at_recorded_address},
        {"address_match_rate", Rate(c.allocs_at_recorded_address, c.allocs)},  // null: none
        {"recorded_segment_allocs", c.recorded_segment_allocs},
        {"model_segment_allocs", c.model_segment_allocs},
        {"segment_allocs_matched", c.segment_allocs_matched},
        {"segment_alloc_match_rate",
         Rate(c.segment_allocs_matched,
              std::max(c.recorded_segment_allocs, c.model_segment_allocs))},
        {"recorded_segment_frees", c.recorded_segment_frees},
        {"segment_frees_matched", c.segment_frees_matched},
        {"release_bursts", bursts},
        {"recorded_segment_maps", c.recorded_maps},
        {"recorded_segment_unmaps", c.recorded_unmaps},
        {"reserved_compared_points", c.compared_points},
        {"reserved_equal_points", c.reserved_equal_points},
        {"max_reserved_difference_bytes", c.max_reserved_difference},
        {"final_segments_recorded", c.final_segments_recorded},
        {"final_segments_matched", c.final_segments_matched},
        {"final_blocks_recorded", c.final_blocks_recorded},
        {"final_blocks_matched", c.final_blocks_matched},
        {"divergence_count", c.divergence_count},
        {"divergences", c.divergences}};
  }
  return j;
}

// The recorded peak allocated of `device`, as every verb reports it (the analysis' summary).
const analysis::DeviceSummary* RecordedSummary(const ReportInput& in, int32_t device) {
  for (const analysis::DeviceSummary& d : in.summary.devices) {
    if (d.device == device) return &d;
  }
  return nullptr;
}

bool Shown(std::optional<int32_t> only, int32_t device) { return !only || *only == device; }

}  // namespace

std::string RenderSimulationText(const ReportInput& in, std::optional<int32_t> device) {
  const model::Trace& trace = in.trace;
  std::string out =
      fmt::format("vramscope simulate: {}\n", trace.source.built_in_example
                                                  ? "built-in example (recorded on an NVIDIA H200: "
                                                    "a 2-layer MLP trained with Adam for 3 steps)"
                                                  : trace.source.path);
  // A window (--from/--to/--step-range): the simulation covers that part only.
  for (const std::string& note : trace.facts.notes) {
    if (note.starts_with("window (")) out += "  " + note + "\n";
  }
  if (in.simulations == nullptr) return out;
  for (const auto& dev : in.simulations->devices) {
    if (!Shown(device, dev.device)) continue;
    const auto [begin, end] = trace.EventRange(dev.device);
    out += fmt::format("\ncuda:{}  {} trace events; allocator settings: {}, {}\n", dev.device,
                       Count(end - begin), ConfLabel(dev.recorded_settings.ToAllocConf()),
                       dev.settings_source);
    if (const analysis::DeviceSummary* d = RecordedSummary(in, dev.device)) {
      out += fmt::format(
          "  recorded: peak allocated {}, peak reserved {} (as 'vramscope report' "
          "gives them)\n",
          Bytes(static_cast<uint64_t>(d->peak_allocated)),
          Bytes(static_cast<uint64_t>(d->peak_reserved)));
    }
    RenderReplay(out, trace, dev, dev.runs.front());
    RenderWhatIf(out, trace, dev, RecordedSummary(in, dev.device));
  }
  return out;
}

nlohmann::json RenderSimulationJson(const ReportInput& in, std::optional<int32_t> device) {
  const model::Trace& trace = in.trace;
  nlohmann::json devices = nlohmann::json::array();
  if (in.simulations != nullptr) {
    for (const auto& dev : in.simulations->devices) {
      if (!Shown(device, dev.device)) continue;
      const auto [begin, end] = trace.EventRange(dev.device);
      const analysis::DeviceSummary* recorded = RecordedSummary(in, dev.device);
      devices.push_back(
          {{"device", dev.device},
           {"events", end - begin},
           {"recorded_settings", SettingsJson(dev.recorded_settings)},
           {"recorded_settings_source", dev.settings_source},
           // The recording's own peaks, as every verb reports them.
           {"recorded_peak_allocated_bytes",
            recorded != nullptr ? nlohmann::json(recorded->peak_allocated) : nlohmann::json()},
           {"recorded_peak_reserved_bytes", dev.recorded_peak_reserved},
           {"recorded_peak_reserved_event", dev.recorded_peak_event},
           {"replay", RunJson(dev.runs.front())},
           {"what_if", [&] {
              nlohmann::json w = nlohmann::json::array();
              for (size_t k = 1; k < dev.runs.size(); ++k) w.push_back(RunJson(dev.runs[k]));
              return w;
            }()}});
    }
  }
  return {{"tool", "vramscope"},
          {"input", trace.source.built_in_example ? "built-in example" : trace.source.path},
          {"devices", devices}};
}

}  // namespace vramscope::report
