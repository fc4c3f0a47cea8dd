#include "sources/native_trace/native_trace_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "native_capture/vstrace_format.h"
#include "sources/input_format.h"
#include "sources/load_source.h"
#include "sources/native_trace/vstrace_reader.h"

namespace vramscope::native_trace {
namespace {

using model::Action;
using model::Phase;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vstrace::Api;
using vstrace::Encoder;
using vstrace::RecordKind;

constexpr uint64_t kStartRealtimeNs = 1'700'000'000'000'000'000;  // 2023-11-14
constexpr uint64_t kStartClockNs = 5'000'000'000;

// Builds a trace the way the recorder writes one: header, then encoded records.
class TraceBuilder {
 public:
  explicit TraceBuilder(int32_t rank = 0) {
    vstrace::Header h;
    h.pid = 4242;
    h.rank = rank;
    h.start_realtime_ns = kStartRealtimeNs;
    h.start_clock_ns = kStartClockNs;
    h.clock = "cuptiGetTimestamp, ns";
    bytes_ = vstrace::EncodeHeader(h);
  }

  TraceBuilder& Raw(RecordKind kind, const Encoder& e) {
    bytes_ += vstrace::EncodeRecord(kind, e.bytes());
    return *this;
  }
  TraceBuilder& Fact(const std::string& key, const std::string& value) {
    Encoder e;
    e.U16(static_cast<uint16_t>(key.size())).Bytes(key).Text32(value);
    return Raw(RecordKind::kProcessFact, e);
  }
  TraceBuilder& String(uint32_t id, const std::string& text) {
    Encoder e;
    e.U32(id).Text32(text);
    return Raw(RecordKind::kString, e);
  }
  TraceBuilder& Frame(uint32_t id, uint64_t pc, uint32_t module, uint64_t offset, uint32_t symbol) {
    Encoder e;
    e.U32(id).U64(pc).U32(module).U64(offset).U32(symbol);
    return Raw(RecordKind::kFrame, e);
  }
  TraceBuilder& Stack(uint32_t id, const std::vector<uint32_t>& frames) {
    Encoder e;
    e.U32(id).U16(static_cast<uint16_t>(frames.size()));
    for (uint32_t f : frames) e.U32(f);
    return Raw(RecordKind::kStack, e);
  }
  static Encoder Prefix(uint64_t us, uint32_t tid, int32_t device, uint32_t stack) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(tid).I32(device).U32(stack);
    return e;
  }
  TraceBuilder& Alloc(uint64_t us, uint64_t addr, uint64_t bytes, int32_t device = 0,
                      uint32_t stack = 0, Api api = Api::kMemAlloc, uint64_t stream = 0,
                      uint32_t tid = 1) {
    Encoder e = Prefix(us, tid, device, stack);
    e.U8(static_cast<uint8_t>(api)).U64(addr).U64(bytes).U64(stream);
    return Raw(RecordKind::kAlloc, e);
  }
  TraceBuilder& Free(uint64_t us, uint64_t addr, int32_t device = 0, Api api = Api::kMemFree,
                     uint64_t stream = 0, uint32_t tid = 1) {
    Encoder e = Prefix(us, tid, device, 0);
    e.U8(static_cast<uint8_t>(api)).U64(addr).U64(stream);
    return Raw(RecordKind::kFree, e);
  }
  TraceBuilder& AllocFailed(uint64_t us, uint64_t bytes, uint32_t result) {
    Encoder e = Prefix(us, 1, 0, 0);
    e.U8(static_cast<uint8_t>(Api::kMemAlloc)).U64(bytes).U64(0).U32(result);
    return Raw(RecordKind::kAllocFailed, e);
  }
  TraceBuilder& Create(uint64_t us, uint64_t handle, uint64_t bytes, int32_t location) {
    Encoder e = Prefix(us, 1, -1, 0);
    e.U64(handle).U64(bytes).I32(location);
    return Raw(RecordKind::kVmmCreate, e);
  }
  TraceBuilder& Release(uint64_t us, uint64_t handle) {
    Encoder e = Prefix(us, 1, 0, 0);
    e.U64(handle);
    return Raw(RecordKind::kVmmRelease, e);
  }
  TraceBuilder& Map(uint64_t us, uint64_t addr, uint64_t bytes, uint64_t handle) {
    Encoder e = Prefix(us, 1, 0, 0);
    e.U64(addr).U64(bytes).U64(0).U64(handle);
    return Raw(RecordKind::kVmmMap, e);
  }
  TraceBuilder& AddressRange(RecordKind kind, uint64_t us, uint64_t addr, uint64_t bytes) {
    Encoder e = Prefix(us, 1, 0, 0);
    e.U64(addr).U64(bytes);
    return Raw(kind, e);
  }
  TraceBuilder& Push(uint64_t us, const std::string& name, uint32_t tid = 1) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(tid).Text32(name);
    return Raw(RecordKind::kNvtxPush, e);
  }
  TraceBuilder& Pop(uint64_t us, uint32_t tid = 1) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(tid);
    return Raw(RecordKind::kNvtxPop, e);
  }
  TraceBuilder& Start(uint64_t us, uint64_t id, const std::string& name) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(1).U64(id).Text32(name);
    return Raw(RecordKind::kNvtxStart, e);
  }
  TraceBuilder& End(uint64_t us, uint64_t id) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(1).U64(id);
    return Raw(RecordKind::kNvtxEnd, e);
  }
  TraceBuilder& Mark(uint64_t us, const std::string& name) {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).U32(1).Text32(name);
    return Raw(RecordKind::kNvtxMark, e);
  }
  TraceBuilder& Finish(uint64_t us, const std::string& reason = "exit") {
    Encoder e;
    e.U64(kStartClockNs + us * 1000).Text32(reason);
    return Raw(RecordKind::kEnd, e);
  }

  const std::string& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
};

std::span<const uint8_t> Span(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Result<ParsedTrace> Read(const std::string& bytes) {
  return ReadNativeTrace(Span(bytes), "t.vstrace");
}

ParsedTrace ReadOk(const std::string& bytes) {
  auto parsed = Read(bytes);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? std::move(parsed).value() : ParsedTrace{};
}

model::Trace LoadOk(const std::string& bytes) {
  auto trace = TraceFromNativeTrace(Span(bytes), "t.vstrace");
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? std::move(trace).value() : model::Trace{};
}

bool HasNote(const model::Trace& t, const std::string& part) {
  for (const std::string& note : t.facts.notes) {
    if (note.find(part) != std::string::npos) return true;
  }
  return false;
}

// Every record kind once, with the definitions an allocation's stack needs.
TraceBuilder EveryKind() {
  TraceBuilder b(3);
  b.Fact("exe", "/usr/bin/python3")
      .String(1, "/usr/lib/libtorch_cuda.so")
      .String(2, "_ZN3c104cuda9CUDAAlloc6mallocEm")
      .Frame(1, 0x7f0000001234, 1, 0x1234, 2)
      .Frame(2, 0x7f0000005678, 1, 0x5678, 0)
      .Stack(1, {1, 2})
      .Push(5, "train_step")
      .Alloc(10, 0x7000000000, 1 << 20, 0, 1, Api::kMemAlloc, 0)
      .Free(20, 0x7000000000)
      .AllocFailed(21, 1ull << 40, 2)
      .Create(30, 0xabc, 2 << 20, 1)
      .AddressRange(RecordKind::kVaReserve, 31, 0x9000000000, 1ull << 30)
      .Map(32, 0x9000000000, 2 << 20, 0xabc)
      .AddressRange(RecordKind::kVmmUnmap, 33, 0x9000000000, 2 << 20)
      .Release(34, 0xabc)
      .AddressRange(RecordKind::kVaFree, 35, 0x9000000000, 1ull << 30)
      .Pop(36)
      .Start(37, 77, "epoch")
      .End(38, 77)
      .Mark(39, "checkpoint")
      .Finish(40);
  return b;
}

// ---- the reader ----------------------------------------------------------------------------

TEST(NativeTraceReader, RoundTripsEveryRecordKind) {
  const ParsedTrace p = ReadOk(EveryKind().bytes());
  EXPECT_EQ(p.header.major, vstrace::kMajorVersion);
  EXPECT_EQ(p.header.minor, vstrace::kMinorVersion);
  EXPECT_EQ(p.header.pid, 4242u);
  EXPECT_EQ(p.header.rank, 3);
  EXPECT_EQ(p.header.start_realtime_ns, kStartRealtimeNs);
  EXPECT_EQ(p.header.start_clock_ns, kStartClockNs);
  EXPECT_EQ(p.header.clock, "cuptiGetTimestamp, ns");
  EXPECT_TRUE(p.stopped.empty()) << p.stopped;
  EXPECT_EQ(p.valid_bytes, EveryKind().size());
  EXPECT_EQ(p.record_count, 21u);
  ASSERT_EQ(p.facts.size(), 1u);
  EXPECT_EQ(p.facts[0].first, "exe");
  EXPECT_EQ(p.facts[0].second, "/usr/bin/python3");
  EXPECT_EQ(p.strings.at(1), "/usr/lib/libtorch_cuda.so");
  EXPECT_EQ(p.frames.at(1).pc, 0x7f0000001234u);
  EXPECT_EQ(p.frames.at(1).module, 1u);
  EXPECT_EQ(p.frames.at(1).offset, 0x1234u);
  EXPECT_EQ(p.frames.at(1).symbol, 2u);
  EXPECT_EQ(p.frames.at(2).symbol, 0u);
  EXPECT_EQ(p.stacks.at(1), (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(p.ended);
  EXPECT_EQ(p.end_reason, "exit");

  ASSERT_EQ(p.records.size(), 15u);
  std::vector<RecordKind> kinds;
  for (const Record& r : p.records) kinds.push_back(r.kind);
  EXPECT_EQ(kinds, (std::vector<RecordKind>{
                       RecordKind::kNvtxPush, RecordKind::kAlloc, RecordKind::kFree,
                       RecordKind::kAllocFailed, RecordKind::kVmmCreate, RecordKind::kVaReserve,
                       RecordKind::kVmmMap, RecordKind::kVmmUnmap, RecordKind::kVmmRelease,
                       RecordKind::kVaFree, RecordKind::kNvtxPop, RecordKind::kNvtxStart,
                       RecordKind::kNvtxEnd, RecordKind::kNvtxMark, RecordKind::kEnd}));
  const Record& push = p.records[0];
  EXPECT_EQ(push.name, "train_step");
  EXPECT_EQ(push.tid, 1u);
  const Record& alloc = p.records[1];
  EXPECT_EQ(alloc.time_ns, kStartClockNs + 10'000);
  EXPECT_EQ(alloc.api, static_cast<uint8_t>(Api::kMemAlloc));
  EXPECT_EQ(alloc.address, 0x7000000000u);
  EXPECT_EQ(alloc.bytes, 1u << 20);
  EXPECT_EQ(alloc.stack, 1u);
  EXPECT_EQ(alloc.device, 0);
  EXPECT_EQ(p.records[2].address, 0x7000000000u);
  EXPECT_EQ(p.records[3].bytes, 1ull << 40);
  EXPECT_EQ(p.records[3].result, 2u);
  EXPECT_EQ(p.records[4].handle, 0xabcu);
  EXPECT_EQ(p.records[4].location_device, 1);
  EXPECT_EQ(p.records[5].bytes, 1ull << 30);
  EXPECT_EQ(p.records[6].handle, 0xabcu);
  EXPECT_EQ(p.records[6].bytes, 2u << 20);
  EXPECT_EQ(p.records[7].address, 0x9000000000u);
  EXPECT_EQ(p.records[8].handle, 0xabcu);
  EXPECT_EQ(p.records[11].range_id, 77u);
  EXPECT_EQ(p.records[11].name, "epoch");
  EXPECT_EQ(p.records[12].range_id, 77u);
  EXPECT_EQ(p.records[13].name, "checkpoint");
  EXPECT_EQ(p.records[14].name, "exit");
}

TEST(NativeTraceReader, CrcIsZlibsCrc32) {
  // The check value of CRC-32/ISO-HDLC (zlib's crc32, Python's zlib.crc32).
  EXPECT_EQ(vstrace::Crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(vstrace::Crc32("6789", 4, vstrace::Crc32("12345", 5)), 0xCBF43926u);
}

TEST(NativeTraceReader, CutAtEveryByteReadsUpToTheLastCompleteRecord) {
  const std::string full = EveryKind().bytes();
  // Where each record ends, from a full read.
  std::vector<size_t> ends;
  {
    vstrace::Header h;
    size_t pos = ReadOk(full).valid_bytes;  // the whole file
    (void)h;
    (void)pos;
    size_t p = vstrace::EncodeHeader([] {
                 vstrace::Header x;
                 x.clock = "cuptiGetTimestamp, ns";
                 return x;
               }())
                   .size();
    ends.push_back(p);
    while (p < full.size()) {
      const auto* b = reinterpret_cast<const uint8_t*>(full.data() + p);
      const uint32_t length = b[0] | b[1] << 8 | b[2] << 16 | uint32_t{b[3]} << 24;
      p += length + vstrace::kRecordOverheadBytes;
      ends.push_back(p);
    }
    ASSERT_EQ(p, full.size());
  }
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    const std::string part = full.substr(0, cut);
    auto parsed = Read(part);
    if (cut < ends.front()) {
      ASSERT_FALSE(parsed.ok()) << cut;
      EXPECT_THAT(parsed.status().message(), StartsWith("t.vstrace: "));
      continue;
    }
    ASSERT_TRUE(parsed.ok()) << cut << ": " << parsed.status().message();
    size_t last_end = ends.front();
    size_t complete = 0;
    for (size_t i = 1; i < ends.size() && ends[i] <= cut; ++i) {
      last_end = ends[i];
      complete = i;
    }
    EXPECT_EQ(parsed->valid_bytes, last_end) << cut;
    EXPECT_EQ(parsed->record_count, complete) << cut;
    EXPECT_EQ(parsed->stopped.empty(), cut == last_end) << cut;
    // The source reads every prefix too, and says it was truncated.
    auto trace = TraceFromNativeTrace(Span(part), "t.vstrace");
    ASSERT_TRUE(trace.ok()) << cut << ": " << trace.status().message();
    if (cut != last_end) {
      EXPECT_TRUE(HasNote(*trace, "the trace was truncated: at byte " + std::to_string(last_end)))
          << cut;
    }
  }
}

TEST(NativeTraceReader, ACorruptChecksumStopsReadingThere) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 4096);
  const size_t second = b.size();
  b.Alloc(2, 0x2000, 4096).Alloc(3, 0x3000, 4096);
  std::string bytes = b.bytes();
  bytes[second + 10] ^= 0x01;  // a bit inside the second record's payload
  const ParsedTrace p = ReadOk(bytes);
  EXPECT_EQ(p.records.size(), 1u);
  EXPECT_EQ(p.valid_bytes, second);
  EXPECT_THAT(p.stopped, HasSubstr("at byte " + std::to_string(second) +
                                   " a record's checksum does not match"));
  const model::Trace t = LoadOk(bytes);
  EXPECT_EQ(t.allocations.size(), 1u);
  EXPECT_TRUE(HasNote(t, "the trace was truncated"));
}

TEST(NativeTraceReader, ARecordOfImpossibleLengthStopsReading) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 4096);
  std::string bytes = b.bytes() + std::string("\xff\xff\xff\x7f", 4) + std::string(64, 'x');
  const ParsedTrace p = ReadOk(bytes);
  EXPECT_EQ(p.records.size(), 1u);
  EXPECT_THAT(p.stopped, HasSubstr("which no record has"));
}

TEST(NativeTraceReader, ANewerMajorVersionIsRefusedClearly) {
  vstrace::Header h;
  h.major = vstrace::kMajorVersion + 1;
  h.minor = 3;
  const auto parsed = Read(vstrace::EncodeHeader(h));
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(parsed.status().message(),
            "t.vstrace: native trace format version 2.3; this vramscope reads version 1.x only: "
            "the trace was written by a newer vramscope; read it with that version or upgrade "
            "vramscope");
}

TEST(NativeTraceReader, ANewerMinorVersionIsReadAndItsUnknownRecordsSkipped) {
  vstrace::Header h;
  h.minor = vstrace::kMinorVersion + 1;
  std::string bytes = vstrace::EncodeHeader(h);
  Encoder unknown;
  unknown.U64(1).U64(2);
  bytes += vstrace::EncodeRecord(static_cast<RecordKind>(200), unknown.bytes());
  Encoder alloc = TraceBuilder::Prefix(1, 1, 0, 0);
  alloc.U8(1).U64(0x1000).U64(512).U64(0);
  bytes += vstrace::EncodeRecord(RecordKind::kAlloc, alloc.bytes());
  const ParsedTrace p = ReadOk(bytes);
  EXPECT_EQ(p.unknown_records, 1u);
  EXPECT_EQ(p.records.size(), 1u);
  EXPECT_TRUE(p.stopped.empty());
  EXPECT_TRUE(HasNote(LoadOk(bytes), "1 records of kinds this vramscope does not know"));
}

TEST(NativeTraceReader, NotATraceAndADamagedHeaderAreErrors) {
  EXPECT_THAT(Read("{\"json\": 1}").status().message(), HasSubstr("not a vramscope native trace"));
  std::string bytes = TraceBuilder().bytes();
  bytes[20] ^= 0x40;  // inside the rank
  EXPECT_THAT(Read(bytes).status().message(), HasSubstr("header is damaged"));
}

TEST(NativeTraceReader, AMalformedPayloadWithAValidChecksumStopsReading) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 4096);
  const size_t bad = b.size();
  Encoder short_alloc;
  short_alloc.U64(1);  // far too short for an alloc
  b.Raw(RecordKind::kAlloc, short_alloc).Alloc(3, 0x3000, 4096);
  const ParsedTrace p = ReadOk(b.bytes());
  EXPECT_EQ(p.records.size(), 1u);
  EXPECT_THAT(p.stopped, HasSubstr("at byte " + std::to_string(bad) + " a alloc record"));
}

// ---- the source ----------------------------------------------------------------------------

TEST(NativeTraceSource, ADriverAllocationIsASegmentAndAnAllocation) {
  TraceBuilder b;
  b.Alloc(10, 0x7000000000, 3 << 20, 1, 0, Api::kMemAlloc).Free(20, 0x7000000000, 1).Finish(30);
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_EQ(t.source.format, "vramscope native trace (.vstrace)");
  EXPECT_EQ(t.source.generation, "native trace format 1.0");
  EXPECT_EQ(t.devices, (std::vector<int32_t>{1}));
  const auto& ev = t.events;
  ASSERT_EQ(ev.count(), 4u);
  EXPECT_EQ(ev.action[0], Action::kSegmentAlloc);
  EXPECT_EQ(ev.action[1], Action::kAlloc);
  EXPECT_EQ(ev.action[2], Action::kFreeCompleted);
  EXPECT_EQ(ev.action[3], Action::kSegmentFree);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(ev.addr[i], 0x7000000000u);
    EXPECT_EQ(ev.size[i], 3u << 20);
    EXPECT_EQ(ev.device[i], 1);
  }
  EXPECT_EQ(ev.time_us[0], static_cast<int64_t>(kStartRealtimeNs / 1000 + 10));
  EXPECT_EQ(ev.time_us[3], static_cast<int64_t>(kStartRealtimeNs / 1000 + 20));
  ASSERT_EQ(t.allocations.size(), 1u);
  const model::Allocation& a = t.allocations[0];
  EXPECT_EQ(a.size, 3u << 20);
  EXPECT_EQ(a.requested_size, 3u << 20);
  EXPECT_TRUE(a.size_exact);
  EXPECT_EQ(a.alloc_event, 1);
  EXPECT_EQ(a.free_completed_event, 2);
  EXPECT_FALSE(t.facts.has_allocator_state);
  EXPECT_TRUE(t.facts.sizes_are_block_sizes);
  EXPECT_TRUE(t.facts.has_segment_events);
  EXPECT_TRUE(t.facts.has_times);
  EXPECT_FALSE(t.facts.starts_mid_run);
  EXPECT_TRUE(HasNote(t, "driver-level memory"));
  EXPECT_FALSE(HasNote(t, "truncated"));
  EXPECT_FALSE(HasNote(t, "no end record"));
}

// Found by the fuzzer: sizes no device holds summed past int64 in the timelines. They are damage.
TEST(NativeTraceSource, ImplausibleSizesAreSkippedAndSaid) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, uint64_t{1} << 62, 0).Alloc(2, 0x9000, uint64_t{1} << 62, 0);
  b.Alloc(3, 0x2000, 1 << 20, 0).Free(4, 0x2000).Finish(5);
  const model::Trace t = LoadOk(b.bytes());
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].size, 1u << 20);
  EXPECT_TRUE(HasNote(t, "2 allocation or mapping records of more than 256 TiB"));
}

TEST(NativeTraceSource, DevicesAreSeparatedAndAFreeFollowsItsAllocation) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 1 << 20, 0).Alloc(2, 0x2000, 2 << 20, 1).Free(3, 0x2000, -1).Free(4, 0x1000);
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_EQ(t.devices, (std::vector<int32_t>{0, 1}));
  const auto [b1, e1] = t.EventRange(1);
  ASSERT_EQ(e1 - b1, 4u);
  EXPECT_EQ(t.events.action[e1 - 1], Action::kSegmentFree);
  EXPECT_EQ(t.events.device[e1 - 1], 1);
  EXPECT_EQ(t.allocations.size(), 2u);
  EXPECT_TRUE(HasNote(t, "no end record"));
}

TEST(NativeTraceSource, StreamOrderedAndManagedAllocationsAreCountedWithNotes) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 4096, 0, 0, Api::kMemAllocAsync, 0x55)
      .Alloc(2, 0x3000, 8192, 0, 0, Api::kMemAllocFromPoolAsync, 0x66)
      .Alloc(3, 0x5000, 4096, 0, 0, Api::kMemAllocManaged)
      .Free(4, 0x1000, 0, Api::kMemFreeAsync, 0x55)
      .Free(5, 0xdead000)  // never allocated
      .Free(6, 0);         // cuMemFree(0): nothing
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_EQ(t.events.stream[0], 0x55u);
  EXPECT_EQ(t.events.stream[2], 0x66u);
  EXPECT_EQ(t.allocations.size(), 3u);
  EXPECT_TRUE(HasNote(t, "2 allocations come from stream-ordered pools"));
  EXPECT_TRUE(HasNote(t, "1 allocations are managed memory"));
  EXPECT_TRUE(HasNote(t, "1 frees release an address the trace never allocated"));
}

TEST(NativeTraceSource, AFailedAllocationIsAnOomEvent) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 4096).AllocFailed(2, 1ull << 40, 2);
  const model::Trace t = LoadOk(b.bytes());
  ASSERT_EQ(t.events.count(), 3u);
  EXPECT_EQ(t.events.action[2], Action::kOom);
  EXPECT_EQ(t.events.size[2], 1ull << 40);
  EXPECT_TRUE(HasNote(t, "1 driver allocations failed"));
}

TEST(NativeTraceSource, VmmMemoryCountsWhileMappedOnItsHandlesDevice) {
  TraceBuilder b;
  b.AddressRange(RecordKind::kVaReserve, 1, 0x9000000000, 1ull << 30)
      .Create(2, 0xa1, 2 << 20, 2)
      .Create(3, 0xa2, 2 << 20, 2)
      .Create(4, 0xa3, 4 << 20, 2)  // never mapped
      .Map(5, 0x9000000000, 2 << 20, 0xa1)
      .Map(6, 0x9000200000, 2 << 20, 0xa2)
      .Release(7, 0xa1)                                               // still mapped: still counts
      .AddressRange(RecordKind::kVmmUnmap, 8, 0x9000000000, 4 << 20)  // both mappings
      .Release(9, 0xa2)
      .Release(10, 0xa3);
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_EQ(t.devices, (std::vector<int32_t>{2}));
  std::vector<Action> actions(t.events.action.begin(), t.events.action.end());
  EXPECT_EQ(actions,
            (std::vector<Action>{Action::kSegmentMap, Action::kAlloc, Action::kSegmentMap,
                                 Action::kAlloc, Action::kFreeCompleted, Action::kSegmentUnmap,
                                 Action::kFreeCompleted, Action::kSegmentUnmap}));
  EXPECT_EQ(t.allocations.size(), 2u);
  EXPECT_TRUE(HasNote(t,
                      "4.00 MiB of physical memory was created with cuMemCreate but never "
                      "mapped"))
      << t.facts.notes.size();
  EXPECT_TRUE(HasNote(t, "1 virtual address reservations"));
}

TEST(NativeTraceSource, NativeStacksBecomeFramesAndStacks) {
  TraceBuilder b;
  b.String(1, "/usr/lib/libtorch_cuda.so")
      .String(2, "_ZN3c104cuda20CUDACachingAllocator6mallocEm")
      .String(3, "/usr/bin/python3.11")
      .Frame(1, 0x7f0000001234, 1, 0x1234, 2)
      .Frame(2, 0x400000, 3, 0x9abc, 0)
      .Stack(1, {1, 2})
      .Alloc(1, 0x1000, 4096, 0, 1);
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_TRUE(t.facts.has_stacks);
  EXPECT_TRUE(t.facts.has_native_frames);
  EXPECT_FALSE(t.facts.has_python_frames);
  const model::StackId stack = t.events.stack[1];
  ASSERT_NE(stack, model::kEmptyStack);
  const auto frames = t.stacks.Frames(stack);
  ASSERT_EQ(frames.size(), 2u);
  const model::Frame& inner = t.frames.Get(frames[0]);
  EXPECT_EQ(t.strings.Get(inner.filename), "/usr/lib/libtorch_cuda.so");
  EXPECT_EQ(t.strings.Get(inner.function),
            "c10::cuda::CUDACachingAllocator::malloc(unsigned long)");
  EXPECT_EQ(inner.kind, model::FrameKind::kNative);
  const model::Frame& outer = t.frames.Get(frames[1]);
  EXPECT_EQ(t.strings.Get(outer.function), "python3.11+0x9abc");
  EXPECT_EQ(t.allocations[0].alloc_stack, stack);
}

TEST(NativeTraceSource, PhaseNamesAreWordsNotSubstrings) {
  EXPECT_EQ(PhaseOfRangeName("forward"), Phase::kForward);
  EXPECT_EQ(PhaseOfRangeName("FWD"), Phase::kForward);
  EXPECT_EQ(PhaseOfRangeName("model.ForwardPass"), Phase::kForward);
  EXPECT_EQ(PhaseOfRangeName("Backward"), Phase::kBackward);
  EXPECT_EQ(PhaseOfRangeName("bwd_pass"), Phase::kBackward);
  EXPECT_EQ(PhaseOfRangeName("AddmmBackward0"), Phase::kBackward);
  EXPECT_EQ(PhaseOfRangeName("optimizer.step"), Phase::kOptimizer);
  EXPECT_EQ(PhaseOfRangeName("Optim"), Phase::kOptimizer);
  EXPECT_EQ(PhaseOfRangeName("step"), Phase::kOptimizer);
  EXPECT_EQ(PhaseOfRangeName("opt_step"), Phase::kOptimizer);
  EXPECT_EQ(PhaseOfRangeName("train_step"), std::nullopt);
  EXPECT_EQ(PhaseOfRangeName("forwarding_table"), std::nullopt);
  EXPECT_EQ(PhaseOfRangeName("aten::addmm"), std::nullopt);
  EXPECT_EQ(PhaseOfRangeName(""), std::nullopt);
}

TEST(NativeTraceSource, NvtxRangesGiveEachEventItsPathAndThePhaseMarks) {
  TraceBuilder b;
  b.Alloc(1, 0x100000, 4096)  // set-up
      .Fact("nvtx", "on");
  for (int step = 0; step < 2; ++step) {
    const uint64_t t0 = 100 + 100 * step;
    const uint64_t base = 0x10000000 * (step + 1);
    b.Push(t0, "train_step")
        .Push(t0 + 1, "forward")
        .Alloc(t0 + 2, base, 4096)
        .Pop(t0 + 3)
        .Alloc(t0 + 4, base + 0x1000, 4096)  // the loss: still forward
        .Push(t0 + 5, "backward")
        .Alloc(t0 + 6, base + 0x2000, 4096, 0, 0, Api::kMemAlloc, 0, /*tid=*/2)  // autograd thread
        .Pop(t0 + 7)
        .Push(t0 + 8, "optimizer.step")
        .Alloc(t0 + 9, base + 0x3000, 4096)
        .Pop(t0 + 10)
        .Alloc(t0 + 11, base + 0x4000, 4096)  // zero_grad, data: before the next forward
        .Pop(t0 + 12);
  }
  const model::Trace t = LoadOk(b.bytes());
  const auto& ev = t.events;
  auto path_of = [&](size_t event) -> std::string {
    const auto it = ev.user_metadata.find(static_cast<uint32_t>(event));
    return it == ev.user_metadata.end() ? "" : std::string(t.strings.Get(it->second));
  };
  // Events come in (segment, alloc) pairs; the alloc of the k-th allocation is event 2k+1.
  EXPECT_EQ(path_of(1), "");
  EXPECT_EQ(path_of(3), "train_step/forward");
  EXPECT_EQ(path_of(5), "train_step");
  EXPECT_EQ(path_of(7), "train_step/backward");  // thread 2 has no ranges: the last active one's
  EXPECT_EQ(path_of(9), "train_step/optimizer.step");

  std::vector<std::tuple<uint32_t, int32_t, Phase>> marks;
  for (const model::PhaseMark& m : t.phase_marks) {
    EXPECT_EQ(m.device, 0);
    marks.emplace_back(m.event, m.step, m.phase);
  }
  EXPECT_EQ(marks, (std::vector<std::tuple<uint32_t, int32_t, Phase>>{
                       {0, 0, Phase::kSetup},
                       {2, 1, Phase::kForward},
                       {6, 1, Phase::kBackward},
                       {8, 1, Phase::kOptimizer},
                       {10, 1, Phase::kBeforeForward},
                       {12, 2, Phase::kForward},
                       {16, 2, Phase::kBackward},
                       {18, 2, Phase::kOptimizer},
                       {20, 2, Phase::kBeforeForward},
                   }));
  EXPECT_FALSE(HasNote(t, "NVTX ranges were not recorded"));
}

TEST(NativeTraceSource, StartEndRangesAndMarksCountToo) {
  TraceBuilder b;
  b.Start(1, 9, "fwd").Alloc(2, 0x1000, 512).End(3, 9).Mark(4, "bwd").Alloc(5, 0x2000, 512);
  const model::Trace t = LoadOk(b.bytes());
  ASSERT_EQ(t.phase_marks.size(), 2u);
  EXPECT_EQ(t.phase_marks[0].phase, Phase::kForward);
  EXPECT_EQ(t.phase_marks[0].step, 1);
  EXPECT_EQ(t.phase_marks[1].phase, Phase::kBackward);
  EXPECT_EQ(t.phase_marks[1].event, 2u);
}

TEST(NativeTraceSource, UnnamedRangesMarkNoPhases) {
  TraceBuilder b;
  b.Fact("nvtx", "NVTX_INJECTION64_PATH is not set").Push(1, "aten::mm").Alloc(2, 0x1000, 512);
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_TRUE(t.phase_marks.empty());
  EXPECT_TRUE(HasNote(t, "no NVTX range is named for a training phase"));
  EXPECT_TRUE(HasNote(t, "NVTX ranges were not recorded: NVTX_INJECTION64_PATH is not set"));
}

TEST(NativeTraceSource, CaptureDisabledInsideTheProcessIsSaid) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 512).Finish(2, "disabled: writing x failed: No space left on device");
  const model::Trace t = LoadOk(b.bytes());
  EXPECT_TRUE(HasNote(t,
                      "capture stopped inside the process before it exited: disabled: "
                      "writing x failed"));
}

TEST(NativeTraceSource, AnEmptyTraceLoads) {
  const model::Trace t = LoadOk(TraceBuilder().bytes());
  EXPECT_EQ(t.events.count(), 0u);
  EXPECT_FALSE(t.facts.has_trace);
  EXPECT_TRUE(t.devices.empty());
}

TEST(NativeTraceSource, LoadTraceDetectsTheFormatByItsMagic) {
  TraceBuilder b;
  b.Alloc(1, 0x1000, 1 << 20).Finish(2);
  const std::string& bytes = b.bytes();
  EXPECT_EQ(sources::DetectInputFormat(Span(bytes).first(16)), sources::InputFormat::kNativeTrace);
  const auto file = MappedFile::FromBytes("x.bin", Span(bytes));
  auto trace = sources::LoadTrace(*file);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->source.format, "vramscope native trace (.vstrace)");
  EXPECT_EQ(trace->source.file_bytes, bytes.size());
  EXPECT_EQ(trace->allocations.size(), 1u);
}

TEST(NativeTraceSource, WritesTheFuzzCorpusWhenAsked) {
  // Regenerates the fuzz corpus seeds from this file's builder when VRAMSCOPE_WRITE_CORPUS is
  // set (the checked-in seeds were made this way).
  const char* dir = std::getenv("VRAMSCOPE_WRITE_CORPUS");
  if (dir == nullptr) GTEST_SKIP() << "VRAMSCOPE_WRITE_CORPUS not set";
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(std::filesystem::path(dir) / name, std::ios::binary) << bytes;
  };
  write("every_kind.vstrace", EveryKind().bytes());
  TraceBuilder phases;
  phases.Push(1, "train_step").Push(2, "forward").Alloc(3, 0x1000, 4096).Pop(4).Push(5, "backward");
  phases.Alloc(6, 0x2000, 8192).Free(7, 0x1000).Pop(8).Push(9, "optimizer").Pop(10).Pop(11);
  write("phases.vstrace", phases.bytes());
  const std::string every = EveryKind().bytes();
  write("truncated.vstrace", every.substr(0, every.size() - 7));
}

}  // namespace
}  // namespace vramscope::native_trace
