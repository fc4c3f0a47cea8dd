// Where the native capture's libraries are, for `vramscope run --native`: the injection library
// vramscope builds (libvramscope_inject.so, where CUPTI was found at build time) and the CUPTI
// library that NVTX loads so that its ranges reach CUPTI's callbacks.
#pragma once

#include <optional>
#include <string>

namespace vramscope::capture {

// $VRAMSCOPE_INJECT_LIB, next to the binary (a build tree), or <prefix>/lib/vramscope (an
// installed or pip-installed vramscope); nullopt when none is readable.
std::optional<std::string> FindInjectLibrary();

// $VRAMSCOPE_CUPTI_LIB, else the one the injection library was built against (when it is still
// there).
std::optional<std::string> FindCuptiLibrary();

}  // namespace vramscope::capture
