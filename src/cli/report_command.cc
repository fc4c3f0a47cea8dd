#include "cli/report_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "analysis/analyze.h"
#include "analysis/simulation.h"
#include "cli/exit_codes.h"
#include "cli/load_input.h"
#include "cli/view_command.h"
#include "common/atomic_output.h"
#include "common/peak_memory.h"
#include "common/units.h"
#include "report/json_summary.h"
#include "report/rank_table.h"
#include "report/sqlite_report.h"
#include "report/terminal_summary.h"
#include "sources/capture/capture_folder.h"
#include "sources/capture/capture_sidecar.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::cli {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// "runs/step3.pickle" -> "step3.sqlite" (in the current directory).
std::string DefaultOutput(const std::string& input) {
  if (input.empty()) return "vramscope-example.sqlite";
  std::string base = input.substr(input.rfind('/') == std::string::npos ? 0 : input.rfind('/') + 1);
  const size_t dot = base.rfind('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  if (base.empty()) base = "report";
  return base + ".sqlite";
}

namespace fs = std::filesystem;

// The allocator model's replay of the recording (the vramscope_sim_* tables). It runs before the
// analysis: where it confirms a block at its recorded address, its block size replaces the
// estimate the trace gives for blocks freed during it, so the curves count what PyTorch counted.
// A trace it cannot replay (none recorded) is not an error for the report; the comparison needs
// the allocator's recorded state (a snapshot). nullopt when there is no replay.
std::optional<analysis::Simulations> ReplayForReport(model::Trace& trace,
                                                     const analysis::ProjectRoot& root,
                                                     std::optional<int32_t> device) {
  if (!trace.facts.has_trace || !trace.facts.has_allocator_state) return std::nullopt;
  analysis::SiteNamer replay_sites(trace, root);
  analysis::SimulationRequest request;
  request.device = device;
  auto replayed = analysis::Simulate(trace, replay_sites, request);
  if (!replayed.ok()) return std::nullopt;
  analysis::AdoptReplayedBlockSizes(trace, *replayed);
  return std::move(*replayed);
}

// Reads one process's capture: its snapshot (else its native trace) with the sidecar's phases,
// names and facts applied.
Result<model::Trace> LoadCapture(const sources::Capture& capture, bool quiet,
                                 std::optional<sources::CaptureSidecar>* sidecar_out) {
  const fs::path& file = capture.snapshot.empty() ? capture.native : capture.snapshot;
  ASSIGN_OR_RETURN(model::Trace trace, LoadInput(file.string(), quiet));
  if (!capture.snapshot.empty() && !capture.sidecar.empty()) {
    ASSIGN_OR_RETURN(std::optional<sources::CaptureSidecar> sidecar,
                     sources::ReadCaptureSidecar(capture.sidecar.string()));
    if (sidecar) sources::ApplyCaptureSidecar(*sidecar, trace);
    if (sidecar_out != nullptr) *sidecar_out = std::move(sidecar);
  }
  if (!capture.snapshot.empty() && !capture.native.empty()) {
    trace.facts.notes.push_back(fmt::format(
        "a native trace was captured too: 'vramscope report {}' shows the driver-level view",
        capture.native.string()));
  }
  return trace;
}

// One row of the per-rank table: the figures the rank's own report gives.
Result<report::RankRow> RankRowOf(const sources::Capture& capture, const fs::path& dir,
                                  const ReportOptions& options, const std::string& project_root) {
  std::optional<sources::CaptureSidecar> sidecar;
  ASSIGN_OR_RETURN(model::Trace trace, LoadCapture(capture, /*quiet=*/true, &sidecar));
  const analysis::ProjectRoot root(project_root);
  ReplayForReport(trace, root, options.device);
  const analysis::Analysis analysis = analysis::Analyze(trace, root);
  report::RankRow row;
  row.label = capture.label;
  row.rank = capture.rank;
  row.file =
      fs::relative(capture.snapshot.empty() ? capture.native : capture.snapshot, dir).string();
  const analysis::DeviceSummary* worst = nullptr;
  for (const analysis::DeviceSummary& d : analysis.summary.devices) {
    if (worst == nullptr || d.peak_reserved > worst->peak_reserved) worst = &d;
  }
  if (worst != nullptr) {
    row.device = worst->device;
    row.peak_allocated = worst->peak_allocated;
    row.peak_reserved = worst->peak_reserved;
    row.peak_step = worst->peak_step;
    row.peak_phase = attribution::PhaseName(worst->peak_phase);
    row.steps = static_cast<int64_t>(worst->iterations.size());
  }
  for (const model::Action a : trace.events.action) row.oom |= a == model::Action::kOom;
  if (sidecar) {
    row.local_rank = sidecar->local_rank;
    row.host = sidecar->hostname;
    row.device_name = sidecar->device_name;
    if (sidecar->device) row.device = static_cast<int32_t>(*sidecar->device);
    row.end_reason = sidecar->end_reason;
    row.oom |= sidecar->end_reason == "oom";
  }
  return row;
}

// `vramscope report FOLDER`: the captures `vramscope run` wrote. One process: its report. Several
// (ranks): the per-rank table, then the full report of the rank that bounds the job.
Status ReportFolder(const ReportOptions& given) {
  const fs::path dir(given.input);
  ReportOptions options = given;
  if (options.output.empty()) options.output = (dir / "report.sqlite").string();
  ASSIGN_OR_RETURN(const std::vector<sources::Capture> captures, sources::FindCaptures(dir));
  ASSIGN_OR_RETURN(const std::string project_root, ResolveProjectRoot(options.project_root));
  if (captures.size() == 1) {
    ASSIGN_OR_RETURN(model::Trace trace, LoadCapture(captures.front(), options.quiet, nullptr));
    return ReportTrace(std::move(trace), options);
  }
  std::vector<report::RankRow> rows;
  for (const sources::Capture& capture : captures) {
    if (!options.quiet && !options.json) {
      fmt::print(stderr, "reading {} ({} of {})\n", capture.label, rows.size() + 1,
                 captures.size());
    }
    auto row = RankRowOf(capture, dir, options, project_root);
    if (!row.ok()) return row.status().WithPrefix(capture.label + ": ");
    rows.push_back(std::move(*row));
  }
  const size_t bounding = report::BoundingRank(rows);
  rows[bounding].reported = true;
  ASSIGN_OR_RETURN(model::Trace trace, LoadCapture(captures[bounding], /*quiet=*/true, nullptr));
  trace.facts.notes.push_back(fmt::format(
      "{} of {} processes: the one with the highest reserved peak (the table above has them all; "
      "'vramscope report {}' reports another)",
      rows[bounding].label, rows.size(), (dir / "<rank>.pickle").string()));
  return ReportTrace(std::move(trace), options, &rows);
}

}  // namespace

Status WriteReport(const ReportOptions& options) {
  if (options.top < 0) return UsageError("--top must be 0 or more");
  std::error_code ec;
  if (!options.input.empty() && fs::is_directory(options.input, ec)) return ReportFolder(options);
  // A snapshot `vramscope run` wrote: its sidecar beside it gives phases and names.
  if (!options.input.empty()) {
    const fs::path sidecar_path = sources::SidecarBeside(options.input);
    if (!sidecar_path.empty()) {
      ASSIGN_OR_RETURN(std::optional<sources::CaptureSidecar> sidecar,
                       sources::ReadCaptureSidecar(sidecar_path.string()));
      if (sidecar) {
        ASSIGN_OR_RETURN(model::Trace trace, LoadInput(options.input, options.quiet));
        sources::ApplyCaptureSidecar(*sidecar, trace);
        return ReportTrace(std::move(trace), options);
      }
    }
  }
  return ReportTrace(std::nullopt, options);
}

Status ReportTrace(std::optional<model::Trace> given, const ReportOptions& options,
                   const std::vector<report::RankRow>* ranks) {
  const auto t_start = Clock::now();
  ASSIGN_OR_RETURN(const std::string project_root, ResolveProjectRoot(options.project_root));

  // Check the output before any heavy work, so "already exists" comes at once.
  std::optional<AtomicOutput> output;
  if (!options.no_sqlite) {
    const std::string target =
        options.output.empty() ? DefaultOutput(options.input) : options.output;
    ASSIGN_OR_RETURN(AtomicOutput prepared, AtomicOutput::Prepare(target, options.force));
    output.emplace(std::move(prepared));
  }
  // The viewer reads the report database; with --summary-only it gets a temporary one.
  std::optional<AtomicOutput> viewer_db;
  if (!options.html.empty()) {
    { ASSIGN_OR_RETURN(AtomicOutput check, AtomicOutput::Prepare(options.html, options.force)); }
    if (!output) {
      ASSIGN_OR_RETURN(AtomicOutput temp,
                       AtomicOutput::Prepare(options.html + ".sqlite", /*overwrite=*/true));
      viewer_db.emplace(std::move(temp));
    }
  }

  // Read.
  const auto t_read = Clock::now();
  snapshot::LoadTimings load_timings;
  model::Trace trace;
  if (given) {
    trace = std::move(*given);
  } else {
    ASSIGN_OR_RETURN(trace, LoadInput(options.input, options.quiet, &load_timings));
  }

  // Analyse.
  const auto t_analyze = Clock::now();
  const analysis::ProjectRoot root(project_root);
  std::optional<analysis::Simulations> sims = ReplayForReport(trace, root, options.device);
  // A prediction's replay agrees with itself by construction: nothing to tell the user.
  const bool trace_is_predicted = trace.facts.predicted;
  const analysis::Analysis analysis = analysis::Analyze(trace, root);
  const analysis::Summary& summary = analysis.summary;
  if (options.device) {
    bool found = false;
    std::vector<std::string> known;
    for (const auto& d : summary.devices) {
      found |= d.device == *options.device;
      known.push_back(std::to_string(d.device));
    }
    if (!found) {
      return UsageError(fmt::format(
          "--device {}: the snapshot holds memory on device(s) {}", *options.device,
          known.empty() ? std::string("none") : fmt::format("{}", fmt::join(known, ", "))));
    }
  }
  const report::ReportInput input{trace,
                                  analysis.timelines,
                                  analysis.attribution,
                                  summary,
                                  analysis.entries,
                                  *analysis.sites,
                                  root,
                                  sims ? &*sims : nullptr,
                                  &analysis.category_timelines,
                                  analysis.owners.get()};

  // Write.
  const auto t_write = Clock::now();
  report::SqliteReportInfo info;
  if (output) {
    RETURN_IF_ERROR(report::WriteSqliteReport(output->temp_path(), input, &info));
    if (ranks != nullptr) {
      RETURN_IF_ERROR(report::WriteRankTable(output->temp_path(), *ranks));
      ++info.vramscope_tables;
      info.rows += ranks->size();
    }
    RETURN_IF_ERROR(output->Commit());
  }
  if (!options.html.empty()) {
    if (viewer_db) {
      report::SqliteReportInfo ignored;
      RETURN_IF_ERROR(report::WriteSqliteReport(viewer_db->temp_path(), input, &ignored));
    }
    RETURN_IF_ERROR(WriteViewerPage({output ? output->target() : viewer_db->temp_path()},
                                    options.html, options.force, ""));
  }
  const auto t_end = Clock::now();

  if (options.json) {
    nlohmann::json json = report::RenderJsonSummary(input, options.top);
    json["report"] = output ? nlohmann::json{{"path", output->target()},
                                             {"skyline_tables", info.skyline_tables},
                                             {"vramscope_tables", info.vramscope_tables},
                                             {"rows", info.rows}}
                            : nlohmann::json(nullptr);
    if (ranks != nullptr) json["ranks"] = report::RankTableJson(*ranks);
    if (options.timings) {
      json["timings_s"] = {
          {"read", Seconds(t_start, t_read)},          {"parse", load_timings.parse_s},
          {"build_model", load_timings.build_model_s}, {"analyze", Seconds(t_analyze, t_write)},
          {"write_report", Seconds(t_write, t_end)},   {"total", Seconds(t_start, t_end)},
          {"peak_rss_bytes", PeakResidentBytes()}};
    }
    fmt::print("{}\n", json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (!options.quiet) {
    report::TerminalOptions terminal;
    terminal.top_sites = options.top;
    terminal.device = options.device;
    if (ranks != nullptr) fmt::print("{}\n", report::RenderRankTable(*ranks));
    fmt::print("{}", report::RenderTerminalSummary(input, terminal));
    if (sims && !trace_is_predicted) {
      for (const auto& dev : sims->devices) {
        const auto& c = dev.runs.front().result.comparison;
        fmt::print(
            "\nallocator model, cuda:{}: the replay puts {} of {} allocations at their recorded "
            "address and makes {} of {} recorded segment allocations ('vramscope simulate' for "
            "details and what-if runs)\n",
            dev.device, FormatCount(static_cast<int64_t>(c.allocs_at_recorded_address)),
            FormatCount(static_cast<int64_t>(c.allocs)),
            FormatCount(static_cast<int64_t>(c.segment_allocs_matched)),
            FormatCount(static_cast<int64_t>(c.recorded_segment_allocs)));
      }
    }
    if (output) {
      fmt::print("\nreport written to {} ({} Skyline tables + {} vramscope_ tables, {} rows)\n",
                 output->target(), info.skyline_tables, info.vramscope_tables, info.rows);
    }
    if (!options.html.empty()) fmt::print("viewer written to {}\n", options.html);
    if (options.timings) {
      fmt::print(
          "timings: read {:.3f} s, parse {:.3f} s, model {:.3f} s, analyze {:.3f} s, "
          "write {:.3f} s, total {:.3f} s; peak memory {}\n",
          Seconds(t_start, t_read), load_timings.parse_s, load_timings.build_model_s,
          Seconds(t_analyze, t_write), Seconds(t_write, t_end), Seconds(t_start, t_end),
          FormatBytes(static_cast<int64_t>(PeakResidentBytes())));
    }
  }
  return Status::Ok();
}

void RegisterReportCommand(CLI::App& app, ReportOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Read a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot) and write the "
      "memory report: a SQLite database in the Skyline/DeepView.Profile schema plus vramscope_* "
      "tables, and a summary on the terminal. With no INPUT, reports on the built-in example.");
  cmd->add_option("input", o.input,
                  "snapshot pickle; omit it to use the built-in example (a snapshot recorded on an "
                  "NVIDIA H200: a 2-layer MLP trained with Adam for 3 steps)");
  cmd->add_option("-o,--output", o.output,
                  "report database to write (default: the input's name with .sqlite, in the "
                  "current directory; vramscope-example.sqlite for the built-in example)");
  cmd->add_flag("--force", o.force, "overwrite the output if it exists");
  cmd->add_flag("--json", o.json, "print the summary as JSON on stdout instead of text");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_flag("--summary-only", o.no_sqlite, "print the summary and write no database");
  cmd->add_option("--project-root", o.project_root,
                  "stack frames under this folder are the user's code: they name allocation "
                  "sites and fill Skyline's stack_frames, relative to it (default: the current "
                  "directory)");
  cmd->add_option("--device", o.device, "show only this CUDA device ordinal in the summary");
  cmd->add_option("--top", o.top, "allocation sites to list per device (default: 10)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--timings", o.timings, "print how long each stage took");
  cmd->add_option("--html", o.html,
                  "also write the interactive HTML viewer to this file (as 'vramscope view')");
}

int RunReportCommand(const ReportOptions& options) {
  return RunAndReport(options.input, [&] { return WriteReport(options); });
}

}  // namespace vramscope::cli
