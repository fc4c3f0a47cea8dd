#include "report/json_summary.h"

#include <algorithm>

#include "report/explain_output.h"
#include "report/prediction_fit.h"

namespace vramscope::report {

namespace {

nlohmann::json EventOrNull(int64_t v) {
  return v == model::kNoEvent ? nlohmann::json(nullptr) : nlohmann::json(v);
}
nlohmann::json TimeOrNull(int64_t v) {
  return v == model::kNoTime ? nlohmann::json(nullptr) : nlohmann::json(v);
}

// What a prediction assumed and found (null for a measured trace), with whether it fits the GPU's
// capacity when one was given (report/prediction_fit.h).
nlohmann::json Prediction(const ReportInput& in) {
  using nlohmann::json;
  if (!in.trace.prediction) return json(nullptr);
  const model::PredictionInfo& p = *in.trace.prediction;
  json facts = json::object();
  for (const auto& [key, value] : p.facts) facts[key] = value;
  json out = {
      {"model", p.model},
      {"setup", p.setup},
      {"gpu", p.gpu},
      {"torch_version", p.torch_version},
      {"parameters", p.parameters},
      {"trainable_parameters", p.trainable_parameters},
      {"parameter_bytes", p.parameter_bytes},
      {"buffer_bytes", p.buffer_bytes},
      {"capacity_bytes", p.capacity},  // 0: unlimited
      {"host_bytes", p.host_bytes},    // pinned host memory at its most (offloading)
      {"paged_bytes", p.paged_bytes},  // of it, unified-memory optimizer pages
      {"facts", facts},
      {"assumptions", p.assumptions},
  };
  if (const auto fit = FitOfPrediction(in)) {
    out["peak_reserved_bytes"] = fit->peak_reserved;
    out["needed_bytes"] = fit->needed;
    out["fits"] = fit->fits;
    out["headroom_bytes"] = fit->headroom;
    out["oom"] = fit->oom ? json{{"device", fit->oom_device},
                                 {"event", fit->oom_event},
                                 {"requested_bytes", fit->oom_requested},
                                 {"reserved_bytes", fit->reserved_at_oom}}
                          : json(nullptr);
  }
  return out;
}

// One out-of-memory, explained (analysis/oom.h). Exact bytes; `top` owners and sites at most
// (all when negative).
nlohmann::json Oom(const analysis::OomExplanation& o, int top) {
  using nlohmann::json;
  const auto limited = [&](size_t n) {
    return top < 0 ? n : std::min<size_t>(n, static_cast<size_t>(top));
  };
  json by_category = json::object();
  for (const analysis::CategoryShare& c : o.live.by_category) {
    by_category[attribution::CategoryName(c.category)] = {{"bytes", c.bytes}, {"count", c.count}};
  }
  json owners = json::array();
  for (size_t i = 0; i < limited(o.live.by_owner.size()); ++i) {
    const analysis::OwnerGroup& g = o.live.by_owner[i];
    owners.push_back({{"owner", g.label},
                      {"category", attribution::CategoryName(g.category)},
                      {"bytes", g.bytes},
                      {"count", g.count}});
  }
  json sites = json::array();
  for (size_t i = 0; i < limited(o.live.by_site.size()); ++i) {
    const analysis::SiteGroup& g = o.live.by_site[i];
    sites.push_back({{"site", g.label},
                     {"category", attribution::CategoryName(g.category)},
                     {"bytes", g.bytes},
                     {"count", g.count}});
  }
  const auto text_or_null = [](const std::string& s) {
    return s.empty() ? json(nullptr) : json(s);
  };
  return {
      {"event", o.event},
      {"time_us", TimeOrNull(o.time_us)},
      {"step", o.step},
      {"phase", attribution::PhaseName(o.phase)},
      {"request",
       {{"requested_bytes", o.requested_bytes},
        {"block_bytes", o.block_bytes},
        {"segment_bytes", o.segment_bytes},
        {"pool", o.small_pool ? "small" : "large"},
        {"stream", o.stream},
        {"stack_id", o.stack},
        {"site", text_or_null(o.site)},
        {"operation", text_or_null(o.operation)}}},
      {"device_free_bytes", o.device_free_known ? json(o.device_free_bytes) : json(nullptr)},
      {"allocated_bytes", o.allocated_bytes},
      {"reserved_bytes", o.reserved_bytes},
      {"reserved_free_bytes", o.reserved_free_bytes},
      {"free_blocks", o.state_known ? json{{"largest_usable_bytes", o.largest_free_block_bytes},
                                           {"usable_bytes", o.usable_free_bytes},
                                           {"usable_blocks", o.usable_free_blocks},
                                           {"largest_any_bytes", o.largest_free_block_any_bytes},
                                           {"total_bytes", o.free_block_bytes}}
                                    : json(nullptr)},
      {"free_blocks_note", text_or_null(o.state_note)},
      {"expandable_segments", o.expandable_segments},
      {"fragmentation", o.fragmentation},
      {"limit", analysis::OomLimitName(o.limit)},
      {"cap_bytes", o.limit == analysis::OomLimit::kAllocatorCap
                        ? json{{"at_least", o.cap_at_least_bytes}, {"below", o.cap_below_bytes}}
                        : json(nullptr)},
      {"verdict", o.verdict},
      {"hint", o.hint},
      {"live",
       {{"bytes", o.live.bytes},
        {"count", o.live.count},
        {"by_category", by_category},
        {"largest_owners", owners},
        {"sites_total", o.live.by_site.size()},
        {"by_site", sites}}},
  };
}

}  // namespace

nlohmann::json RenderJsonSummary(const ReportInput& in, int top_sites) {
  using nlohmann::json;
  const model::Trace& t = in.trace;
  json out;
  out["tool"] = {{"name", "vramscope"}, {"version", kToolVersion}};
  // A prediction measured nothing: its figures are what `vramscope predict` expects.
  out["predicted"] = IsPredictedTrace(t);
  out["prediction"] = Prediction(in);
  out["source"] = {
      {"path", t.source.path},
      {"format", in.view.Format()},
      {"generation", t.source.generation},
      {"generation_evidence", t.source.generation_evidence},
      {"bytes", t.source.file_bytes},
      {"pickle_protocol", t.source.pickle_protocol},
      {"device_type", t.source.device_type},
      {"built_in_example", t.source.built_in_example},
      {"events", t.events.count()},
      {"segments", t.segments.size()},
      {"blocks", t.blocks.size()},
      {"allocations", t.allocations.size()},
  };
  const model::TraceFacts& f = t.facts;
  out["facts"] = {
      {"has_trace", f.has_trace},
      {"has_times", f.has_times},
      {"has_stacks", f.has_stacks},
      {"has_python_frames", f.has_python_frames},
      {"has_native_frames", f.has_native_frames},
      {"has_segment_events", f.has_segment_events},
      {"trace_starts_mid_run", f.starts_mid_run},
      {"ring_buffer_overflowed", f.ring_buffer_overflowed},
      {"partial", f.partial},
      {"cut_at_byte", f.cut_at_byte},
      {"skipped_actions", f.skipped_actions},
      {"frees_without_alloc", f.frees_without_alloc},
      {"allocations_alive_before_trace", f.allocations_alive_before_trace},
  };
  out["notes"] = in.view.Notes();
  out["attribution"] = {{"phases_evidence", in.attribution.phases.evidence},
                        {"phases_detected", in.attribution.phases.detected},
                        {"notes", in.attribution.notes}};
  out["region_notes"] = in.regions != nullptr ? json(in.regions->notes) : json(json::array());
  out["peak_usage_bytes"] = in.summary.peak_usage_bytes;
  // nvidia-smi's figure decomposed (analysis/device_usage.h); null without NVML samples.
  json device_usage = nullptr;
  if (in.device_usage != nullptr && in.device_usage->recorded) {
    const analysis::DeviceUsageDecomposition& u = *in.device_usage;
    json parts = json::array();
    for (const analysis::DeviceUsagePart& p : u.parts) {
      parts.push_back({{"what", p.what}, {"bytes", p.bytes}, {"how", p.how}});
    }
    device_usage = {{"available", u.available},
                    {"why_not", u.why_not},
                    {"samples", u.samples},
                    {"step", u.step},
                    {"phase", u.phase},
                    {"at", u.at},
                    {"time_us", u.time_us},
                    {"device_total", u.device_total},
                    {"device_used", u.device_used},
                    {"parts", parts},
                    {"unexplained_bytes", u.unexplained ? json(*u.unexplained) : json(nullptr)},
                    {"model_gpu", u.gpu}};
  }
  out["device_usage"] = device_usage;
  json oom_message = nullptr;
  if (in.oom_message != nullptr) {
    oom_message = {{"text", in.oom_message->message.text},
                   {"verdict", OomVerdictJson(in.oom_message->verdict)},
                   {"cause", analysis::OomMessageCauseName(in.oom_message->cause)},
                   {"findings", OomFindingsJson(in.oom_message->findings)},
                   {"advice", in.oom_message->advice}};
  }
  out["oom_message"] = oom_message;
  // Memory timelines record no reserved memory at all.
  const bool reserved_known = f.reserved_known;
  json devices = json::array();
  for (const analysis::DeviceSummary& d : in.summary.devices) {
    json categories = json::array();
    const double whole = static_cast<double>(d.live_at_peak_bytes);
    uint64_t unknown = 0;
    for (const auto& c : d.live_at_peak_by_category) {
      json owners = json::array();
      for (const analysis::OwnerGroup& o : d.live_at_peak_by_owner) {
        if (o.category != c.category) continue;
        if (top_sites >= 0 && owners.size() >= static_cast<size_t>(top_sites)) break;
        owners.push_back({{"owner", o.label}, {"bytes", o.bytes}, {"count", o.count}});
      }
      if (c.category == attribution::Category::kUnknown) unknown = c.bytes;
      categories.push_back({{"category", attribution::CategoryName(c.category)},
                            {"bytes", c.bytes},
                            {"count", c.count},
                            {"share", whole > 0 ? static_cast<double>(c.bytes) / whole : 0.0},
                            {"largest_owners", owners}});
    }
    json iterations = json::array();
    for (const analysis::IterationSummary& it : d.iterations) {
      json at_peak = json::object();
      for (int c = 0; c < attribution::kCategoryCount; ++c) {
        at_peak[attribution::CategoryName(static_cast<attribution::Category>(c))] = it.at_peak[c];
      }
      iterations.push_back({{"step", it.step},
                            {"first_event", it.first_event},
                            {"last_event", it.last_event},
                            {"start_time_us", TimeOrNull(it.start_time_us)},
                            {"end_time_us", TimeOrNull(it.end_time_us)},
                            {"has_forward", it.has_forward},
                            {"has_backward", it.has_backward},
                            {"has_optimizer", it.has_optimizer},
                            {"peak_allocated_bytes", it.peak_allocated},
                            {"peak_event", EventOrNull(it.peak_event)},
                            {"peak_phase", attribution::PhaseName(it.peak_phase)},
                            {"at_peak_by_category", at_peak}});
    }
    const auto& conf = d.live_at_peak_by_confidence;
    json sites = json::array();
    const size_t shown = top_sites < 0 ? d.live_at_peak_by_site.size()
                                       : std::min<size_t>(d.live_at_peak_by_site.size(),
                                                          static_cast<size_t>(top_sites));
    for (size_t i = 0; i < shown; ++i) {
      const auto& g = d.live_at_peak_by_site[i];
      sites.push_back({{"site", g.label},
                       {"bytes", g.bytes},
                       {"count", g.count},
                       {"category", attribution::CategoryName(g.category)}});
    }
    // Memory by region, every region of every kind recorded on this device (analysis/regions.h),
    // and the annotation ranges behind the annotation_range regions.
    json regions = json::object();
    json ranges = json::array();
    if (in.regions != nullptr) {
      for (const analysis::Region& r : in.regions->regions) {
        if (r.device != d.device) continue;
        json& kind = regions[analysis::RegionKindName(r.kind)];
        if (kind.is_null()) kind = json::array();
        kind.push_back({{"name", r.name},
                        {"remainder", r.remainder},
                        {"allocations", r.allocations},
                        {"allocated_bytes", r.allocated_bytes},
                        {"live_at_peak_bytes", r.live_at_peak_bytes},
                        {"live_at_peak_count", r.live_at_peak_count},
                        {"peak_bytes", r.peak_bytes},
                        {"peak_event", EventOrNull(r.peak_event)},
                        {"first_event", EventOrNull(r.first_event)},
                        {"last_event", EventOrNull(r.last_event)},
                        {"start_time_us", TimeOrNull(r.start_time_us)},
                        {"end_time_us", TimeOrNull(r.end_time_us)},
                        {"ranges", r.ranges}});
      }
      for (const analysis::RegionRange& r : in.regions->ranges) {
        if (r.device != d.device) continue;
        ranges.push_back({{"name", r.name},
                          {"depth", r.depth},
                          {"start_time_us", TimeOrNull(r.start_time_us)},
                          {"end_time_us", TimeOrNull(r.end_time_us)},
                          {"first_event", EventOrNull(r.first_event)},
                          {"last_event", EventOrNull(r.last_event)},
                          {"unmatched_start", r.unmatched_start},
                          {"unmatched_end", r.unmatched_end}});
      }
    }
    json ooms = json::array();
    for (const analysis::OomExplanation& o : d.ooms) ooms.push_back(Oom(o, top_sites));
    const json oom = ooms.empty() ? json(nullptr) : ooms.front();
    devices.push_back({
        {"device", d.device},
        {"events", d.events},
        {"peak_from_trace", d.peak_from_trace},
        {"peak_allocated",
         {{"bytes", d.peak_allocated},
          {"event", EventOrNull(d.peak_allocated_event)},
          {"time_us", TimeOrNull(d.peak_allocated_time_us)},
          {"reserved_bytes_then", d.reserved_at_peak_allocated}}},
        {"peak_reserved",
         {{"bytes", d.peak_reserved},
          {"event", EventOrNull(d.peak_reserved_event)},
          {"time_us", TimeOrNull(d.peak_reserved_time_us)}}},
        {"at_dump",
         {{"allocated_bytes", d.allocated_at_dump},
          {"reserved_bytes", d.reserved_at_dump},
          {"active_bytes", d.active_at_dump},
          {"requested_bytes", d.requested_at_dump},
          {"reserved_not_allocated_bytes",
           reserved_known ? json(d.reserved_at_dump - d.allocated_at_dump) : json(nullptr)},
          {"largest_cached_free_block_bytes", d.largest_cached_free_block},
          {"segments", d.segments},
          {"small_segments", d.small_segments},
          {"private_pools",
           {{"pools", d.private_pools},
            {"segments", d.private_pool_segments},
            {"reserved_bytes", d.reserved_in_private_pools},
            {"cached_free_bytes", d.cached_in_private_pools}}},
          {"blocks", d.blocks},
          {"active_blocks", d.active_blocks}}},
        {"breakdown_at_peak",
         {{"step", d.peak_step},
          {"phase", attribution::PhaseName(d.peak_phase)},
          {"bytes", d.live_at_peak_bytes},
          {"unknown_bytes", unknown},
          {"unknown_share", whole > 0 ? static_cast<double>(unknown) / whole : 0.0},
          {"by_confidence_bytes", {{"high", conf[2]}, {"medium", conf[1]}, {"low", conf[0]}}},
          {"by_category", categories}}},
        {"iterations", iterations},
        {"live_at_peak",
         {{"bytes", d.live_at_peak_bytes},
          {"count", d.live_at_peak_count},
          {"by_category", categories},
          {"sites_total", d.live_at_peak_by_site.size()},
          {"by_site", sites}}},
        {"regions", regions},
        {"annotation_ranges", ranges},
        {"estimated_block_sizes", d.estimated_sizes},
        // The first out-of-memory (null when none), and all of them in order.
        {"oom", oom},
        {"ooms", ooms},
        {"first_time_us", TimeOrNull(d.first_time_us)},
        {"last_time_us", TimeOrNull(d.last_time_us)},
    });
  }
  out["devices"] = devices;
  out["skyline"] = {{"weight_entries", in.entries.weights.size()},
                    {"activation_entries", in.entries.activations.size()}};
  return out;
}

}  // namespace vramscope::report
