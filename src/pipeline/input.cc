#include "pipeline/input.h"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>

#include "pipeline/built_in_example.h"

namespace vramscope::pipeline {

namespace fs = std::filesystem;

std::string Input::Name() const {
  return kind == InputKind::kBuiltInExample ? std::string(kBuiltInExampleName) : path;
}

Input ClassifyInput(const std::string& path) {
  if (path.empty()) return {InputKind::kBuiltInExample, ""};
  std::error_code ec;
  if (fs::is_directory(path, ec)) return {InputKind::kCaptureFolder, path};
  return {InputKind::kFile, path};
}

std::string DefaultOutputName(const Input& input, std::string_view extension) {
  switch (input.kind) {
    case InputKind::kBuiltInExample:
      return fmt::format("vramscope-example.{}", extension);
    case InputKind::kCaptureFolder:
      return (fs::path(input.path) / fmt::format("report.{}", extension)).string();
    case InputKind::kFile:
      break;
  }
  std::string base = input.path;
  while (!base.empty() && (base.back() == '/' || base.back() == '\\')) base.pop_back();
  if (const size_t slash = base.find_last_of("/\\"); slash != std::string::npos) {
    base = base.substr(slash + 1);
  }
  static constexpr std::array<std::string_view, 11> kSuffixes = {
      ".gz",      ".zst",   ".pickle", ".pkl",    ".json", ".raw",
      ".vstrace", ".trace", ".pt",     ".sqlite", ".html"};
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string_view suffix : kSuffixes) {
      if (base.size() > suffix.size() && base.ends_with(suffix)) {
        base.resize(base.size() - suffix.size());
        stripped = true;
      }
    }
  }
  if (base.empty() || base == "." || base == "..") base = "report";
  return fmt::format("{}.{}", base, extension);
}

Result<std::string> ResolveProjectRoot(const std::string& requested) {
  std::string path = requested;
  if (path.empty()) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) {
      return InvalidInput("cannot determine the current directory; pass --project-root");
    }
    path = cwd;
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return UsageError(fmt::format("--project-root {}: no such directory", path));
  }
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return std::string(path);
  return std::string(resolved);
}

}  // namespace vramscope::pipeline
