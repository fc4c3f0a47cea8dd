#include "common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "common/units.h"

namespace vramscope {

Progress::Progress(std::string label, bool enabled)
    : label_(std::move(label)),
      enabled_(enabled && isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() { Finish(); }

void Progress::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::milliseconds(500)) return;
  if (shown_ && now - last_ < std::chrono::milliseconds(100) && done < total) return;
  last_ = now;
  shown_ = true;
  const double pct = total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / total;
  fmt::print(stderr, "\r{} {:5.1f}% ({} of {})\x1b[K", label_, pct,
             FormatBytes(static_cast<int64_t>(done)), FormatBytes(static_cast<int64_t>(total)));
  std::fflush(stderr);
}

void Progress::Finish() {
  if (shown_) {
    fmt::print(stderr, "\r\x1b[K");
    std::fflush(stderr);
    shown_ = false;
  }
}

}  // namespace vramscope
