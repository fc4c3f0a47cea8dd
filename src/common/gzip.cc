#include "common/gzip.h"

#include <fmt/format.h>
#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <vector>

namespace vramscope {

Status TruncatedGzip(const std::string& what, const GzipCut& cut) {
  return InvalidInput(fmt::format(
      "{}: the gzip data is truncated after {} compressed bytes ({} inflated); the file was cut "
      "short, copy it again",
      what, cut.compressed_bytes, cut.inflated_bytes));
}

Status GunzipChunks(std::span<const uint8_t> compressed, const std::string& what,
                    const std::function<Status(std::string_view)>& sink, GzipCut* cut) {
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (and check its CRC).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return InternalError(fmt::format("{}: cannot start zlib", what));
  }
  // inflateEnd on every way out.
  struct End {
    z_stream* zs;
    ~End() { inflateEnd(zs); }
  } end{&zs};
  size_t consumed = 0;
  uint64_t produced = 0;
  int rc = Z_OK;
  // One chunk at a time: what is inflated is handed on, never accumulated here.
  std::vector<char> buffer(size_t{1} << 16);
  while (true) {
    const size_t remaining = compressed.size() - consumed;
    zs.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    zs.avail_in = static_cast<uInt>(std::min<size_t>(remaining, std::numeric_limits<uInt>::max()));
    const uInt offered = zs.avail_in;
    zs.next_out = reinterpret_cast<Bytef*>(buffer.data());
    zs.avail_out = static_cast<uInt>(buffer.size());
    rc = inflate(&zs, Z_NO_FLUSH);
    consumed += offered - zs.avail_in;
    const size_t n = buffer.size() - zs.avail_out;
    produced += n;
    if (n > 0) RETURN_IF_ERROR(sink(std::string_view(buffer.data(), n)));
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
      if (cut != nullptr) {
        *cut = {true, consumed, produced};
        return Status::Ok();
      }
      return TruncatedGzip(what, {true, consumed, produced});
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string reason = zs.msg != nullptr ? zs.msg : fmt::format("zlib error {}", rc);
      return InvalidInput(
          fmt::format("{}: corrupt gzip data at compressed byte {}: {}", what, consumed, reason));
    }
  }
  return Status::Ok();
}

Result<std::string> Gunzip(std::span<const uint8_t> compressed, const std::string& what,
                           uint64_t max_bytes) {
  std::string out;
  RETURN_IF_ERROR(GunzipChunks(compressed, what, [&](std::string_view chunk) -> Status {
    if (out.size() + chunk.size() > max_bytes) {
      return LimitExceeded(
          fmt::format("{}: inflates to more than {} bytes; refusing it", what, max_bytes));
    }
    out.append(chunk);
    return Status::Ok();
  }));
  return out;
}

std::string Gzip(std::string_view data, int level) {
  // libdeflate compresses the whole buffer at once (the callers hold it in memory anyway), about
  // four times zlib's speed at the same level, with output as small (bench: the viewer's blob).
  struct FreeCompressor {
    void operator()(libdeflate_compressor* c) const { libdeflate_free_compressor(c); }
  };
  const std::unique_ptr<libdeflate_compressor, FreeCompressor> compressor(
      libdeflate_alloc_compressor(std::clamp(level, 1, 12)));
  if (compressor == nullptr) throw std::bad_alloc();
  std::string out(libdeflate_gzip_compress_bound(compressor.get(), data.size()), '\0');
  const size_t produced =
      libdeflate_gzip_compress(compressor.get(), data.data(), data.size(), out.data(), out.size());
  if (produced == 0) throw std::bad_alloc();  // the bound makes room for any input
  out.resize(produced);
  return out;
}

}  // namespace vramscope
