// Reads the native trace file (.vstrace, docs/design/native-trace.md) into its records, without
// interpreting them (native_trace_source.h turns them into a model::Trace). Free of CUPTI and of
// the CUDA headers, so it builds everywhere.
//
// A trace written by a process that crashed, was killed or ran out of disk ends in a torn record;
// reading stops at the last complete record whose checksum holds, and `stopped` says where and
// why. Only a file that is not a trace at all (no intact header, another major version) is an
// error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "native_capture/vstrace_format.h"

namespace vramscope::native_trace {

// One allocation, VMM, NVTX or end record. Which fields are meaningful depends on `kind` (see
// vstrace::RecordKind); the rest stay zero.
struct Record {
  vstrace::RecordKind kind = vstrace::RecordKind::kEnd;
  uint64_t file_offset = 0;  // where the record starts in the file
  uint64_t time_ns = 0;      // trace clock
  uint32_t tid = 0;
  int32_t device = -1;
  uint32_t stack = 0;  // a key of ParsedTrace::stacks; 0: none
  uint8_t api = 0;     // vstrace::Api
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;
  uint64_t handle = 0;           // VMM
  uint64_t handle_offset = 0;    // cuMemMap's offset into the handle
  int32_t location_device = -1;  // cuMemCreate's location
  uint32_t result = 0;           // kAllocFailed: the CUresult
  uint64_t range_id = 0;         // NVTX start/end
  std::string name;              // NVTX message; kEnd: the reason
};

struct Frame {
  uint64_t pc = 0;
  uint32_t module = 0;  // string id
  uint64_t offset = 0;  // pc - the module's load address
  uint32_t symbol = 0;  // string id; 0: dladdr found none
};

struct ParsedTrace {
  vstrace::Header header;
  std::vector<std::pair<std::string, std::string>> facts;  // process facts, in file order
  std::unordered_map<uint32_t, std::string> strings;
  std::unordered_map<uint32_t, Frame> frames;
  std::unordered_map<uint32_t, std::vector<uint32_t>> stacks;  // frame ids, innermost first
  std::vector<Record> records;
  uint64_t record_count = 0;     // every intact record, definitions included
  uint64_t unknown_records = 0;  // kinds of a newer minor version, skipped
  bool ended = false;            // an end record was read: the process finished cleanly
  std::string end_reason;
  uint64_t valid_bytes = 0;  // the header and intact records: where reading stopped
  // Zeros after the last record: space the writer reserved and had not used (the file was not
  // closed: the process crashed, was killed or is still running). Not damage.
  uint64_t reserved_tail_bytes = 0;
  // Empty when the file ends exactly after an intact record; else one sentence saying where
  // reading stopped and why ("at byte 1234 the last record is cut short (...)").
  std::string stopped;
};

// `path` prefixes error messages. Errors: no complete header, not a .vstrace, a major version
// other than vstrace::kMajorVersion, a damaged header.
Result<ParsedTrace> ReadNativeTrace(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace vramscope::native_trace
