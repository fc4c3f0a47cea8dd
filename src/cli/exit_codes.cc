#include "cli/exit_codes.h"

#include <fmt/format.h>

#include <cstdio>
#include <new>

#include "pipeline/built_in_example.h"

namespace vramscope::cli {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidInput:
    case StatusCode::kUnsupported:
    case StatusCode::kLimitExceeded:
      return kExitBadInput;
    case StatusCode::kUsage:
      return kExitUsage;
    case StatusCode::kInterrupted:
      return kExitInterrupted;
    case StatusCode::kInternal:
      return kExitInternal;
  }
  return kExitInternal;
}

int ReportError(const Status& status) {
  // An interrupted command says nothing more: the user pressed Ctrl-C (or sent SIGTERM).
  if (status.code() == StatusCode::kInterrupted) return ExitCodeFor(status);
  fmt::print(stderr, "vramscope: error: {}\n", status.message());
  if (status.code() == StatusCode::kInternal) {
    fmt::print(stderr,
               "vramscope: this is a bug in vramscope; please report it with the command you "
               "ran and, if you can share it, the input file\n");
  }
  return ExitCodeFor(status);
}

int RunAndReport(const std::string& input, const std::function<Status()>& body) {
  try {
    const Status status = body();
    return status.ok() ? kExitOk : ReportError(status);
  } catch (const std::bad_alloc&) {
    return ReportError(InvalidInput(fmt::format(
        "{}: ran out of memory; the input may be corrupt, or larger than this machine can hold",
        input.empty() ? pipeline::kBuiltInExampleName : input)));
  } catch (const std::exception& e) {
    return ReportError(InternalError(fmt::format("unexpected failure: {}", e.what())));
  }
}

}  // namespace vramscope::cli
