// How every verb prepares a file it writes (`report`'s database, `view`'s page, the viewer page
// of `--html`, `simulate -o`, `predict -o`): an output the user named keeps the rule "never
// overwrite without --force"; an output whose name the tool chose itself (the input's name with
// .sqlite or .html) replaces the output an earlier vramscope run wrote there, so that the same
// command works the second time, and never anything else.
#pragma once

#include <string>
#include <vector>

#include "common/atomic_output.h"
#include "common/status.h"
#include "report/earlier_output.h"

namespace vramscope::report {

struct PreparedOutput {
  AtomicOutput file;
  bool replaces_earlier = false;  // a default-named output replacing vramscope's own earlier one
};

// `named_by_user`: the path came from -o/--html. Checked before any heavy work, so that a refusal
// comes at once; nothing is created yet.
Result<PreparedOutput> PrepareOutput(const std::string& path, bool named_by_user, OutputKind kind,
                                     bool force);

// A usage error when `output` names one of `inputs` (the same file, however spelled) or one of
// `other_outputs`: --force must never turn a typo into a lost snapshot, and two outputs of one
// run cannot share a file. Empty paths are ignored.
Status CheckOutputIsItsOwn(const std::string& output, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& other_outputs = {});

// ", replacing the earlier one" when `replaces_earlier`, else "": appended to "... written to X".
std::string ReplacedNote(bool replaces_earlier);

}  // namespace vramscope::report
