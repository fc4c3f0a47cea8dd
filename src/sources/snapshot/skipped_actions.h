// Traces recorded with _record_memory_history(skip_actions=[...]): which kinds of entries the
// recording left out, found from the trace itself.
#pragma once

#include "model/trace.h"

namespace vramscope::snapshot {

// torch 2.9+'s _record_memory_history(skip_actions=[...]) leaves kinds of entries out of the
// trace. The file does not say which; the trace shows it where an entry's partner is there and
// it never is (segments that are never made while some are freed could also all predate the
// trace: said as likely, not certain).
// Adds each kind found to trace.facts.skipped_actions, with a note saying what it changes.
void DescribeSkippedActions(model::Trace& trace);

}  // namespace vramscope::snapshot
