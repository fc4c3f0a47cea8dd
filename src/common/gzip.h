// gzip decompression for inputs that PyTorch writes compressed (profiler traces saved as
// .json.gz, export_memory_timeline's .raw.gz). The whole output is held in memory: the inputs
// this serves are at most a few hundred MB once inflated.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace vramscope {

// Inflates every gzip member of `compressed` (gzip files may be concatenations). Fails with one
// line naming `what` when the data is corrupt, truncated, or inflates past `max_bytes`.
Result<std::string> Gunzip(std::span<const uint8_t> compressed, const std::string& what,
                           uint64_t max_bytes = uint64_t{16} << 30);

// One gzip member holding `data` (what browsers' DecompressionStream('gzip') reads). `level` is
// zlib's 1 (fastest) to 9 (smallest).
std::string Gzip(std::string_view data, int level = 6);

}  // namespace vramscope
