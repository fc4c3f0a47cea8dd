#include "native_capture/vstrace_format.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace vramscope::vstrace {

namespace {

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

void PutU32(char* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

const char* ApiName(uint8_t api) {
  switch (static_cast<Api>(api)) {
    case Api::kMemAlloc:
      return "cuMemAlloc";
    case Api::kMemAllocPitch:
      return "cuMemAllocPitch";
    case Api::kMemAllocManaged:
      return "cuMemAllocManaged";
    case Api::kMemAllocAsync:
      return "cuMemAllocAsync";
    case Api::kMemAllocFromPoolAsync:
      return "cuMemAllocFromPoolAsync";
    case Api::kMemFree:
      return "cuMemFree";
    case Api::kMemFreeAsync:
      return "cuMemFreeAsync";
  }
  return "unknown driver call";
}

const char* RecordKindName(uint8_t kind) {
  switch (static_cast<RecordKind>(kind)) {
    case RecordKind::kProcessFact:
      return "process fact";
    case RecordKind::kString:
      return "string";
    case RecordKind::kFrame:
      return "frame";
    case RecordKind::kStack:
      return "stack";
    case RecordKind::kAlloc:
      return "alloc";
    case RecordKind::kFree:
      return "free";
    case RecordKind::kAllocFailed:
      return "failed alloc";
    case RecordKind::kVmmCreate:
      return "cuMemCreate";
    case RecordKind::kVmmRelease:
      return "cuMemRelease";
    case RecordKind::kVmmMap:
      return "cuMemMap";
    case RecordKind::kVmmUnmap:
      return "cuMemUnmap";
    case RecordKind::kVaReserve:
      return "cuMemAddressReserve";
    case RecordKind::kVaFree:
      return "cuMemAddressFree";
    case RecordKind::kNvtxPush:
      return "NVTX push";
    case RecordKind::kNvtxPop:
      return "NVTX pop";
    case RecordKind::kNvtxStart:
      return "NVTX range start";
    case RecordKind::kNvtxEnd:
      return "NVTX range end";
    case RecordKind::kNvtxMark:
      return "NVTX mark";
    case RecordKind::kEnd:
      return "end";
  }
  return "unknown";
}

uint32_t Crc32(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

Encoder& Encoder::U8(uint8_t v) {
  bytes_.push_back(static_cast<char>(v));
  return *this;
}
Encoder& Encoder::U16(uint16_t v) {
  bytes_.push_back(static_cast<char>(v & 0xff));
  bytes_.push_back(static_cast<char>(v >> 8));
  return *this;
}
Encoder& Encoder::U32(uint32_t v) {
  char b[4];
  PutU32(b, v);
  bytes_.append(b, 4);
  return *this;
}
Encoder& Encoder::U64(uint64_t v) {
  U32(static_cast<uint32_t>(v));
  return U32(static_cast<uint32_t>(v >> 32));
}
Encoder& Encoder::Text32(std::string_view s, size_t max_bytes) {
  if (s.size() > max_bytes) s = s.substr(0, max_bytes);
  U32(static_cast<uint32_t>(s.size()));
  bytes_.append(s);
  return *this;
}
Encoder& Encoder::Bytes(std::string_view s) {
  bytes_.append(s);
  return *this;
}

std::string EncodeHeader(const Header& header) {
  const std::string_view clock = std::string_view(header.clock).substr(0, 1024);
  Encoder e;
  e.Bytes(std::string_view(kMagic, kMagicBytes))
      .U16(header.major)
      .U16(header.minor)
      .U32(static_cast<uint32_t>(kHeaderFixedBytes + clock.size() + 4))
      .U32(header.pid)
      .I32(header.rank)
      .U64(header.start_realtime_ns)
      .U64(header.start_clock_ns)
      .U16(static_cast<uint16_t>(clock.size()))
      .Bytes(clock);
  const std::string& b = e.bytes();
  e.U32(Crc32(b.data(), b.size()));
  return e.bytes();
}

std::string EncodeRecord(RecordKind kind, std::string_view payload) {
  std::string out;
  AppendRecord(out, kind, payload);
  return out;
}

void AppendRecord(std::string& out, RecordKind kind, std::string_view payload) {
  const size_t start = out.size();
  out.resize(start + 4 + 1 + payload.size() + 4);
  char* record = out.data() + start;
  PutU32(record, static_cast<uint32_t>(1 + payload.size()));
  record[4] = static_cast<char>(kind);
  if (!payload.empty()) std::memcpy(record + 5, payload.data(), payload.size());
  PutU32(record + 5 + payload.size(), Crc32(record, 5 + payload.size()));
}

std::unique_ptr<Writer> Writer::Create(const std::string& path, const Header& header,
                                       std::string* error, WriteFunction write_fn,
                                       AllocateFunction allocate_fn) {
  // Read and write: a shared mapping needs both, even to write only.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot create " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<Writer> writer(new Writer(fd, path, write_fn, allocate_fn));
  // The header with one write(2): the reader can tell the file's format from its first bytes
  // even while the first chunk is being reserved.
  if (!writer->WriteAll(write_fn != nullptr ? write_fn : &::write, EncodeHeader(header), error)) {
    return nullptr;
  }
  return writer;
}

Writer::Writer(int fd, std::string path, WriteFunction write_fn, AllocateFunction allocate_fn)
    : fd_(fd),
      path_(std::move(path)),
      write_fn_(write_fn),
      allocate_fn_(allocate_fn != nullptr ? allocate_fn : &::posix_fallocate) {}

Writer::~Writer() {
  std::string ignored;
  Close(&ignored);
}

bool Writer::Append(RecordKind kind, std::string_view payload, std::string* error) {
  return AppendEncoded(EncodeRecord(kind, payload), error);
}

bool Writer::AppendEncoded(std::string_view records, std::string* error) {
  if (closed_) {
    *error = "writing " + path_ + " failed: the trace was already closed";
    return false;
  }
  return write_fn_ != nullptr ? WriteAll(write_fn_, records, error) : CopyMapped(records, error);
}

bool Writer::Close(std::string* error) {
  if (closed_) return true;
  closed_ = true;
  bool ok = true;
  if (write_fn_ == nullptr) {  // mapped: the file was reserved past its last record
    Unmap();
    if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) {
      *error = "cutting " + path_ + " at its last record failed: " + std::strerror(errno);
      ok = false;
    }
  }
  ::close(fd_);
  fd_ = -1;
  return ok;
}

bool Writer::WriteAll(WriteFunction write, std::string_view bytes, std::string* error) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = "writing " + path_ + " failed: " +
               (n < 0 ? std::string(std::strerror(errno)) : std::string("nothing was written"));
      return false;
    }
    done += static_cast<size_t>(n);
  }
  end_ += bytes.size();
  return true;
}

bool Writer::CopyMapped(std::string_view bytes, std::string* error) {
  const uint64_t start = end_;
  while (!bytes.empty()) {
    if (chunk_ == nullptr || end_ == chunk_offset_ + kMappedChunkBytes) {
      if (!MapNextChunk(error)) {
        end_ = start;  // Close() cuts the file before the records this call began
        return false;
      }
    }
    const uint64_t room = chunk_offset_ + kMappedChunkBytes - end_;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(room, bytes.size()));
    std::memcpy(chunk_ + (end_ - chunk_offset_), bytes.data(), n);
    end_ += n;
    bytes.remove_prefix(n);
  }
  return true;
}

bool Writer::MapNextChunk(std::string* error) {
  // Chunks are aligned to their size (a multiple of the page size, as mmap's offset must be);
  // the first one starts at the header's page and keeps its bytes.
  const uint64_t offset = end_ / kMappedChunkBytes * kMappedChunkBytes;
  Unmap();
  // posix_fallocate returns the error number rather than setting errno.
  if (const int e =
          allocate_fn_(fd_, static_cast<off_t>(offset), static_cast<off_t>(kMappedChunkBytes));
      e != 0) {
    *error = "reserving space in " + path_ + " failed: " + std::strerror(e);
    return false;
  }
  void* map = ::mmap(nullptr, kMappedChunkBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                     static_cast<off_t>(offset));
  if (map == MAP_FAILED) {
    *error = "mapping " + path_ + " failed: " + std::strerror(errno);
    return false;
  }
  chunk_ = static_cast<char*>(map);
  chunk_offset_ = offset;
  return true;
}

void Writer::Unmap() {
  if (chunk_ != nullptr) ::munmap(chunk_, kMappedChunkBytes);
  chunk_ = nullptr;
}

}  // namespace vramscope::vstrace
