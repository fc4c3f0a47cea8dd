// SIGINT and SIGTERM for the command line: the first cancels the running request (its Control's
// token), which unwinds, removes its temporary outputs and ends with exit status 130; a second
// one ends the process at once (status 130). The library never handles signals itself
// (common/progress.h); this is the CLI's own.
#pragma once

#include "common/progress.h"

namespace vramscope::cli {

// The token every verb puts in its requests' Control.
const CancelToken& InterruptToken();

// Installs the handlers (idempotent). `main` calls it before running a verb.
void InstallInterruptHandler();

}  // namespace vramscope::cli
