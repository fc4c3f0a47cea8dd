#include "cli/input_flags.h"

#include <fmt/format.h>

namespace vramscope::cli {

void AddInputLimitFlags(CLI::App& cmd, pipeline::InputLimits& limits) {
  cmd.add_option("--max-inflate-ratio", limits.max_inflate_ratio,
                 fmt::format("a gzipped input may inflate to this many times its compressed "
                             "size (default {}; real PyTorch files inflate under 40 times, "
                             "a decompression bomb about 1,000)",
                             pipeline::kDefaultMaxInflateRatio))
      ->check(CLI::Range(1u, 100000u))
      ->option_text("N");
}

void AddWindowFlags(CLI::App& cmd, pipeline::WindowRequest& window) {
  cmd.add_option("--from", window.from,
                 "report the recording from here on: an event number as the report prints them "
                 "(from 1, each device's own) or a time since the first event (250ms, 2.5s); the "
                 "allocator's state at the window's start is what the snapshot implies")
      ->option_text("EVENT|TIME");
  cmd.add_option("--to", window.to,
                 "report the recording up to here (kept): an event number or a time, as --from; "
                 "the allocator's state there comes from the model's replay of the recording")
      ->option_text("EVENT|TIME");
  cmd.add_option("--step-range", window.steps,
                 "report only these iterations of the training loop, numbered as the report's "
                 "iteration table: 5:7, 5, 5: or :7")
      ->option_text("A:B");
}

}  // namespace vramscope::cli
