// gzip for inputs that PyTorch writes compressed (snapshots, profiler traces saved as .json.gz,
// export_memory_timeline's .raw.gz) and for the viewer's data blob. Inputs are inflated as a
// stream (GunzipChunks): what keeps the output, and how much of it, is the caller's choice
// (sources/inflate_input.h spills big inputs to a temporary file and bounds the ratio).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace vramscope {

// Inflates every gzip member of `compressed` (gzip files may be concatenations), handing each
// inflated chunk (at most 64 KiB) to `sink` in order. An error from `sink` stops the inflation
// and is returned; corrupt data fails with one line naming `what`. Truncated data (a deflate
// stream cut off: a killed job, a full disk) fails the same way, unless `cut` is given: then
// everything inflated up to the cut has been handed to `sink`, the call succeeds, and `cut`
// says where the data ended.
struct GzipCut {
  bool truncated = false;
  uint64_t compressed_bytes = 0;  // where the compressed data ends
  uint64_t inflated_bytes = 0;    // what was inflated before it
};
Status GunzipChunks(std::span<const uint8_t> compressed, const std::string& what,
                    const std::function<Status(std::string_view)>& sink, GzipCut* cut = nullptr);

// The one line for gzip data cut off at `cut` (a file that cannot be read up to its cut).
Status TruncatedGzip(const std::string& what, const GzipCut& cut);

// The whole inflated text in memory (small data: tests, the viewer's blob). Fails with one line
// naming `what` when the data is corrupt, truncated, or inflates past `max_bytes`.
Result<std::string> Gunzip(std::span<const uint8_t> compressed, const std::string& what,
                           uint64_t max_bytes = uint64_t{16} << 30);

// One gzip member holding `data` (what browsers' DecompressionStream('gzip') reads), made by
// libdeflate. `level` is 1 (fastest) to 12 (smallest); 6, the default, is as small as zlib's 6.
std::string Gzip(std::string_view data, int level = 6);

}  // namespace vramscope
