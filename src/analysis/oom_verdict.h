// The verdict on an out-of-memory message: what held the GPU when the allocation failed, in one
// sentence a person can act on, then every holder ranked by its bytes with the arithmetic. It
// answers "why is the GPU full", where the findings (analysis/oom_message_explain.h) answer "why
// did this one request fail" (the proximate cause: a race, the driver's headroom, a cap).
//
// The dominant holder is one of a closed set, defined in docs/design/explain.md ("The verdict"):
// the largest holder by bytes of what was held at the failure (the request is asked, not held),
// the figures' rounding deciding ties (a holder whose range lies wholly above the next one's is
// dominant; overlapping ranges are compared at their midpoints and the verdict says it was
// close). Some readings override the bytes, in this order: memory above the card (Windows' spill,
// or a host sharing its memory), a request (or tensors and request) larger than the GPU, a free
// figure above the total, a printed cap that refused memory the device had, most of the card free
// with no cap printed, and messages without figures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/byte_range.h"
#include "analysis/oom_accounting.h"
#include "model/oom_message.h"

namespace vramscope::analysis {

enum class OomHolder : uint8_t {
  kTensors,                // this process's tensors and the request: the step does not fit
  kFragmentation,          // reserved by PyTorch but unallocated (and private pools' cache)
  kProcessOutsidePyTorch,  // this process's memory outside PyTorch's allocator
  kOtherProcesses,         // other processes on the GPU
  kCap,                    // a memory cap refused memory the device had
  kWddmSpill,              // Windows' driver let this process's memory exceed the card's
  kUnifiedMemory,          // a GPU sharing its memory with the host, which holds the bulk
  kInconsistentFigures,    // figures that contradict each other
  kUnaccounted,            // held by nothing the message names
  kNoFigures,              // a message without figures (a driver or library error)
};
// "tensors", "fragmentation", "process_outside_pytorch", "other_processes", "cap", "wddm_spill",
// "unified_memory", "inconsistent_figures", "unaccounted", "no_figures".
const char* OomHolderName(OomHolder holder);
// Every holder, in declaration order (tests and docs enumerate them).
const std::vector<OomHolder>& AllOomHolders();

// One holder of the GPU's memory and how its bytes follow from the message.
struct OomHolding {
  OomHolder holder = OomHolder::kTensors;
  ByteRange bytes;
  std::string what;        // "this process's tensors and the request"
  std::string arithmetic;  // "allocated 7.31 GiB + request 20.00 MiB"
  bool assumed = false;    // rests on an assumed figure (a context size for an unnamed GPU)
};

struct OomVerdict {
  OomHolder holder = OomHolder::kNoFigures;
  std::string sentence;  // the verdict, one sentence
  // The holders by bytes, largest first (empty for the overriding readings without figures).
  std::vector<OomHolding> holdings;
  // The two largest holders' ranges overlap: the midpoints decided.
  bool close = false;
};

// What one process holds outside the allocator on this GPU, as a range, and whether that range is
// assumed (no GPU named or matched: a range over the architectures plausible for the message).
struct ExpectedOutside {
  ByteRange bytes;
  bool assumed = false;
};

// The verdict on `m`. `accounting` is AccountFor(m) (unset for messages without the three
// figures); `expected` what one process holds outside the allocator here; `unified` whether the GPU
// shares its memory with the host (a known APU, or what the message's figures show of one).
OomVerdict DecideOomVerdict(const model::OomMessage& m,
                            const std::optional<OomAccounting>& accounting,
                            ExpectedOutside expected, bool unified);

}  // namespace vramscope::analysis
