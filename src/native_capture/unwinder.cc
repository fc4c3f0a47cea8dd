#include "native_capture/unwinder.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <utility>

namespace vramscope::capture {

namespace {

// glibc's backtrace(), with the signature unw_backtrace has.
int GlibcBacktrace(void** pcs, int max) { return ::backtrace(pcs, max); }

}  // namespace

Unwinder Unwinder::Load(std::string_view setting) {
  std::string note;
  if (setting == "glibc") {
    return {&GlibcBacktrace, "glibc backtrace() (VRAMSCOPE_NATIVE_UNWINDER=glibc)", false};
  }
  if (!setting.empty() && setting != "auto" && setting != "libunwind") {
    note = "; VRAMSCOPE_NATIVE_UNWINDER=" + std::string(setting) +
           " is not one of auto, libunwind, glibc, so auto was used";
  }
  // Loaded once and never closed: the addresses it returns are the program's, and the callback
  // may run on any thread until the process exits.
  void* library = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (library != nullptr) {
    if (void* symbol = ::dlsym(library, "unw_backtrace"); symbol != nullptr) {
      auto* function = reinterpret_cast<BacktraceFunction>(symbol);
      void* warm[4];
      function(warm, 4);  // its caches are set up now, not inside the first callback
      return {function, "libunwind unw_backtrace (libunwind.so.8)" + note, true};
    }
    ::dlclose(library);
    note = "; libunwind.so.8 has no unw_backtrace" + note;
  } else {
    note = "; libunwind.so.8 did not load (install libunwind8 for stacks about 20x cheaper)" + note;
  }
  void* warm[4];
  ::backtrace(warm, 4);  // loads libgcc's unwinder now, not inside the first callback
  return {&GlibcBacktrace, "glibc backtrace()" + note, false};
}

}  // namespace vramscope::capture
