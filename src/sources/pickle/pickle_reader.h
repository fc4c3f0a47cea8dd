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

// Lets a consumer take the items of a list while the list is being filled, so a huge list of
// records (a snapshot's trace) is never held as a whole: the consumer converts each batch as
// pickle appends it, and the reader reclaims the batch's storage.
//
// `context` is the VM stack below the list (the keys and containers that enclose it, innermost
// last): enough to recognise which list it is. Values handed to the consumer are valid only
// during the call.
class ListSink {
 public:
  virtual ~ListSink() = default;
  // Whether the items of `list` (with `context` below it) are to be consumed. Asked when a batch
  // of items begins; must answer the same for every batch of one list.
  virtual bool Wants(const Document& doc, std::span<const Value> context, Value list) = 0;
  // Takes a batch of items of a wanted list. An error stops the parse with that Status.
  virtual Status Consume(const Document& doc, std::span<const Value> context, Value list,
                         std::span<const Value> items) = 0;
  // Containers with ids >= `first` were dropped or moved; `moved` gives (old id, new id) for those
  // kept. Forget or re-key anything remembered about them.
  virtual void Reclaimed(uint64_t first, std::span<const std::pair<uint64_t, uint64_t>> moved) = 0;
  // ParseOptions::recover_truncated: the input ended before STOP and the reader is closing what
  // was open; the Consume calls that follow hand over the items read before the cut, the last
  // of which may be a record cut short that the sink should drop.
  virtual void Recovering() {}
};

struct ParseOptions {
  // Called every few MiB with (bytes consumed, total bytes); may be empty. Returning false stops
  // the parse with Interrupted (the caller's cancellation).
  std::function<bool(uint64_t, uint64_t)> progress;
  // Optional consumer of list items (see ListSink); not owned.
  ListSink* sink = nullptr;
  // A pickle cut off before its STOP (a killed job, a full disk) yields the document it holds up
  // to the cut instead of an error: every container still open at the cut is closed as it stands
  // (a list keeps the items it has, a dict the pairs it has; a key without its value is dropped)
  // and marked incomplete (Document::IsIncomplete), and a dict or tuple that was still being
  // filled as an item of a list is dropped from that list, so every record a list holds is one
  // the writer finished. A FRAME that claims more bytes than remain is read as far as it goes.
  // The sink sees the last items through Consume after its Recovering() call.
  bool recover_truncated = false;
  // With a sink: a pre-scan finds the memo slots the pickle reads back (memo_references.h), and
  // the others keep nothing, so that what the sink consumed is dropped with its batch rather
  // than kept in case a later opcode asks for it. The document is the same either way; false
  // keeps every slot (the differential fuzz target compares the two).
  bool drop_unread_memo = true;
  // While that pre-scan reads: called every few MiB with a range [begin, end) of bytes it has
  // read, from two threads at once on a large input (MemoReferences::Scanned). The parse reads
  // them again afterwards, from the start.
  std::function<void(uint64_t begin, uint64_t end)> scanned;
};

struct ParseInfo {
  int protocol = 0;  // from PROTO; 0 or 1 when absent (text or early binary pickle)
  uint64_t opcodes = 0;
  uint64_t consumed_items = 0;     // items handed to the sink
  uint64_t reclaimed_batches = 0;  // batches whose storage was reclaimed
  // recover_truncated: the input ended before the pickle's STOP, at byte `cut_at` (its size);
  // `closed_containers` were still open there and were closed as they stood.
  bool truncated = false;
  uint64_t cut_at = 0;
  uint64_t closed_containers = 0;
  uint64_t dropped_records = 0;  // unfinished dicts/tuples left out of the lists holding them
};

// Parses `input`. On success the document refers into `input`, which must outlive it. Error
// messages start with "byte N:" so callers can prefix the file name.
Result<Document> Parse(std::span<const uint8_t> input, const ParseOptions& options = {},
                       ParseInfo* info = nullptr);

}  // namespace vramscope::pickle
