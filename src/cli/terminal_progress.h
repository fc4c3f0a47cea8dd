// The CLI's Progress (common/progress.h): one progress line on stderr for the stages of a verb that
// can take more than a moment (read, replay, attribute, analyse, write, build the page). The
// contract:
// - shown only when `enabled` (-q turns it off) and stderr is a terminal, so scripts and pipes see
//   nothing of it;
// - the line appears once the stages have run half a second together (VRAMSCOPE_PROGRESS_DELAY_MS
//   overrides, for tests), as one line updated in place: its label, its fraction when the stage can
//   count its work (Update), and how long it has run; a ticker thread redraws it, so a stage that
//   cannot count still shows it is alive;
// - Finish() erases the line before the verb prints its results (and the destructor does).
// Thread-safe: workers of one stage may call Update concurrently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/progress.h"
#include "model/trace.h"

namespace vramscope::cli {

class TerminalProgress final : public Progress {
 public:
  // `enabled`: the progress line (shown only on a terminal); `notes`: Note() lines on stderr.
  explicit TerminalProgress(bool enabled, bool notes = false);
  ~TerminalProgress() override;
  TerminalProgress(const TerminalProgress&) = delete;
  TerminalProgress& operator=(const TerminalProgress&) = delete;

  // A stage begins (the previous one, if any, ends): the line names it.
  void Stage(std::string label) override;
  // How far the current stage is: `done` of `total` bytes or items.
  void Update(uint64_t done, uint64_t total, Unit unit = Unit::kBytes) override;
  // The stages are over for now: erases the line. A later Stage() shows it again.
  void Finish() override;
  void Note(const std::string& line) override;
  // A line on stderr whatever `notes` says (a warning about the input), clear of the progress line.
  void Warn(const std::string& line);
  // The warning for an input cut off before its end (TraceFacts::partial), if it is one: every
  // verb that reads a file says it the same way.
  void WarnIfPartial(const model::Trace& trace);

 private:
  void Tick();         // the ticker thread's loop
  void DrawLocked();   // with mutex_ held
  void EraseLocked();  // with mutex_ held

  const bool enabled_;
  const bool notes_;
  std::chrono::milliseconds delay_{500};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
  bool stopping_ = false;
  std::string label_;                                 // empty: no stage running
  std::chrono::steady_clock::time_point line_start_;  // the first stage since Finish()
  std::chrono::steady_clock::time_point stage_start_;
  uint64_t done_ = 0, total_ = 0;
  Unit unit_ = Unit::kBytes;
  bool counted_ = false;  // Update() was called in this stage
  bool shown_ = false;    // the line is on the terminal
};

}  // namespace vramscope::cli
