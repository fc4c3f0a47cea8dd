// The sidecar `vramscope run`'s bootstrap writes beside each snapshot (docs/design/capture.md,
// format "vramscope-capture" version 1): what the snapshot cannot say. Interpreting it beside the
// snapshot's Trace gives the capture's recorded phases, the names and categories of weights,
// gradients and optimizer state, notes (which rank, why the capture ended, PyTorch's OOM
// message), torch's counters per phase and NVML's samples of the device, as a
// model::Interpretation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/interpretation.h"
#include "model/trace.h"
#include "model/vocabulary.h"

namespace vramscope::sources {

struct SidecarPhase {
  int32_t step = 0;
  std::string phase;  // forward, backward, optimizer, between
  int64_t begin_us = model::kNoTime;
  int64_t end_us = model::kNoTime;
  // torch's counters at the phase's end ("memory"; null in the CPU test mode).
  std::optional<model::CapturedPhaseMemory> memory;
};

struct SidecarTensor {
  model::Category category = model::Category::kWeight;
  std::string name;
  uint64_t data_ptr = 0;     // the tensor's first byte
  uint64_t storage_ptr = 0;  // its storage's first byte (0: the same as data_ptr)
  uint64_t nbytes = 0;
  int64_t seen_us = model::kNoTime;
  int32_t step = 0;
};

struct SidecarOom {
  uint64_t requested_bytes = 0;
  std::optional<uint64_t> device_free;
  int32_t step = 0;
  std::string phase;
  std::string message;  // PyTorch's own
};

// A JAX or TensorFlow capture's own allocator at the end (the sidecar's process.allocator): the
// environment that decides what it takes up front, and its own figures where it gives them (JAX's
// device.memory_stats(), TensorFlow's get_memory_info: GPU only).
struct SidecarFrameworkAllocator {
  std::vector<std::pair<std::string, std::string>> settings;  // variable, value; as set
  std::optional<uint64_t> bytes_in_use, peak_bytes_in_use, bytes_limit, pool_bytes;
};

struct CaptureSidecar {
  std::string path;
  std::string snapshot;  // file name beside it; empty: none was taken
  std::optional<int64_t> rank, local_rank, world_size, pid, device, total_memory;
  std::string hostname, framework, torch_version, device_name;
  std::string stacks, context, fallback;
  std::string end_reason;  // exit, steps, oom, exception, signal
  int64_t steps_completed = 0;
  std::string exception;
  std::vector<SidecarPhase> phases;
  std::vector<SidecarTensor> tensors;
  std::optional<SidecarOom> oom;
  // "nvml": NVML's samples of the device (nullopt: a sidecar from before they were recorded).
  // At most kMaxNvmlSamples samples (the rest counted in samples_dropped) and kMaxNvmlProcesses
  // other processes per sample (the rest counted in other_processes_more).
  std::optional<model::DeviceUsage> nvml;
  std::optional<SidecarFrameworkAllocator> framework_allocator;
};

// What the bootstrap writes at most is what is read (model/vocabulary.h: one set of limits).
inline constexpr size_t kMaxNvmlSamples = model::kCaptureLimits.max_nvml_samples;
inline constexpr size_t kMaxNvmlProcesses = model::kCaptureLimits.max_nvml_processes;

// Reads a sidecar. nullopt when the file is JSON of another format (an older golden's sidecar);
// an error naming the file and field when it is malformed.
Result<std::optional<CaptureSidecar>> ReadCaptureSidecar(const std::string& path);
// The same from text (`path` names it in errors).
Result<std::optional<CaptureSidecar>> ParseCaptureSidecar(std::string_view text,
                                                          const std::string& path);

struct SidecarApplied {
  size_t phase_marks = 0;
  bool phases_from_metadata = false;  // else from the recorded times
  size_t tensors_named = 0;           // allocations that got a name
  size_t tensors_unmatched = 0;       // sidecar tensors no allocation of the trace holds
};

// What the sidecar says about the trace read from its snapshot: its phases, the names and
// categories of the tensors it saw, notes (rank, host, why the capture ended), torch's counters
// per phase and NVML's samples (Interpretation::phase_memory, device_usage), added to `out`
// (the trace itself stays as the snapshot had it). Never fails: what does not match is counted
// and said in the notes.
SidecarApplied InterpretCaptureSidecar(const CaptureSidecar& sidecar, const model::Trace& trace,
                                       model::Interpretation& out);

}  // namespace vramscope::sources
