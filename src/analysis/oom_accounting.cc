#include "analysis/oom_accounting.h"

namespace vramscope::analysis {

std::optional<ByteRange> OomAccounting::Tensors() const {
  if (!allocated) return std::nullopt;
  return private_pools ? NonNegative(*allocated - *private_pools) : *allocated;
}

std::optional<ByteRange> OomAccounting::OutsidePyTorch() const {
  if (!self || !reserved) return std::nullopt;
  return *self - *reserved;
}

std::optional<OomAccounting> AccountFor(const model::OomMessage& m) {
  if (!m.tried_to_allocate || !m.free || !m.total_capacity) return std::nullopt;
  OomAccounting a;
  a.legacy = m.kind == model::OomMessageKind::kAllocatorLegacy;
  a.request = RangeOf(*m.tried_to_allocate);
  a.free = RangeOf(*m.free);
  a.total = RangeOf(*m.total_capacity);
  if (a.legacy) {
    if (m.already_allocated) a.allocated = RangeOf(*m.already_allocated);
    if (m.reserved_total && a.allocated) {
      a.reserved = RangeOf(*m.reserved_total);
      // Never below 0 (a message whose reserved is below its allocated, as pasted figures can
      // be, gives 0).
      a.unallocated = *a.reserved - *a.allocated;
      a.unallocated->lo = std::max<int64_t>(a.unallocated->lo, 0);
      a.unallocated->hi = std::max(a.unallocated->hi, a.unallocated->lo);
    } else if (m.cached && a.allocated) {
      // 1.0 - 1.3's "cached" was reserved minus allocated.
      a.unallocated = RangeOf(*m.cached);
      a.reserved = *a.allocated + *a.unallocated;
    }
  } else {
    if (m.allocated_by_pytorch) a.allocated = RangeOf(*m.allocated_by_pytorch);
    if (m.reserved_unallocated) a.unallocated = RangeOf(*m.reserved_unallocated);
    if (a.allocated && a.unallocated) a.reserved = *a.allocated + *a.unallocated;
  }
  if (m.private_pools) a.private_pools = RangeOf(*m.private_pools);
  if (m.allowed && RangeOf(*m.allowed).hi < kByteRangeMax / 2) a.allowed = RangeOf(*m.allowed);

  // The processes NVML listed. In a container NVML gives host PIDs, so this process may be
  // listed as "Process N" without the "Including non-PyTorch memory" clause: one process holding
  // at least what PyTorch reserved is taken to be this one.
  a.others = m.processes;
  if (m.this_process_in_use) a.self = RangeOf(*m.this_process_in_use);
  // NVML in some containers reports this process as using less than PyTorch reserved (even
  // "0 bytes"): such a figure states nothing.
  if (a.self && a.reserved && a.self->hi < a.reserved->lo) {
    a.self.reset();
    a.self_contradicts_reserved = true;
  }
  if (!a.self && !a.reserved && a.others.size() == 1 && !m.this_process_in_use &&
      !a.self_contradicts_reserved) {
    // NVML lists every process with a context on the GPU, this one included; a lone process
    // listed under another PID (a container's) is this one.
    a.self = RangeOf(a.others[0].in_use);
    a.self_pid = a.others[0].pid;
    a.others.clear();
  }
  if (!a.self && a.reserved && !a.others.empty()) {
    std::vector<size_t> holders;
    for (size_t i = 0; i < a.others.size(); ++i) {
      if (Always(RangeOf(a.others[i].in_use), *a.reserved)) holders.push_back(i);
    }
    if (holders.size() == 1) {
      a.self = RangeOf(a.others[holders[0]].in_use);
      a.self_pid = a.others[holders[0]].pid;
      a.others.erase(a.others.begin() + static_cast<std::ptrdiff_t>(holders[0]));
    }
  }
  a.other_sum = ExactRange(0);
  for (const model::OomProcess& p : a.others) a.other_sum = a.other_sum + RangeOf(p.in_use);
  return a;
}

}  // namespace vramscope::analysis
