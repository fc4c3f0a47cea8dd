// The last component of a slash-separated path, as a view into it.
#pragma once

#include <string_view>

namespace vramscope {

inline std::string_view PathBasename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace vramscope
