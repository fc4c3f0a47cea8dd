#include "capture/embedded_python.h"

#include <fmt/format.h>

#include <system_error>

#include "common/temp_dir.h"

namespace vramscope::capture {

std::optional<std::span<const uint8_t>> EmbeddedPythonFile(std::string_view path) {
  for (const EmbeddedFile& f : EmbeddedPythonPackage()) {
    if (f.path == path) return f.bytes;
  }
  return std::nullopt;
}

Status WriteEmbeddedPythonPackage(const std::filesystem::path& dir) {
  const std::filesystem::path package = dir / "vramscope";
  for (const EmbeddedFile& f : EmbeddedPythonPackage()) {
    const std::filesystem::path target = package / std::filesystem::path(f.path);
    std::error_code ec;
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) {
      return InternalError(
          fmt::format("{}: cannot be made: {}", target.parent_path().string(), ec.message()));
    }
    RETURN_IF_ERROR(WriteWholeFile(target, f.bytes));
  }
  return Status::Ok();
}

}  // namespace vramscope::capture
