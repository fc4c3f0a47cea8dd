#include "cli/split_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/input_flags.h"
#include "cli/interrupt.h"
#include "cli/terminal_progress.h"
#include "common/atomic_output.h"
#include "common/units.h"
#include "pipeline/split.h"
#include "report/snapshot_pickle.h"

namespace vramscope::cli {

namespace {

namespace fs = std::filesystem;

// Raised whenever the document's keys or their meaning change (docs/guide/README.md).
constexpr int kSplitJsonVersion = 1;

Status Run(const SplitFlags& flags) {
  const pipeline::Input input = pipeline::ClassifyInput(flags.input);
  const fs::path folder = flags.folder.empty() ? fs::path(".") : fs::path(flags.folder);
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    return UsageError(
        fmt::format("-o {}: not a folder; give the folder the pieces go to "
                    "(it must exist)",
                    folder.string()));
  }
  if (flags.slices < 2 || flags.slices > pipeline::kMaxSlices) {
    return UsageError(
        fmt::format("--slices {}: give 2 to {} pieces", flags.slices, pipeline::kMaxSlices));
  }
  // Every target checked before any work: nothing is written unless all can be.
  const std::string stem = pipeline::DefaultOutputName(input, "");
  std::vector<AtomicOutput> outputs;
  bool replacing = false;
  for (int i = 1; i <= flags.slices; ++i) {
    const std::string name = fmt::format("{}part{}of{}.pickle",
                                         stem.ends_with('.') ? stem : stem + ".", i, flags.slices);
    // A piece an earlier split wrote is replaced; any other file only with --force.
    const std::string path = (folder / name).string();
    const bool ours = report::IsSnapshotPickleWeWrote(path);
    replacing = replacing || ours;
    Result<AtomicOutput> out = AtomicOutput::Prepare(path, flags.force || ours);
    if (!out.ok()) return out.status();
    outputs.push_back(std::move(*out));
  }
  TerminalProgress progress(!flags.quiet);
  const Control control{&progress, &InterruptToken()};
  ASSIGN_OR_RETURN(const pipeline::SplitPlan plan,
                   pipeline::PlanSplit({input, flags.slices, control, flags.limits}));
  const model::Trace& trace = plan.loaded.trace;
  std::vector<std::string> lines;
  nlohmann::json pieces = nlohmann::json::array();
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const pipeline::SplitPiece& piece = plan.pieces[i];
    control.Stage(fmt::format("writing piece {} of {}", i + 1, plan.pieces.size()));
    const std::string bytes =
        report::SnapshotPickle({&trace, piece.ranges, piece.state.segments, piece.state.blocks});
    RETURN_IF_ERROR(outputs[i].WriteAll(bytes, control));
    std::string events;
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& [device, range] : piece.ranges) {
      const size_t first = trace.EventRange(device).first;
      const size_t total = trace.EventRange(device).second - first;
      devices.push_back({{"device", device},
                         {"first_event", range.first - first + 1},
                         {"last_event", range.second - first},
                         {"events_in_trace", total}});
      events += fmt::format("{}cuda:{} events {} to {} of {}", events.empty() ? "" : ", ", device,
                            FormatCount(static_cast<int64_t>(range.first - first + 1)),
                            FormatCount(static_cast<int64_t>(range.second - first)),
                            FormatCount(static_cast<int64_t>(total)));
    }
    lines.push_back(fmt::format("  {}  {}, {}", fs::path(outputs[i].target()).filename().string(),
                                events, FormatBytes(static_cast<int64_t>(bytes.size()))));
    pieces.push_back({{"path", fs::absolute(outputs[i].target()).lexically_normal().string()},
                      {"bytes", bytes.size()},
                      {"devices", std::move(devices)}});
  }
  // Renamed into place only once every piece is written.
  for (AtomicOutput& out : outputs) RETURN_IF_ERROR(out.Commit());
  if (flags.json) {
    const nlohmann::json doc = {{"schema_version", kSplitJsonVersion},
                                {"input", input.Name()},
                                {"slices", flags.slices},
                                {"pieces", std::move(pieces)}};
    fmt::print("{}\n", doc.dump(1));
    return Status::Ok();
  }
  if (!flags.quiet) {
    fmt::print("{} split into {} snapshots in {}{}:\n", input.Name(), plan.pieces.size(),
               folder.string(), replacing ? " (replacing the pieces an earlier split wrote)" : "");
    for (const std::string& line : lines) fmt::print("{}\n", line);
    fmt::print(
        "each is a PyTorch memory snapshot of its events and the allocator's state at their end: "
        "open it in PyTorch's memory_viz or with 'vramscope report'\n");
  }
  return Status::Ok();
}

}  // namespace

void RegisterSplitCommand(CLI::App& app, SplitFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "split",
      "Cut a memory snapshot into pieces that are snapshots themselves: piece i of N holds the "
      "i-th N-th of each device's trace events and the allocator's state at their end (the "
      "snapshot's own for the last, the allocator model's replay of the recording for the "
      "others), so PyTorch's memory_viz opens each piece and each replays alone as the whole "
      "does over its events. With no INPUT, splits the built-in example.");
  cmd->add_option("input", o.input,
                  "a memory snapshot pickle with its trace, plain or gzipped; omit it for the "
                  "built-in example");
  cmd->add_option("--slices", o.slices, "how many pieces (2 to 10,000)")
      ->required()
      ->option_text("N");
  cmd->add_option("-o,--output", o.folder,
                  "the folder the pieces go to, as NAME.partIofN.pickle (default: the current "
                  "directory)")
      ->option_text("DIR");
  cmd->add_flag("--force", o.force, "overwrite pieces that exist");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors");
  cmd->add_flag("--json", o.json,
                "print the pieces as JSON: each one's path, size and events (its first and last, "
                "as reports number the whole trace's, for each device)");
  AddInputLimitFlags(*cmd, o.limits);
}

int RunSplitCommand(const SplitFlags& flags) {
  return RunAndReport(flags.input, [&] { return Run(flags); });
}

}  // namespace vramscope::cli
