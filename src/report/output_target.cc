#include "report/output_target.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>

namespace vramscope::report {

Result<PreparedOutput> PrepareOutput(const std::string& path, bool named_by_user, OutputKind kind,
                                     bool force) {
  bool replaces_earlier = false;
  struct stat st {};
  if (!force && !named_by_user && stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    if (!IsEarlierOutput(path, kind)) {
      return InvalidInput(fmt::format(
          "{}: exists and is not a vramscope {} (it is the default name for this output, and the "
          "file there is left as it is); name another output with -o, or pass --force to "
          "overwrite it",
          path, OutputKindName(kind)));
    }
    replaces_earlier = true;
  }
  ASSIGN_OR_RETURN(AtomicOutput file, AtomicOutput::Prepare(path, force || replaces_earlier));
  return PreparedOutput{std::move(file), replaces_earlier};
}

namespace {

bool SameFile(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec) && !ec) return true;
  return std::filesystem::weakly_canonical(a, ec) == std::filesystem::weakly_canonical(b, ec);
}

}  // namespace

Status CheckOutputIsItsOwn(const std::string& output, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& other_outputs) {
  for (const std::string& input : inputs) {
    if (SameFile(output, input)) {
      return UsageError(fmt::format(
          "{}: is the input; name another output, so that the input is not overwritten", output));
    }
  }
  for (const std::string& other : other_outputs) {
    if (SameFile(output, other)) {
      return UsageError(
          fmt::format("{}: named for two outputs of this run; give each its own file", output));
    }
  }
  return Status::Ok();
}

std::string ReplacedNote(bool replaces_earlier) {
  return replaces_earlier ? ", replacing the earlier one" : "";
}

}  // namespace vramscope::report
