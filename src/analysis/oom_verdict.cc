#include "analysis/oom_verdict.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"

namespace vramscope::analysis {

namespace {

using model::OomMessage;
using model::OomMessageKind;

std::string F(ByteRange r) { return FormatByteRange(r); }

// A share of the card, "65%", from the midpoints.
std::string Share(ByteRange part, ByteRange whole) {
  if (whole.Mid() <= 0) return "?";
  return fmt::format("{:.0f}%",
                     100.0 * static_cast<double>(part.Mid()) / static_cast<double>(whole.Mid()));
}

// One request this large (128 GiB) is the cause on any GPU but the largest data-centre parts.
constexpr int64_t kHugeRequest = 128ll << 30;

// Holdings below this are not worth a line (rounding noise of the remainders).
constexpr int64_t kNoise = 64ll << 20;

void Hold(std::vector<OomHolding>& out, OomHolder holder, ByteRange bytes, std::string what,
          std::string arithmetic, bool assumed = false) {
  bytes = NonNegative(bytes);
  if (bytes.hi < kNoise) return;
  out.push_back({holder, bytes, std::move(what), std::move(arithmetic), assumed});
}

// The largest first: a holding wholly above another ranks above it; overlapping ones by midpoint.
void Rank(std::vector<OomHolding>& holdings) {
  std::stable_sort(holdings.begin(), holdings.end(), [](const OomHolding& a, const OomHolding& b) {
    return a.bytes.Mid() > b.bytes.Mid();
  });
}

OomVerdict Overriding(OomHolder holder, std::string sentence,
                      std::vector<OomHolding> holdings = {}) {
  Rank(holdings);
  return {holder, std::move(sentence), std::move(holdings), false};
}

// The holders of a caching-allocator message's memory, by the figures it prints.
std::vector<OomHolding> Holdings(const OomAccounting& a, ExpectedOutside expected, bool unified) {
  std::vector<OomHolding> out;
  const std::optional<ByteRange> tensors = a.Tensors();
  // What each holds at the failure; the request is what was asked, not held (the overriding
  // readings weigh it).
  if (tensors) {
    Hold(out, OomHolder::kTensors, *tensors, "this process's tensors",
         a.private_pools ? fmt::format("allocated by PyTorch {} - the private pools' cache {}",
                                       F(*a.allocated), F(*a.private_pools))
                         : "allocated by PyTorch");
  }
  if (a.unallocated) {
    ByteRange frag = *a.unallocated;
    std::string how = fmt::format("reserved but unallocated {}", F(*a.unallocated));
    if (a.private_pools) {
      frag = frag + *a.private_pools;
      how += fmt::format(" + private pools' cache {}", F(*a.private_pools));
    }
    Hold(out, OomHolder::kFragmentation, frag, "reserved by PyTorch but unallocated", how);
  }
  const char* host = "the host and its programs (shared memory)";
  if (a.self && a.reserved) {
    // 2.1+: NVML saw this process and the others; what neither holds is the driver's or unseen.
    Hold(out, OomHolder::kProcessOutsidePyTorch, *a.OutsidePyTorch(),
         "this process outside PyTorch's allocator",
         fmt::format("this process {} - reserved {} (a context and libraries: about {})",
                     F(*a.self), F(*a.reserved), F(expected.bytes)));
    if (!a.others.empty()) {
      Hold(out, OomHolder::kOtherProcesses, a.other_sum,
           fmt::format("{} other process{}", a.others.size(), a.others.size() == 1 ? "" : "es"),
           "the processes listed");
    }
    const ByteRange unlisted = a.total - a.free - *a.self - a.other_sum;
    Hold(out, unified ? OomHolder::kUnifiedMemory : OomHolder::kUnaccounted, unlisted,
         unified ? host : "no process the message lists",
         fmt::format("total {} - free {} - this process {}{}", F(a.total), F(a.free), F(*a.self),
                     a.others.empty() ? "" : fmt::format(" - others {}", F(a.other_sum))));
    return out;
  }
  if (a.self && !a.reserved) {
    // The message is cut before PyTorch's figures: this process's memory stands for its tensors.
    Hold(out, OomHolder::kTensors, *a.self,
         "this process (the message is cut before PyTorch's figures)",
         fmt::format("process {} as listed", a.self_pid ? std::to_string(*a.self_pid) : "this"));
    Hold(out, OomHolder::kUnaccounted, a.total - a.free - *a.self, "no process the message lists",
         "total - free - this process");
  }
  if (!a.reserved) return out;
  if (!a.others.empty()) {
    // Processes listed but none of them this one (a container's PIDs): what they do not hold.
    Hold(out, OomHolder::kOtherProcesses, a.other_sum,
         fmt::format("{} other process{}", a.others.size(), a.others.size() == 1 ? "" : "es"),
         "the processes listed");
  }
  // 1.x (and 2.x without NVML): all that is neither free nor PyTorch's is one undivided figure:
  // this process's context and libraries and other processes together (the message does not tell
  // them apart). Within what one process is expected to hold outside the allocator, it is taken
  // as this process's own; beyond it, as other processes' (what maintainers reading such
  // messages in the threads of tests/data/oom_messages name; the text says it cannot tell); on a
  // GPU sharing its memory with the host, as the host's.
  const ByteRange outside = NonNegative(a.total - a.free - *a.reserved - a.other_sum);
  const OomHolder holder = unified                          ? OomHolder::kUnifiedMemory
                           : outside.lo > expected.bytes.hi ? OomHolder::kOtherProcesses
                                                            : OomHolder::kProcessOutsidePyTorch;
  Hold(out, holder, outside,
       unified                                ? host
       : holder == OomHolder::kOtherProcesses ? "outside this PyTorch: other processes, most likely"
                                              : "outside this PyTorch: its context and libraries",
       fmt::format("total {} - free {} - reserved {}{}; one context and libraries: {}; the "
                   "message does not tell other processes from this one's non-PyTorch memory",
                   F(a.total), F(a.free), F(*a.reserved),
                   a.others.empty() ? "" : fmt::format(" - others {}", F(a.other_sum)),
                   F(expected.bytes)),
       expected.assumed);
  return out;
}

std::string HolderSentence(const OomHolding& top, const OomAccounting& a) {
  const std::string of = fmt::format("of this {} GPU", F(a.total));
  const std::string self = a.self       ? F(*a.self)
                           : a.reserved ? F(*a.reserved) + " reserved by PyTorch"
                                        : "less";
  switch (top.holder) {
    case OomHolder::kTensors:
      if (!a.allocated) {
        return fmt::format(
            "This process holds {} ({} {}) and asked for {} more; the message is cut before "
            "PyTorch's own figures, so its tensors cannot be told from the rest.",
            F(top.bytes), Share(top.bytes, a.total), of, F(a.request));
      }
      return fmt::format(
          "This process's tensors fill the GPU: {} allocated ({} {}) when it asked for {} more; "
          "the step does not fit.",
          F(top.bytes), Share(top.bytes, a.total), of, F(a.request));
    case OomHolder::kFragmentation:
      return fmt::format(
          "PyTorch held {} reserved but unallocated, in pieces it could not hand out "
          "(fragmentation): the largest holder {}.",
          F(top.bytes), of);
    case OomHolder::kProcessOutsidePyTorch:
      return fmt::format(
          "This process holds {} outside PyTorch's allocator ({}), more than anything else {}.",
          F(top.bytes), Share(top.bytes, a.total), of);
    case OomHolder::kOtherProcesses:
      if (!a.self && a.others.empty()) {
        return fmt::format(
            "{} {} is held outside this process's PyTorch, far more than a context: most likely "
            "other processes (a notebook, another run, a display), or this process's own memory "
            "outside PyTorch (this message does not tell them apart; nvidia-smi does); PyTorch "
            "got {}.",
            F(top.bytes), of, self);
      }
      return fmt::format("Other processes hold {} {}; this process got {}.", F(top.bytes), of,
                         self);
    case OomHolder::kUnifiedMemory:
      return fmt::format(
          "This GPU shares its {} with the host, and the host and its other programs hold {} of "
          "it; this process got {}.",
          F(a.total), F(top.bytes), self);
    case OomHolder::kUnaccounted:
      return fmt::format(
          "{} {} is held by nothing the message names (no listed process holds it); this "
          "process got {}.",
          F(top.bytes), of, self);
    default:
      return "";
  }
}

OomVerdict AllocatorVerdict(const OomMessage& m, const OomAccounting& a, ExpectedOutside expected,
                            bool unified) {
  std::vector<OomHolding> holdings = Holdings(a, expected, unified);
  // Above the card: on Windows the driver spills to shared system memory; on a GPU sharing its
  // memory with the host, the host's memory is the limit.
  const std::optional<ByteRange> mine = a.self ? a.self : a.reserved;
  if (mine && mine->lo > a.total.hi && a.free.lo <= a.total.hi) {
    if (unified || m.backend == "HIP") {
      return Overriding(
          OomHolder::kUnifiedMemory,
          fmt::format("This process holds {}, more than the {} the GPU reports: it shares its "
                      "memory with the host, whose memory is the limit.",
                      F(*mine), F(a.total)),
          std::move(holdings));
    }
    return Overriding(
        OomHolder::kWddmSpill,
        fmt::format("This process holds {}, more than the {} of the card: Windows' driver let it "
                    "spill into shared system memory (the sysmem fallback) until that ran out too.",
                    F(*mine), F(a.total)),
        std::move(holdings));
  }
  // A request larger than the GPU is a capacity problem whatever else the figures say.
  if (a.request.lo > a.total.hi) {
    return Overriding(OomHolder::kTensors,
                      fmt::format("The request alone, {}, is larger than this {} GPU: no setting "
                                  "frees that; the step must need less at once.",
                                  F(a.request), F(a.total)),
                      std::move(holdings));
  }
  const std::optional<ByteRange> tensors = a.Tensors();
  if (tensors && (*tensors + a.request).lo > a.total.hi) {
    return Overriding(OomHolder::kTensors,
                      fmt::format("This process's tensors, {}, and the {} request exceed this {} "
                                  "GPU by themselves: whatever else is freed, the step does not "
                                  "fit.",
                                  F(*tensors), F(a.request), F(a.total)),
                      std::move(holdings));
  }
  if (a.free.lo > a.total.hi) {
    // A free figure above the total (an unsigned underflow in some ROCm builds) says nothing;
    // the tensors and the request may still decide.
    return Overriding(
        OomHolder::kInconsistentFigures,
        fmt::format("The figures contradict each other ({} free of a {} total), so no holder "
                    "can be named from them; the device's own tools (rocm-smi, nvidia-smi) must "
                    "tell.",
                    F(a.free), F(a.total)),
        std::move(holdings));
  }
  // A printed cap that refused memory the device had.
  if (a.allowed && a.reserved &&
      Sometimes(*a.reserved + a.request, ExactRange(a.allowed->lo + 1)) &&
      Sometimes(a.free, a.request)) {
    return Overriding(OomHolder::kCap,
                      fmt::format("A memory cap of {} stopped PyTorch at {} reserved, while the "
                                  "device still had {} free.",
                                  F(*a.allowed), F(*a.reserved), F(a.free)),
                      std::move(holdings));
  }
  // Most of the card free and the request among it, no cap printed: no holder filled the GPU.
  // A request that needs nearly all that is free fails on the driver's headroom (the tensors'
  // demand); a small one contradicts the figures: a cap the message does not print (a memory
  // fraction before PyTorch printed it, or left by a test), another process taking the memory
  // between the failure and the message, or a driver fault.
  if (Always(a.free, a.request) && 4 * a.free.lo >= a.total.hi) {
    if (10 * a.request.lo >= 9 * a.free.hi) {
      return Overriding(OomHolder::kTensors,
                        fmt::format("The request, {}, needs nearly all of the {} free on this {} "
                                    "GPU, more than the driver gives in one piece: the step asks "
                                    "too much at once.",
                                    F(a.request), F(a.free), F(a.total)),
                        std::move(holdings));
    }
    return Overriding(
        OomHolder::kInconsistentFigures,
        fmt::format("The device reported {} free of {}, enough for the {} request many times "
                    "over, yet it failed: the figures do not explain it. A memory cap the message "
                    "does not print (set_per_process_memory_fraction, perhaps left by a test), "
                    "another process taking the memory in between, or a driver fault are left.",
                    F(a.free), F(a.total), F(a.request)),
        std::move(holdings));
  }
  if (holdings.empty()) {
    return Overriding(OomHolder::kNoFigures,
                      "The message states too few figures to say what held the GPU.");
  }
  Rank(holdings);
  OomVerdict v;
  v.holder = holdings[0].holder;
  v.close = holdings.size() > 1 && holdings[1].bytes.hi >= holdings[0].bytes.lo;
  v.sentence = HolderSentence(holdings[0], a);
  if (v.close) {
    v.sentence += fmt::format(" (Close: {} holds {}; the figures' rounding cannot order them.)",
                              holdings[1].what, F(holdings[1].bytes));
  }
  v.holdings = std::move(holdings);
  return v;
}

// cudaMallocAsync's message: the device limit, its free memory and PyTorch's allocated memory.
OomVerdict AsyncVerdict(const OomMessage& m, ExpectedOutside expected, bool unified) {
  if (!m.tried_to_allocate || !m.free || !m.total_capacity || !m.allocated_by_pytorch) {
    return Overriding(OomHolder::kNoFigures,
                      "The message states too few figures to say what held the GPU.");
  }
  OomAccounting a;
  a.request = RangeOf(*m.tried_to_allocate);
  a.free = RangeOf(*m.free);
  a.total = RangeOf(*m.total_capacity);
  a.allocated = RangeOf(*m.allocated_by_pytorch);
  a.reserved = a.allocated;
  a.other_sum = ExactRange(0);
  return AllocatorVerdict(m, a, expected, unified);
}

// Apple's MPS: PyTorch's allocations and the other Metal allocations under the high watermark.
// XLA's and TensorFlow's: the BFC pool's figures when its log was pasted, else the compiled
// program's buffers, else what the request alone says.
OomVerdict XlaOrTensorflowVerdict(const OomMessage& m) {
  const char* framework = m.kind == OomMessageKind::kXla ? "XLA" : "TensorFlow";
  const bool host = m.OnHost();
  if (m.tried_to_allocate && RangeOf(*m.tried_to_allocate).lo >= kHugeRequest) {
    return Overriding(OomHolder::kTensors,
                      fmt::format("The request alone, {}, is more than {} has: a shape gone wrong "
                                  "rather than too little memory.",
                                  F(RangeOf(*m.tried_to_allocate)),
                                  host ? "the host" : "any GPU but the largest"));
  }
  if (m.pool_limit && m.pool_in_use) {
    const ByteRange limit = RangeOf(*m.pool_limit), in_use = RangeOf(*m.pool_in_use);
    std::vector<OomHolding> holdings;
    Hold(holdings, OomHolder::kTensors, in_use, fmt::format("{}'s live buffers", framework),
         "Stats: InUse");
    Hold(holdings, OomHolder::kFragmentation, limit - in_use, "free in the pool", "Limit - InUse");
    Rank(holdings);
    const bool fragmented =
        m.tried_to_allocate && m.largest_free_block &&
        Always(limit - in_use, RangeOf(*m.tried_to_allocate)) &&
        Always(RangeOf(*m.tried_to_allocate), RangeOf(*m.largest_free_block) + ExactRange(1));
    OomVerdict v;
    v.holder = fragmented ? OomHolder::kFragmentation : OomHolder::kTensors;
    v.sentence = fragmented
                     ? fmt::format(
                           "The pool had {} free but no block of the request's size: "
                           "fragmentation between {}'s live buffers ({}).",
                           F(limit - in_use), framework, F(in_use))
                     : fmt::format(
                           "{}'s live buffers, {} of the pool's {} ({}), and the request fill "
                           "what the framework may take of the GPU.",
                           framework, F(in_use), F(limit), Share(in_use, limit));
    v.holdings = std::move(holdings);
    return v;
  }
  if (m.program_total) {
    return Overriding(
        OomHolder::kTensors,
        fmt::format("The compiled step needs {} of its own{}: it does not fit the memory XLA "
                    "may take.",
                    F(RangeOf(*m.program_total)),
                    m.program_temp
                        ? fmt::format(", {} of it temporaries", F(RangeOf(*m.program_temp)))
                        : std::string()));
  }
  return Overriding(OomHolder::kNoFigures,
                    fmt::format("{}'s message states the request only: paste the allocator's "
                                "log before it to see what held the {}.",
                                framework, host ? "host's memory" : "GPU"));
}

OomVerdict MpsVerdict(const OomMessage& m) {
  if (!m.tried_to_allocate || !m.allocated_by_pytorch || !m.allowed) {
    return Overriding(OomHolder::kNoFigures,
                      "The message states too few figures to say what held the GPU.");
  }
  const ByteRange request = RangeOf(*m.tried_to_allocate), allowed = RangeOf(*m.allowed);
  std::vector<OomHolding> holdings;
  Hold(holdings, OomHolder::kTensors, RangeOf(*m.allocated_by_pytorch), "this process's tensors",
       "MPS allocated");
  if (m.other_allocations) {
    Hold(holdings, OomHolder::kProcessOutsidePyTorch, RangeOf(*m.other_allocations),
         "other Metal allocations of this process, outside PyTorch's pool", "stated");
  }
  Rank(holdings);
  if (holdings.empty()) {
    return Overriding(OomHolder::kNoFigures,
                      "The message states too few figures to say what held the GPU.");
  }
  OomVerdict v;
  v.holder = holdings[0].holder;
  v.close = holdings.size() > 1 && holdings[1].bytes.hi >= holdings[0].bytes.lo;
  v.sentence =
      v.holder == OomHolder::kTensors
          ? fmt::format(
                "This process's tensors, {}, and the {} request fill the {} MPS may "
                "use (its high watermark).",
                F(holdings[0].bytes), F(request), F(allowed))
          : fmt::format("Metal allocations outside PyTorch's pool hold {} of the {} MPS may use.",
                        F(holdings[0].bytes), F(allowed));
  v.holdings = std::move(holdings);
  return v;
}

// A free figure printed as 2^64 B less a little (an unsigned underflow in some ROCm builds):
// only the tensors and the request can still decide.
OomVerdict FreeNotAvailableVerdict(const OomMessage& m) {
  const std::optional<model::PrintedBytes>& p =
      m.allocated_by_pytorch ? m.allocated_by_pytorch : m.already_allocated;
  if (m.tried_to_allocate && m.total_capacity && p &&
      (RangeOf(*p) + RangeOf(*m.tried_to_allocate)).lo > RangeOf(*m.total_capacity).hi) {
    return Overriding(OomHolder::kTensors,
                      fmt::format("This process's tensors, {}, and the {} request exceed this {} "
                                  "GPU by themselves (its free figure is not a size).",
                                  p->text, m.tried_to_allocate->text, m.total_capacity->text));
  }
  return Overriding(OomHolder::kInconsistentFigures,
                    "The free figure is not a size (2^64 B less a little: an underflow in the "
                    "driver's report), so no holder can be named from the figures; the device's "
                    "own tools (rocm-smi, nvidia-smi) must tell.");
}

}  // namespace

const char* OomHolderName(OomHolder holder) {
  switch (holder) {
    case OomHolder::kTensors:
      return "tensors";
    case OomHolder::kFragmentation:
      return "fragmentation";
    case OomHolder::kProcessOutsidePyTorch:
      return "process_outside_pytorch";
    case OomHolder::kOtherProcesses:
      return "other_processes";
    case OomHolder::kCap:
      return "cap";
    case OomHolder::kWddmSpill:
      return "wddm_spill";
    case OomHolder::kUnifiedMemory:
      return "unified_memory";
    case OomHolder::kInconsistentFigures:
      return "inconsistent_figures";
    case OomHolder::kUnaccounted:
      return "unaccounted";
    case OomHolder::kNoFigures:
      return "no_figures";
  }
  return "no_figures";
}

const std::vector<OomHolder>& AllOomHolders() {
  static const std::vector<OomHolder> all = {OomHolder::kTensors,
                                             OomHolder::kFragmentation,
                                             OomHolder::kProcessOutsidePyTorch,
                                             OomHolder::kOtherProcesses,
                                             OomHolder::kCap,
                                             OomHolder::kWddmSpill,
                                             OomHolder::kUnifiedMemory,
                                             OomHolder::kInconsistentFigures,
                                             OomHolder::kUnaccounted,
                                             OomHolder::kNoFigures};
  return all;
}

OomVerdict DecideOomVerdict(const model::OomMessage& m,
                            const std::optional<OomAccounting>& accounting,
                            ExpectedOutside expected, bool unified) {
  switch (m.kind) {
    case OomMessageKind::kAllocator:
    case OomMessageKind::kAllocatorLegacy:
      if (accounting) return AllocatorVerdict(m, *accounting, expected, unified);
      if (std::find(m.not_available.begin(), m.not_available.end(), "free") !=
          m.not_available.end()) {
        return FreeNotAvailableVerdict(m);
      }
      break;
    case OomMessageKind::kAsyncAllocator:
      return AsyncVerdict(m, expected, unified);
    case OomMessageKind::kMps:
      return MpsVerdict(m);
    case OomMessageKind::kXla:
    case OomMessageKind::kTensorflow:
      return XlaOrTensorflowVerdict(m);
    case OomMessageKind::kDriverError:
    case OomMessageKind::kLibraryError:
      return Overriding(
          OomHolder::kNoFigures,
          fmt::format("{} failed to allocate memory of its own, outside PyTorch's caching "
                      "allocator, and the error states no figures: the GPU was full, most often "
                      "of this process's cached memory or of other processes (nvidia-smi at the "
                      "failure tells which).",
                      m.kind == OomMessageKind::kLibraryError ? m.library : "The CUDA driver"));
    case OomMessageKind::kAllocatorBare:
      // Cut short after the request: only a request beyond all but the largest GPUs decides.
      if (m.tried_to_allocate && RangeOf(*m.tried_to_allocate).lo >= kHugeRequest) {
        return Overriding(OomHolder::kTensors,
                          fmt::format("The request alone, {}, is more than all but the largest "
                                      "data-centre GPUs hold: the step asks too much at once.",
                                      m.tried_to_allocate->text));
      }
      break;
  }
  return Overriding(OomHolder::kNoFigures,
                    "The message is cut short before its figures: paste it whole (to the link at "
                    "its end) to see what held the GPU.");
}

}  // namespace vramscope::analysis
