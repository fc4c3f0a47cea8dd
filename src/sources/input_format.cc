#include "sources/input_format.h"

#include <cctype>
#include <cstring>

#include "native_capture/vstrace_format.h"

namespace vramscope::sources {

InputFormat DetectInputFormat(std::span<const uint8_t> head) {
  if (head.empty()) return InputFormat::kEmpty;
  auto starts = [&](const char* magic, size_t n) {
    return head.size() >= n && std::memcmp(head.data(), magic, n) == 0;
  };
  if (starts("\x1f\x8b", 2)) return InputFormat::kGzip;
  if (starts("\x28\xb5\x2f\xfd", 4)) return InputFormat::kZstd;
  if (starts("PK\x03\x04", 4)) return InputFormat::kZipArchive;
  if (starts("SQLite format 3", 16)) return InputFormat::kSqlite;
  if (starts(vstrace::kMagic, vstrace::kMagicBytes)) return InputFormat::kNativeTrace;
  // Protocol 2+ pickles start with PROTO; a file of that one byte is such a pickle cut off at
  // its first byte (the reader says so).
  if (head[0] == 0x80 && (head.size() == 1 || (head[1] >= 2 && head[1] <= 5))) {
    return InputFormat::kPickle;
  }
  // A pprof profile's first field is a sample_type (field 1, length-delimited: 0x0a), a ValueType
  // of two small varints (at most 22 bytes) whose first field, type, is a varint (0x08). A text
  // starting with a newline has a printable byte, not 0x08, two bytes in.
  if (head.size() >= 3 && head[0] == 0x0a && head[1] >= 2 && head[1] <= 22 && head[2] == 0x08) {
    return InputFormat::kPprof;
  }
  size_t i = 0;
  while (i < head.size() &&
         (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) {
    ++i;
  }
  if (i < head.size() && head[i] == '{') return InputFormat::kJson;
  if (i < head.size() && head[i] == '[' && i + 1 < head.size() &&
      (head[i + 1] == '{' || head[i + 1] == '[' || head[i + 1] == ' ' || head[i + 1] == '\n' ||
       head[i + 1] == ']' || (head[i + 1] >= '0' && head[i + 1] <= '9') || head[i + 1] == '-')) {
    return InputFormat::kJson;
  }
  // Protocol 0/1 pickles: a container, scalar or text-argument opcode. GLOBAL ('c') and INST ('i')
  // count when followed by a "module\n" line, so that the reader can refuse them by name.
  switch (head[0]) {
    case '}':
    case ']':
    case '(':
    case ')':
    case 'N':
    case 'K':
    case 'J':
    case 'M':
    case 'G':
    case 'X':
    case 'T':
    case 'U':
      return InputFormat::kPickle;
    case 'c':
    case 'i': {
      size_t k = 1;
      while (k < head.size() && (std::isalnum(head[k]) || head[k] == '_' || head[k] == '.')) ++k;
      if (k > 1 && k < head.size() && head[k] == '\n') return InputFormat::kPickle;
      break;
    }
    default:
      break;
  }
  return InputFormat::kUnknown;
}

const char* InputFormatName(InputFormat format) {
  switch (format) {
    case InputFormat::kEmpty:
      return "an empty file";
    case InputFormat::kPickle:
      return "a pickle";
    case InputFormat::kJson:
      return "a JSON file";
    case InputFormat::kGzip:
      return "a gzip-compressed file";
    case InputFormat::kZstd:
      return "a zstd-compressed file";
    case InputFormat::kZipArchive:
      return "a zip archive (torch.save() writes these)";
    case InputFormat::kSqlite:
      return "a SQLite database";
    case InputFormat::kNativeTrace:
      return "a vramscope native trace (.vstrace)";
    case InputFormat::kPprof:
      return "a pprof profile (protobuf)";
    case InputFormat::kUnknown:
      return "an unrecognised file";
  }
  return "?";
}

}  // namespace vramscope::sources
