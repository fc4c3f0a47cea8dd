#include "common/temp_dir.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <system_error>

namespace vramscope {

TempDir::TempDir(const std::string& prefix) {
  std::error_code ec;
  const auto base = std::filesystem::temp_directory_path(ec);
  if (ec) return;
  std::string pattern = (base / (prefix + "XXXXXX")).string();
  if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

TempFile::TempFile(const std::string& prefix, const std::string& suffix) {
  std::error_code ec;
  const auto base = std::filesystem::temp_directory_path(ec);
  if (ec) return;
  std::string pattern = (base / (prefix + "XXXXXX" + suffix)).string();
  const int fd = mkstemps(pattern.data(), static_cast<int>(suffix.size()));
  if (fd >= 0) {
    close(fd);
    path_ = pattern;
  }
}

TempFile::~TempFile() {
  if (!path_.empty()) std::remove(path_.c_str());
}

Status WriteWholeFile(const std::filesystem::path& path, std::span<const uint8_t> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out.flush()) return InvalidInput(fmt::format("{}: cannot be written", path.string()));
  return Status::Ok();
}

}  // namespace vramscope
