#include "sources/pickle/pickle_utf8.h"

#include <cstring>

namespace vramscope::pickle {

Utf8 CheckUtf8(const uint8_t* s, size_t n) {
  bool surrogates = false;
  size_t i = 0;
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return Utf8::kInvalid;
    }
    if (i + extra >= n) return Utf8::kInvalid;
    for (size_t k = 1; k <= extra; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return Utf8::kInvalid;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        cp > 0x10FFFF) {
      return Utf8::kInvalid;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) surrogates = true;
    i += extra + 1;
  }
  return surrogates ? Utf8::kSurrogates : Utf8::kValid;
}

std::string ReplaceSurrogates(const uint8_t* s, size_t n) {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == 0xED && i + 2 < n && (s[i + 1] & 0xE0) == 0xA0) {
      out += "\xEF\xBF\xBD";
      i += 2;
    } else {
      out.push_back(static_cast<char>(s[i]));
    }
  }
  return out;
}

}  // namespace vramscope::pickle
