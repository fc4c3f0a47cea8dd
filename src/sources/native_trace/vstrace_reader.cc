#include "sources/native_trace/vstrace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

namespace vramscope::native_trace {

namespace {

using vstrace::RecordKind;

// Reads little-endian fields from one record's payload; any read past the end marks it bad.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == bytes_.size(); }

  uint64_t Uint(size_t n) {
    if (!ok_ || bytes_.size() - pos_ < n) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{bytes_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  uint8_t U8() { return static_cast<uint8_t>(Uint(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Uint(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Uint(4)); }
  int32_t I32() { return static_cast<int32_t>(U32()); }
  uint64_t U64() { return Uint(8); }
  std::string Text(size_t n) {
    if (!ok_ || bytes_.size() - pos_ < n) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::string Text32() { return Text(U32()); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  bool ok_ = true;
};

uint32_t Le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void ReadPrefix(Cursor& c, Record& r) {
  r.time_ns = c.U64();
  r.tid = c.U32();
  r.device = c.I32();
  r.stack = c.U32();
}

// Decodes one intact record into `out`. Returns false when its payload does not have the shape
// its kind requires (damage that the checksum did not catch, or a writer bug).
bool Decode(RecordKind kind, Cursor& c, uint64_t offset, ParsedTrace& out) {
  Record r;
  r.kind = kind;
  r.file_offset = offset;
  switch (kind) {
    case RecordKind::kProcessFact: {
      std::string key = c.Text(c.U16());
      std::string value = c.Text32();
      if (!c.ok()) return false;
      out.facts.emplace_back(std::move(key), std::move(value));
      return c.at_end();
    }
    case RecordKind::kString: {
      const uint32_t id = c.U32();
      std::string text = c.Text32();
      if (!c.ok() || id == 0) return false;
      out.strings[id] = std::move(text);
      return c.at_end();
    }
    case RecordKind::kFrame: {
      const uint32_t id = c.U32();
      Frame f;
      f.pc = c.U64();
      f.module = c.U32();
      f.offset = c.U64();
      f.symbol = c.U32();
      if (!c.ok() || id == 0) return false;
      out.frames[id] = f;
      return c.at_end();
    }
    case RecordKind::kStack: {
      const uint32_t id = c.U32();
      const uint16_t count = c.U16();
      if (!c.ok() || id == 0 || count > vstrace::kMaxStackFrames) return false;
      std::vector<uint32_t> frames(count);
      for (uint32_t& f : frames) f = c.U32();
      if (!c.ok()) return false;
      out.stacks[id] = std::move(frames);
      return c.at_end();
    }
    case RecordKind::kAlloc:
      ReadPrefix(c, r);
      r.api = c.U8();
      r.address = c.U64();
      r.bytes = c.U64();
      r.stream = c.U64();
      break;
    case RecordKind::kFree:
      ReadPrefix(c, r);
      r.api = c.U8();
      r.address = c.U64();
      r.stream = c.U64();
      break;
    case RecordKind::kAllocFailed:
      ReadPrefix(c, r);
      r.api = c.U8();
      r.bytes = c.U64();
      r.stream = c.U64();
      r.result = c.U32();
      break;
    case RecordKind::kVmmCreate:
      ReadPrefix(c, r);
      r.handle = c.U64();
      r.bytes = c.U64();
      r.location_device = c.I32();
      break;
    case RecordKind::kVmmRelease:
      ReadPrefix(c, r);
      r.handle = c.U64();
      break;
    case RecordKind::kVmmMap:
      ReadPrefix(c, r);
      r.address = c.U64();
      r.bytes = c.U64();
      r.handle_offset = c.U64();
      r.handle = c.U64();
      break;
    case RecordKind::kVmmUnmap:
    case RecordKind::kVaReserve:
    case RecordKind::kVaFree:
      ReadPrefix(c, r);
      r.address = c.U64();
      r.bytes = c.U64();
      break;
    case RecordKind::kNvtxPush:
    case RecordKind::kNvtxMark:
      r.time_ns = c.U64();
      r.tid = c.U32();
      r.name = c.Text32();
      break;
    case RecordKind::kNvtxPop:
      r.time_ns = c.U64();
      r.tid = c.U32();
      break;
    case RecordKind::kNvtxStart:
      r.time_ns = c.U64();
      r.tid = c.U32();
      r.range_id = c.U64();
      r.name = c.Text32();
      break;
    case RecordKind::kNvtxEnd:
      r.time_ns = c.U64();
      r.tid = c.U32();
      r.range_id = c.U64();
      break;
    case RecordKind::kEnd:
      r.time_ns = c.U64();
      r.name = c.Text32();
      if (c.ok() && c.at_end()) {
        out.ended = true;
        out.end_reason = r.name;
      }
      break;
    default:
      ++out.unknown_records;  // a newer minor version's kind: skipped by its length
      return true;
  }
  if (!c.ok() || !c.at_end()) return false;
  out.records.push_back(std::move(r));
  return true;
}

}  // namespace

Result<ParsedTrace> ReadNativeTrace(std::span<const uint8_t> bytes, const std::string& path) {
  const size_t n = bytes.size();
  if (n < vstrace::kMagicBytes ||
      std::memcmp(bytes.data(), vstrace::kMagic, vstrace::kMagicBytes) != 0) {
    return InvalidInput(
        fmt::format("{}: not a vramscope native trace (.vstrace): it does not start with the "
                    "format's magic bytes",
                    path));
  }
  if (n < vstrace::kHeaderFixedBytes) {
    return InvalidInput(fmt::format(
        "{}: the native trace ends inside its header ({} bytes): the traced process stopped "
        "before it wrote anything; nothing to read",
        path, n));
  }
  Cursor c(bytes.subspan(vstrace::kMagicBytes));
  ParsedTrace out;
  vstrace::Header& h = out.header;
  h.major = c.U16();
  h.minor = c.U16();
  if (h.major != vstrace::kMajorVersion) {
    return InvalidInput(fmt::format(
        "{}: native trace format version {}.{}; this vramscope reads version {}.x only{}", path,
        h.major, h.minor, vstrace::kMajorVersion,
        h.major > vstrace::kMajorVersion
            ? ": the trace was written by a newer vramscope; read it with that version or "
              "upgrade vramscope"
            : ""));
  }
  const uint32_t header_bytes = c.U32();
  h.pid = c.U32();
  h.rank = c.I32();
  h.start_realtime_ns = c.U64();
  h.start_clock_ns = c.U64();
  const uint16_t clock_bytes = c.U16();
  if (header_bytes < vstrace::kHeaderFixedBytes + clock_bytes + 4 ||
      header_bytes > vstrace::kMaxHeaderBytes) {
    return InvalidInput(fmt::format("{}: the native trace's header is damaged (it claims {} bytes)",
                                    path, header_bytes));
  }
  if (n < header_bytes) {
    return InvalidInput(fmt::format(
        "{}: the native trace ends inside its header ({} of {} bytes): the traced process "
        "stopped before it wrote anything; nothing to read",
        path, n, header_bytes));
  }
  h.clock = c.Text(clock_bytes);
  if (vstrace::Crc32(bytes.data(), header_bytes - 4) != Le32(bytes.data() + header_bytes - 4)) {
    return InvalidInput(fmt::format(
        "{}: the native trace's header is damaged (its checksum does not match)", path));
  }

  size_t pos = header_bytes;
  out.valid_bytes = pos;
  while (pos < n) {
    // The space the writer reserved ahead of its last record (vstrace::kMappedChunkBytes at
    // most) is zeros until it closes the file: a process that crashed or was killed, or is still
    // running, leaves it. No record begins with a zero length.
    if (bytes[pos] == 0 && std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(pos),
                                       bytes.end(), [](uint8_t b) { return b == 0; })) {
      out.reserved_tail_bytes = n - pos;
      break;
    }
    if (n - pos < 4) {
      out.stopped = fmt::format(
          "at byte {} the file ends inside a record's length ({} trailing bytes)", pos, n - pos);
      break;
    }
    const uint32_t length = Le32(bytes.data() + pos);
    if (length == 0 || length > vstrace::kMaxRecordBytes) {
      out.stopped = fmt::format(
          "at byte {} a record claims {} bytes, which no record has (damaged data)", pos, length);
      break;
    }
    if (n - pos < size_t{length} + vstrace::kRecordOverheadBytes) {
      out.stopped = fmt::format(
          "at byte {} the last record is cut short ({} of its {} bytes are in the file)", pos,
          n - pos, size_t{length} + vstrace::kRecordOverheadBytes);
      break;
    }
    const uint8_t* record = bytes.data() + pos;
    if (vstrace::Crc32(record, 4 + length) != Le32(record + 4 + length)) {
      out.stopped = fmt::format(
          "at byte {} a record's checksum does not match (damaged data); the records after it "
          "are not read",
          pos);
      break;
    }
    const auto kind = static_cast<RecordKind>(record[4]);
    Cursor payload(std::span<const uint8_t>(record + 5, length - 1));
    if (!Decode(kind, payload, pos, out)) {
      out.stopped = fmt::format(
          "at byte {} a {} record does not have its kind's layout (damaged data, or a writer "
          "bug); the records after it are not read",
          pos, vstrace::RecordKindName(record[4]));
      break;
    }
    ++out.record_count;
    pos += length + vstrace::kRecordOverheadBytes;
    out.valid_bytes = pos;
  }
  return out;
}

}  // namespace vramscope::native_trace
