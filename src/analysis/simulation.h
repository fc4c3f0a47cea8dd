// The allocator model run over a trace: the replay against the recording and the what-if runs
// that `vramscope simulate` prints and the report stores (vramscope_sim_* tables).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "allocator/replay.h"
#include "analysis/sites.h"
#include "common/status.h"
#include "model/trace.h"

namespace vramscope::analysis {

struct SimulationRequest {
  std::optional<int32_t> device;  // default: every device with trace events
  // The PYTORCH_CUDA_ALLOC_CONF the recorded run used, for snapshots that do not record their
  // settings (before torch 2.3). When given it wins over what the snapshot records.
  std::optional<std::string> recorded_conf;
  // What-if runs: each a whole PYTORCH_CUDA_ALLOC_CONF ("" = torch's defaults), or nullopt for
  // the recorded settings (used when only a capacity or memory fraction is asked about).
  std::vector<std::optional<std::string>> what_if;
  uint64_t capacity = allocator::kUnlimited;  // for the what-if runs
  double memory_fraction = 0;
  bool record_curves = true;
  size_t top_sites = 10;  // live-at-OOM sites kept per what-if run
};

struct SiteBytes {
  std::string site;
  uint64_t bytes = 0;
  uint64_t allocations = 0;
};

struct SimulationRun {
  std::string label;       // "replay" or "what-if"
  std::string alloc_conf;  // the settings in PYTORCH_CUDA_ALLOC_CONF syntax ("" = defaults)
  allocator::ReplayResult result;
  std::vector<SiteBytes> live_at_oom;  // what-if runs that ran out of memory: who held it
  uint64_t live_at_oom_total = 0;
};

struct DeviceSimulation {
  int32_t device = 0;
  allocator::AllocatorSettings recorded_settings;
  std::string settings_source;  // where the recorded settings come from, for the reader
  uint64_t recorded_peak_reserved = 0;
  int64_t recorded_peak_event = -1;
  // runs[0] is the replay against the recording; for sources without a recorded allocator state
  // (profiler traces, memory timelines) there is nothing to compare, and runs[0] is the model's
  // own run over the recorded requests ("model") with compared == false.
  std::vector<SimulationRun> runs;
  bool compared = true;
};

struct Simulations {
  std::vector<DeviceSimulation> devices;
  std::vector<std::string> notes;  // devices skipped, and why
};

// Runs the replay of every selected device and the what-if runs. Errors are the user's: a bad
// setting, a device without events, a snapshot without a trace.
Result<Simulations> Simulate(const model::Trace& trace, SiteNamer& sites,
                             const SimulationRequest& request);

// Gives every allocation whose block size the trace left estimated, and that the replay against
// the recording placed at its recorded address, the model's block size (then exact). A block the
// allocator did not split is bigger than the rounded request (up to 1 MiB in the large pool, more
// for oversize blocks); with this the allocated curve is PyTorch's own (checked on the goldens).
// Returns how many allocations changed size.
size_t AdoptReplayedBlockSizes(model::Trace& trace, const Simulations& sims);

}  // namespace vramscope::analysis
