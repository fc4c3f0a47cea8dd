// The settings of PyTorch's CUDA caching allocator that change its decisions, and the parsers that
// produce them: the `PYTORCH_CUDA_ALLOC_CONF` syntax (what users type and what `--alloc-conf`
// takes) and the `allocator_settings` a snapshot records (torch 2.3+).
//
// Only what changes memory decisions is modelled. Options that affect speed or host memory alone
// (`release_lock_on_cudamalloc`, `pinned_*`, `graph_capture_record_stream_reuse`) are accepted and
// ignored; `backend:cudaMallocAsync` is refused, since it is a different allocator that records no
// snapshots.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/allocator_constants.h"

namespace vramscope::allocator {

// The allocator's constants, defined once in the model (model/allocator_constants.h).
using model::kLargeBuffer;
using model::kMiB;
using model::kMinBlockSize;
using model::kMinLargeAlloc;
using model::kRoundLarge;
using model::kSmallBuffer;
using model::kSmallSize;
inline constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
// roundup_power2_divisions has one entry per power-of-two MiB bucket: 1 MiB, 2 MiB, ... 32 GiB.
inline constexpr size_t kRoundupBuckets = 16;

struct AllocatorSettings {
  uint64_t max_split_size = kUnlimited;            // blocks this large are never split
  uint64_t max_non_split_rounding = kLargeBuffer;  // slack an oversize request may take unsplit
  std::array<uint32_t, kRoundupBuckets> roundup_power2_divisions{};  // 0 or 1: plain 512 B rounding
  double garbage_collection_threshold = 0;                           // 0: off
  bool expandable_segments = false;

  // Not part of PYTORCH_CUDA_ALLOC_CONF, but part of what decides a run.
  uint64_t capacity =
      kUnlimited;              // bytes the allocator can get from CUDA (cudaMalloc fails beyond)
  double memory_fraction = 0;  // torch.cuda.set_per_process_memory_fraction; 0: not set
  uint64_t total_memory = 0;   // the device's memory, for the fraction and expandable ranges

  // The most the allocator may reserve: capacity, and fraction * total_memory when set.
  uint64_t AllowedMaximum() const;
  bool GarbageCollectionActive() const {
    return garbage_collection_threshold > 0 && memory_fraction > 0;
  }
  // One line in PYTORCH_CUDA_ALLOC_CONF syntax, "" for all defaults (capacity not included).
  std::string ToAllocConf() const;
  bool operator==(const AllocatorSettings&) const = default;
};

// Parses PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF text ("key:value,key:value") over `base`.
// Errors name the option and the accepted values, e.g. "max_split_size_mb:5: must be more than 20".
Result<AllocatorSettings> ParseAllocConf(std::string_view conf, AllocatorSettings base = {});

// Reads the `allocator_settings` of a snapshot as the source flattened them ("max_split_size" ->
// "-1", "roundup_power2_divisions.512" -> "2", "expandable_segments" -> "False"). Keys the model
// does not need are ignored; a value that does not parse is an error naming the key.
Result<AllocatorSettings> SettingsFromSnapshot(
    const std::vector<std::pair<std::string, std::string>>& recorded);

}  // namespace vramscope::allocator
