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
//   O(input) in the worst case, a few hundred KiB for a snapshot.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_set>
#include <vector>

namespace vramscope::pickle {

class MemoReferences {
 public:
  // Scans `input` (see the contract above). `scanned`, when set, is called every few MiB with
  // the bytes read so far (a mapped file's caller releases them: the reader reads them again).
  static MemoReferences Scan(std::span<const uint8_t> input,
                             const std::function<void(uint64_t)>& scanned = {});

  bool Has(uint64_t index) const {
    if (index / 64 < dense_.size() && ((dense_[index / 64] >> (index % 64)) & 1) != 0) {
      return true;
    }
    // (The bitset may have grown over an index recorded here before.)
    return !sparse_.empty() && sparse_.count(index) != 0;
  }

 private:
  // Records a read of slot `index` by the opcode at byte `at`.
  void Add(uint64_t index, uint64_t at) {
    if (index / 64 < dense_.size()) {
      dense_[index / 64] |= uint64_t{1} << (index % 64);
    } else {
      AddBeyondBitset(index, at);
    }
  }
  void AddBeyondBitset(uint64_t index, uint64_t at);

  std::vector<uint64_t> dense_;
  std::unordered_set<uint64_t> sparse_;
};

}  // namespace vramscope::pickle
