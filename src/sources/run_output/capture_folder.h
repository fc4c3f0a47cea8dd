// The files `vramscope run` writes into its output folder (docs/design/capture.md): per process
// <label>.pickle (PyTorch snapshot), <label>.jax.prof or <label>.xplane.pb (JAX's device memory
// profile, TensorFlow's profile), <label>.sidecar.json and <label>.vstrace (native trace), where
// <label> is rank<RANK> under a launcher, else pid<PID>; plus the report it writes there.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace vramscope::sources {

// One process's capture.
struct Capture {
  std::string label;               // "rank3", "pid1234"
  std::optional<int64_t> rank;     // from the label rank<N>
  std::optional<int64_t> pid;      // from the label pid<N>
  std::filesystem::path snapshot;  // empty when absent
  std::filesystem::path sidecar;
  std::filesystem::path native;
  std::filesystem::path profile;  // a framework's own: .jax.prof or .xplane.pb

  // What the report reads: the snapshot, else the framework's profile (categorised), else the
  // native trace.
  const std::filesystem::path& Recording() const;
};

// Every file of a capture run in `dir` (snapshots, sidecars, native traces, the report and viewer
// `vramscope run` wrote), sorted; what --force replaces. Other files are not listed.
std::vector<std::filesystem::path> CaptureFilesIn(const std::filesystem::path& dir);

// The captures in `dir`, ranks first in rank order, then processes by pid. An error when the
// folder holds none (naming what it expected).
Result<std::vector<Capture>> FindCaptures(const std::filesystem::path& dir);

// The sidecar written beside a snapshot or a framework's profile: runs/rank0.pickle ->
// runs/rank0.sidecar.json (also for .pickle.gz, .jax.prof, .xplane.pb). Empty when there is none.
std::filesystem::path SidecarBeside(const std::filesystem::path& snapshot);

}  // namespace vramscope::sources
