// Human-readable sizes and counts. Sizes print in binary units (KiB, MiB, GiB); exact bytes go to
// JSON and SQLite, never rounded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace vramscope {

// "1.50 GiB", "512 B", "-3.00 MiB".
std::string FormatBytes(int64_t bytes);
// "1,234,567".
std::string FormatCount(int64_t n);
// Parses "24GiB", "512MiB", "1.5 GB", "80G", "1024" (bytes). Returns -1 when malformed.
int64_t ParseBytes(const std::string& text);

// Text from an input file, made safe for a one-line message: control characters escaped
// (\n, \x01), at most `max` bytes kept (then "...").
std::string ForMessage(std::string_view text, size_t max = 60);

}  // namespace vramscope
