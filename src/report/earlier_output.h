// Recognises vramscope's own earlier outputs, so that an output the tool named itself (the
// input's name with .sqlite or .html) may replace the one an earlier run wrote, and nothing
// else. Recognition reads only what vramscope writes into its outputs and nothing else does: a
// report database has the table `vramscope_metadata`; a viewer page starts with the template's
// `<meta name="generator" content="vramscope">`.
#pragma once

#include <string>
#include <string_view>

namespace vramscope::report {

enum class OutputKind { kReportDatabase, kViewerPage };

// "report database", "viewer page": for messages.
std::string_view OutputKindName(OutputKind kind);

// True when `path` is a regular file vramscope wrote as an output of `kind`. Reads at most the
// file's first 4 KiB (a page) or opens it read-only and asks SQLite for one table name (a
// database); a file that is neither, unreadable or corrupt, is not recognised.
bool IsEarlierOutput(const std::string& path, OutputKind kind);

}  // namespace vramscope::report
