// Read-only view of a whole input file.
//
// Large snapshots are memory-mapped so that strings can point into the file instead of being
// copied (the parser keeps only offsets). Small or special files (pipes) are read into memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace vramscope {

class MappedFile {
 public:
  // Opens `path`. Errors name the file and say what is wrong with it (missing, a directory,
  // unreadable, empty).
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // Wraps bytes that are already in memory (the built-in example, tests).
  static std::unique_ptr<MappedFile> FromBytes(std::string name, std::span<const uint8_t> bytes);
  // Takes ownership of bytes made in memory (a small inflated input).
  static std::unique_ptr<MappedFile> FromOwnedBytes(std::string name, std::string bytes);
  // Maps the first `size` bytes of the open file `fd` (an unlinked temporary file holding a big
  // inflated input) and closes `fd`; `name` is what messages call it.
  static Result<std::unique_ptr<MappedFile>> FromDescriptor(std::string name, int fd,
                                                            uint64_t size);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Lets the kernel drop the resident pages of [0, end) of a mapped file. The bytes stay readable
  // (a later read faults them back in from the page cache); a no-op for in-memory inputs.
  void ReleasePages(uint64_t end) const;
  // The same for [begin, end), the whole pages inside it; safe to call from several threads.
  void ReleasePages(uint64_t begin, uint64_t end) const;
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string owned_;  // used when the file could not be mapped
};

}  // namespace vramscope
