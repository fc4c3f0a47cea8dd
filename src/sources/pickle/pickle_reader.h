// A safe reader for the pickles PyTorch writes as memory snapshots.
//
// Contract:
// - Accepts protocols 0-5 (snapshots use 2, 4 and 5; text opcodes appear in re-saves) and builds
//   only plain data: dict, list, tuple, set, str, bytes, int (any width), float, bool, None.
// - Refuses every opcode that imports or calls code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST,
// OBJ,
//   NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT1/2/4) and out-of-band buffers, naming the opcode and
//   its byte offset. Nothing is ever executed.
// - Never recurses (the machine is a loop over a value stack) and never allocates more than the
//   input can justify: every declared length is checked against the bytes that remain, and every
//   pushed value consumed at least one input byte.
// - Truncated or corrupt input yields an error with the byte offset and what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/status.h"
#include "sources/pickle/pickle_document.h"

namespace vramscope::pickle {

struct ParseOptions {
  // Called every few MiB with (bytes consumed, total bytes); may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct ParseInfo {
  int protocol = 0;  // from PROTO; 0 or 1 when absent (text or early binary pickle)
  uint64_t opcodes = 0;
};

// Parses `input`. On success the document refers into `input`, which must outlive it. Error
// messages start with "byte N:" so callers can prefix the file name.
Result<Document> Parse(std::span<const uint8_t> input, const ParseOptions& options = {},
                       ParseInfo* info = nullptr);

}  // namespace vramscope::pickle
