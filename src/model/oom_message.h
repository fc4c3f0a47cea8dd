// What an out-of-memory message states, as `vramscope explain` reads it from text a user pasted
// (sources/oom_message parses it; analysis/oom_message_explain concludes from it).
//
// PyTorch prints every figure with format_size: "N bytes" up to 1 KiB, then two decimals of KiB,
// MiB or GiB. A figure is therefore known only to an interval, and every conclusion drawn from
// it is arithmetic on intervals (docs/design/explain.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vramscope::model {

// A size as a message prints it, and the bytes it can stand for.
struct PrintedBytes {
  std::string text;  // "79.11 GiB", as printed
  uint64_t lo = 0;   // the smallest size that prints so
  uint64_t hi = 0;   // the largest
  uint64_t Mid() const { return lo + (hi - lo) / 2; }
  // NVML's and the allocator's "not available": 2^64 - 1 B (no GPU has 8 EiB).
  bool IsNotAvailable() const { return lo >= (uint64_t{1} << 63); }
};

// Which text it is: the generations of the caching allocator's message, or an error that does not
// come from the caching allocator at all.
enum class OomMessageKind : uint8_t {
  kAllocator,        // PyTorch 2.1+: "GPU 0 has a total capacity of ... of which ... is free."
  kAllocatorLegacy,  // PyTorch 1.x - 2.0: "(GPU 0; ... total capacity; ... already allocated; ...)"
  kAllocatorBare,    // "CUDA out of memory. Tried to allocate ..." with no figures after it
  kDriverError,      // "CUDA error: out of memory", cudaErrorMemoryAllocation, hipErrorOutOfMemory
  kLibraryError,  // CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED, NCCL's "out of memory"
  // backend:cudaMallocAsync: "Allocation on device 0 would exceed allowed memory. (out of memory)"
  // with "Currently allocated", "Requested", "Device limit", "Free (according to CUDA)" lines.
  kAsyncAllocator,
  kMps,  // Apple's "MPS backend out of memory (MPS allocated: ..., other allocations: ...)"
  // XLA (JAX): "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes." on a GPU,
  // "... Out of memory allocating N bytes." on the host; with the BFC allocator's log and
  // BufferAssignment's stats of the compiled program when they are pasted with it.
  kXla,
  // TensorFlow: "OOM when allocating tensor with shape[...] and type T on DEVICE by allocator
  // NAME", with the BFC allocator's log when it is pasted with it.
  kTensorflow,
};
const char* OomMessageKindName(OomMessageKind kind);

struct OomProcess {
  int64_t pid = 0;
  PrintedBytes in_use;
};

struct OomMessage {
  OomMessageKind kind = OomMessageKind::kAllocator;
  std::string backend;      // "CUDA", "HIP", "XPU", "MPS"
  std::string library;      // kLibraryError: "cuBLAS", "cuDNN", "NCCL"
  size_t line = 0;          // 1-based line of the text where it starts
  std::optional<int> rank;  // a "[rank3]:" prefix on its line
  std::string text;         // the message, whitespace collapsed, at most a few KiB

  std::optional<PrintedBytes> tried_to_allocate;
  std::optional<int> gpu;
  std::optional<PrintedBytes> total_capacity;
  std::optional<PrintedBytes> free;  // cudaMemGetInfo's free bytes at the failure
  // The memory fraction's cap, when one is set (MPS: "max allowed"; cudaMallocAsync: "PyTorch
  // limit", which prints as 17179869184.00 GiB, i.e. 2^64 B, when no fraction is set).
  std::optional<PrintedBytes> allowed;
  // 2.1+: the processes NVML lists on the GPU, other than this one, and this one's own total.
  std::vector<OomProcess> processes;
  std::optional<PrintedBytes> this_process_in_use;
  // 2.1+: stats' allocated bytes plus the free blocks cached in private pools, so that
  // allocated_by_pytorch + reserved_unallocated = memory_reserved(). cudaMallocAsync: "Currently
  // allocated"; MPS: "MPS allocated".
  std::optional<PrintedBytes> allocated_by_pytorch;
  // "with ... allocated in private pools": the free blocks cached in CUDA graphs' and MemPools'
  // pools, counted in allocated_by_pytorch although no tensor holds them.
  std::optional<PrintedBytes> private_pools;
  std::optional<PrintedBytes> reserved_unallocated;
  // 1.x - 2.0.
  std::optional<PrintedBytes> already_allocated;
  std::optional<PrintedBytes> reserved_total;  // 1.4+: "reserved in total by PyTorch"
  // 1.0 - 1.3: "... cached)", which was reserved minus allocated (not the total), and a
  // short-lived "; ... inactive)".
  std::optional<PrintedBytes> cached;
  std::optional<PrintedBytes> inactive;
  std::optional<PrintedBytes> other_allocations;  // MPS: what else holds the unified memory
  // The figures printed as NVML's or the allocator's "not available" (2^64 - 1 B, printed as
  // 17179869184.00 GiB: Windows' NVML for this process's memory; cudaMallocAsync's "no limit"):
  // their keys ("this_process_in_use", "allowed", "process 1234"). Such a figure is never read as
  // one: its field is left unset (the process dropped) and `text` shows "[not available]" there.
  std::vector<std::string> not_available;
  // XLA and TensorFlow. The device the failing allocation was for ("GPU:0", "CPU:0"), the
  // allocator ("GPU_0_bfc", "cpu"), TensorFlow's tensor (its shape "[64,1024]" and dtype name).
  std::string device;
  std::string allocator;
  // Whether the failing allocation was in the host's memory (XLA's host wording, a CPU device).
  bool OnHost() const { return device == "CPU" || device.rfind("CPU:", 0) == 0; }
  std::string tensor_shape;
  std::string tensor_dtype;
  // TSL's BFC allocator (XLA's and TensorFlow's GPU pool), as it logs running out: its pool's
  // limit (what it may take of the GPU), the bytes in use, the most ever in use, the largest
  // free block ("Stats:" lines, exact integers).
  std::optional<PrintedBytes> pool_limit;
  std::optional<PrintedBytes> pool_in_use;
  std::optional<PrintedBytes> pool_peak_in_use;
  std::optional<PrintedBytes> largest_free_block;
  // XLA's "BufferAssignment stats" of the compiled program (printed with the error when the
  // program's own buffers do not fit): its parameters, constants, outputs that may outlive it
  // (maybe_live_out), the preallocated temporaries (the step's intermediates) and their total.
  std::optional<PrintedBytes> program_parameters;
  std::optional<PrintedBytes> program_constants;
  std::optional<PrintedBytes> program_outputs;
  std::optional<PrintedBytes> program_temp;
  std::optional<PrintedBytes> program_total;
  // The message's own advice, quoted back only to say whether it applies.
  bool suggests_expandable_segments = false;
  bool suggests_max_split_size = false;
};

// Every figure a message can state, in the order reports list them: its name in JSON, its label
// in text, and where the message keeps it.
struct OomMessageFigure {
  const char* key;    // "tried_to_allocate"
  const char* label;  // "tried to allocate"
  std::optional<PrintedBytes> OomMessage::*field;
};
const std::vector<OomMessageFigure>& OomMessageFigures();

}  // namespace vramscope::model
