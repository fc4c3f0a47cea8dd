// What a caching-allocator message's figures say the GPU held, derived once for the causes
// (analysis/oom_message_explain.h) and the verdict (analysis/oom_verdict.h): PyTorch's allocated,
// unallocated and reserved memory, this process's total, the other processes, and a cap. Every
// quantity is an interval (analysis/byte_range.h); what the message does not state is unset.
#pragma once

#include <optional>
#include <vector>

#include "analysis/byte_range.h"
#include "model/oom_message.h"

namespace vramscope::analysis {

struct OomAccounting {
  bool legacy = false;  // the 1.x - 2.0 wording: no process figures
  ByteRange request, free, total;
  std::optional<ByteRange> allocated;      // by PyTorch (2.1+: with the private pools' cache)
  std::optional<ByteRange> private_pools;  // free blocks cached in private pools (2.4+)
  std::optional<ByteRange> unallocated;    // reserved by PyTorch but unallocated
  std::optional<ByteRange> reserved;       // allocated + unallocated
  // This process as NVML saw it (2.1+): stated, or in a container the one listed process that
  // holds at least what PyTorch reserved (self_pid; it is then not among `others`).
  std::optional<ByteRange> self;
  std::optional<int64_t> self_pid;
  // The message's figure for this process was below what PyTorch reserved (unset above).
  bool self_contradicts_reserved = false;
  std::vector<model::OomProcess> others;  // the other processes listed
  ByteRange other_sum;                    // their memory
  std::optional<ByteRange> allowed;       // a cap the message prints (not the "no limit" 2^64 B)
  // The tensors: allocated less the private pools' cached blocks.
  std::optional<ByteRange> Tensors() const;
  // This process's memory outside PyTorch's allocator: self - reserved.
  std::optional<ByteRange> OutsidePyTorch() const;
};

// Needs the request, the free memory and the total (else every field but `legacy` is unset).
std::optional<OomAccounting> AccountFor(const model::OomMessage& m);

}  // namespace vramscope::analysis
