#include "cli/terminal_progress.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "common/units.h"

namespace vramscope::cli {

namespace {

std::chrono::milliseconds DelayFromEnvironment() {
  const char* env = std::getenv("VRAMSCOPE_PROGRESS_DELAY_MS");
  if (env == nullptr || *env == '\0') return std::chrono::milliseconds(500);
  char* end = nullptr;
  const long ms = std::strtol(env, &end, 10);
  if (*end != '\0' || ms < 0 || ms > 60000) return std::chrono::milliseconds(500);
  return std::chrono::milliseconds(ms);
}

}  // namespace

TerminalProgress::TerminalProgress(bool enabled, bool notes)
    : enabled_(enabled && isatty(STDERR_FILENO) == 1), notes_(notes) {
  if (!enabled_) return;
  delay_ = DelayFromEnvironment();
  ticker_ = std::thread([this] { Tick(); });
}

TerminalProgress::~TerminalProgress() {
  if (!enabled_) return;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    EraseLocked();
  }
  wake_.notify_all();
  ticker_.join();
}

void TerminalProgress::Stage(std::string label) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  stage_start_ = std::chrono::steady_clock::now();
  if (label_.empty()) line_start_ = stage_start_;
  label_ = std::move(label);
  done_ = total_ = 0;
  counted_ = false;
  // The line already stands, or is due: show the new stage at once.
  if (shown_ || stage_start_ - line_start_ >= delay_) DrawLocked();
}

void TerminalProgress::Update(uint64_t done, uint64_t total, Unit unit) {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  total_ = total;
  unit_ = unit;
  counted_ = true;
}

void TerminalProgress::Finish() {
  if (!enabled_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  label_.clear();
  EraseLocked();
}

void TerminalProgress::Tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_ || label_.empty()) continue;
    if (!shown_ && std::chrono::steady_clock::now() - line_start_ < delay_) continue;
    DrawLocked();
  }
}

void TerminalProgress::DrawLocked() {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stage_start_).count();
  std::string line = "vramscope: " + label_;
  if (counted_) {
    const double pct = total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done_) / total_;
    const auto count = [&](uint64_t n) {
      return unit_ == Unit::kBytes ? FormatBytes(static_cast<int64_t>(n))
                                   : FormatCount(static_cast<int64_t>(n));
    };
    line += fmt::format(" {:5.1f}% ({} of {})", pct, count(done_), count(total_));
  } else {
    line += " ...";
  }
  line += fmt::format(" {:.1f} s", seconds);
  // One terminal row: a line that wrapped could not be redrawn in place.
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 4 &&
      line.size() >= size.ws_col) {
    line.resize(size.ws_col - 4);
    line += "...";
  }
  fmt::print(stderr, "\r{}\x1b[K", line);
  std::fflush(stderr);
  shown_ = true;
}

void TerminalProgress::EraseLocked() {
  if (!shown_) return;
  fmt::print(stderr, "\r\x1b[K");
  std::fflush(stderr);
  shown_ = false;
}

void TerminalProgress::Warn(const std::string& line) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) EraseLocked();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void TerminalProgress::WarnIfPartial(const model::Trace& trace) {
  if (!trace.facts.partial) return;
  // Exit 0 (what the file holds is reported), but never silently: the cut changes the figures.
  Warn(fmt::format(
      "vramscope: warning: {} is cut off at byte {} (partial file): reporting what it holds up to "
      "the cut; the notes say what is missing",
      trace.source.path, trace.facts.cut_at_byte));
}

void TerminalProgress::Note(const std::string& line) {
  if (!notes_) return;
  // Under the lock, so that the ticker cannot draw the line in the middle of the note.
  const std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_) EraseLocked();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace vramscope::cli
