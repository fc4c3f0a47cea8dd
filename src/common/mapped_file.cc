#include "common/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace vramscope {

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return InvalidInput(fmt::format("{}: no such file", path));
    return InvalidInput(fmt::format("{}: cannot read it: {}", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return InvalidInput(fmt::format(
        "{}: is a directory; give a file (a memory snapshot, profiler trace, memory timeline or "
        "native trace), or the folder 'vramscope run' wrote",
        path));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return InvalidInput(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));

  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* addr = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr != MAP_FAILED) {
      // The parser walks the file front to back once.
      madvise(addr, static_cast<size_t>(st.st_size), MADV_SEQUENTIAL);
      file->data_ = static_cast<const uint8_t*>(addr);
      file->size_ = static_cast<size_t>(st.st_size);
      file->mapped_ = true;
      ::close(fd);
      return file;
    }
  }
  // Not mappable (a pipe, /dev/stdin, an empty file): read it.
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return InvalidInput(fmt::format("{}: cannot read it: {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    file->owned_.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  return file;
}

std::unique_ptr<MappedFile> MappedFile::FromBytes(std::string name,
                                                  std::span<const uint8_t> bytes) {
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(name);
  file->data_ = bytes.data();
  file->size_ = bytes.size();
  return file;
}

std::unique_ptr<MappedFile> MappedFile::FromOwnedBytes(std::string name, std::string bytes) {
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(name);
  file->owned_ = std::move(bytes);
  file->data_ = reinterpret_cast<const uint8_t*>(file->owned_.data());
  file->size_ = file->owned_.size();
  return file;
}

Result<std::unique_ptr<MappedFile>> MappedFile::FromDescriptor(std::string name, int fd,
                                                               uint64_t size) {
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = std::move(name);
  if (size == 0) {
    ::close(fd);
    return file;
  }
  void* addr = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (addr == MAP_FAILED) {
    return InvalidInput(fmt::format("{}: cannot map its inflated copy ({} bytes): {}", file->path_,
                                    size, std::strerror(err)));
  }
  madvise(addr, static_cast<size_t>(size), MADV_SEQUENTIAL);
  file->data_ = static_cast<const uint8_t*>(addr);
  file->size_ = static_cast<size_t>(size);
  file->mapped_ = true;
  return file;
}

void MappedFile::ReleasePages(uint64_t end) const { ReleasePages(0, end); }

void MappedFile::ReleasePages(uint64_t begin, uint64_t end) const {
  if (!mapped_) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = (begin + page - 1) / page * page;
  const uint64_t last = std::min<uint64_t>(end, size_) / page * page;
  if (last > first) madvise(const_cast<uint8_t*>(data_ + first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace vramscope
