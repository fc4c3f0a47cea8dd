// Writes an output file so that a failed or interrupted run leaves nothing half-written: the
// content goes to a hidden temporary file beside the target, which is renamed into place only
// by Commit(). Without `overwrite`, an existing target is never replaced (checked up front and
// again at the rename, which refuses to replace a file that appeared in between).
#pragma once

#include <string>

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
  Status Commit();

 private:
  AtomicOutput(std::string target, std::string temp, bool overwrite);

  std::string target_;
  std::string temp_;
  bool overwrite_ = false;
  bool committed_ = false;
};

// Removes every uncommitted temporary file and exits with 130; installed for SIGINT/SIGTERM.
void InstallInterruptCleanup();

}  // namespace vramscope
