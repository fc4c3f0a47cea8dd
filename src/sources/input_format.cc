#include "sources/input_format.h"

#include <cctype>
#include <cstring>

#include "native_capture/vstrace_format.h"

namespace vramscope::sources {

namespace {

// Reads the protobuf varint at head[i], advancing i; false when it does not end in the head.
bool ReadVarint(std::span<const uint8_t> head, size_t& i, uint64_t& value) {
  value = 0;
  for (int shift = 0; i < head.size() && shift < 64; shift += 7) {
    const uint8_t byte = head[i++];
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// A profiler XSpace starts with its first plane (field 1, length-delimited: 0x0a, a varint
// length), whose fields start with its id (0x08, a varint; absent when 0) and then its name
// (0x12, a length of 1 to 255, then the name: printable, as "/host:CPU" and "/device:GPU:0" are).
// A pprof profile's ValueType has a varint (0x10) where a plane has its name.
bool LooksLikeXSpace(std::span<const uint8_t> head) {
  size_t i = 1;
  uint64_t value = 0;
  if (head.empty() || head[0] != 0x0a || !ReadVarint(head, i, value) || value < 3) return false;
  if (i < head.size() && head[i] == 0x08) {
    ++i;
    if (!ReadVarint(head, i, value)) return false;
  }
  if (i >= head.size() || head[i] != 0x12) return false;
  ++i;
  if (!ReadVarint(head, i, value) || value == 0 || value > 255) return false;
  for (size_t k = 0; k < value && i < head.size(); ++k, ++i) {
    if (head[i] < 0x20 || head[i] > 0x7e) return false;
  }
  return true;
}

}  // namespace

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
  if (LooksLikeXSpace(head)) return InputFormat::kXSpace;
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
    case InputFormat::kXSpace:
      return "a profiler XSpace (.xplane.pb)";
    case InputFormat::kUnknown:
      return "an unrecognised file";
  }
  return "?";
}

}  // namespace vramscope::sources
