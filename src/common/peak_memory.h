// This process's peak resident memory, as the kernel counts it for the running program image
// (VmHWM). Unlike getrusage's ru_maxrss, it does not include what a parent process held before
// it forked and exec'd us, so benchmarks started from a big Python process measure us, not it.
#pragma once

#include <cstdint>

namespace vramscope {

// Bytes; 0 when /proc is not available.
uint64_t PeakResidentBytes();

}  // namespace vramscope
