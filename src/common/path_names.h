// The last component of a slash-separated path, as a view into it (header-only, so that the
// native capture library, which links nothing of ours, uses it too).
#pragma once

#include <string_view>

namespace vramscope {

inline std::string_view PathBasename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace vramscope
