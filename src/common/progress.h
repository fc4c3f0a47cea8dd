// A progress line on stderr for inputs that take more than a moment: shown only when stderr is a
// terminal, not before half a second has passed, and erased when done, so scripts and pipes see
// nothing of it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace vramscope {

class Progress {
 public:
  Progress(std::string label, bool enabled);
  ~Progress();
  void Update(uint64_t done, uint64_t total);
  void Finish();

 private:
  std::string label_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace vramscope
