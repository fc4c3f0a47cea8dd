// What the pickle reader's tests share: pickles written as hex or text, and a parse that owns
// its input (the document points into it).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sources/pickle/pickle_reader.h"

namespace vramscope::pickle {

// "80 02 4b 05 2e" -> bytes. Whitespace is ignored.
inline std::vector<uint8_t> Hex(std::string_view hex) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      EXPECT_TRUE(c == ' ' || c == '\n') << "bad character in hex literal: " << c;
      continue;
    }
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high * 16 + v));
      high = -1;
    }
  }
  EXPECT_EQ(high, -1) << "odd number of hex digits";
  return out;
}

// Text-protocol pickles are easier to read as text.
inline std::vector<uint8_t> Text(std::string_view text) { return {text.begin(), text.end()}; }

// Owns the input bytes (the document points into them) and the parse result.
class Parsed {
 public:
  explicit Parsed(std::vector<uint8_t> bytes)
      : bytes_(std::move(bytes)), result_(Parse(bytes_, {}, &info_)) {}
  Parsed(const Parsed&) = delete;
  Parsed& operator=(const Parsed&) = delete;

  bool ok() const { return result_.ok(); }
  const std::string& error() const { return result_.status().message(); }
  const Document& doc() const { return result_.value(); }
  Value root() const { return doc().root(); }
  const ParseInfo& info() const { return info_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  // Shortcuts on the root value.
  Kind kind() const { return doc().kind(root()); }
  std::optional<int64_t> i64() const { return doc().AsInt64(root()); }
  std::optional<uint64_t> u64() const { return doc().AsUint64(root()); }
  std::optional<double> f64() const { return doc().AsDouble(root()); }
  std::optional<std::string_view> str() const { return doc().AsString(root()); }
  std::span<const Value> items() const { return doc().Items(root()); }

 private:
  std::vector<uint8_t> bytes_;
  ParseInfo info_;
  Result<Document> result_;
};

inline Parsed FromHex(std::string_view hex) { return Parsed(Hex(hex)); }
inline Parsed FromText(std::string_view text) { return Parsed(Text(text)); }

#define ASSERT_PARSES(p) ASSERT_TRUE((p).ok()) << (p).error()

// The error message for bytes that must not parse ("" and a test failure when they do).
inline std::string ErrorOf(const std::vector<uint8_t>& bytes) {
  const Result<Document> result = Parse(bytes);
  if (result.ok()) {
    ADD_FAILURE() << "parsed successfully, expected an error";
    return "";
  }
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidInput);
  return result.status().message();
}
inline std::string HexError(std::string_view hex) { return ErrorOf(Hex(hex)); }
inline std::string TextError(std::string_view text) { return ErrorOf(Text(text)); }

inline std::vector<int64_t> Ints(const Document& doc, std::span<const Value> items) {
  std::vector<int64_t> out;
  for (Value v : items) out.push_back(doc.AsInt64(v).value_or(-999999));
  return out;
}

}  // namespace vramscope::pickle
