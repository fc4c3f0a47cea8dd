// The limits that keep the cost of reading an input in proportion to its size (the resource
// contract, docs/design/resource-contract.md). Only what a legitimate file could exceed is a
// setting here, with the flag that raises it; what no real file does (shared references where
// PyTorch writes one owner, impossible allocator states) is refused outright by the sources.
#pragma once

#include <cstdint>

namespace vramscope::sources {

// A gzip input inflates to at most this many times its compressed size. Real PyTorch files
// inflate 12-35x (snapshots, profiler traces, memory timelines: docs/design/resource-contract.md);
// zeros inflate about 1,000x.
inline constexpr uint32_t kDefaultMaxInflateRatio = 100;
// What any gzip input may inflate to whatever its ratio: small files cost little either way.
inline constexpr uint64_t kInflateAllowanceBytes = uint64_t{64} << 20;

struct InputLimits {
  uint32_t max_inflate_ratio = kDefaultMaxInflateRatio;       // --max-inflate-ratio
  uint64_t inflate_allowance_bytes = kInflateAllowanceBytes;  // fuzz targets keep it small
};

}  // namespace vramscope::sources
