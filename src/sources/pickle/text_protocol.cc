// Protocol 0's escaped and quoted strings (UNICODE, STRING; document_builder.h).
#include <string>

#include "common/utf8.h"
#include "sources/pickle/document_builder.h"

namespace vramscope::pickle {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool DocumentBuilder::DecodeUnicodeEscape(uint64_t at, std::string_view line, Value* out) {
  // raw-unicode-escape: bytes are Latin-1 code points except \uXXXX and \UXXXXXXXX.
  std::string s;
  s.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == '\\' && i + 1 < line.size() && (line[i + 1] == 'u' || line[i + 1] == 'U')) {
      const size_t digits = line[i + 1] == 'u' ? 4 : 8;
      if (i + 2 + digits > line.size()) return Fail(at, "UNICODE has a truncated \\u escape");
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int h = HexValue(line[i + 2 + k]);
        if (h < 0) return Fail(at, "UNICODE has a malformed \\u escape");
        cp = (cp << 4) | static_cast<uint32_t>(h);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Fail(at, "UNICODE escape is not a valid code point");
      }
      AppendUtf8(s, cp);
      i += 1 + digits;
    } else {
      AppendUtf8(s, c);
    }
  }
  *out = MakeOwned(std::move(s), Value::kTagOwnedStr);
  return true;
}

bool DocumentBuilder::DecodeQuotedString(uint64_t at, std::string_view line, Value* out) {
  // Python 2 str repr: 'text' or "text" with backslash escapes.
  if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') ||
      line.back() != line.front()) {
    return Fail(at, "STRING argument is not a quoted string");
  }
  line = line.substr(1, line.size() - 2);
  std::string s;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      s.push_back(line[i]);
      continue;
    }
    const char e = line[++i];
    switch (e) {
      case 'n':
        s.push_back('\n');
        break;
      case 't':
        s.push_back('\t');
        break;
      case 'r':
        s.push_back('\r');
        break;
      case 'a':
        s.push_back('\a');
        break;
      case 'b':
        s.push_back('\b');
        break;
      case 'f':
        s.push_back('\f');
        break;
      case 'v':
        s.push_back('\v');
        break;
      case 'x': {
        if (i + 2 >= line.size()) return Fail(at, "STRING has a truncated \\x escape");
        const int hi = HexValue(line[i + 1]);
        const int lo = HexValue(line[i + 2]);
        if (hi < 0 || lo < 0) return Fail(at, "STRING has a malformed \\x escape");
        s.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          for (int k = 0; k < 2 && i + 1 < line.size() && line[i + 1] >= '0' && line[i + 1] <= '7';
               ++k) {
            v = v * 8 + (line[++i] - '0');
          }
          s.push_back(static_cast<char>(v & 0xFF));
        } else {
          s.push_back(e);  // \\, \', \" and unknown escapes keep the character
        }
    }
  }
  if (!IsValidUtf8(reinterpret_cast<const uint8_t*>(s.data()), s.size())) {
    return Fail(at, "STRING is not valid text");
  }
  *out = MakeOwned(std::move(s), Value::kTagOwnedStr);
  return true;
}

}  // namespace vramscope::pickle
