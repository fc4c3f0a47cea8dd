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

}  // namespace vramscope::cli
