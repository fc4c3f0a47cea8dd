// How a long request reports where it is, and how its caller stops it. Every pipeline request
// carries a Control: the library names its stages and counts its work on `progress`, and polls
// `cancel` between units of work (a parse chunk, a stage, a batch of rows, a simulation), returning
// Interrupted when it is set. Neither may be set: a library call alone shows nothing and runs to
// its end. The library never installs a signal handler or exits: the CLI's handler sets the token
// (src/cli/interrupt.h); the Python binding sets it on KeyboardInterrupt.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace vramscope {

// Where a request is. Implementations: the CLI's progress line on a terminal
// (cli/terminal_progress.h), a callback for Python and tests. Thread-safe: workers of one stage
// may call Update concurrently.
class Progress {
 public:
  enum class Unit { kBytes, kItems };

  virtual ~Progress() = default;
  // A stage begins (the previous one, if any, ends).
  virtual void Stage(std::string label) = 0;
  // How far the current stage is: `done` of `total` bytes or items.
  virtual void Update(uint64_t done, uint64_t total, Unit unit = Unit::kBytes) = 0;
  // The stages are over for now; a later Stage() starts again.
  virtual void Finish() = 0;
  // A line worth telling whoever watches, terminal or not ("tracing rank 3 of 8 ...", "replacing
  // the captures of an earlier run ..."); the CLI prints it on stderr unless -q or --json.
  virtual void Note(const std::string& line) = 0;
};

// Set once, from any thread or a signal handler; read by the request between units of work.
class CancelToken {
 public:
  void Cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};
// Cancel() is called from signal handlers: the flag must be lock-free.
static_assert(std::atomic<bool>::is_always_lock_free);

struct Control {
  Progress* progress = nullptr;         // null: no progress reported
  const CancelToken* cancel = nullptr;  // null: not cancellable

  void Stage(std::string label) const {
    if (progress != nullptr) progress->Stage(std::move(label));
  }
  void Update(uint64_t done, uint64_t total, Progress::Unit unit = Progress::Unit::kBytes) const {
    if (progress != nullptr) progress->Update(done, total, unit);
  }
  void Finish() const {
    if (progress != nullptr) progress->Finish();
  }
  void Note(const std::string& line) const {
    if (progress != nullptr) progress->Note(line);
  }
  bool cancelled() const { return cancel != nullptr && cancel->cancelled(); }
  // Ok, or Interrupted naming what was under way.
  Status CheckCancelled(const char* what = "the request") const {
    if (!cancelled()) return Status::Ok();
    return Interrupted(std::string("interrupted: ") + what + " was cancelled");
  }
};

// Null-safe helpers for stages whose caller may have no progress line.
inline void ProgressStage(Progress* p, std::string label) {
  if (p != nullptr) p->Stage(std::move(label));
}
inline void ProgressFinish(Progress* p) {
  if (p != nullptr) p->Finish();
}

}  // namespace vramscope
