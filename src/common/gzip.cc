#include "common/gzip.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <limits>

namespace vramscope {

Result<std::string> Gunzip(std::span<const uint8_t> compressed, const std::string& what,
                           uint64_t max_bytes) {
  std::string out;
  // Compressed JSON typically inflates 10-20x; start there and grow.
  out.reserve(std::min<uint64_t>(max_bytes, compressed.size() * 16 + 4096));
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (and check its CRC).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return InternalError(fmt::format("{}: cannot start zlib", what));
  }
  size_t consumed = 0;
  int rc = Z_OK;
  char buffer[1 << 16];
  while (true) {
    const size_t remaining = compressed.size() - consumed;
    zs.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    zs.avail_in = static_cast<uInt>(std::min<size_t>(remaining, std::numeric_limits<uInt>::max()));
    const uInt offered = zs.avail_in;
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof(buffer);
    rc = inflate(&zs, Z_NO_FLUSH);
    consumed += offered - zs.avail_in;
    out.append(buffer, sizeof(buffer) - zs.avail_out);
    if (out.size() > max_bytes) {
      inflateEnd(&zs);
      return InvalidInput(
          fmt::format("{}: inflates to more than {} bytes; refusing it", what, max_bytes));
    }
    if (rc == Z_STREAM_END) {
      // Another member may follow (concatenated gzip files); trailing zero padding is allowed.
      size_t next = consumed;
      while (next < compressed.size() && compressed[next] == 0) ++next;
      if (next >= compressed.size()) break;
      consumed = next;
      if (inflateReset(&zs) != Z_OK) break;
      continue;
    }
    if (rc == Z_BUF_ERROR && zs.avail_in == 0 && consumed >= compressed.size()) {
      inflateEnd(&zs);
      return InvalidInput(fmt::format(
          "{}: the gzip data is truncated after {} compressed bytes ({} inflated); the file "
          "was cut short, copy it again",
          what, consumed, out.size()));
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string reason = zs.msg != nullptr ? zs.msg : fmt::format("zlib error {}", rc);
      inflateEnd(&zs);
      return InvalidInput(
          fmt::format("{}: corrupt gzip data at compressed byte {}: {}", what, consumed, reason));
    }
  }
  inflateEnd(&zs);
  return out;
}

}  // namespace vramscope
