// What interpretation adds beside a loaded Trace, and the view every later stage reads.
//
// A Trace holds what its source read, and nothing rewrites it after loading. What later steps
// learn about the same recording sits here instead:
//   - a capture sidecar (vramscope run) gives the phases the bootstrap marked and the names and
//     categories of parameters, gradients and optimizer state;
//   - the allocator model's replay against the recording gives the real block size of
//     allocations the trace left estimated (a trace records requested sizes, and a large-pool
//     block the allocator did not split is bigger than the rounded request);
//   - the pipeline notes what it did (which rank of several is shown, a native trace beside).
// TraceView joins the two: what interpretation established wins, the source's record is the
// rest. Attribution, analyses and reporters read a TraceView, so every verb that loads the same
// input through the pipeline sees the same sizes, names and phases.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/oom_message.h"
#include "model/trace.h"

namespace vramscope::model {

// Where a block size came from, from most to least certain.
enum class SizeEvidence : uint8_t {
  kRecorded,   // the source recorded the block size (alive at the dump, a profiler's block bytes)
  kReplayed,   // the allocator model's replay placed it at its recorded address with this size
  kEstimated,  // the request rounded to 512 B: the trace recorded only the request
};
const char* SizeEvidenceName(SizeEvidence evidence);

// What NVML said about the device during a capture (vramscope run's sidecar, "nvml"): samples
// of nvidia-smi's figures beside torch's own, taken at the start, at the end of every phase, at
// an out-of-memory error and at the end. Plain data, as the sidecar had it; byte counts.
struct DeviceUsageProcess {
  int64_t pid = 0;
  std::optional<uint64_t> used;  // nullopt: NVML could not tell (containers, MIG)
};

struct DeviceUsageSample {
  int64_t time_us = kNoTime;
  int32_t step = 0;
  std::string phase;  // the phase that ended here (setup, forward, ...), as the sidecar names it
  std::string at;     // start, phase_end, oom, end
  uint64_t device_total = 0;
  uint64_t device_used = 0;  // nvidia-smi's "used"
  std::optional<uint64_t> device_free;
  std::optional<uint64_t> device_reserved;  // the driver's own (NVML's v2 memory info)
  // This process's memory as NVML lists it; nullopt when it is not listed (a container's pid)
  // or NVML could not tell.
  bool process_listed = false;
  std::optional<uint64_t> process_used;
  // The device's other compute processes, largest first; nullopt when NVML could not list them.
  std::optional<std::vector<DeviceUsageProcess>> other_processes;
  uint64_t other_processes_more = 0;  // others beyond those listed (the bootstrap lists 64)
  std::optional<uint64_t> torch_reserved, torch_allocated;  // nullopt: not on a GPU
};

struct DeviceUsage {
  bool available = false;
  std::string why_not;  // when not available: why (no nvidia-ml-py, NVML failed, ...)
  std::string driver;
  std::optional<int64_t> nvml_index;
  std::string pci_bus_id, device_name;
  std::string matched_by;             // how torch's device was found in NVML: pci_bus_id, uuid, ...
  std::string pid_note;               // why this process's own figure is missing, when it is
  std::string stopped;                // why sampling stopped early, when it did
  uint64_t samples_dropped = 0;       // the earliest, beyond the bootstrap's bound
  uint64_t samples_other_device = 0;  // taken while torch was on another device: left out
  std::vector<DeviceUsageSample> samples;
};

// torch's counters at the end of one phase (the sidecar's per-phase "memory"); max_* only with
// --phase-memory (peaks since the phase began).
struct CapturedPhaseMemory {
  int32_t step = 0;
  std::string phase;
  int64_t end_us = kNoTime;
  uint64_t allocated = 0, reserved = 0;
  std::optional<uint64_t> max_allocated, max_reserved;
};

struct Interpretation {
  // Block sizes the allocator replay established for allocations the trace left estimated, by
  // allocation index, in units of kReplayedBlockUnit (every block the caching allocator makes is
  // a multiple of 512 B: 4 bytes an allocation, not 8): 0 where it established nothing. Empty
  // when there was no replay. Read through TraceView::BlockSize.
  static constexpr uint64_t kReplayedBlockUnit = 512;
  std::vector<uint32_t> replayed_block_units;

  // From a capture sidecar. Phase marks, when any, replace the source's (Trace::phase_marks):
  // by device, then event. Categories and names are keyed by alloc event, like the source's own
  // (Events::category, Events::tensor_name), and win over them.
  std::vector<PhaseMark> phase_marks;
  std::unordered_map<uint32_t, Category> category;
  std::unordered_map<uint32_t, std::string> tensor_name;
  // NVML's samples of the device; nullopt when the input had no capture sidecar with an "nvml"
  // record (an older sidecar, or another source).
  std::optional<DeviceUsage> device_usage;
  // PyTorch's out-of-memory message as the capture recorded it, read (sources/oom_message); unset
  // when the run did not run out or the message is not one vramscope reads.
  std::optional<OomMessage> oom_message;
  // torch's counters per phase, from a capture sidecar recorded on a GPU; empty otherwise.
  std::vector<CapturedPhaseMemory> phase_memory;

  // What the user should know about how the input was read, one line each, after the source's
  // own notes (TraceFacts::notes).
  std::vector<std::string> notes;
  // Appended to SourceInfo::format in reports: " + vramscope run sidecar".
  std::string format_suffix;
};

// The trace as every stage after loading reads it. Cheap to copy; both parts must outlive it.
struct TraceView {
  const Trace& trace;
  const Interpretation& interpretation;

  // Block bytes of allocation `i` (what torch.cuda.memory_allocated() counts for it), and how
  // that size is known.
  uint64_t BlockSize(size_t i) const {
    const Allocation& a = trace.allocations[i];
    if (a.size_exact) return a.size;
    const auto& replayed = interpretation.replayed_block_units;
    return i < replayed.size() && replayed[i] != 0
               ? uint64_t{replayed[i]} * Interpretation::kReplayedBlockUnit
               : a.size;
  }
  SizeEvidence SizeEvidenceOf(size_t i) const {
    if (trace.allocations[i].size_exact) return SizeEvidence::kRecorded;
    const auto& replayed = interpretation.replayed_block_units;
    return i < replayed.size() && replayed[i] != 0 ? SizeEvidence::kReplayed
                                                   : SizeEvidence::kEstimated;
  }
  bool SizeExact(size_t i) const { return SizeEvidenceOf(i) != SizeEvidence::kEstimated; }

  // The recorded phases: the capture's when it marked any, else the source's.
  std::span<const PhaseMark> PhaseMarks() const {
    return interpretation.phase_marks.empty()
               ? std::span<const PhaseMark>(trace.phase_marks)
               : std::span<const PhaseMark>(interpretation.phase_marks);
  }
  // The category a source or a capture recorded for the tensor of alloc event `event`.
  std::optional<Category> RecordedCategory(uint32_t event) const;
  // The name a source or a capture gave that tensor; empty when none.
  std::string_view TensorName(uint32_t event) const;
  bool HasTensorNames() const {
    return !interpretation.tensor_name.empty() || !trace.events.tensor_name.empty();
  }
  // The source's format, with what interpretation added ("... + vramscope run sidecar").
  std::string Format() const { return trace.source.format + interpretation.format_suffix; }
  // Every note: the source's, then interpretation's.
  std::vector<std::string> Notes() const;
};

// An empty interpretation, for views of a trace as its source read it (sources' tests, fuzzers).
const Interpretation& NoInterpretation();
inline TraceView Uninterpreted(const Trace& trace) { return {trace, NoInterpretation()}; }

}  // namespace vramscope::model
