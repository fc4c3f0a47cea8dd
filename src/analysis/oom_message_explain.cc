#include "analysis/oom_message_explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "analysis/oom_accounting.h"
#include "common/units.h"

namespace vramscope::analysis {

namespace {

using model::OomMessage;
using model::OomMessageKind;
using model::PrintedBytes;

constexpr int64_t kMax = kByteRangeMax;

ByteRange R(const PrintedBytes& b) { return RangeOf(b); }
ByteRange Exact(int64_t v) { return ExactRange(v); }

// What one process is expected to hold outside the allocator, as a range: a measured or given
// figure within 10%, a documented one within 25%, an assumed one within 50%. A cause that rests
// on the excess over it is decisive only beyond that spread.
ByteRange ExpectedRange(const device::OutsideMemory& outside) {
  ByteRange r;
  for (const device::OutsideFigure& f : outside.figures) {
    const int64_t b = static_cast<int64_t>(f.bytes);
    int64_t spread = b / 10;
    if (f.evidence == device::Evidence::kDocumented) spread = b / 4;
    if (f.evidence == device::Evidence::kAssumed) spread = b / 2;
    r.lo += b - spread;
    r.hi += b + spread;
  }
  return r;
}

// The expected range over several set-ups (each a known GPU, or an architecture plausible for
// the message): from the smallest low end to the largest high end.
ByteRange UnionOfExpected(const std::vector<device::OutsideSetup>& setups) {
  ByteRange r{kMax, 0};
  for (const device::OutsideSetup& s : setups) {
    const ByteRange one = ExpectedRange(device::EstimateOutsideAllocator(s));
    r.lo = std::min(r.lo, one.lo);
    r.hi = std::max(r.hi, one.hi);
  }
  return r.lo > r.hi ? ExactRange(0) : r;
}

// What one process holds outside the allocator here. The GPUs of the message's capacity when the
// catalog has them; else every architecture plausible for a card of that capacity, backend and
// message era (1.x messages predate lazy module loading, so their contexts may hold all of
// PyTorch's kernels), marked assumed. docs/design/explain.md lists the choice.
ExpectedOutside ExpectedOutsideFor(const OomMessage& m, const std::vector<device::GpuSpec>& gpus,
                                   const device::OutsideSetup& base) {
  std::vector<device::OutsideSetup> setups;
  for (const device::GpuSpec& g : gpus) {
    device::OutsideSetup s = base;
    s.vendor = g.vendor;
    s.sm = g.sm;
    s.gpu_name = g.name;
    setups.push_back(s);
  }
  if (!setups.empty()) return {UnionOfExpected(setups), false};
  const bool amd = m.backend == "HIP";
  const uint64_t total = m.total_capacity ? m.total_capacity->hi : 0;
  std::vector<int> archs;
  if (amd) {
    archs = {0};
  } else if (total < (33ull << 29)) {  // under 16.5 GiB: consumer and small data-centre cards
    archs = {61, 75, 86, 89};
  } else if (total < (40ull << 30)) {
    archs = {70, 75, 80, 86, 89, 90};
  } else {
    archs = {80, 89, 90, 100};
  }
  const bool legacy = m.kind == OomMessageKind::kAllocatorLegacy;
  for (const int sm : archs) {
    for (const bool lazy : {true, false}) {
      if (!lazy && !legacy) continue;
      device::OutsideSetup s = base;
      s.vendor = amd ? device::Vendor::kAmd : device::Vendor::kNvidia;
      if (!amd) s.sm = sm;
      s.lazy_loading = lazy;
      setups.push_back(s);
    }
  }
  ByteRange r = UnionOfExpected(setups);
  // No context takes half a card: on a small one the architectures' figures overstate it.
  if (total > 0) {
    r.hi = std::min<int64_t>(r.hi, static_cast<int64_t>(total / 2));
    r.lo = std::min(r.lo, r.hi);
  }
  return {r, true};
}

// Whether the GPU shares its memory with the host: an AMD GPU the catalog has no discrete card of
// this capacity for, whose "total" is that of an APU's memory (the GTT carve-out of Strix Halo,
// 32 to 128 GiB; MI300A's 128 GiB). Discrete AMD cards above 128 GiB (MI325X, MI355X) are not
// APUs. NVIDIA's unified parts (Jetson, Grace Hopper's coherent memory) print as discrete cards
// and are not guessed.
bool IsUnifiedMemory(const OomMessage& m, const std::vector<device::GpuSpec>& gpus) {
  return m.backend == "HIP" && gpus.empty() && m.total_capacity &&
         m.total_capacity->lo >= (32ull << 30) && m.total_capacity->hi <= (129ull << 30);
}

bool ExpandableSegmentsOn(const std::string& conf) {
  std::string lower;
  for (const char c : conf)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  lower.erase(std::remove(lower.begin(), lower.end(), ' '), lower.end());
  return lower.find("expandable_segments:true") != std::string::npos;
}

struct Context {
  const OomMessage& m;
  const ExplainOptions& options;
  OomMessageExplanation& out;
};

// Advice belongs to the finding made just before it (so that it can follow the findings' order);
// advice given with no finding is general.
void Advise(OomMessageExplanation& out, std::string advice) {
  if (out.findings.empty()) {
    out.advice.push_back(std::move(advice));
  } else {
    out.findings.back().advice.push_back(std::move(advice));
  }
}

void AddFinding(OomMessageExplanation& out, OomMessageCause cause, bool decisive,
                std::string arithmetic, std::string meaning, ByteRange bytes = {}) {
  out.findings.push_back({cause, decisive, std::move(arithmetic), std::move(meaning), bytes, {}});
}

// The request would have fit had `extra` been free too: a cause, decisive or possible.
void TestCause(OomMessageExplanation& out, OomMessageCause cause, ByteRange free, ByteRange extra,
               ByteRange request, const std::string& extra_name, const std::string& meaning) {
  extra.lo = std::max<int64_t>(extra.lo, 0);  // "beyond the expected" may be nothing
  const ByteRange sum = free + extra;
  // When the device reported the request free, nothing that held memory is a cause (see
  // ExplainAllocator).
  if (extra.hi <= 0 || !Sometimes(sum, request) || Always(free, request)) return;
  const bool decisive = Always(sum, request) && extra.lo > 0;
  AddFinding(out, cause, decisive,
             fmt::format("free {} + {} {} = {} {} the request {}", FormatByteRange(free),
                         extra_name, FormatByteRange(extra), FormatByteRange(sum),
                         decisive ? ">=" : "may reach", FormatByteRange(request)),
             meaning, extra);
}

void FragmentationAdvice(const Context& c) {
  const bool legacy = c.m.kind == OomMessageKind::kAllocatorLegacy;
  if (c.options.alloc_conf && ExpandableSegmentsOn(*c.options.alloc_conf)) {
    Advise(c.out,
           "expandable_segments is already on (PyTorch's message suggests it either way, "
           "pytorch#173049): the unallocated memory lies between live tensors; lower the peak "
           "(smaller batch, activation checkpointing) or free tensors earlier");
    return;
  }
  if (c.m.backend == "HIP") {
    Advise(c.out, fmt::format(
                      "set PYTORCH_HIP_ALLOC_CONF=max_split_size_mb:{} (older ROCm builds have no "
                      "expandable segments) so that blocks of the request's size are not split",
                      std::max<int64_t>(20, (R(*c.m.tried_to_allocate).hi + (1 << 20) - 1) >> 20)));
    return;
  }
  if (legacy) {
    Advise(c.out,
           "PyTorch 2.1 and later offer PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which "
           "removes this fragmentation; on this version set max_split_size_mb (e.g. "
           "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128) so that large blocks are not split");
    return;
  }
  Advise(
      c.out,
      fmt::format(
          "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_ALLOC_CONF from PyTorch "
          "2.9){}: segments then grow in place instead of stranding free memory between tensors",
          c.options.alloc_conf ? "" : ", unless it is already on (say so with --alloc-conf)"));
}

void CapacityAdvice(const Context& c, ByteRange needed_more, ByteRange allocated,
                    ByteRange request) {
  if (needed_more.lo > 0) {
    const double base = static_cast<double>(allocated.hi + request.hi);
    const double share =
        base > 0 ? 100.0 * static_cast<double>(std::max<int64_t>(needed_more.lo, 0)) / base : 0;
    Advise(
        c.out,
        fmt::format(
            "the step needs at least {} more than this GPU gave it: cut the batch by at least "
            "{:.0f}% (if all of PyTorch's memory grew with the batch; weights and optimizer state "
            "do "
            "not, so more), or use activation checkpointing, mixed precision, or shard the model "
            "over GPUs",
            FormatByteRange(needed_more), share));
  } else {
    Advise(c.out,
           "lower the step's peak: a smaller batch, activation checkpointing, mixed precision, or "
           "sharding the model over GPUs");
  }
  if (c.out.available_to_pytorch) {
    Advise(
        c.out,
        fmt::format(
            "find the largest batch that fits: vramscope explain --model YOUR_MODEL --batch N "
            "(this message), or vramscope predict --model YOUR_MODEL --fit {:.2f}GiB",
            static_cast<double>(c.out.available_to_pytorch->lo) / static_cast<double>(1ull << 30)));
  }
}

void ExplainAllocator(Context& c, const OomAccounting& a) {
  const OomMessage& m = c.m;
  OomMessageExplanation& out = c.out;
  const ByteRange request = a.request, free = a.free, total = a.total;
  const bool legacy = a.legacy;
  const std::optional<ByteRange> allocated = a.allocated, unallocated = a.unallocated,
                                 reserved = a.reserved, self = a.self;
  const std::vector<model::OomProcess>& others = a.others;
  const ByteRange other_sum = a.other_sum;

  out.shares.push_back({"total capacity", total, "stated"});
  out.shares.push_back({"free on the device", free, "stated (cudaMemGetInfo)"});
  if (allocated) {
    if (a.private_pools) {
      out.shares.push_back({"allocated to tensors", *a.Tensors(),
                            "allocated by PyTorch less the private pools' cached blocks"});
      out.shares.push_back(
          {"cached in private pools (CUDA graphs, MemPools)", *a.private_pools, "stated"});
    } else {
      out.shares.push_back({"allocated by PyTorch", *allocated, "stated"});
    }
  }
  if (unallocated) {
    out.shares.push_back(
        {"reserved by PyTorch but unallocated", *unallocated,
         legacy && m.reserved_total ? "reserved in total - already allocated" : "stated"});
  }
  if (reserved) {
    out.shares.push_back({"reserved by PyTorch", *reserved,
                          legacy && m.reserved_total ? "stated" : "allocated + unallocated"});
  }
  if (a.self_pid) {
    out.shares.push_back(
        {fmt::format("process {} (taken to be this one: it holds what PyTorch reserved; in a "
                     "container NVML shows host PIDs)",
                     *a.self_pid),
         *self, "stated"});
  } else if (self) {
    out.shares.push_back({"this process, in all", *self, "stated (NVML)"});
  }
  if (!others.empty()) {
    out.shares.push_back(
        {fmt::format("{} other process{}", others.size(), others.size() == 1 ? "" : "es"),
         other_sum, "the processes listed"});
  }
  const ByteRange expected = out.expected_outside_range.bytes;
  std::optional<ByteRange> non_pytorch;
  if (self && reserved) {
    non_pytorch = *self - *reserved;
    out.shares.push_back(
        {"this process's non-PyTorch memory", *non_pytorch, "this process - reserved by PyTorch"});
    const ByteRange unlisted = total - free - *self - other_sum;
    if (unlisted.lo > (64 << 20)) {
      out.shares.push_back(
          {"held by no listed process (the driver's reservation, processes NVML cannot see)",
           unlisted, "total - free - the processes"});
    }
  }

  // The causes.
  const bool capped = a.allowed.has_value();
  if (capped && reserved) {
    const ByteRange allowed = R(*m.allowed);
    const ByteRange wanted = *reserved + request;
    if (Sometimes(free, request) && Sometimes(wanted, Exact(allowed.lo + 1))) {
      // The device had the segment free: only the cap can have refused it (the figures'
      // rounding cannot show reserved + request > allowed when they lie within 0.01 GiB).
      const bool decisive = Always(free, request);
      AddFinding(
          out, OomMessageCause::kMemoryFractionCap, decisive,
          fmt::format("reserved {} + request {} = {} > allowed {}, while the device had "
                      "{} free",
                      FormatByteRange(*reserved), FormatByteRange(request), FormatByteRange(wanted),
                      FormatByteRange(allowed), FormatByteRange(free)),
          "the memory fraction (torch.cuda.set_per_process_memory_fraction or "
          "per_process_memory_fraction) refused memory the device had");
      Advise(c.out,
             "raise or remove the cap: torch.cuda.set_per_process_memory_fraction(...) or "
             "PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction:... (a test or a library may "
             "have set it)");
    }
  }
  if (unallocated) {
    const size_t before = out.findings.size();
    TestCause(out, OomMessageCause::kFragmentation, free, *unallocated, request,
              "reserved-but-unallocated",
              "fragmentation: PyTorch had reserved enough, but in pieces between live tensors "
              "that it could neither hand out nor release");
    if (out.findings.size() > before) FragmentationAdvice(c);
  }
  if (!others.empty()) {
    const size_t before = out.findings.size();
    TestCause(out, OomMessageCause::kOtherProcesses, free, other_sum, request,
              "the other processes'",
              "other processes on the GPU held the memory the request needed");
    if (out.findings.size() > before) {
      std::string pids;
      for (size_t i = 0; i < others.size() && i < 8; ++i) {
        pids += fmt::format("{}{} ({})", i == 0 ? "" : ", ", others[i].pid, others[i].in_use.text);
      }
      Advise(out, fmt::format(
                      "free the GPU of the other processes ({}{}) or choose another with "
                      "CUDA_VISIBLE_DEVICES; each process on a GPU also pays its own CUDA context",
                      pids, others.size() > 8 ? ", ..." : ""));
    }
  }
  if (non_pytorch) {
    const ByteRange excess = *non_pytorch - expected;
    const size_t before = out.findings.size();
    TestCause(out, OomMessageCause::kNonPyTorchMemory, free, excess, request,
              fmt::format("non-PyTorch memory beyond a context and libraries ({} expected)",
                          FormatByteRange(expected)),
              "this process holds memory outside PyTorch's allocator beyond a CUDA context and "
              "libraries: NCCL buffers, another framework's pool or an extension's cudaMalloc");
    if (out.findings.size() > before) {
      Advise(out,
             "find what holds memory outside PyTorch: NCCL (NCCL_NVLS_ENABLE=0, fewer "
             "communicators, a smaller NCCL_BUFFSIZE), JAX (XLA_PYTHON_CLIENT_PREALLOCATE=false), "
             "TensorFlow (allow_growth), CuPy's pool; vramscope run samples it per phase");
    }
  }
  if (legacy && reserved) {
    // 1.x does not list processes: all that is neither free nor PyTorch's.
    const ByteRange outside = total - free - *reserved;
    out.shares.push_back({"outside this PyTorch (its context, other processes)", outside,
                          "total - free - reserved"});
    const ByteRange excess = outside - expected;
    const size_t before = out.findings.size();
    TestCause(out, OomMessageCause::kOtherProcesses, free, excess, request,
              fmt::format("the memory outside PyTorch beyond one context ({} expected)",
                          FormatByteRange(expected)),
              "memory outside this PyTorch (other processes, or this process's non-PyTorch "
              "memory: the 1.x message does not tell them apart) held what the request needed");
    if (out.findings.size() > before) {
      Advise(out,
             "look at nvidia-smi for other processes on this GPU (a notebook kernel, another "
             "run, a display) and at this process's memory outside PyTorch");
    }
  }
  // The memory this process's PyTorch could have had at most, and what it lacked.
  if (allocated) {
    out.available_to_pytorch = total - other_sum;
    if (capped) {
      out.available_to_pytorch->lo = std::min(out.available_to_pytorch->lo, R(*m.allowed).lo);
      out.available_to_pytorch->hi = std::min(out.available_to_pytorch->hi, R(*m.allowed).hi);
    }
    if (unallocated) {
      out.shortfall = request - free - *unallocated;
    }
  }
  if (Always(free, request) && !capped) {
    AddFinding(
        out, OomMessageCause::kUnknown, false,
        fmt::format("free {} >= the request {}", FormatByteRange(free), FormatByteRange(request)),
        "the device reported the request free and no cap is set, yet cudaMalloc failed: "
        "the driver keeps some headroom, its free memory was in pieces, or another "
        "process took it between the failure and the message");
  }
  // Near capacity: the tensors and the request fill 95% or more of what one process could have
  // on this GPU. Then fragmentation or a few MiB elsewhere decided which request failed, not
  // whether the step fits: the next requests would fail too.
  bool near_capacity = false;
  if (allocated && !Always(free, request)) {
    // What one process has on this GPU alone: the total less one context and libraries. Other
    // processes and extra non-PyTorch memory are causes of their own, tested above.
    const ByteRange room = total - expected;
    const ByteRange tensors = *allocated + request;
    near_capacity =
        room.hi > 0 && static_cast<double>(tensors.lo) >= 0.95 * static_cast<double>(room.hi);
    if (near_capacity) {
      const ByteRange short_by = out.shortfall ? *out.shortfall : request - free;
      AddFinding(out, OomMessageCause::kCapacity, true,
                 fmt::format("allocated {} + request {} = {} is {:.0f}% or more of the {} this "
                             "process could have on this GPU alone (total {} less a context and "
                             "libraries)",
                             FormatByteRange(*allocated), FormatByteRange(request),
                             FormatByteRange(tensors),
                             100.0 * static_cast<double>(tensors.lo) / static_cast<double>(room.hi),
                             FormatByteRange(room), FormatByteRange(total)),
                 "plain capacity: the step's tensors fill the GPU; whatever freed this request, "
                 "the next ones would fail",
                 {kMax / 2, kMax / 2});
      CapacityAdvice(c, short_by, *allocated, request);
    }
  }
  const bool any_decisive = std::any_of(out.findings.begin(), out.findings.end(),
                                        [](const OomFinding& f) { return f.decisive; });
  if (!any_decisive && allocated && !Always(free, request)) {
    const ByteRange short_by = out.shortfall ? *out.shortfall : request - free;
    AddFinding(
        out, OomMessageCause::kCapacity, short_by.lo > 0,
        fmt::format("request {} - free {}{} = {} short", FormatByteRange(request),
                    FormatByteRange(free),
                    unallocated ? fmt::format(" - unallocated {}", FormatByteRange(*unallocated))
                                : std::string(),
                    FormatByteRange(short_by)),
        "plain capacity: even with no fragmentation, no other process and no memory "
        "outside PyTorch beyond a context, the tensors needed more than the GPU had");
    CapacityAdvice(c, short_by, *allocated, request);
  }
}

void ExplainAsync(Context& c) {
  const OomMessage& m = c.m;
  OomMessageExplanation& out = c.out;
  if (!m.tried_to_allocate || !m.free || !m.total_capacity || !m.allocated_by_pytorch) return;
  const ByteRange request = R(*m.tried_to_allocate), free = R(*m.free),
                  total = R(*m.total_capacity), allocated = R(*m.allocated_by_pytorch);
  const ByteRange outside = total - free - allocated;
  out.shares.push_back({"device limit", total, "stated"});
  out.shares.push_back({"free (according to CUDA)", free, "stated"});
  out.shares.push_back({"allocated by PyTorch (cudaMallocAsync)", allocated, "stated"});
  out.shares.push_back({"outside PyTorch (its context, other processes)", outside,
                        "device limit - free - allocated"});
  const ByteRange expected = out.expected_outside_range.bytes;
  TestCause(out, OomMessageCause::kOtherProcesses, free, outside - expected, request,
            fmt::format("the memory outside PyTorch beyond one context ({} expected)",
                        FormatByteRange(expected)),
            "memory outside PyTorch (other processes, a browser or desktop on the same GPU, or "
            "this process's own non-PyTorch memory) held what the request needed");
  if (!out.findings.empty()) {
    Advise(out,
           "close what else uses the GPU (nvidia-smi lists it), or give PyTorch a GPU of its own");
  }
  if (m.allowed && R(*m.allowed).hi < kMax / 2 &&
      Always(allocated + request, Exact(R(*m.allowed).hi + 1))) {
    AddFinding(out, OomMessageCause::kMemoryFractionCap, Always(free, request),
               fmt::format("allocated {} + request {} > limit {}", FormatByteRange(allocated),
                           FormatByteRange(request), FormatByteRange(R(*m.allowed))),
               "the memory fraction refused it");
  }
  if (out.findings.empty()) {
    out.available_to_pytorch = total;
    const ByteRange short_by = request - free;
    AddFinding(out, OomMessageCause::kCapacity, short_by.lo > 0,
               fmt::format("request {} - free {} = {} short", FormatByteRange(request),
                           FormatByteRange(free), FormatByteRange(short_by)),
               "plain capacity: the tensors needed more than the GPU had");
    CapacityAdvice(c, short_by, allocated, request);
  }
}

void ExplainMps(Context& c) {
  const OomMessage& m = c.m;
  OomMessageExplanation& out = c.out;
  if (!m.tried_to_allocate || !m.allocated_by_pytorch || !m.allowed) return;
  const ByteRange request = R(*m.tried_to_allocate), allocated = R(*m.allocated_by_pytorch),
                  allowed = R(*m.allowed);
  const ByteRange other = m.other_allocations ? R(*m.other_allocations) : Exact(0);
  out.shares.push_back({"MPS allocated (PyTorch)", allocated, "stated"});
  out.shares.push_back({"other allocations (unified memory)", other, "stated"});
  out.shares.push_back({"max allowed (high watermark)", allowed, "stated"});
  const ByteRange over = allocated + other + request - allowed;
  const ByteRange room = allowed - allocated - other;
  TestCause(out, OomMessageCause::kOtherProcesses, room, other, request, "other allocations",
            "other allocations in the unified memory (other apps, the OS, Metal buffers "
            "outside PyTorch's pool) took the room the request needed");
  if (out.findings.empty()) {
    AddFinding(
        out, OomMessageCause::kCapacity, over.lo > 0,
        fmt::format("allocated {} + other {} + request {} = {} > max allowed {}",
                    FormatByteRange(allocated), FormatByteRange(other), FormatByteRange(request),
                    FormatByteRange(allocated + other + request), FormatByteRange(allowed)),
        "plain capacity under the MPS high watermark");
  }
  Advise(out,
         "PYTORCH_MPS_HIGH_WATERMARK_RATIO raises the limit (0.0 removes it, at the risk of "
         "system failure); a smaller batch or fp16 lowers what is needed");
}

// XLA's (JAX's) and TensorFlow's messages: the BFC pool's figures when its log was pasted with
// the error, the compiled program's buffers when XLA printed them, and each framework's levers:
// its up-front reservation (JAX takes 75% of the GPU at start, TensorFlow nearly all of it),
// rematerialisation, donation, memory growth.
void ExplainXlaOrTensorflow(Context& c) {
  const OomMessage& m = c.m;
  OomMessageExplanation& out = c.out;
  const bool jax = m.kind == OomMessageKind::kXla;
  const bool host = m.OnHost();
  if (m.pool_limit && m.pool_in_use) {
    const ByteRange limit = R(*m.pool_limit), in_use = R(*m.pool_in_use);
    const ByteRange free = limit - in_use;
    out.shares.push_back({"BFC pool limit (what it may take)", limit, "stated (Stats: Limit)"});
    out.shares.push_back({"in use at the failure", in_use, "stated (Stats: InUse)"});
    out.shares.push_back({"free in the pool", free, "limit - in use"});
    if (m.largest_free_block) {
      out.shares.push_back(
          {"largest free block", R(*m.largest_free_block), "stated (Stats: LargestFreeBlock)"});
    }
    if (m.tried_to_allocate) {
      const ByteRange request = R(*m.tried_to_allocate);
      if (Always(free, request) && m.largest_free_block &&
          Always(request, R(*m.largest_free_block) + Exact(1))) {
        AddFinding(out, OomMessageCause::kFragmentation, true,
                   fmt::format("free in the pool {} >= the request {}, but the largest free "
                               "block is {}",
                               FormatByteRange(free), FormatByteRange(request),
                               FormatByteRange(R(*m.largest_free_block))),
                   "fragmentation: the pool had the bytes, split between live buffers");
        Advise(out, jax ? "XLA_PYTHON_CLIENT_PREALLOCATE=true (the default) keeps one pool "
                          "for the whole run; a smaller peak (jax.checkpoint, a smaller batch) "
                          "leaves room between buffers"
                        : "a smaller peak (a smaller batch, mixed precision) leaves room "
                          "between tensors; TF_GPU_ALLOCATOR=cuda_malloc_async lets the "
                          "driver place them");
      } else if (Sometimes(request, free + Exact(1))) {
        AddFinding(
            out, OomMessageCause::kCapacity, Always(request, free + Exact(1)),
            fmt::format("in use {} + the request {} > the pool's limit {}", FormatByteRange(in_use),
                        FormatByteRange(request), FormatByteRange(limit)),
            "plain capacity of the pool: its buffers and the request need more than "
            "the framework may take");
      }
    }
  }
  if (m.program_total) {
    const ByteRange total = R(*m.program_total);
    const std::pair<const char*, const std::optional<PrintedBytes>*> parts[] = {
        {"program parameters (its arguments)", &m.program_parameters},
        {"program constants", &m.program_constants},
        {"program outputs (maybe_live_out)", &m.program_outputs},
        {"program temporaries (intermediates)", &m.program_temp},
    };
    for (const auto& [what, figure] : parts) {
      if (*figure) out.shares.push_back({what, R(**figure), "stated (BufferAssignment stats)"});
    }
    out.shares.push_back({"program total", total, "stated (BufferAssignment stats)"});
    if (m.program_temp && R(*m.program_temp).hi > 0) {
      AddFinding(out, OomMessageCause::kCapacity, false,
                 fmt::format("the compiled program needs {} of its own, {} of it temporaries",
                             FormatByteRange(total), FormatByteRange(R(*m.program_temp))),
                 "the jitted step's own buffers: its arguments, outputs and the "
                 "intermediates XLA keeps for the gradient",
                 total);
      Advise(out,
             "jax.checkpoint (jax.remat) around the model's blocks recomputes intermediates "
             "instead of keeping them; a smaller batch shrinks them; donate_argnums on the step "
             "lets its outputs (the new weights and optimizer state) reuse the arguments' "
             "buffers");
    }
  }
  if (host) {
    AddFinding(out, OomMessageCause::kCapacity, false,
               fmt::format("on {}: the allocation was in the host's memory", m.device),
               "the host ran out of memory (the CPU device), not a GPU");
  }
  if (m.tried_to_allocate && R(*m.tried_to_allocate).lo >= (int64_t{1} << 40)) {
    AddFinding(out, OomMessageCause::kCapacity, true,
               fmt::format("the request alone is {}", FormatByteRange(R(*m.tried_to_allocate))),
               "more than any GPU or host has: a shape gone wrong (a broadcast, an outer "
               "product, a batch dimension multiplied in twice) rather than a memory setting",
               R(*m.tried_to_allocate));
  }
  if (jax && !host) {
    Advise(out,
           "JAX reserves 75% of the GPU when it starts (XLA_PYTHON_CLIENT_MEM_FRACTION=.75): "
           "if nothing else uses the GPU, XLA_PYTHON_CLIENT_MEM_FRACTION=.95 gives it the rest; "
           "XLA_PYTHON_CLIENT_PREALLOCATE=false allocates on demand (slower, more "
           "fragmentation); other XLA clients have the same settings under their own names");
  } else if (!jax && !host) {
    Advise(out,
           "TensorFlow takes nearly all of the GPU at start: "
           "tf.config.experimental.set_memory_growth(gpu, True) grows its pool on demand, "
           "tf.config.set_logical_device_configuration(gpu, [LogicalDeviceConfiguration("
           "memory_limit=...)]) caps it; report_tensor_allocations_upon_oom in RunOptions "
           "lists the tensors at the failure; mixed precision "
           "(tf.keras.mixed_precision.set_global_policy('mixed_float16')) halves activations");
  }
  if (!m.pool_limit && !m.program_total && !host) {
    Advise(out, jax ? "paste the lines the BFC allocator logs before the error (\"Allocator "
                      "(GPU_0_bfc) ran out of memory ...\" and its Stats), or the "
                      "BufferAssignment stats after it, to see what filled the GPU"
                    : "paste the BFC allocator's log before the error (\"Allocator (GPU_0_bfc) ran "
                      "out of memory ...\" and its Stats) to see what filled the GPU");
  }
}

}  // namespace

std::string FormatByteRange(ByteRange range) {
  const std::string lo = FormatBytes(range.lo), hi = FormatBytes(range.hi);
  return lo == hi ? lo : fmt::format("{} to {}", lo, hi);
}

const char* OomMessageCauseName(OomMessageCause cause) {
  switch (cause) {
    case OomMessageCause::kMemoryFractionCap:
      return "memory_fraction_cap";
    case OomMessageCause::kFragmentation:
      return "fragmentation";
    case OomMessageCause::kOtherProcesses:
      return "other_processes";
    case OomMessageCause::kNonPyTorchMemory:
      return "non_pytorch_memory";
    case OomMessageCause::kCapacity:
      return "capacity";
    case OomMessageCause::kOutsideAllocator:
      return "outside_allocator";
    case OomMessageCause::kUnknown:
      return "unknown";
  }
  return "unknown";
}

OomMessageExplanation ExplainOomMessage(const model::OomMessage& message,
                                        const ExplainOptions& options) {
  OomMessageExplanation out;
  out.message = message;
  Context c{message, options, out};
  // The GPU: the one named, else those of the message's total capacity.
  device::OutsideSetup setup = options.outside;
  if (options.gpu) {
    out.gpus.push_back(*options.gpu);
  } else if (message.total_capacity) {
    out.gpus = device::GpusWithCapacity(message.total_capacity->lo, message.total_capacity->hi);
  }
  if (!out.gpus.empty()) {
    setup.vendor = out.gpus[0].vendor;
    setup.sm = out.gpus[0].sm;
    setup.gpu_name = out.gpus[0].name;
  } else if (message.backend == "HIP") {
    setup.vendor = device::Vendor::kAmd;
  }
  out.expected_outside = device::EstimateOutsideAllocator(setup);
  out.expected_outside_range = ExpectedOutsideFor(message, out.gpus, options.outside);

  switch (message.kind) {
    case OomMessageKind::kAllocator:
    case OomMessageKind::kAllocatorLegacy:
      if (const std::optional<OomAccounting> a = AccountFor(message)) ExplainAllocator(c, *a);
      break;
    case OomMessageKind::kAsyncAllocator:
      ExplainAsync(c);
      break;
    case OomMessageKind::kMps:
      ExplainMps(c);
      break;
    case OomMessageKind::kDriverError:
    case OomMessageKind::kLibraryError:
      AddFinding(out, OomMessageCause::kOutsideAllocator, true,
                 "the error names no figures: it comes from the CUDA driver or a library, not "
                 "from PyTorch's caching allocator",
                 message.kind == OomMessageKind::kLibraryError
                     ? fmt::format("{} could not allocate its own memory (a handle, a "
                                   "workspace or buffers) outside PyTorch's allocator",
                                   message.library)
                     : "an allocation outside PyTorch's caching allocator failed: creating the "
                       "CUDA context, a library's handle, NCCL's buffers or a kernel's memory");
      Advise(out,
             "PyTorch's cache may have taken the memory the library needed: look at nvidia-smi for "
             "other processes, call torch.cuda.empty_cache() before the call that fails, or lower "
             "the peak; with CUDA_LAUNCH_BLOCKING=1 the traceback points at the call");
      break;
    case OomMessageKind::kXla:
    case OomMessageKind::kTensorflow:
      ExplainXlaOrTensorflow(c);
      break;
    case OomMessageKind::kAllocatorBare:
      break;
  }
  if (message.kind == OomMessageKind::kAllocatorBare && out.findings.empty()) {
    Advise(out,
           "the message is cut short after \"Tried to allocate\": paste the whole message (up to "
           "the link at its end) to see what filled the GPU");
  }
  // Decisive findings first; among them a cap (the device had the memory), then the cause that
  // took the most.
  std::stable_sort(out.findings.begin(), out.findings.end(),
                   [](const OomFinding& a, const OomFinding& b) {
                     if (a.decisive != b.decisive) return a.decisive > b.decisive;
                     const bool a_cap = a.cause == OomMessageCause::kMemoryFractionCap;
                     const bool b_cap = b.cause == OomMessageCause::kMemoryFractionCap;
                     if (a_cap != b_cap) return a_cap;
                     return a.bytes.lo > b.bytes.lo;
                   });
  if (!out.findings.empty()) out.cause = out.findings.front().cause;
  out.verdict = DecideOomVerdict(message, AccountFor(message), out.expected_outside_range,
                                 IsUnifiedMemory(message, out.gpus));
  // The advice in the findings' order, then the general.
  std::vector<std::string> advice;
  for (const OomFinding& f : out.findings)
    advice.insert(advice.end(), f.advice.begin(), f.advice.end());
  advice.insert(advice.end(), out.advice.begin(), out.advice.end());
  out.advice = std::move(advice);
  return out;
}

}  // namespace vramscope::analysis
