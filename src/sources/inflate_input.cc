#include "sources/inflate_input.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/gzip.h"
#include "common/units.h"

namespace vramscope::sources {

namespace {

// Past this, the inflated bytes go to a temporary file rather than the heap.
// Small, so that a gzipped input costs what the plain file costs: a mapped file whose pages the
// parser releases behind itself (MappedFile::ReleasePages), never a heap copy that grows.
constexpr uint64_t kSpillBytes = uint64_t{64} << 10;

// An unlinked temporary file: it disappears when the last descriptor closes, whatever happens to
// the process.
Result<int> OpenUnlinkedTemporary(const std::string& what) {
  const char* dir = std::getenv("TMPDIR");
  std::string path =
      fmt::format("{}/vramscope-inflate-XXXXXX", dir != nullptr && *dir != '\0' ? dir : "/tmp");
  const int fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    return InvalidInput(
        fmt::format("{}: cannot make a temporary file to inflate it into ({}: {}); set TMPDIR to a "
                    "writable folder",
                    what, path, std::strerror(errno)));
  }
  ::unlink(path.c_str());
  return fd;
}

Status WriteAll(int fd, std::string_view data, const std::string& what) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return InvalidInput(fmt::format(
          "{}: cannot write its inflated copy to the temporary folder: {}; set TMPDIR to a "
          "folder with more room",
          what, std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

uint64_t InflatedBound(uint64_t compressed, const InputLimits& limits) {
  const uint32_t ratio = std::max<uint32_t>(1, limits.max_inflate_ratio);  // 0 would divide by 0
  return std::max<uint64_t>(limits.inflate_allowance_bytes,
                            compressed > UINT64_MAX / ratio ? UINT64_MAX : compressed * ratio);
}

Status TooMuchInflated(const std::string& what, uint64_t compressed, const InputLimits& limits) {
  return LimitExceeded(fmt::format(
      "{}: inflates to more than {} times its compressed size (past {} from {}); real PyTorch "
      "files inflate under 40 times, so this looks like a decompression bomb: if the file is "
      "genuine, raise the limit with --max-inflate-ratio",
      what, std::max<uint32_t>(1, limits.max_inflate_ratio),
      FormatBytes(static_cast<int64_t>(InflatedBound(compressed, limits))),
      FormatBytes(static_cast<int64_t>(compressed))));
}

Result<std::unique_ptr<MappedFile>> InflateInput(
    const MappedFile& file, const InputLimits& limits,
    const std::function<Status(std::span<const uint8_t> head)>& recognise, GzipCut* cut) {
  const std::string& what = file.path();
  const uint64_t compressed = file.bytes().size();
  const uint64_t limit = InflatedBound(compressed, limits);
  std::string memory;  // what is inflated, while it is small
  int fd = -1;         // the temporary file, once it is not
  uint64_t produced = 0;
  bool recognised = false;
  auto check_head = [&]() -> Status {
    recognised = true;
    return recognise(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(memory.data()),
                                              std::min(memory.size(), kInflatedHeadBytes)));
  };
  Status status = GunzipChunks(
      file.bytes(), what,
      [&](std::string_view chunk) -> Status {
        produced += chunk.size();
        if (produced > limit) return TooMuchInflated(what, compressed, limits);
        if (fd >= 0) return WriteAll(fd, chunk, what);
        memory.append(chunk);
        if (!recognised && memory.size() >= kInflatedHeadBytes) RETURN_IF_ERROR(check_head());
        if (memory.size() > kSpillBytes) {
          ASSIGN_OR_RETURN(fd, OpenUnlinkedTemporary(what));
          RETURN_IF_ERROR(WriteAll(fd, memory, what));
          std::string().swap(memory);
        }
        return Status::Ok();
      },
      cut);
  if (status.ok() && !recognised) status = check_head();  // shorter than the head
  if (!status.ok()) {
    if (fd >= 0) ::close(fd);
    return status;
  }
  if (fd < 0) return MappedFile::FromOwnedBytes(what, std::move(memory));
  return MappedFile::FromDescriptor(what, fd, produced);
}

}  // namespace vramscope::sources
