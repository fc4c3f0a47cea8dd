// Which memo slots a pickle ever reads back: a pre-scan of the opcodes, before the reader runs.
//
// Why: the pickler memoizes every container (protocol 4 writes MEMOIZE after each), so a reader
// that streams a list's items (ListSink) must keep whatever the memo holds, in case a later
// BINGET asks for it. PyTorch gives each trace entry a frames list of its own that nothing reads
// back; kept, they made a real-shaped 1M-entry snapshot (307 MiB) cost 1.3 GiB. Knowing which
// slots are read lets the reader keep only those.
//
// Contract:
// - Decodes opcode boundaries exactly as the reader does, and records the index of every
//   BINGET, LONG_BINGET and GET up to STOP, the end of the input, or the first opcode the reader
//   would refuse (unknown or code-executing, a negative length, an argument cut off, a GET whose
//   line is not an index). The reader never runs past that point, so every memo read it makes
//   is recorded: Has(i) is false only for a slot no read of the reader's asks for.
// - Memory: a bitset up to the largest index read that could have been defined by then (a slot
//   defined at byte N has an index below N), a hash set for the rest (sparse BINPUT indices):
//   O(input) in the worst case, a few hundred KiB for a snapshot (two of them for a moment when
//   the halves are scanned apart).
// - Both cores: from kParallelScanBytes on, the halves are scanned on two threads; the first
//   half's scan checks that the split is where an opcode starts, and the result is exactly one
//   pass's (memo_references_test and the pickle fuzzer compare them).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_set>
#include <vector>

namespace vramscope::pickle {

class MemoReferences {
 public:
  // Told that bytes [begin, end) of the input have been read, every few MiB (a mapped file's
  // caller releases them: the reader reads them again). Called from the scan's two threads at
  // once on a large input: it must be safe to call concurrently.
  using Scanned = std::function<void(uint64_t begin, uint64_t end)>;

  // Inputs from this size on are scanned in two halves on two threads, split at a FRAME's
  // start (the result is the same as one pass; see Scan).
  static constexpr uint64_t kParallelScanBytes = uint64_t{16} << 20;

  // Scans `input` (see the contract above), on two threads when it is `parallel_from` bytes or
  // more and its FRAMEs can be followed to its middle.
  static MemoReferences Scan(std::span<const uint8_t> input, const Scanned& scanned = {},
                             uint64_t parallel_from = kParallelScanBytes);

  bool Has(uint64_t index) const {
    if (index / 64 < dense_.size() && ((dense_[index / 64] >> (index % 64)) & 1) != 0) {
      return true;
    }
    // (The bitset may have grown over an index recorded here before.)
    return !sparse_.empty() && sparse_.count(index) != 0;
  }

  // Every slot read, in increasing order (for tests and the fuzzer's comparisons).
  std::vector<uint64_t> Indices() const;

  // Where Scan splits an input it scans on two threads: the start of the first FRAME at or past
  // the middle, found by hopping from frame to frame; 0 when there is none (no frames, or
  // something between them: one pass). `scanned` is told what the hops have passed.
  static uint64_t SplitPoint(std::span<const uint8_t> input, const Scanned& scanned = {});

 private:
  // Where a scan of a range ended: `end` is past the last opcode it decoded whole, or, when
  // `stopped`, at the opcode where the reader stops (STOP, a refusal, an argument cut off).
  struct Reach {
    uint64_t end = 0;
    bool stopped = false;
  };
  // Decodes opcodes from `begin` (an opcode's start) until one ends at or past `limit`, or the
  // reader would stop, recording reads into `refs`.
  static Reach ScanRange(std::span<const uint8_t> input, uint64_t begin, uint64_t limit,
                         const Scanned& scanned, MemoReferences& refs);
  void Merge(const MemoReferences& other);
  // Records a read of slot `index` by the opcode at byte `at` that the bitset does not cover
  // (Scan sets the bits it covers itself).
  void AddBeyondBitset(uint64_t index, uint64_t at);

  std::vector<uint64_t> dense_;
  std::unordered_set<uint64_t> sparse_;
};

}  // namespace vramscope::pickle
