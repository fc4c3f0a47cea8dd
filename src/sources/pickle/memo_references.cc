#include "sources/pickle/memo_references.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>

#include "sources/pickle/pickle_opcodes.h"

namespace vramscope::pickle {

namespace {

// How an opcode's argument is laid out, for the scan's one table lookup an opcode.
enum class Argument : uint8_t {
  kRefused,  // an opcode the reader refuses (code-executing, out-of-band buffers, unknown)
  kFixed,    // a fixed number of bytes (OpcodeLayout::bytes), 0 for none
  kLength,   // a little-endian length of OpcodeLayout::bytes bytes, then that many bytes
  kLine,     // a text-protocol line
};
struct OpcodeLayout {
  Argument argument = Argument::kRefused;
  uint8_t bytes = 0;           // kFixed: the argument's bytes; kLength: the length's width
  bool signed_length = false;  // kLength: the reader refuses a negative length
};
constexpr std::array<OpcodeLayout, 256> MakeLayouts() {
  std::array<OpcodeLayout, 256> t{};
  for (const uint8_t op :
       {kMark,     kStop,      kPop,       kPopMark,    kDup,       kNone,   kNewTrue,
        kNewFalse, kEmptyList, kEmptyDict, kEmptyTuple, kEmptySet,  kTuple1, kTuple2,
        kTuple3,   kTuple,     kList,      kDict,       kFrozenSet, kAppend, kAppends,
        kSetItem,  kSetItems,  kAddItems,  kMemoize}) {
    t[op] = {Argument::kFixed, 0};
  }
  for (const uint8_t op : {kProto, kBinInt1, kBinGet, kBinPut}) t[op] = {Argument::kFixed, 1};
  t[kBinInt2] = {Argument::kFixed, 2};
  for (const uint8_t op : {kBinInt, kLongBinGet, kLongBinPut}) t[op] = {Argument::kFixed, 4};
  for (const uint8_t op : {kBinFloat, kFrame}) t[op] = {Argument::kFixed, 8};
  for (const uint8_t op : {kShortBinUnicode, kShortBinString, kShortBinBytes, kLong1}) {
    t[op] = {Argument::kLength, 1};
  }
  for (const uint8_t op : {kBinUnicode, kBinBytes}) t[op] = {Argument::kLength, 4};
  for (const uint8_t op : {kBinString, kLong4}) t[op] = {Argument::kLength, 4, true};
  for (const uint8_t op : {kBinUnicode8, kBinBytes8, kByteArray8}) {
    t[op] = {Argument::kLength, 8};
  }
  for (const uint8_t op : {kInt, kLong, kFloat, kString, kUnicode, kGet, kPut}) {
    t[op] = {Argument::kLine, 0};
  }
  return t;
}
constexpr std::array<OpcodeLayout, 256> kLayouts = MakeLayouts();

// How often the scan reports what it has read (MemoReferences::Scanned).
constexpr uint64_t kReportEvery = uint64_t{8} << 20;

}  // namespace

void MemoReferences::AddBeyondBitset(uint64_t index, uint64_t at) {
  // A slot MEMOIZE defined before byte `at` has an index below `at`: the bitset grows with the
  // input read, never with an index a crafted file names.
  if (index < at) {
    dense_.resize(index / 64 + 1 + dense_.size() / 2, 0);
    dense_[index / 64] |= uint64_t{1} << (index % 64);
  } else {
    sparse_.insert(index);
  }
}

MemoReferences::Reach MemoReferences::ScanRange(std::span<const uint8_t> input, uint64_t begin,
                                                uint64_t limit, const Scanned& scanned,
                                                MemoReferences& refs) {
  const uint8_t* const data = input.data();
  const uint64_t size = input.size();
  uint64_t pos = begin;
  uint64_t reported = begin;
  // Where the reader stops: what was read up to the opcode there is reported first.
  const auto stop_at = [&scanned, &reported](uint64_t at) {
    if (scanned && at > reported) scanned(reported, at);
    return Reach{at, true};
  };
  // The bitset in locals, reloaded only when it grows: a store into it could otherwise alias the
  // vector's own fields. A bit already set is not written again: most reads are of slots read
  // before (a snapshot's dict keys, its frames), and a write each time would chain every read of
  // the same word through memory.
  uint64_t* words = refs.dense_.data();
  uint64_t word_count = refs.dense_.size();
  const auto add = [&refs, &words, &word_count](uint64_t index, uint64_t at) {
    const uint64_t word = index / 64, bit = uint64_t{1} << (index % 64);
    if (word < word_count) {
      if ((words[word] & bit) == 0) words[word] |= bit;
      return;
    }
    refs.AddBeyondBitset(index, at);
    words = refs.dense_.data();
    word_count = refs.dense_.size();
  };
  while (pos < limit) {
    if (pos - reported >= kReportEvery && scanned) {
      scanned(reported, pos);
      reported = pos;
    }
    const uint64_t at = pos;
    const uint8_t op = data[pos++];
    const uint64_t left = size - pos;
    // A snapshot's frames lists are runs of memo reads: most of its opcodes.
    if (op == kLongBinGet && left >= 4) {
      add(LoadLittleEndian(data + pos, 4), at);
      pos += 4;
      continue;
    }
    if (op == kBinGet && left >= 1) {
      add(data[pos], at);
      pos += 1;
      continue;
    }
    const OpcodeLayout layout = kLayouts[op];
    switch (layout.argument) {
      case Argument::kFixed:
        if (left < layout.bytes) return stop_at(at);
        if (op == kBinGet || op == kLongBinGet) add(LoadLittleEndian(data + pos, layout.bytes), at);
        if (op == kStop) return stop_at(at);
        pos += layout.bytes;
        break;
      case Argument::kLength: {
        if (left < layout.bytes) return stop_at(at);
        const uint64_t len = LoadLittleEndian(data + pos, layout.bytes);
        if (layout.signed_length && static_cast<int32_t>(static_cast<uint32_t>(len)) < 0) {
          return stop_at(at);
        }
        if (left - layout.bytes < len) return stop_at(at);
        pos += layout.bytes + len;
        break;
      }
      case Argument::kLine: {
        const void* nl = std::memchr(data + pos, '\n', left);
        if (nl == nullptr) return stop_at(at);
        const auto* end = static_cast<const uint8_t*>(nl);
        if (op == kGet) {
          const char* first = reinterpret_cast<const char*>(data + pos);
          const char* last = reinterpret_cast<const char*>(end);
          if (last > first && last[-1] == '\r') --last;  // as the reader accepts \r\n
          uint64_t index = 0;
          const auto [stop, ec] = std::from_chars(first, last, index);
          if (ec != std::errc() || stop != last) return stop_at(at);
          add(index, at);
        }
        pos = static_cast<uint64_t>(end - data) + 1;
        break;
      }
      case Argument::kRefused:
        return stop_at(at);
    }
  }
  if (scanned && pos > reported) scanned(reported, std::min(pos, size));
  return {pos, false};
}

uint64_t MemoReferences::SplitPoint(std::span<const uint8_t> input, const Scanned& scanned) {
  // Protocol 4 and 5 cut the opcodes into FRAMEs of about 64 KiB, each announcing its length:
  // hop from frame to frame to the first that starts past the middle. Anything else between
  // frames (a large string is written outside them) ends the walk: no split. Each header read
  // maps its neighbourhood in (the kernel's fault-around): what the walk has passed is reported
  // as it goes, or half the file would be resident before the scan starts.
  const uint64_t size = input.size();
  uint64_t pos = size >= 2 && input[0] == kProto ? 2 : 0;
  uint64_t reported = 0;
  uint64_t split = 0;
  while (size - pos >= 9 && input[pos] == kFrame) {
    const uint64_t length = LoadLittleEndian(input.data() + pos + 1, 8);
    if (length > size - pos - 9) break;
    pos += 9 + length;
    if (scanned && pos - reported >= kReportEvery) {
      scanned(reported, pos);
      reported = pos;
    }
    if (pos >= size / 2) {
      split = pos < size ? pos : 0;
      break;
    }
  }
  if (scanned && pos > reported) scanned(reported, std::min(pos + 9, size));
  return split;
}

void MemoReferences::Merge(const MemoReferences& other) {
  if (other.dense_.size() > dense_.size()) dense_.resize(other.dense_.size(), 0);
  for (size_t i = 0; i < other.dense_.size(); ++i) dense_[i] |= other.dense_[i];
  sparse_.insert(other.sparse_.begin(), other.sparse_.end());
}

MemoReferences MemoReferences::Scan(std::span<const uint8_t> input, const Scanned& scanned,
                                    uint64_t parallel_from) {
  MemoReferences refs;
  const uint64_t split = input.size() >= parallel_from ? SplitPoint(input, scanned) : 0;
  if (split == 0) {
    ScanRange(input, 0, input.size(), scanned, refs);
    return refs;
  }
  // The second half on a second thread, from a frame's start: an opcode's start in every file
  // pickle writes. The first half's scan says whether it was one here: it ends exactly there,
  // or past it (an opcode ran over the frame's end: the second half is scanned again from
  // where the first ended), or before (the reader stops there: the second half is not used).
  // What the second thread throws (std::bad_alloc, which the command reports) is rethrown here
  // once it has ended; the thread is joined however the first half ends.
  // (Where the second half stops does not matter: what it read up to there is what one pass
  // reads once it has come to the split.)
  MemoReferences second;
  std::exception_ptr second_failed;
  Reach first;
  {
    std::jthread thread;
    try {
      thread = std::jthread([&] {
        try {
          (void)ScanRange(input, split, input.size(), scanned, second);
        } catch (...) {
          second_failed = std::current_exception();
        }
      });
    } catch (const std::system_error&) {
      ScanRange(input, 0, input.size(), scanned, refs);  // no thread to be had: one pass
      return refs;
    }
    first = ScanRange(input, 0, split, scanned, refs);
  }
  if (second_failed) std::rethrow_exception(second_failed);
  if (first.stopped) return refs;
  if (first.end == split) {
    refs.Merge(second);
  } else {
    ScanRange(input, first.end, input.size(), scanned, refs);
  }
  return refs;
}

std::vector<uint64_t> MemoReferences::Indices() const {
  std::vector<uint64_t> out;
  for (size_t w = 0; w < dense_.size(); ++w) {
    for (uint64_t bits = dense_[w]; bits != 0; bits &= bits - 1) {
      out.push_back(w * 64 + static_cast<uint64_t>(std::countr_zero(bits)));
    }
  }
  for (const uint64_t index : sparse_) {
    if (!(index / 64 < dense_.size() && ((dense_[index / 64] >> (index % 64)) & 1) != 0)) {
      out.push_back(index);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace vramscope::pickle
