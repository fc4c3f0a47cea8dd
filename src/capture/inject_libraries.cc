#include "capture/inject_libraries.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace vramscope::capture {

namespace {

namespace fs = std::filesystem;

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return fs::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

}  // namespace

std::optional<std::string> FindInjectLibrary() {
  if (const char* env = std::getenv("VRAMSCOPE_INJECT_LIB"); env && *env) {
    if (access(env, R_OK) == 0) return std::string(env);
    return std::nullopt;
  }
  const std::string exe_dir = ExecutableDir();
  if (exe_dir.empty()) return std::nullopt;
  for (const fs::path& candidate :
       {fs::path(exe_dir) / "libvramscope_inject.so",
        fs::path(exe_dir) / ".." / "lib" / "vramscope" / "libvramscope_inject.so"}) {
    if (access(candidate.c_str(), R_OK) == 0) return fs::weakly_canonical(candidate).string();
  }
  return std::nullopt;
}

std::optional<std::string> FindCuptiLibrary() {
  if (const char* env = std::getenv("VRAMSCOPE_CUPTI_LIB"); env && *env) return std::string(env);
#ifdef VRAMSCOPE_CUPTI_LIBRARY
  if (access(VRAMSCOPE_CUPTI_LIBRARY, R_OK) == 0) return std::string(VRAMSCOPE_CUPTI_LIBRARY);
#endif
  return std::nullopt;
}

}  // namespace vramscope::capture
