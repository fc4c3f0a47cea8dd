// Writes an output file so that a failed or interrupted run leaves nothing half-written: the
// content goes to a hidden temporary file beside the target, which is renamed into place only
// by Commit(). An interrupted run (its Control's token set) unwinds, and the destructor removes
// the temporary file; nothing here installs a signal handler. Without `overwrite`, an existing
// target is never replaced (checked up front and again at the rename, which refuses to replace a
// file that appeared in between).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/progress.h"
#include "common/status.h"

namespace vramscope {

class AtomicOutput {
 public:
  // Checks the target (its folder exists, it is not a directory, it does not exist unless
  // `overwrite`) and chooses the temporary path. Creates nothing yet.
  static Result<AtomicOutput> Prepare(const std::string& target, bool overwrite);

  AtomicOutput(AtomicOutput&& other) noexcept;
  AtomicOutput& operator=(AtomicOutput&&) = delete;
  AtomicOutput(const AtomicOutput&) = delete;
  ~AtomicOutput();  // removes the temporary file unless committed

  const std::string& temp_path() const { return temp_; }
  const std::string& target() const { return target_; }
  // Writes `bytes` to the temporary file in chunks of kWriteChunk, counting them on
  // control.progress and stopping with Interrupted, the temporary file left for the destructor,
  // as soon as control.cancel is set. Writers with their own I/O (SQLite) use temp_path().
  Status WriteAll(std::string_view bytes, const Control& control = {});
  Status Commit();

  static constexpr size_t kWriteChunk = size_t{1} << 20;

 private:
  AtomicOutput(std::string target, std::string temp, bool overwrite);

  std::string target_;
  std::string temp_;
  bool overwrite_ = false;
  bool committed_ = false;
};

}  // namespace vramscope
