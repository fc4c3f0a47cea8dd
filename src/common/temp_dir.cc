#include "common/temp_dir.h"

#include <fmt/format.h>
#include <stdlib.h>

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

Status WriteWholeFile(const std::filesystem::path& path, std::span<const uint8_t> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out.flush()) return InvalidInput(fmt::format("{}: cannot be written", path.string()));
  return Status::Ok();
}

}  // namespace vramscope
