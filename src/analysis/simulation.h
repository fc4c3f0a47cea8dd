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
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

// What-if runs over the recorded requests (vramscope simulate --capacity, --alloc-conf,
// --compare).
struct WhatIfRequest {
  std::optional<int32_t> device;  // default: every device the replay covers
  // Each a whole PYTORCH_CUDA_ALLOC_CONF ("" = torch's defaults), or nullopt for the recorded
  // settings (used when only a capacity or memory fraction is asked about).
  std::vector<std::optional<std::string>> what_if;
  uint64_t capacity = allocator::kUnlimited;
  double memory_fraction = 0;
  bool record_curves = true;
  size_t top_sites = 10;  // live-at-OOM sites kept per what-if run
  // What the what-if runs do with the recording's private pools (CUDA graphs, MemPools).
  allocator::PoolMapping pools = allocator::PoolMapping::kRecorded;
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
  std::vector<DeviceSimulation> devices;  // every device with allocations, ascending
};

// The allocator model's replay of every device with allocations: runs[0] of each device, against
// the recording where the source holds the allocator's state ("replay"), else the model's own run
// over the recorded requests ("model"). `recorded_conf` (PYTORCH_CUDA_ALLOC_CONF syntax) replaces
// the settings the snapshot records, for snapshots from before torch 2.3 that record none. An
// error when the trace holds nothing to replay, or `recorded_conf` is malformed.
Result<Simulations> ReplayRecording(const model::Trace& trace,
                                    const std::optional<std::string>& recorded_conf,
                                    bool record_curves = true);

// Appends the what-if runs of `request` to the devices of `sims` (made by ReplayRecording from
// the same trace). Errors are the user's: a bad setting, a device without allocations.
Status AddWhatIfRuns(const model::TraceView& view, SiteNamer& sites, const WhatIfRequest& request,
                     Simulations& sims);

// The block bytes the replay against the recording established for allocations the trace left
// estimated, parallel to Trace::allocations (0: nothing established): the model placed the
// allocation at its recorded address, or, alive before the trace, the recorded segment layout
// fixes its block. A block the allocator did not split is bigger than the rounded request (up to
// 1 MiB in the large pool, more for oversize blocks); with these the allocated curve is PyTorch's
// own (checked on the goldens). Empty when no replay was compared with a recording. In units of
// Interpretation::kReplayedBlockUnit (Interpretation::replayed_block_units). Takes (and empties)
// each replay's ReplayResult::confirmed_block_sizes, which it replaces.
std::vector<uint32_t> TakeReplayedBlockSizes(const model::Trace& trace, Simulations& sims);

}  // namespace vramscope::analysis
