#include "cli/exit_codes.h"

#include <fmt/format.h>

#include <cstdio>

namespace vramscope::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidInput:
      return kExitBadInput;
    case StatusCode::kUsage:
      return kExitUsage;
    case StatusCode::kInternal:
      return kExitInternal;
  }
  return kExitInternal;
}

int ReportError(const Status& status) {
  fmt::print(stderr, "vramscope: error: {}\n", status.message());
  if (status.code() == StatusCode::kInternal) {
    fmt::print(stderr,
               "vramscope: this is a bug in vramscope; please report it with the command you "
               "ran and, if you can share it, the input file\n");
  }
  return ExitCodeFor(status);
}

}  // namespace vramscope::cli
