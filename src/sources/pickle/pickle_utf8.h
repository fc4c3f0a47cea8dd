// The UTF-8 checks of the strings a pickle holds: the reader points into the file for valid
// text, and replaces what CPython writes for lone surrogates (downstream writers, SQLite and JSON,
// need valid UTF-8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace vramscope::pickle {

enum class Utf8 { kValid, kSurrogates, kInvalid };

// Strict UTF-8 (no overlongs, nothing above U+10FFFF). Encoded surrogates, which CPython writes for
// lone surrogates (file names that were not valid UTF-8), are reported apart so the caller can
// replace them: downstream writers (SQLite, JSON) need valid UTF-8.
Utf8 CheckUtf8(const uint8_t* s, size_t n);

inline bool IsValidUtf8(const uint8_t* s, size_t n) { return CheckUtf8(s, n) == Utf8::kValid; }

// Replaces each encoded surrogate (ED A0..BF xx) with U+FFFD; the rest is already valid.
std::string ReplaceSurrogates(const uint8_t* s, size_t n);

}  // namespace vramscope::pickle
