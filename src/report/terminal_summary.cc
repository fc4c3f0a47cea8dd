#include "report/terminal_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string_view>

#include "common/units.h"
#include "report/prediction_fit.h"

namespace vramscope::report {

namespace {

std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "at event 4,512 of 10,307, 12.345 s into the trace" / "at the start of the trace" / "at the dump"
std::string When(const model::Trace& trace, const analysis::DeviceSummary& d, int64_t event,
                 int64_t time_us) {
  if (!d.peak_from_trace) {
    return IsPredictedTrace(trace) ? "at the end (no events predicted)"
                                   : "at the dump (no trace recorded)";
  }
  if (event == model::kNoEvent) return "at the start of the trace";
  const auto [begin, end] = trace.EventRange(d.device);
  std::string text =
      fmt::format("at event {} of {}", FormatCount(event - static_cast<int64_t>(begin) + 1),
                  FormatCount(static_cast<int64_t>(end - begin)));
  if (time_us != model::kNoTime && d.first_time_us != model::kNoTime) {
    text += fmt::format(", {:.3f} s into the trace",
                        static_cast<double>(time_us - d.first_time_us) / 1e6);
  }
  return text;
}

// "at the peak of step 3 (backward)" / "at the peak (before the first iteration)" / ...
std::string PeakHeadline(const model::Trace& trace, const analysis::DeviceSummary& d) {
  if (!d.peak_from_trace) return IsPredictedTrace(trace) ? "at the end" : "at the dump";
  if (d.peak_step > 0) {
    return fmt::format("at the peak of step {} ({})", d.peak_step,
                       attribution::PhaseName(d.peak_phase));
  }
  if (d.peak_phase == attribution::Phase::kSetup) return "at the peak (before the first step)";
  return "at the peak";
}

// "activation 3.12 GiB (56.9%), weight 1.01 GiB (18.5%), ...; unknown 0 B (0.0%)"
std::string Breakdown(const std::vector<analysis::CategoryShare>& shares, int64_t whole) {
  std::string text;
  uint64_t unknown = 0;
  for (const auto& share : shares) {
    if (share.category == attribution::Category::kUnknown) {
      unknown = share.bytes;
      continue;
    }
    if (share.bytes == 0) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {} ({})", attribution::CategoryName(share.category),
                        FormatBytes(static_cast<int64_t>(share.bytes)),
                        Percent(static_cast<int64_t>(share.bytes), whole));
  }
  if (text.empty()) text = "nothing live";
  return text + fmt::format("; unknown {} ({})", FormatBytes(static_cast<int64_t>(unknown)),
                            Percent(static_cast<int64_t>(unknown), whole));
}

std::string Bytes(int64_t bytes) {
  return fmt::format("{} ({} B)", FormatBytes(bytes), FormatCount(bytes));
}

// A figure's name as the report may claim it: a prediction measured nothing, so its figures say
// so ("predicted peak allocated"); a recording's are plain ("peak allocated").
std::string Figure(bool predicted, std::string_view what) {
  return predicted ? fmt::format("predicted {}", what) : std::string(what);
}

// "124.4 M", "1.3 B", "812.0 K", "97": a count in words, next to its exact digits.
std::string CountInWords(uint64_t n) {
  const auto v = static_cast<double>(n);
  if (n >= 1'000'000'000'000ull) return fmt::format("{:.1f} T", v / 1e12);
  if (n >= 1'000'000'000ull) return fmt::format("{:.1f} B", v / 1e9);
  if (n >= 1'000'000ull) return fmt::format("{:.1f} M", v / 1e6);
  if (n >= 1'000ull) return fmt::format("{:.1f} K", v / 1e3);
  return fmt::format("{}", n);
}

std::string Parameters(uint64_t n) {
  return fmt::format("{} ({})", FormatCount(static_cast<int64_t>(n)), CountInWords(n));
}

// The out-of-memory block that opens a device's section: what failed, the levels then, why, what
// was live and what to try (analysis/oom.h). Several OOMs: each in full, up to kShownOoms.
constexpr size_t kShownOoms = 3;

void OomBlock(const model::Trace& t, const analysis::DeviceSummary& d,
              const TerminalOptions& options, const std::function<void(const std::string&)>& line) {
  const auto [begin, end] = t.EventRange(d.device);
  for (size_t k = 0; k < d.ooms.size() && k < kShownOoms; ++k) {
    const analysis::OomExplanation& o = d.ooms[k];
    std::string when =
        fmt::format("at event {} of {}", FormatCount(o.event - static_cast<int64_t>(begin) + 1),
                    FormatCount(static_cast<int64_t>(end - begin)));
    if (o.step > 0) {
      when += fmt::format(" (step {}, {})", o.step, attribution::PhaseName(o.phase));
    } else if (o.phase != attribution::Phase::kUnknown) {
      when += fmt::format(" ({})", attribution::PhaseName(o.phase));
    }
    if (o.time_us != model::kNoTime && d.first_time_us != model::kNoTime) {
      when += fmt::format(", {:.3f} s into the trace",
                          static_cast<double>(o.time_us - d.first_time_us) / 1e6);
    }
    std::string tried = Bytes(static_cast<int64_t>(o.segment_bytes));
    if (o.segment_bytes != o.block_bytes) {
      tried += fmt::format(" (a new segment for a {} block)",
                           FormatBytes(static_cast<int64_t>(o.block_bytes)));
    }
    line(fmt::format("  OUT OF MEMORY {}: tried to allocate {}", when, tried));
    std::string by = o.operation.empty() ? o.site
                     : o.site.empty()    ? o.operation
                                         : fmt::format("{} @ {}", o.operation, o.site);
    line(fmt::format("    asked by {}, stream {}", by.empty() ? "(no stack recorded)" : by,
                     o.stream));
    std::string largest;
    if (o.state_known) {
      largest =
          fmt::format(", largest free block {}{}",
                      FormatBytes(static_cast<int64_t>(o.largest_free_block_bytes)),
                      o.small_pool ? " in the small pool"
                                   : fmt::format(" in the large pool of stream {}", o.stream));
    }
    line(fmt::format("    {} allocated, {} reserved ({} reserved but free{}); {}",
                     FormatBytes(o.allocated_bytes), FormatBytes(o.reserved_bytes),
                     FormatBytes(o.reserved_free_bytes), largest,
                     o.device_free_known
                         ? fmt::format("device had {} free",
                                       FormatBytes(static_cast<int64_t>(o.device_free_bytes)))
                         : std::string("device's free memory not recorded")));
    if (!o.state_known && !o.state_note.empty()) {
      line(fmt::format("    (free blocks not determined: {})", o.state_note));
    }
    line(fmt::format("    why: {}", o.verdict));
    std::vector<analysis::CategoryShare> shares = o.live.by_category;
    std::stable_sort(shares.begin(), shares.end(),
                     [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
    const auto whole = static_cast<int64_t>(o.live.bytes);
    line(fmt::format("    live then: {} in {} allocations: {}", FormatBytes(whole),
                     FormatCount(static_cast<int64_t>(o.live.count)), Breakdown(shares, whole)));
    const size_t owners = std::min<size_t>(o.live.by_owner.size(),
                                           static_cast<size_t>(std::max(options.top_owners, 0)));
    for (size_t i = 0; i < owners; ++i) {
      const analysis::OwnerGroup& g = o.live.by_owner[i];
      line(fmt::format("      {:>12}  {:>4} allocs  {}  [{}]", FormatBytes(g.bytes),
                       FormatCount(static_cast<int64_t>(g.count)), g.label,
                       attribution::CategoryName(g.category)));
    }
    line(fmt::format("    hint: {}", o.hint));
  }
  if (d.ooms.size() > kShownOoms) {
    line(fmt::format("  ... and {} more out-of-memory events (--json or vramscope_oom for all)",
                     d.ooms.size() - kShownOoms));
  }
}

// The block that opens a predicted report: what was predicted, on what, and what was assumed.
void PredictionHeader(const ReportInput& in, const TerminalOptions& options,
                      const std::function<void(const std::string&)>& line) {
  const model::Trace& t = in.trace;
  line("PREDICTED (vramscope predict, no GPU measured)");
  if (!t.prediction) {
    line("  the trace says it was predicted but carries no description of the prediction");
    return;
  }
  const model::PredictionInfo& p = *t.prediction;
  // One column of values: as wide as "parameter bytes", or the longest fact's key (up to 32).
  size_t width = std::string_view("parameter bytes").size();
  for (const auto& fact : p.facts) width = std::max(width, std::min<size_t>(fact.first.size(), 32));
  auto field = [&](std::string_view key, const std::string& value) {
    line(fmt::format("  {:<{}}   {}", key, width, value.empty() ? std::string("-") : value));
  };
  field("model", p.model);
  field("setup", p.setup);
  std::string gpu = p.gpu.empty() ? std::string("not given") : p.gpu;
  if (p.capacity > 0 && gpu.find("capacity") == std::string::npos) {
    gpu += fmt::format(", {} for the allocator", FormatBytes(static_cast<int64_t>(p.capacity)));
  } else if (p.capacity == 0) {
    gpu += " (no capacity limit)";
  }
  field("GPU", gpu);
  field("torch", p.torch_version);
  field("parameters", fmt::format("{}, {} trainable", Parameters(p.parameters),
                                  Parameters(p.trainable_parameters)));
  field("parameter bytes", Bytes(static_cast<int64_t>(p.parameter_bytes)));
  field("buffer bytes", Bytes(static_cast<int64_t>(p.buffer_bytes)));
  for (const auto& [key, value] : p.facts) field(key, value);
  if (const auto fit = FitOfPrediction(in, options.device)) {
    if (fit->fits) {
      line(fmt::format("  fits: yes, peak reserved {} of {} ({} headroom)",
                       FormatBytes(fit->peak_reserved), FormatBytes(fit->capacity),
                       Percent(fit->headroom, fit->capacity)));
    } else if (!fit->oom) {
      line(fmt::format("  fits: NO — needs {}, the GPU has {} for the allocator",
                       FormatBytes(fit->needed), FormatBytes(fit->capacity)));
    } else {
      const auto [begin, end] = t.EventRange(fit->oom_device);
      line(fmt::format("  fits: NO — needs more than the {} the GPU has for the allocator",
                       FormatBytes(fit->capacity)));
      line(
          fmt::format("        out of memory at event {} of {}: a request of {} with {} reserved "
                      "(the prediction stops there)",
                      FormatCount(fit->oom_event - static_cast<int64_t>(begin) + 1),
                      FormatCount(static_cast<int64_t>(end - begin)),
                      FormatBytes(fit->oom_requested), FormatBytes(fit->reserved_at_oom)));
    }
  }
  if (!p.assumptions.empty()) {
    line("  assumptions:");
    for (const std::string& a : p.assumptions) line("    " + a);
  }
  line("");
}

// Where a region ran: "0.412-1.873 s" into the trace when times were recorded, else events.
std::string RegionSpan(const model::Trace& trace, const analysis::DeviceSummary& d,
                       const analysis::Region& r) {
  if (r.start_time_us != model::kNoTime && d.first_time_us != model::kNoTime) {
    return fmt::format("{:.3f}-{:.3f} s",
                       static_cast<double>(r.start_time_us - d.first_time_us) / 1e6,
                       static_cast<double>(r.end_time_us - d.first_time_us) / 1e6);
  }
  if (r.first_event == model::kNoEvent) return "-";
  const auto begin = static_cast<int64_t>(trace.EventRange(d.device).first);
  return fmt::format("events {}-{}", FormatCount(r.first_event - begin + 1),
                     FormatCount(r.last_event - begin + 1));
}

// Memory by region (analysis/regions.h), one table per kind the trace records on this device.
void RegionBlock(const model::Trace& t, const analysis::DeviceSummary& d,
                 const analysis::RegionBreakdowns& regions, const TerminalOptions& options,
                 const std::function<void(const std::string&)>& line) {
  const auto whole = static_cast<int64_t>(d.live_at_peak_bytes);
  for (int k = 0; k < analysis::kRegionKindCount; ++k) {
    const auto kind = static_cast<analysis::RegionKind>(k);
    std::vector<const analysis::Region*> rows;
    for (const analysis::Region& r : regions.regions) {
      if (r.device == d.device && r.kind == kind) rows.push_back(&r);
    }
    if (rows.empty()) continue;
    line(fmt::format("  memory by {} ({} regions; live at the peak adds up to {}):",
                     analysis::RegionKindName(kind), FormatCount(static_cast<int64_t>(rows.size())),
                     FormatBytes(whole)));
    line(fmt::format("    {:>17}  {:>12}  {:>6}  {:>12}  {:<16}  {}", "live at peak", "allocated",
                     "allocs", "own peak", "span", "region"));
    // The named regions up to --top, largest at the peak first; the remainders always (they
    // come last), so what no region explains stays in view.
    std::vector<const analysis::Region*> shown_rows, rest_rows;
    for (const analysis::Region* r : rows) {
      (r->remainder || shown_rows.size() < static_cast<size_t>(options.top_sites) ? shown_rows
                                                                                  : rest_rows)
          .push_back(r);
    }
    for (const analysis::Region* row : shown_rows) {
      const analysis::Region& r = *row;
      std::string name = r.name;
      if (name.size() > 80) name = name.substr(0, 77) + "...";
      if (r.ranges > 1) name += fmt::format(" ({} ranges)", FormatCount(r.ranges));
      line(fmt::format("    {:>10} {:>6}  {:>12}  {:>6}  {:>12}  {:<16}  {}",
                       FormatBytes(static_cast<int64_t>(r.live_at_peak_bytes)),
                       Percent(static_cast<int64_t>(r.live_at_peak_bytes), whole),
                       FormatBytes(static_cast<int64_t>(r.allocated_bytes)),
                       FormatCount(static_cast<int64_t>(r.allocations)), FormatBytes(r.peak_bytes),
                       RegionSpan(t, d, r), name));
    }
    if (!rest_rows.empty()) {
      uint64_t rest = 0;
      for (const analysis::Region* r : rest_rows) rest += r->live_at_peak_bytes;
      line(fmt::format("    {:>10} {:>6}  in {} more regions (--top to show more)",
                       FormatBytes(static_cast<int64_t>(rest)),
                       Percent(static_cast<int64_t>(rest), whole),
                       FormatCount(static_cast<int64_t>(rest_rows.size()))));
    }
  }
}

}  // namespace

// PyTorch's own out-of-memory message of a captured run, explained as `vramscope explain` does:
// the cause with its arithmetic, and what to change.
void OomMessageBlock(const analysis::OomMessageExplanation& e,
                     const std::function<void(const std::string&)>& line) {
  line("");
  line("PyTorch's out-of-memory message, explained (as 'vramscope explain' does):");
  line(fmt::format("  verdict ({}): {}", analysis::OomHolderName(e.verdict.holder),
                   e.verdict.sentence));
  for (size_t i = 0; i < e.findings.size(); ++i) {
    const analysis::OomFinding& f = e.findings[i];
    line(fmt::format("  {}: {} ({}): {}", i == 0 ? "why this request failed" : "also",
                     analysis::OomMessageCauseName(f.cause), f.decisive ? "decisive" : "possible",
                     f.arithmetic));
  }
  for (const std::string& a : e.advice) line("  - " + a);
}

// nvidia-smi's figure decomposed (analysis/device_usage.h), for a capture with NVML samples.
void DeviceUsageBlock(const analysis::DeviceUsageDecomposition& u,
                      const std::function<void(const std::string&)>& line) {
  if (!u.recorded) return;
  line("");
  if (!u.available) {
    line(fmt::format("nvidia-smi's figure: not sampled ({})", u.why_not));
    return;
  }
  line(fmt::format(
      "nvidia-smi's figure, decomposed (NVML's highest of {} samples: step {} {}, "
      "{}): {} used of {}",
      u.samples, u.step, u.phase, u.at, FormatBytes(static_cast<int64_t>(u.device_used)),
      FormatBytes(static_cast<int64_t>(u.device_total))));
  for (const analysis::DeviceUsagePart& p : u.parts) {
    line(fmt::format("  {:>12}  {}  [{}]", FormatBytes(p.bytes), p.what, p.how));
  }
  if (u.unexplained) {
    line(
        fmt::format("  the model leaves {} of this process unexplained ({} of what NVML shows for "
                    "it); the model's figures are for {}",
                    FormatBytes(*u.unexplained),
                    Percent(*u.unexplained, static_cast<int64_t>(u.device_used)), u.gpu));
  }
}

std::string RenderTerminalSummary(const ReportInput& in, const TerminalOptions& options) {
  const model::Trace& t = in.trace;
  std::string out;
  auto line = [&](const std::string& s) {
    out += s;
    out += '\n';
  };
  const bool predicted = IsPredictedTrace(t);
  const bool state = t.facts.has_allocator_state;
  const bool reserved_known = t.facts.reserved_known;
  if (predicted) {
    PredictionHeader(in, options, line);
    const std::string name = !t.source.path.empty() ? t.source.path
                             : t.prediction && !t.prediction->model.empty()
                                 ? t.prediction->model
                                 : std::string("prediction");
    line(fmt::format("vramscope report: {}", name));
    line(
        fmt::format("  {}: {} predicted events, {} allocations; {} segments, {} blocks at the end",
                    t.source.format.empty() ? std::string("vramscope prediction") : t.source.format,
                    FormatCount(static_cast<int64_t>(t.events.count())),
                    FormatCount(static_cast<int64_t>(t.allocations.size())),
                    FormatCount(static_cast<int64_t>(t.segments.size())),
                    FormatCount(static_cast<int64_t>(t.blocks.size()))));
  } else {
    const std::string name =
        t.source.built_in_example
            ? "built-in example (recorded on an NVIDIA H200: a 2-layer MLP trained with Adam for "
              "3 steps, torch 2.11; see examples/README.md)"
            : t.source.path;
    line(fmt::format("vramscope report: {}", name));
    if (state) {
      line(fmt::format("  {}, {} schema ({}), {}; {} trace events, {} segments, {} blocks",
                       in.view.Format(), t.source.generation,
                       t.source.pickle_protocol > 0
                           ? fmt::format("pickle protocol {}", t.source.pickle_protocol)
                           : std::string("pickle"),
                       FormatBytes(static_cast<int64_t>(t.source.file_bytes)),
                       FormatCount(static_cast<int64_t>(t.events.count())),
                       FormatCount(static_cast<int64_t>(t.segments.size())),
                       FormatCount(static_cast<int64_t>(t.blocks.size()))));
    } else {
      line(fmt::format("  {}, {}, {}; {} events, {} allocations", in.view.Format(),
                       t.source.generation, FormatBytes(static_cast<int64_t>(t.source.file_bytes)),
                       FormatCount(static_cast<int64_t>(t.events.count())),
                       FormatCount(static_cast<int64_t>(t.allocations.size()))));
    }
  }
  if (in.summary.devices.empty()) {
    line(fmt::format("  no device holds any memory in this {}",
                     predicted ? "prediction" : "recording"));
  }
  // The figures' labels, in one column: "peak allocated" or "predicted peak allocated".
  const size_t width = predicted ? 26 : 16;
  const std::string end_label = predicted ? "at the end" : "at the dump";

  for (const analysis::DeviceSummary& d : in.summary.devices) {
    if (options.device && *options.device != d.device) continue;
    line("");
    line(fmt::format("{}:{}", t.source.device_type, d.device));
    OomBlock(t, d, options, line);
    line(fmt::format("  {:<{}}{}  {}", Figure(predicted, "peak allocated"), width,
                     Bytes(d.peak_allocated),
                     When(t, d, d.peak_allocated_event, d.peak_allocated_time_us)));
    if (reserved_known) {
      line(fmt::format("  {:<{}}{}  {}", Figure(predicted, "peak reserved"), width,
                       Bytes(d.peak_reserved),
                       When(t, d, d.peak_reserved_event, d.peak_reserved_time_us)));
    } else {
      line(fmt::format("  {:<{}}not recorded by this source", "peak reserved", width));
    }
    if (d.peak_from_trace && reserved_known) {
      line(fmt::format("  at the {} peak, reserved {} {}: {} reserved but not allocated",
                       Figure(predicted, "allocated"), predicted ? "would be" : "was",
                       FormatBytes(d.reserved_at_peak_allocated),
                       FormatBytes(d.reserved_at_peak_allocated - d.peak_allocated)));
    }
    if (!state) {
      line(fmt::format(
          "  {:<{}}allocated {}{}", "at the end", width, FormatBytes(d.allocated_at_dump),
          reserved_known ? fmt::format(", reserved {}", FormatBytes(d.reserved_at_dump))
                         : std::string()));
    } else {
      line(fmt::format(
          "  {:<{}}allocated {}, reserved {}: {} reserved but not allocated ({} of reserved)",
          end_label, width, FormatBytes(d.allocated_at_dump), FormatBytes(d.reserved_at_dump),
          FormatBytes(d.reserved_at_dump - d.allocated_at_dump),
          Percent(d.reserved_at_dump - d.allocated_at_dump, d.reserved_at_dump)));
      line(
          fmt::format("  {:<{}}{} segments ({} small-pool), {} blocks ({} active), "
                      "largest cached free block {}",
                      "", width, FormatCount(static_cast<int64_t>(d.segments)),
                      FormatCount(static_cast<int64_t>(d.small_segments)),
                      FormatCount(static_cast<int64_t>(d.blocks)),
                      FormatCount(static_cast<int64_t>(d.active_blocks)),
                      FormatBytes(d.largest_cached_free_block)));
      if (d.private_pool_segments > 0) {
        line(fmt::format(
            "  {:<{}}private pools (CUDA graphs, MemPools): {} pool(s), {} segments, {} reserved, "
            "{} of it cached free (only their graphs can use it; PyTorch's OOM message calls it "
            "'allocated in private pools')",
            "", width, FormatCount(static_cast<int64_t>(d.private_pools)),
            FormatCount(static_cast<int64_t>(d.private_pool_segments)),
            FormatBytes(d.reserved_in_private_pools), FormatBytes(d.cached_in_private_pools)));
      }
    }

    std::vector<analysis::CategoryShare> shares = d.live_at_peak_by_category;
    std::stable_sort(shares.begin(), shares.end(),
                     [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
    const auto whole = static_cast<int64_t>(d.live_at_peak_bytes);
    line(fmt::format("  {}: {}", PeakHeadline(t, d), Breakdown(shares, whole)));
    line(
        fmt::format("  live at the peak: {} in {} allocations, by category with the largest "
                    "owners ({} attributed with high, {} medium, {} low confidence):",
                    FormatBytes(whole), FormatCount(static_cast<int64_t>(d.live_at_peak_count)),
                    Percent(static_cast<int64_t>(d.live_at_peak_by_confidence[2]), whole),
                    Percent(static_cast<int64_t>(d.live_at_peak_by_confidence[1]), whole),
                    Percent(static_cast<int64_t>(d.live_at_peak_by_confidence[0]), whole)));
    for (const auto& share : shares) {
      if (share.count == 0) continue;
      line(fmt::format("    {:>16}  {:>6}  {:>6} allocs  {}", FormatBytes(share.bytes),
                       Percent(static_cast<int64_t>(share.bytes), whole),
                       FormatCount(static_cast<int64_t>(share.count)),
                       attribution::CategoryName(share.category)));
      int shown_owners = 0;
      for (const analysis::OwnerGroup& o : d.live_at_peak_by_owner) {
        if (o.category != share.category) continue;
        if (shown_owners++ == options.top_owners) break;
        line(fmt::format("        {:>12}  {:>4} allocs  {}", FormatBytes(o.bytes),
                         FormatCount(static_cast<int64_t>(o.count)), o.label));
      }
    }
    if (!d.iterations.empty()) {
      line(fmt::format("  iterations: {} (phases from {})", d.iterations.size(),
                       in.attribution.phases.evidence));
      line("     step  peak allocated  peak in     phases seen");
      for (const analysis::IterationSummary& it : d.iterations) {
        std::string seen;
        if (it.has_forward) seen += "forward ";
        if (it.has_backward) seen += "backward ";
        if (it.has_optimizer) seen += "optimizer ";
        line(fmt::format("    {:>5}  {:>14}  {:<10}  {}", it.step, FormatBytes(it.peak_allocated),
                         attribution::PhaseName(it.peak_phase), seen));
      }
    } else {
      line(fmt::format("  iterations: none detected (phases from {})",
                       in.attribution.phases.evidence));
    }
    // A prediction has no stacks: its owners above already name every tensor.
    const bool sites = !(in.trace.facts.predicted && !in.trace.facts.has_stacks);
    if (sites) line("  live at the peak, by allocation site:");
    const size_t shown = sites ? std::min<size_t>(d.live_at_peak_by_site.size(),
                                                  static_cast<size_t>(options.top_sites))
                               : 0;
    for (size_t i = 0; i < shown; ++i) {
      const auto& g = d.live_at_peak_by_site[i];
      line(fmt::format(
          "    {:>16}  {:>6}  {:>6} allocs  {}  [{}]", FormatBytes(g.bytes),
          Percent(static_cast<int64_t>(g.bytes), static_cast<int64_t>(d.live_at_peak_bytes)),
          FormatCount(static_cast<int64_t>(g.count)), g.label,
          attribution::CategoryName(g.category)));
    }
    if (sites && d.live_at_peak_by_site.size() > shown) {
      uint64_t rest = 0;
      for (size_t i = shown; i < d.live_at_peak_by_site.size(); ++i) {
        rest += d.live_at_peak_by_site[i].bytes;
      }
      line(fmt::format(
          "    {:>16}  {:>6}  in {} more sites (--top to show more)",
          FormatBytes(static_cast<int64_t>(rest)),
          Percent(static_cast<int64_t>(rest), static_cast<int64_t>(d.live_at_peak_bytes)),
          FormatCount(static_cast<int64_t>(d.live_at_peak_by_site.size() - shown))));
    }
    if (in.regions != nullptr) RegionBlock(t, d, *in.regions, options, line);
    if (d.estimated_sizes > 0 && !state) {
      line(
          fmt::format("  note: {} allocations count with their size rounded up to 512 B (the "
                      "source records tensor sizes, not the allocator's blocks)",
                      FormatCount(static_cast<int64_t>(d.estimated_sizes))));
    } else if (d.estimated_sizes > 0) {
      line(fmt::format(
          "  note: {} allocations freed during the trace count with their request rounded to "
          "512 B ({})",
          FormatCount(static_cast<int64_t>(d.estimated_sizes)),
          predicted ? "the prediction did not give their block sizes"
                    : "the snapshot records block sizes only for live blocks, and the allocator "
                      "model's replay could not establish these"));
    }
  }
  if (in.oom_message != nullptr) OomMessageBlock(*in.oom_message, line);
  if (in.device_usage != nullptr) DeviceUsageBlock(*in.device_usage, line);
  const std::vector<std::string> notes = in.view.Notes();
  if (!notes.empty() || !in.attribution.notes.empty() ||
      (in.regions != nullptr && !in.regions->notes.empty())) {
    line("");
    line("notes:");
    for (const auto& n : notes) line("  - " + n);
    for (const auto& n : in.attribution.notes) line("  - " + n);
    if (in.regions != nullptr) {
      for (const auto& n : in.regions->notes) line("  - " + n);
    }
  }
  return out;
}

}  // namespace vramscope::report
