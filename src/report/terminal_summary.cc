#include "report/terminal_summary.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"

namespace vramscope::report {

namespace {

std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "at event 4,512 of 10,307, 12.345 s into the trace" / "at the start of the trace" / "at the dump"
std::string When(const model::Trace& trace, const analysis::DeviceSummary& d, int64_t event,
                 int64_t time_us) {
  if (!d.peak_from_trace) return "at the dump (no trace recorded)";
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

std::string Bytes(int64_t bytes) {
  return fmt::format("{} ({} B)", FormatBytes(bytes), FormatCount(bytes));
}

}  // namespace

std::string RenderTerminalSummary(const ReportInput& in, const TerminalOptions& options) {
  const model::Trace& t = in.trace;
  std::string out;
  auto line = [&](const std::string& s) {
    out += s;
    out += '\n';
  };
  const std::string name = t.source.built_in_example
                               ? "built-in example (synthetic, see examples/README.md)"
                               : t.source.path;
  line(fmt::format("vramscope report: {}", name));
  line(fmt::format("  {}, {} schema ({}), {}; {} trace events, {} segments, {} blocks",
                   t.source.format, t.source.generation,
                   t.source.pickle_protocol > 0
                       ? fmt::format("pickle protocol {}", t.source.pickle_protocol)
                       : std::string("pickle"),
                   FormatBytes(static_cast<int64_t>(t.source.file_bytes)),
                   FormatCount(static_cast<int64_t>(t.events.count())),
                   FormatCount(static_cast<int64_t>(t.segments.size())),
                   FormatCount(static_cast<int64_t>(t.blocks.size()))));
  if (in.summary.devices.empty()) line("  no device holds any memory in this snapshot");

  for (const analysis::DeviceSummary& d : in.summary.devices) {
    if (options.device && *options.device != d.device) continue;
    line("");
    line(fmt::format("cuda:{}", d.device));
    line(fmt::format("  peak allocated  {}  {}", Bytes(d.peak_allocated),
                     When(t, d, d.peak_allocated_event, d.peak_allocated_time_us)));
    line(fmt::format("  peak reserved   {}  {}", Bytes(d.peak_reserved),
                     When(t, d, d.peak_reserved_event, d.peak_reserved_time_us)));
    if (d.peak_from_trace) {
      line(fmt::format("  at the allocated peak, reserved was {}: {} reserved but not allocated",
                       FormatBytes(d.reserved_at_peak_allocated),
                       FormatBytes(d.reserved_at_peak_allocated - d.peak_allocated)));
    }
    line(
        fmt::format("  at the dump     allocated {}, reserved {}: {} reserved but not allocated "
                    "({} of reserved)",
                    FormatBytes(d.allocated_at_dump), FormatBytes(d.reserved_at_dump),
                    FormatBytes(d.reserved_at_dump - d.allocated_at_dump),
                    Percent(d.reserved_at_dump - d.allocated_at_dump, d.reserved_at_dump)));
    line(
        fmt::format("                  {} segments ({} small-pool), {} blocks ({} active), "
                    "largest cached free block {}",
                    FormatCount(static_cast<int64_t>(d.segments)),
                    FormatCount(static_cast<int64_t>(d.small_segments)),
                    FormatCount(static_cast<int64_t>(d.blocks)),
                    FormatCount(static_cast<int64_t>(d.active_blocks)),
                    FormatBytes(d.largest_cached_free_block)));

    line(
        fmt::format("  live at the peak: {} in {} allocations; by category (first-cut "
                    "attribution):",
                    FormatBytes(static_cast<int64_t>(d.live_at_peak_bytes)),
                    FormatCount(static_cast<int64_t>(d.live_at_peak_count))));
    std::vector<analysis::CategoryShare> shares = d.live_at_peak_by_category;
    std::stable_sort(shares.begin(), shares.end(),
                     [](const auto& x, const auto& y) { return x.bytes > y.bytes; });
    for (const auto& share : shares) {
      if (share.count == 0) continue;
      line(fmt::format(
          "    {:>16}  {:>6}  {:>6} allocs  {}", FormatBytes(share.bytes),
          Percent(static_cast<int64_t>(share.bytes), static_cast<int64_t>(d.live_at_peak_bytes)),
          FormatCount(static_cast<int64_t>(share.count)),
          attribution::CategoryName(share.category)));
    }
    line("  live at the peak, by allocation site:");
    const size_t shown =
        std::min<size_t>(d.live_at_peak_by_site.size(), static_cast<size_t>(options.top_sites));
    for (size_t i = 0; i < shown; ++i) {
      const auto& g = d.live_at_peak_by_site[i];
      line(fmt::format(
          "    {:>16}  {:>6}  {:>6} allocs  {}  [{}]", FormatBytes(g.bytes),
          Percent(static_cast<int64_t>(g.bytes), static_cast<int64_t>(d.live_at_peak_bytes)),
          FormatCount(static_cast<int64_t>(g.count)), g.label,
          attribution::CategoryName(g.category)));
    }
    if (d.live_at_peak_by_site.size() > shown) {
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
    if (d.estimated_sizes > 0) {
      line(
          fmt::format("  note: {} allocations freed during the trace count with their request "
                      "rounded to 512 B (the snapshot records block sizes only for live blocks)",
                      FormatCount(static_cast<int64_t>(d.estimated_sizes))));
    }
  }
  if (!t.facts.notes.empty()) {
    line("");
    line("notes:");
    for (const auto& n : t.facts.notes) line("  - " + n);
  }
  return out;
}

}  // namespace vramscope::report
