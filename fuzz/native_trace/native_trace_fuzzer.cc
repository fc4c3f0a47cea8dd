// libFuzzer target for the native trace (.vstrace) reader and source.
//
// Reads the input; a failure must be one InvalidInput line naming the file. A success must hold
// the source's promises (devices ascending with contiguous events, times in order, every
// segment event paired with an allocation of the same address and size, phase marks in event
// order on their device, no more intact bytes than the input has) and survive every analysis a
// report runs. Any prefix of the input must read too (a crash mid-write cuts a trace anywhere).
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target native_trace_fuzzer).
// Run:   native_trace_fuzzer -max_len=4096 NEW_CORPUS_DIR fuzz/native_trace/corpus
// (new inputs go to the first folder; the checked-in seeds stay as they are). The seeds are
// written by native_trace_source_test with VRAMSCOPE_WRITE_CORPUS=<dir>.
//
// Random mutations almost never keep a record's CRC right, which would stop every run at the
// first changed record; so each input is read twice: as it is (the checksum paths), and with
// every header and record checksum recomputed (the decoding and the source behind them).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "native_capture/vstrace_format.h"
#include "sources/native_trace/native_trace_source.h"
#include "sources/native_trace/vstrace_reader.h"
#include "support/through_pipeline.h"

namespace {

using vramscope::model::Action;

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

void CheckTrace(const vramscope::model::Trace& t) {
  const auto& ev = t.events;
  const size_t n = ev.count();
  Check(t.facts.has_trace == (n > 0));
  Check(!t.facts.has_allocator_state && t.facts.sizes_are_block_sizes);
  Check(t.devices.size() == t.device_event_ranges.size());
  size_t next = 0;
  for (size_t d = 0; d < t.devices.size(); ++d) {
    if (d > 0) Check(t.devices[d - 1] < t.devices[d]);
    Check(t.devices[d] >= 0 && t.devices[d] <= vramscope::model::kMaxDeviceOrdinal);
    const auto [begin, end] = t.device_event_ranges[d];
    Check(begin == next && end > begin);
    for (size_t i = begin; i < end; ++i) Check(ev.device[i] == t.devices[d]);
    next = end;
  }
  Check(next == n);
  for (size_t i = 0; i < n; ++i) {
    Check(ev.time_us[i] != vramscope::model::kNoTime);
    if (i > 0 && ev.device[i] == ev.device[i - 1]) Check(ev.time_us[i] >= ev.time_us[i - 1]);
    Check(ev.stack[i] < t.stacks.size());
    switch (ev.action[i]) {
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        Check(i + 1 < n && ev.action[i + 1] == Action::kAlloc && ev.addr[i + 1] == ev.addr[i] &&
              ev.size[i + 1] == ev.size[i]);
        break;
      case Action::kFreeCompleted:
        Check(i + 1 < n &&
              (ev.action[i + 1] == Action::kSegmentFree ||
               ev.action[i + 1] == Action::kSegmentUnmap) &&
              ev.addr[i + 1] == ev.addr[i] && ev.size[i + 1] == ev.size[i]);
        break;
      case Action::kAlloc:
        Check(ev.size[i] > 0 && ev.addr[i] != 0);
        break;
      default:
        break;
    }
  }
  for (const auto& [index, path] : ev.user_metadata) {
    Check(index < n && path < t.strings.size());
  }
  for (size_t m = 0; m < t.phase_marks.size(); ++m) {
    const auto& mark = t.phase_marks[m];
    Check(mark.event < n && ev.device[mark.event] == mark.device);
    if (m > 0 && t.phase_marks[m - 1].device == mark.device) {
      Check(t.phase_marks[m - 1].event < mark.event);
      Check(t.phase_marks[m - 1].step <= mark.step);
    }
  }
  // A driver allocation is freed at most once.
  for (const auto& a : t.allocations) {
    Check(a.size == a.requested_size);
    if (a.alloc_event != vramscope::model::kNoEvent)
      Check(ev.action[a.alloc_event] == Action::kAlloc);
  }
  Check(t.facts.frees_without_alloc == 0);
}

uint32_t Le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

void PutLe32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// Recomputes the header's and each record's CRC where the lengths allow.
std::string WithChecksumsFixed(std::string s) {
  if (s.size() < vramscope::vstrace::kHeaderFixedBytes) return s;
  const uint32_t header = Le32(s, 12);
  if (header < 4 || header > s.size()) return s;
  PutLe32(s, header - 4, vramscope::vstrace::Crc32(s.data(), header - 4));
  size_t pos = header;
  while (s.size() - pos >= 4) {
    const uint32_t length = Le32(s, pos);
    if (length == 0 || length > vramscope::vstrace::kMaxRecordBytes ||
        s.size() - pos < size_t{length} + 8) {
      break;
    }
    PutLe32(s, pos + 4 + length, vramscope::vstrace::Crc32(s.data() + pos, 4 + length));
    pos += length + 8;
  }
  return s;
}

void ReadOne(const std::string& input) {
  const size_t size = input.size();
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(input.data()), size);
  auto parsed = vramscope::native_trace::ReadNativeTrace(bytes, "fuzz");
  auto trace = vramscope::native_trace::TraceFromNativeTrace(bytes, "fuzz");
  Check(parsed.ok() == trace.ok());
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return;
  }
  Check(parsed->valid_bytes + parsed->reserved_tail_bytes <= size);
  // Read to the end, or to a zero tail (the writer's reserved, unused space), or stopped.
  Check(parsed->stopped.empty() == (parsed->valid_bytes + parsed->reserved_tail_bytes == size));
  Check(parsed->reserved_tail_bytes == 0 || parsed->stopped.empty());
  CheckTrace(*trace);

  // The intact part alone reads to the same records.
  const auto intact = vramscope::native_trace::ReadNativeTrace(
      bytes.first(static_cast<size_t>(parsed->valid_bytes)), "fuzz");
  Check(intact.ok() && intact->stopped.empty() && intact->record_count == parsed->record_count);

  // The rest of the pipeline a user's input takes, and what holds for every input.
  vramscope::testing::ThroughPipeline(std::move(*trace));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copies of exactly `size` bytes, so that any read past the end is caught by ASan.
  const std::string input(reinterpret_cast<const char*>(data), size);
  ReadOne(input);
  const std::string fixed = WithChecksumsFixed(input);
  if (fixed != input) ReadOne(fixed);
  return 0;
}
