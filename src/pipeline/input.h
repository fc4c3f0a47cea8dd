// What the user named on the command line, before anything is read: the built-in example, a
// file of any format vramscope reads, or a folder of captures `vramscope run` wrote. The one rule
// for the names of outputs a verb writes when the user names none lives here too, so that
// `report`, `view` and `simulate` name them alike.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "sources/input_limits.h"

namespace vramscope::pipeline {

// What reading an input may cost beyond the defaults (--max-inflate-ratio): the limits of the
// resource contract (docs/design/resource-contract.md) that a genuine file may need raised.
using InputLimits = sources::InputLimits;
using sources::kDefaultMaxInflateRatio;

enum class InputKind : uint8_t {
  kBuiltInExample,  // no path given: the real H200 snapshot compiled into the binary
  kFile,            // a snapshot, profiler trace, memory timeline or native trace (any, gzipped)
  kCaptureFolder,   // the folder `vramscope run` wrote (<rank>.pickle + .sidecar.json, ...)
};

struct Input {
  InputKind kind = InputKind::kBuiltInExample;
  std::string path;  // as the user gave it; empty for the built-in example

  // How messages name it: the path, or the built-in example's name.
  std::string Name() const;
};

// Classifies `path` (empty: the built-in example) by what is there; a path that does not exist
// is a kFile, which Load then refuses with one line.
Input ClassifyInput(const std::string& path);

// The output a verb writes when the user gives no name, with `extension` ("sqlite", "html"):
//   the built-in example      -> vramscope-example.<extension>
//   a capture folder runs/    -> runs/report.<extension> (beside the captures, as `run` writes)
//   a file runs/step3.pickle.gz, trace.pt.trace.json.gz, timeline.raw.json.gz
//                             -> step3.<extension>, trace.<extension>, timeline.<extension>, in
//                                the current directory: the file's name without the folder and
//                                without the suffixes of the formats vramscope reads (.gz, .zst,
//                                .pickle, .pkl, .json, .raw, .vstrace, .trace, .pt, .sqlite,
//                                .html); "report" when nothing is left.
std::string DefaultOutputName(const Input& input, std::string_view extension);

// The absolute project root: `requested`, or the current directory when empty. A usage error
// when it is not a directory.
Result<std::string> ResolveProjectRoot(const std::string& requested);

// A window of the recording (pipeline/window.h): --from/--to and --step-range.
struct WindowRequest {
  // "" (open), an event number as reports print them (from 1, each device's own), or a time since
  // the trace's first event with its unit: "250ms", "2.5s", "1200us". Both ends are kept.
  std::string from, to;
  // "" (none), "A:B", "A:", ":B" or "A": iterations of the training loop as the report numbers
  // them (from 1), both kept.
  std::string steps;
  bool active() const { return !from.empty() || !to.empty() || !steps.empty(); }
};

}  // namespace vramscope::pipeline
