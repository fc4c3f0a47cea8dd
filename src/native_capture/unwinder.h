// How the native recorder captures the calling thread's stack: return addresses, innermost
// first, as glibc's backtrace() returns them.
//
// glibc's backtrace() goes through libgcc's unwinder, which finds and interprets each frame's
// DWARF unwind table on every call: about 290 ns a frame on the development machine, 13 us for
// a 46-frame stack, and most of the recorder's cost per event (bench/recorder_bench). libunwind's
// unw_backtrace (libunwind.so.8, the nongnu library perf and strace use) keeps a per-thread cache
// of each address's frame layout and walks a cached stack in about 13 ns a frame, returning the
// same addresses. The recorder loads it with dlopen, privately (RTLD_LOCAL: nothing it exports
// replaces the program's own unwinder), and falls back to backtrace() when it does not load.
#pragma once

#include <string>
#include <string_view>

namespace vramscope::capture {

class Unwinder {
 public:
  // `setting` is VRAMSCOPE_NATIVE_UNWINDER: "" or "auto" (libunwind when it loads, else glibc),
  // "libunwind" (the same, said as asked for), "glibc" (backtrace() only). Anything else counts as
  // "auto", and description() says so. Never fails: glibc's backtrace() is always there.
  static Unwinder Load(std::string_view setting);

  // Up to `max` return addresses of the caller's stack, the caller's own first.
  int Capture(void** pcs, int max) const { return backtrace_(pcs, max); }

  // Which unwinder, and why when it is not the fast one: the trace's "unwinder" process fact.
  const std::string& description() const { return description_; }
  bool fast() const { return fast_; }

 private:
  using BacktraceFunction = int (*)(void**, int);
  Unwinder(BacktraceFunction backtrace, std::string description, bool fast)
      : backtrace_(backtrace), description_(std::move(description)), fast_(fast) {}

  BacktraceFunction backtrace_;
  std::string description_;
  bool fast_;
};

}  // namespace vramscope::capture
