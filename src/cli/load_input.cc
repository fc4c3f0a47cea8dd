#include "cli/load_input.h"

#include <fmt/format.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "cli/built_in_example.h"
#include "common/mapped_file.h"
#include "common/progress.h"
#include "sources/load_source.h"

namespace vramscope::cli {

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

Result<model::Trace> LoadInput(const std::string& input, bool quiet,
                               snapshot::LoadTimings* timings) {
  std::unique_ptr<MappedFile> file;
  if (input.empty()) {
    file = MappedFile::FromBytes(kBuiltInExampleName, BuiltInExampleSnapshot());
  } else {
    ASSIGN_OR_RETURN(file, MappedFile::Open(input));
  }
  Progress progress(fmt::format("reading {}", file->path()), !quiet);
  sources::SourceOptions load_options;
  load_options.progress = [&](uint64_t done, uint64_t total) { progress.Update(done, total); };
  ASSIGN_OR_RETURN(model::Trace trace, sources::LoadTrace(*file, load_options, timings));
  progress.Finish();
  trace.source.built_in_example = input.empty();
  return trace;
}

}  // namespace vramscope::cli
