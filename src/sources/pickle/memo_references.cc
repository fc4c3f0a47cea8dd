#include "sources/pickle/memo_references.h"

#include <array>
#include <charconv>
#include <cstring>

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

MemoReferences MemoReferences::Scan(std::span<const uint8_t> input,
                                    const std::function<void(uint64_t)>& scanned) {
  constexpr uint64_t kReportEvery = uint64_t{8} << 20;
  MemoReferences refs;
  const uint8_t* const data = input.data();
  const uint64_t size = input.size();
  uint64_t pos = 0;
  uint64_t next_report = kReportEvery;
  while (pos < size) {
    if (pos >= next_report && scanned) {
      scanned(pos);
      next_report = pos + kReportEvery;
    }
    const uint64_t at = pos;
    const uint8_t op = data[pos++];
    const uint64_t left = size - pos;
    // A snapshot's frames lists are runs of memo reads: most of its opcodes.
    if (op == kLongBinGet && left >= 4) {
      refs.Add(LoadLittleEndian(data + pos, 4), at);
      pos += 4;
      continue;
    }
    if (op == kBinGet && left >= 1) {
      refs.Add(data[pos], at);
      pos += 1;
      continue;
    }
    const OpcodeLayout layout = kLayouts[op];
    switch (layout.argument) {
      case Argument::kFixed:
        if (left < layout.bytes) return refs;
        if (op == kBinGet || op == kLongBinGet)
          refs.Add(LoadLittleEndian(data + pos, layout.bytes), at);
        if (op == kStop) return refs;
        pos += layout.bytes;
        break;
      case Argument::kLength: {
        if (left < layout.bytes) return refs;
        const uint64_t len = LoadLittleEndian(data + pos, layout.bytes);
        if (layout.signed_length && static_cast<int32_t>(static_cast<uint32_t>(len)) < 0) {
          return refs;
        }
        if (left - layout.bytes < len) return refs;
        pos += layout.bytes + len;
        break;
      }
      case Argument::kLine: {
        const void* nl = std::memchr(data + pos, '\n', left);
        if (nl == nullptr) return refs;
        const auto* end = static_cast<const uint8_t*>(nl);
        if (op == kGet) {
          const char* first = reinterpret_cast<const char*>(data + pos);
          const char* last = reinterpret_cast<const char*>(end);
          if (last > first && last[-1] == '\r') --last;  // as the reader accepts \r\n
          uint64_t index = 0;
          const auto [stop, ec] = std::from_chars(first, last, index);
          if (ec != std::errc() || stop != last) return refs;
          refs.Add(index, at);
        }
        pos = static_cast<uint64_t>(end - data) + 1;
        break;
      }
      case Argument::kRefused:
        return refs;
    }
  }
  return refs;
}

}  // namespace vramscope::pickle
