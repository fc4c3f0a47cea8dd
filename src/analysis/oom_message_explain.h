// What an out-of-memory message means: from the figures the message states (known to PyTorch's
// rounding, so every quantity here is an interval), what the rest of the GPU held, which cause
// made the request fail (with the arithmetic that shows it), and what to change.
//
// The causes, each tested on its own ("would the request have fit without it?"):
//   - a memory-fraction cap: the device had the memory free, the cap refused it;
//   - fragmentation: the reserved-but-unallocated memory (which PyTorch could not release: it lies
//     in segments that still hold tensors) plus the free memory would have held the request;
//   - other processes on the GPU;
//   - this process's non-PyTorch memory beyond a CUDA context and libraries (NCCL, another
//     framework's pool, an extension's cudaMalloc);
//   - plain capacity: none of the above would have saved it; the tensors need more than the GPU.
// A cause is "decisive" when its arithmetic holds for every size the rounded figures allow, and
// "possible" when it holds for some. docs/design/explain.md has the rules and their sources.
//
// A pure function of the parsed message and the non-PyTorch memory model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/byte_range.h"
#include "analysis/oom_verdict.h"
#include "device/gpu_catalog.h"
#include "device/non_pytorch_memory.h"
#include "model/oom_message.h"

namespace vramscope::analysis {

enum class OomMessageCause : uint8_t {
  kMemoryFractionCap,
  kFragmentation,
  kOtherProcesses,
  kNonPyTorchMemory,
  kCapacity,
  kOutsideAllocator,  // a driver or library error: the failing allocation was not PyTorch's
  kUnknown,           // the message states too little to tell
};
const char* OomMessageCauseName(OomMessageCause cause);  // "fragmentation", ...

struct OomFinding {
  OomMessageCause cause = OomMessageCause::kUnknown;
  bool decisive = false;   // holds for every size the figures allow (else: for some)
  std::string arithmetic;  // the figures that show it, written out
  std::string meaning;     // one sentence
  // The memory the cause took from the request (what would have been free without it): the
  // decisive cause that took the most is the one named first.
  ByteRange bytes;
  std::vector<std::string> advice;  // what to change for this cause
};

// One line of "what the GPU held": a quantity, its range, and how it follows from the message.
struct GpuShare {
  std::string what;
  ByteRange bytes;
  std::string how;  // "stated", or the arithmetic
};

struct OomMessageExplanation {
  model::OomMessage message;
  // What held the GPU: the dominant holder in one sentence, then every holder ranked. The
  // findings below are the proximate cause (why this one request failed).
  OomVerdict verdict;
  std::vector<GpuShare> shares;
  std::vector<OomFinding> findings;  // decisive ones first, in the order of the header
  OomMessageCause cause = OomMessageCause::kUnknown;  // the first decisive finding's, or the
                                                      // first possible one's
  std::vector<std::string> advice;  // every finding's, in the findings' order, then general
  // The GPUs whose capacity matches the message's total, and the non-PyTorch memory the model
  // expects of one process there.
  std::vector<device::GpuSpec> gpus;
  device::OutsideMemory expected_outside;
  // What one process holds outside the allocator, as a range: over the GPUs the message's
  // capacity matches, or (none matched) over the architectures plausible for its capacity,
  // backend and era, then marked assumed.
  ExpectedOutside expected_outside_range;
  // The memory this process could have used: total, less other processes and the cap; what
  // `predict --fit` should fit into. Unset when the message does not say.
  std::optional<ByteRange> available_to_pytorch;
  // How much more the request needed than the allocator could get, at least.
  std::optional<ByteRange> shortfall;
};

struct ExplainOptions {
  // The PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) of the failed run, when known: whether
  // expandable_segments was already on decides the advice.
  std::optional<std::string> alloc_conf;
  // A GPU the user named (--gpu); else the catalog's GPUs of the message's capacity.
  std::optional<device::GpuSpec> gpu;
  device::OutsideSetup outside;  // overrides and NCCL set-up; vendor/sm come from the GPU
};

OomMessageExplanation ExplainOomMessage(const model::OomMessage& message,
                                        const ExplainOptions& options);

}  // namespace vramscope::analysis
