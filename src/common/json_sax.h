// A fast event-driven (SAX) JSON reader for big inputs (profiler traces of gigabytes): one pass
// over the bytes, no document, no recursion, strings handed over without a copy per character.
//
// Contract: it drives the same consumer interface as nlohmann::json::sax_parse, and accepts and
// rejects exactly what nlohmann's strict parser does (RFC 8259: one value, then only whitespace;
// strings of valid UTF-8 without raw control characters; surrogate pairs in \u escapes; numbers
// without leading zeros; a float that overflows to infinity is an error; a NUL byte after the value
// ends the input), with the same events in
// the same order: fuzz/json_sax checks both readers against each other on every input. Integers
// are number_unsigned when non-negative and they fit 64 bits, number_integer when negative and
// they fit, else number_float with the literal, as nlohmann does. start_object / start_array get
// kUnknownSize. The consumer's parse_error is never called: errors come back in JsonSaxResult.
//
// The consumer provides: null(), boolean(bool), number_integer(int64_t),
// number_unsigned(uint64_t), number_float(double, const std::string& literal),
// string(std::string&), key(std::string&), start_object(size_t), end_object(),
// start_array(size_t), end_array(); each returns false to stop the parse (JsonSaxResult::stopped).
// The strings passed are buffers this reader reuses; the consumer may swap or move them away.
//
// Two ways in: Parse reads text already in memory (a mapped file), and ParseStream pulls the
// text from a Source chunk by chunk (a gzip being inflated), holding one chunk and the token in
// progress, never the document. Both give the same events, results and error positions (counted
// from the start of the whole input); fuzz/json_sax checks that too, feeding chunks of every
// size.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/utf8.h"

namespace vramscope::json_sax {

inline constexpr size_t kUnknownSize = static_cast<size_t>(-1);

struct JsonSaxResult {
  bool ok = true;        // the whole input was one valid JSON value and the consumer took it
  bool stopped = false;  // the consumer returned false (ok is false, message empty)
  // Where the input is invalid: the offending byte, counted from 1 (the input's size + 1 when it
  // ends early, the byte that is missing), and what was wrong there.
  size_t position = 0;
  bool ended_early = false;  // the input ended inside the value: a file cut off, most likely
  std::string message;
};

// More input for ParseStream. Read fills `out` with up to `size` bytes (size > 0) and returns how
// many; 0 only at the end of the input. A source that fails returns 0 and keeps the reason itself:
// the parse then ends early, and the caller reports the source's reason instead.
class Source {
 public:
  virtual ~Source() = default;
  virtual size_t Read(char* out, size_t size) = 0;
};

struct ParseOptions {
  // Called between tokens, every `progress_step` bytes or so, with how many bytes from the start
  // the reader is done with (it never reads them again): a mapped input can let them go.
  std::function<void(uint64_t done)> progress;
  uint64_t progress_step = uint64_t{32} << 20;
  // ParseStream: what it reads from its source at a time (its buffer grows past it only while
  // one token is longer). Small values are for tests, which cut every token that way.
  size_t stream_chunk = size_t{1} << 20;
};

namespace internal {

// Bytes a string's fast scan stops at: '"', '\\', control characters, and non-ASCII (validated).
inline bool StopsStringScan(unsigned char c) {
  return c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
}

template <typename Consumer>
class Reader {
 public:
  Reader(std::string_view text, Consumer& consumer, const ParseOptions& options)
      : begin_(reinterpret_cast<const unsigned char*>(text.data())),
        p_(begin_),
        end_(begin_ + text.size()),
        consumer_(consumer),
        options_(options),
        next_progress_(options.progress_step) {}
  Reader(Source& source, Consumer& consumer, const ParseOptions& options)
      : consumer_(consumer), options_(options), next_progress_(options.progress_step) {
    source_ = &source;
    chunk_ = std::max<size_t>(16, options.stream_chunk);
    buffer_.resize(chunk_);
    begin_ = p_ = end_ = buffer_.data();
  }

  JsonSaxResult Run() {
    // A UTF-8 byte order mark is skipped, as nlohmann does.
    Ensure(3);
    if (end_ - p_ >= 3 && p_[0] == 0xEF && p_[1] == 0xBB && p_[2] == 0xBF) p_ += 3;
    // Containers open, innermost last: true for an object.
    std::vector<bool> open;
    // After a value inside a container: a ',' or the container's end comes next.
    bool after_value = false;
    for (;;) {
      if (options_.progress && Done() >= next_progress_) {
        options_.progress(Done());
        next_progress_ = Done() + options_.progress_step;
      }
      SkipSpace();
      if (after_value) {
        if (open.empty()) break;
        if (!Avail()) return Fail("unexpected end of input inside a container");
        const unsigned char c = *p_;
        const bool object = open.back();
        if (c == ',') {
          ++p_;
          if (object && !ReadKey()) return result_;
          after_value = false;
          continue;
        }
        if (c == (object ? '}' : ']')) {
          ++p_;
          open.pop_back();
          if (!(object ? consumer_.end_object() : consumer_.end_array())) return Stop();
          continue;  // after_value stays: the container was a value
        }
        return Fail(object ? "expected ',' or '}' after an object member"
                           : "expected ',' or ']' after an array item");
      }
      if (!Avail()) return Fail("unexpected end of input where a value was expected");
      switch (*p_) {
        case '{':
          ++p_;
          if (!consumer_.start_object(kUnknownSize)) return Stop();
          SkipSpace();
          if (Avail() && *p_ == '}') {
            ++p_;
            if (!consumer_.end_object()) return Stop();
            after_value = true;
            continue;
          }
          open.push_back(true);
          if (!ReadKey()) return result_;
          continue;
        case '[':
          ++p_;
          if (!consumer_.start_array(kUnknownSize)) return Stop();
          SkipSpace();
          if (Avail() && *p_ == ']') {
            ++p_;
            if (!consumer_.end_array()) return Stop();
            after_value = true;
            continue;
          }
          open.push_back(false);
          continue;
        case '"':
          ++p_;
          if (!ReadString()) return result_;
          if (!consumer_.string(text_)) return Stop();
          break;
        case 't':
          if (!Literal("true")) return result_;
          if (!consumer_.boolean(true)) return Stop();
          break;
        case 'f':
          if (!Literal("false")) return result_;
          if (!consumer_.boolean(false)) return Stop();
          break;
        case 'n':
          if (!Literal("null")) return result_;
          if (!consumer_.null()) return Stop();
          break;
        default:
          if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) {
            if (!ReadNumber()) return result_;
            break;
          }
          return Fail("expected a value");
      }
      after_value = true;
    }
    SkipSpace();
    // nlohmann reads a NUL byte where a token would start as the end of the input (files padded
    // with zeros after the value are read); anything else after the value is an error.
    if (Avail() && *p_ != '\0') return Fail("unexpected content after the JSON value");
    return result_;
  }

 private:
  // Whether a byte is there at p_, pulling more from the source when the buffer is used up.
  bool Avail() {
    if (p_ < end_) [[likely]]
      return true;
    return More();
  }
  // At least `n` bytes at p_ where the input has them.
  void Ensure(size_t n) {
    while (static_cast<size_t>(end_ - p_) < n && More()) {
    }
  }
  // ParseStream: the bytes from the token in progress (anchor_, else p_) moved to the buffer's
  // start, then as many as fit read after them; the buffer grows only while one token is longer
  // than a chunk. False at the end of the input (and always for Parse's text in memory).
  bool More() {
    if (source_ == nullptr || exhausted_) return false;
    const size_t keep = static_cast<size_t>((anchor_ != nullptr ? anchor_ : p_) - begin_);
    const size_t at = static_cast<size_t>(p_ - begin_);
    const size_t anchor = anchor_ != nullptr ? static_cast<size_t>(anchor_ - begin_) : 0;
    const size_t kept = static_cast<size_t>(end_ - begin_) - keep;
    std::memmove(buffer_.data(), buffer_.data() + keep, kept);
    base_ += keep;
    if (buffer_.size() - kept < chunk_ / 2) buffer_.resize(kept + chunk_);
    const size_t n =
        source_->Read(reinterpret_cast<char*>(buffer_.data() + kept), buffer_.size() - kept);
    begin_ = buffer_.data();
    p_ = begin_ + (at - keep);
    if (anchor_ != nullptr) anchor_ = begin_ + (anchor - keep);
    end_ = begin_ + kept + n;
    if (n == 0) exhausted_ = true;
    return n > 0;
  }
  // Bytes of the whole input before p_.
  uint64_t Done() const { return base_ + static_cast<uint64_t>(p_ - begin_); }

  void SkipSpace() {
    while (Avail() && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  JsonSaxResult Fail(const char* what) { return FailAt(p_, what); }
  JsonSaxResult FailAt(const unsigned char* at, const char* what) {
    result_.ok = false;
    result_.position = static_cast<size_t>(base_ + static_cast<uint64_t>(at - begin_)) + 1;
    bool at_end = at >= end_;
    if (at_end && source_ != nullptr && !exhausted_) {
      p_ = end_;  // a stream's buffer ends here: whether the input does too
      at_end = !More();
    }
    result_.ended_early = at_end;
    result_.message = what;
    return result_;
  }
  JsonSaxResult Stop() {
    result_.ok = false;
    result_.stopped = true;
    return result_;
  }

  bool Literal(std::string_view word) {
    for (const char c : word) {
      if (!Avail()) {
        Fail("unexpected end of input inside a literal");
        return false;
      }
      if (*p_ != static_cast<unsigned char>(c)) {
        Fail("invalid literal");
        return false;
      }
      ++p_;
    }
    return true;
  }

  // A member's key and its ':' (the key's '"' not yet read).
  bool ReadKey() {
    SkipSpace();
    if (!Avail()) {
      Fail("unexpected end of input where an object key was expected");
      return false;
    }
    if (*p_ != '"') {
      Fail("expected a string as an object key");
      return false;
    }
    ++p_;
    if (!ReadString()) return false;
    if (!consumer_.key(text_)) {
      Stop();
      return false;
    }
    SkipSpace();
    if (!Avail()) {
      Fail("unexpected end of input where ':' was expected");
      return false;
    }
    if (*p_ != ':') {
      Fail("expected ':' after an object key");
      return false;
    }
    ++p_;
    return true;
  }

  // The rest of a string after its opening '"', decoded into text_.
  bool ReadString() {
    text_.clear();
    for (;;) {
      const unsigned char* run = p_;
      ScanPlain();
      text_.append(reinterpret_cast<const char*>(run), static_cast<size_t>(p_ - run));
      if (!Avail()) {
        Fail("unexpected end of input inside a string");
        return false;
      }
      const unsigned char c = *p_;
      if (!StopsStringScan(c)) continue;  // the scan reached the buffer's end: more was read
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        if (!ReadEscape()) return false;
        continue;
      }
      if (c < 0x20) {
        Fail("control character inside a string (must be escaped)");
        return false;
      }
      Ensure(4);  // the longest UTF-8 sequence
      const size_t n = Utf8SequenceLength(p_, static_cast<size_t>(end_ - p_));
      if (n == 0) {
        Fail("invalid UTF-8 inside a string");
        return false;
      }
      text_.append(reinterpret_cast<const char*>(p_), n);
      p_ += n;
    }
  }

  // Advances p_ to the first byte StopsStringScan accepts, 16 at a time where SSE2 is there.
  void ScanPlain() {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i below_space = _mm_set1_epi8(0x20);
    while (end_ - p_ >= 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p_));
      // Signed compare: bytes >= 0x80 are negative, so "< 0x20" also catches non-ASCII.
      const __m128i stop =
          _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                       _mm_cmplt_epi8(v, below_space));
      const int mask = _mm_movemask_epi8(stop);
      if (mask != 0) {
        p_ += __builtin_ctz(static_cast<unsigned>(mask));
        return;
      }
      p_ += 16;
    }
#endif
    while (p_ < end_ && !StopsStringScan(*p_)) ++p_;
  }

  bool Hex4(uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      if (!Avail()) {
        Fail("unexpected end of input inside a \\u escape");
        return false;
      }
      const unsigned char c = *p_;
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        Fail("a \\u escape needs four hexadecimal digits");
        return false;
      }
      v = v * 16 + d;
      ++p_;
    }
    *out = v;
    return true;
  }

  bool ReadEscape() {
    ++p_;  // the backslash
    if (!Avail()) {
      Fail("unexpected end of input inside an escape");
      return false;
    }
    const unsigned char c = *p_++;
    if (c == '"' || c == '\\' || c == '/') {
      text_.push_back(static_cast<char>(c));
      return true;
    }
    constexpr std::string_view kLetters = "bfnrt", kControls = "\b\f\n\r\t";
    if (const size_t k = kLetters.find(static_cast<char>(c)); k != std::string_view::npos) {
      text_.push_back(kControls[k]);
      return true;
    }
    if (c != 'u') {
      --p_;
      Fail("invalid escape in a string");
      return false;
    }
    uint32_t cp;
    if (!Hex4(&cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      Fail("a \\u escape of a low surrogate without its high surrogate");
      return false;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      Ensure(2);
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') {
        Fail(p_ >= end_ ? "unexpected end of input after a high surrogate"
                        : "a high surrogate must be followed by a \\u escape of a low one");
        return false;
      }
      p_ += 2;
      uint32_t low;
      if (!Hex4(&low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) {
        Fail("a high surrogate must be followed by a \\u escape of a low one");
        return false;
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    AppendUtf8(text_, cp);
    return true;
  }

  bool Digit() { return Avail() && *p_ >= '0' && *p_ <= '9'; }

  // A number, its first byte at p_. anchor_ holds its start while it is read (the literal is
  // kept for floats and errors), so that More() keeps it in the buffer.
  bool ReadNumber() {
    anchor_ = p_;
    const bool ok = ReadNumberAt();
    anchor_ = nullptr;
    return ok;
  }
  bool ReadNumberAt() {
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (!Avail()) {
      Fail("unexpected end of input inside a number");
      return false;
    }
    uint64_t magnitude = 0;
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (Digit()) {
        const uint64_t d = *p_ - '0';
        if (magnitude > (UINT64_MAX - d) / 10) overflow = true;
        magnitude = magnitude * 10 + d;
        ++p_;
      }
    } else {
      Fail("a number needs a digit after '-'");
      return false;
    }
    bool is_float = false;
    if (Avail() && *p_ == '.') {
      ++p_;
      if (!Digit()) {
        Fail(p_ == end_ ? "unexpected end of input inside a number"
                        : "a number needs a digit after '.'");
        return false;
      }
      while (Digit()) ++p_;
      is_float = true;
    }
    if (Avail() && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (Avail() && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!Digit()) {
        Fail(p_ == end_ ? "unexpected end of input inside a number"
                        : "a number needs a digit in its exponent");
        return false;
      }
      while (Digit()) ++p_;
      is_float = true;
    }
    if (!is_float && !overflow) {
      if (!negative) {
        if (!consumer_.number_unsigned(magnitude)) return StopFalse();
        return true;
      }
      if (magnitude <= static_cast<uint64_t>(INT64_MAX) + 1) {
        const int64_t v = magnitude == static_cast<uint64_t>(INT64_MAX) + 1
                              ? INT64_MIN
                              : -static_cast<int64_t>(magnitude);
        if (!consumer_.number_integer(v)) return StopFalse();
        return true;
      }
    }
    literal_.assign(reinterpret_cast<const char*>(anchor_), static_cast<size_t>(p_ - anchor_));
    double value = 0;
    const auto [ptr, ec] =
        std::from_chars(literal_.data(), literal_.data() + literal_.size(), value);
    if (ec == std::errc::result_out_of_range) {
      // from_chars says "out of range" for underflow and overflow alike; strtod, which nlohmann
      // uses, rounds an underflow to zero or a denormal, and overflows to infinity.
      value = std::strtod(literal_.c_str(), nullptr);
    } else if (ec != std::errc() || ptr != literal_.data() + literal_.size()) {
      FailAt(anchor_, "invalid number");
      return false;
    }
    if (!std::isfinite(value)) {
      FailAt(anchor_, "number overflows a double");
      return false;
    }
    if (!consumer_.number_float(value, literal_)) return StopFalse();
    return true;
  }

  bool StopFalse() {
    Stop();
    return false;
  }

  // The bytes at hand: the whole text (Parse), or the stream's buffer (ParseStream), which holds
  // the input from byte base_ on.
  const unsigned char* begin_ = nullptr;
  const unsigned char* p_ = nullptr;
  const unsigned char* end_ = nullptr;
  uint64_t base_ = 0;
  Source* source_ = nullptr;
  std::vector<unsigned char> buffer_;
  size_t chunk_ = 0;
  bool exhausted_ = false;
  const unsigned char* anchor_ = nullptr;  // the number being read: kept in the buffer
  Consumer& consumer_;
  const ParseOptions& options_;
  uint64_t next_progress_;
  std::string text_;
  std::string literal_;
  JsonSaxResult result_;
};

}  // namespace internal

// Reads `text` (one JSON value) into `consumer`'s events.
template <typename Consumer>
JsonSaxResult Parse(std::string_view text, Consumer& consumer, const ParseOptions& options = {}) {
  return internal::Reader<Consumer>(text, consumer, options).Run();
}

// The same, the text pulled from `source` as it is read.
template <typename Consumer>
JsonSaxResult ParseStream(Source& source, Consumer& consumer, const ParseOptions& options = {}) {
  return internal::Reader<Consumer>(source, consumer, options).Run();
}

}  // namespace vramscope::json_sax
