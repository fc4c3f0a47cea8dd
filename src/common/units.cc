#include "common/units.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string_view>

namespace vramscope {

std::string FormatBytes(int64_t bytes) {
  const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  // Work in double for the scaled value; exact bytes are shown elsewhere.
  double value = std::fabs(static_cast<double>(bytes));
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{}{} B", negative ? "-" : "", static_cast<int64_t>(value));
  return fmt::format("{}{:.2f} {}", negative ? "-" : "", value, kUnits[unit]);
}

std::string FormatCount(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return n < 0 ? "-" + out : out;
}

int64_t ParseBytes(const std::string& text) {
  std::string_view s(text);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.empty()) return -1;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return -1;
  const std::string number(s.substr(0, i));
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || value < 0) return -1;
  std::string unit;
  for (char c : s.substr(i)) {
    if (!std::isspace(static_cast<unsigned char>(c))) {
      unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "t" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return -1;
  }
  const double bytes = value * scale;
  if (bytes > 9.0e18) return -1;
  return static_cast<int64_t>(std::llround(bytes));
}

std::string ForMessage(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace vramscope
