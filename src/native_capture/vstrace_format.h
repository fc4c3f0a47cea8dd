// The native trace file (.vstrace): what `vramscope run --native` writes from inside the traced
// process (src/native_capture/inject.cc) and what sources/native_trace reads. The layout is
// documented in docs/design/native-trace.md; this header is its single definition in code.
//
// Append-only and crash-safe: a header, then records copied into a shared mapping of the file,
// so that a record is in the file (the page cache) as soon as the copy returns and a crash or a
// kill loses at most the record being copied. Each record is length-prefixed and ends with a
// CRC-32 of its bytes, so a reader stops at the last complete, intact record; the space reserved
// ahead of the last record is zeros, which a reader skips, until the writer closes the file.
//
// This part has no dependencies (it is linked into the injection library, which runs inside the
// user's process): no fmt, no exceptions thrown by its own code.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace vramscope::vstrace {

// "\x89VST\r\n\x1a\n": a non-ASCII first byte (never text, never a pickle's PROTO opcode 0x80),
// and the line-ending bytes catch a file mangled by a text-mode copy.
inline constexpr char kMagic[8] = {'\x89', 'V', 'S', 'T', '\r', '\n', '\x1a', '\n'};
inline constexpr size_t kMagicBytes = sizeof(kMagic);

// Readers read every minor version of their major one (records of kinds they do not know are
// skipped by their length) and refuse any other major version.
inline constexpr uint16_t kMajorVersion = 1;
inline constexpr uint16_t kMinorVersion = 0;

// Header bytes before the clock description: magic, major, minor, header_bytes, pid, rank,
// start_realtime_ns, start_clock_ns, clock description length.
inline constexpr size_t kHeaderFixedBytes = 42;
inline constexpr size_t kMaxHeaderBytes = 64 * 1024;
// A record's length field counts its kind byte and payload; anything larger is damage.
inline constexpr uint32_t kMaxRecordBytes = 1 << 20;
// Bytes around a record's kind and payload: the length before, the CRC after.
inline constexpr size_t kRecordOverheadBytes = 8;
// Names (NVTX messages) longer than this are cut.
inline constexpr size_t kMaxNameBytes = 4096;
inline constexpr uint16_t kMaxStackFrames = 256;

enum class RecordKind : uint8_t {
  kProcessFact = 1,  // u16 key length, key, u32 value length, value
  kString = 2,       // u32 id (>= 1), u32 length, bytes
  kFrame = 3,        // u32 id (>= 1), u64 pc, u32 module string, u64 offset, u32 symbol string
  kStack = 4,        // u32 id (>= 1), u16 count, count x u32 frame id, innermost first
  kAlloc = 5,        // event prefix, u8 api, u64 address, u64 bytes, u64 stream
  kFree = 6,         // event prefix, u8 api, u64 address, u64 stream
  kAllocFailed = 7,  // event prefix, u8 api, u64 bytes, u64 stream, u32 CUresult
  kVmmCreate = 8,    // event prefix, u64 handle, u64 bytes, i32 location device
  kVmmRelease = 9,   // event prefix, u64 handle
  kVmmMap = 10,      // event prefix, u64 address, u64 bytes, u64 offset, u64 handle
  kVmmUnmap = 11,    // event prefix, u64 address, u64 bytes
  kVaReserve = 12,   // event prefix, u64 address, u64 bytes
  kVaFree = 13,      // event prefix, u64 address, u64 bytes
  kNvtxPush = 14,    // u64 time, u32 tid, u32 length, name
  kNvtxPop = 15,     // u64 time, u32 tid
  kNvtxStart = 16,   // u64 time, u32 tid, u64 range id, u32 length, name
  kNvtxEnd = 17,     // u64 time, u32 tid, u64 range id
  kNvtxMark = 18,    // u64 time, u32 tid, u32 length, name
  kEnd = 19,         // u64 time, u32 length, reason ("exit", or why capture was disabled)
};
// The event prefix of allocation and VMM records: u64 time (trace clock, ns), u32 thread id,
// i32 device (-1: unknown), u32 stack id (0: none).
inline constexpr size_t kEventPrefixBytes = 20;

// The driver call that made an allocation or free record.
enum class Api : uint8_t {
  kMemAlloc = 1,               // cuMemAlloc_v2
  kMemAllocPitch = 2,          // cuMemAllocPitch_v2 (bytes: pitch x height)
  kMemAllocManaged = 3,        // cuMemAllocManaged
  kMemAllocAsync = 4,          // cuMemAllocAsync (and _ptsz)
  kMemAllocFromPoolAsync = 5,  // cuMemAllocFromPoolAsync (and _ptsz)
  kMemFree = 6,                // cuMemFree_v2
  kMemFreeAsync = 7,           // cuMemFreeAsync (and _ptsz)
};
const char* ApiName(uint8_t api);
const char* RecordKindName(uint8_t kind);

// CRC-32 (IEEE 802.3, the polynomial of zlib's crc32), continuing from `crc` (0 to start).
uint32_t Crc32(const void* data, size_t bytes, uint32_t crc = 0);

// Little-endian encoding into a growing byte string.
class Encoder {
 public:
  Encoder& U8(uint8_t v);
  Encoder& U16(uint16_t v);
  Encoder& U32(uint32_t v);
  Encoder& I32(int32_t v) { return U32(static_cast<uint32_t>(v)); }
  Encoder& U64(uint64_t v);
  // u32 length then the bytes, cut at `max_bytes`.
  Encoder& Text32(std::string_view s, size_t max_bytes = kMaxNameBytes);
  Encoder& Bytes(std::string_view s);
  const std::string& bytes() const { return bytes_; }
  std::string& mutable_bytes() { return bytes_; }

 private:
  std::string bytes_;
};

struct Header {
  uint16_t major = kMajorVersion;
  uint16_t minor = kMinorVersion;
  uint32_t pid = 0;
  int32_t rank = -1;               // -1: RANK was not set
  uint64_t start_realtime_ns = 0;  // CLOCK_REALTIME at the start
  uint64_t start_clock_ns = 0;     // the trace clock at the same moment
  std::string clock;               // what the trace clock is
};

// The header's bytes (with its CRC).
std::string EncodeHeader(const Header& header);
// One record's bytes: length, kind, payload, CRC.
std::string EncodeRecord(RecordKind kind, std::string_view payload);
// The same, appended to `out` (no allocation when `out` has the room: the recorder's hot path).
void AppendRecord(std::string& out, RecordKind kind, std::string_view payload);

// write(2)'s signature: with one given, the writer writes every call's records with it instead of
// mapping the file (tests make it fail).
using WriteFunction = ssize_t (*)(int fd, const void* data, size_t bytes);
// posix_fallocate's signature: how the mapped writer reserves each chunk (tests make it fail).
using AllocateFunction = int (*)(int fd, off_t offset, off_t bytes);

// The mapped writer's chunk: reserved on disk (posix_fallocate: a full disk is an error here, never
// a SIGBUS on a later copy) and mapped one at a time. A killed process leaves at most this many
// zero bytes after its last record.
inline constexpr size_t kMappedChunkBytes = size_t{1} << 20;

// Writes a trace to a file it creates. Records are copied into a shared mapping of the file, a
// chunk at a time (bench/recorder_bench: a write(2) call per record cost about 1 us, most of the
// recorder's time per event); a failed reservation leaves the file ending at the last complete
// record. Close() (or the destructor) unmaps and cuts the file at its last record. With a
// WriteFunction, every call is one write(2) of whole records instead. Not thread safe (the
// recorder serializes).
class Writer {
 public:
  // Creates `path` (O_EXCL: never overwrites) and writes the header. On failure returns null
  // and sets `error` to one sentence (no trailing period).
  static std::unique_ptr<Writer> Create(const std::string& path, const Header& header,
                                        std::string* error, WriteFunction write_fn = nullptr,
                                        AllocateFunction allocate_fn = nullptr);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  bool Append(RecordKind kind, std::string_view payload, std::string* error);
  // Writes bytes already encoded (several records at once). Same contract as Append.
  bool AppendEncoded(std::string_view records, std::string* error);
  // Unmaps and cuts the file at its last record; later appends fail. Idempotent. False with
  // `error` set when the file could not be cut (it then ends in zeros the reader skips).
  bool Close(std::string* error);
  const std::string& path() const { return path_; }

 private:
  Writer(int fd, std::string path, WriteFunction write_fn, AllocateFunction allocate_fn);
  bool WriteAll(WriteFunction write, std::string_view bytes, std::string* error);
  bool CopyMapped(std::string_view bytes, std::string* error);
  bool MapNextChunk(std::string* error);
  void Unmap();

  int fd_ = -1;
  std::string path_;
  WriteFunction write_fn_;  // null: mapped
  AllocateFunction allocate_fn_;
  uint64_t end_ = 0;           // the file's bytes written so far (header and records)
  char* chunk_ = nullptr;      // the mapped chunk, or null
  uint64_t chunk_offset_ = 0;  // where it starts in the file
  bool closed_ = false;
};

}  // namespace vramscope::vstrace
