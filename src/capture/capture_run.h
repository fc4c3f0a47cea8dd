// `vramscope run`'s capture: the user's command runs unchanged with capture injected (the Python
// bootstrap through PYTHONPATH; with --native the CUPTI library through the CUDA driver's
// injection variable), into a folder of captures that the pipeline then reads like any input
// (docs/design/capture.md). This stage starts, injects and waits; it reads nothing back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"

namespace vramscope::capture {

// The captures' folder when the request names none. An earlier run's captures there are replaced
// (they are vramscope's own, recognised by their names); in a folder the request names, only
// with `force`.
inline constexpr const char* kDefaultRunFolder = "vramscope-run";

// --on-oom's ring buffer: a dump of about 20 MiB without stacks (89 bytes an entry in the pickled
// trace of a real H100 capture with its stacks removed), under the flight recorder's 64 MiB.
inline constexpr int64_t kOnOomMaxEntries = 200000;

struct RunRequest {
  std::vector<std::string> command;  // the program and its arguments
  std::string output;                // the captures' folder; empty: kDefaultRunFolder
  bool force = false;                // replace an earlier run's captures in `output`
  int64_t steps = 0;                 // write the capture after this many steps; 0: at exit
  bool keep_running = false;         // with steps: stop recording, let the program go on
  // The flight recorder: record until the program exits, write only when it runs out of GPU
  // memory (docs/guide/run.md, "Only when memory runs out").
  bool on_oom = false;
  // none (no tracebacks), python or all; empty: python, or none with on_oom.
  std::string stacks;
  // PyTorch's ring buffer of allocator events; 0: 1,000,000, or kOnOomMaxEntries with on_oom.
  int64_t max_entries = 0;
  bool phase_memory = false;  // PyTorch's peaks per phase (synchronizes)
  bool native = false;        // CUPTI's driver-level capture too
  bool no_python = false;     // no PyTorch bootstrap (native only)
  bool quiet = false;         // the bootstrap prints nothing either
  // Notes (the captures an earlier run left and that are replaced) go to control.progress.
  Control control;
};

struct RunOutcome {
  std::filesystem::path folder;  // absolute
  std::string shown;             // the folder as the user spelled it (or the default)
  int program_exit = 0;          // the program's status, or 128 + signal
  std::string program_description;
  bool captured = false;  // a snapshot or native trace was written
  size_t sidecars = 0;    // sidecars written (the bootstrap's CPU test mode writes only these)
};

// Checks the request (a usage error before anything starts), prepares the folder, runs the
// program with capture injected and waits for it. An error only when the program could not be
// run; its own failure is in the outcome. A folder made for this run and left empty is removed.
Result<RunOutcome> RunAndCapture(const RunRequest& request);

}  // namespace vramscope::capture
