// A private temporary folder that is removed with its scope, and a whole-file writer: what the
// commands that run Python (the tracer, the capture bootstrap) use to lay out the modules they
// embed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "common/status.h"

namespace vramscope {

class TempDir {
 public:
  // Makes <system temp>/<prefix>XXXXXX (mode 0700). path() is empty when that failed.
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A private temporary file, <system temp>/<prefix>XXXXXX<suffix>, removed with its scope.
// path() is empty when it could not be made.
class TempFile {
 public:
  TempFile(const std::string& prefix, const std::string& suffix);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `data` to `path` (replacing it); a failure names the file.
Status WriteWholeFile(const std::filesystem::path& path, std::span<const uint8_t> data);

}  // namespace vramscope
