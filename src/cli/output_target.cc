#include "cli/output_target.h"

#include <fmt/format.h>
#include <sys/stat.h>

namespace vramscope::cli {

Result<PreparedOutput> PrepareOutput(const std::string& path, bool named_by_user,
                                     report::OutputKind kind, bool force) {
  bool replaces_earlier = false;
  struct stat st {};
  if (!force && !named_by_user && stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    if (!report::IsEarlierOutput(path, kind)) {
      return InvalidInput(fmt::format(
          "{}: exists and is not a vramscope {} (it is the default name for this output, and the "
          "file there is left as it is); name another output with -o, or pass --force to "
          "overwrite it",
          path, report::OutputKindName(kind)));
    }
    replaces_earlier = true;
  }
  ASSIGN_OR_RETURN(AtomicOutput file, AtomicOutput::Prepare(path, force || replaces_earlier));
  return PreparedOutput{std::move(file), replaces_earlier};
}

std::string ReplacedNote(bool replaces_earlier) {
  return replaces_earlier ? ", replacing the earlier one" : "";
}

}  // namespace vramscope::cli
