// The reader's memo pre-scan (memo_references.h); how the reader uses it is in
// pickle_list_sink_test.cc (ListSink.AListNothingReadsBackIsDroppedWithItsBatch).
#include "sources/pickle/memo_references.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vramscope::pickle {
namespace {

// The pre-scan's verdicts, opcode by opcode (memo_references.h).
std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

TEST(MemoReferences, RecordsEveryKindOfMemoRead) {
  // BINGET 1, LONG_BINGET 300, GET 7 (text, \r\n), BINPUT 9 (a write), a string holding the
  // bytes of a BINGET ("h\x05"), STOP.
  const auto refs =
      MemoReferences::Scan(Bytes(std::string("\x80\x04N\x94h\x01j\x2c\x01\x00\x00g7\r\nq\x09"
                                             "\x8c\x02h\x05.",
                                             22)));
  EXPECT_TRUE(refs.Has(1));
  EXPECT_TRUE(refs.Has(300));
  EXPECT_TRUE(refs.Has(7));
  EXPECT_FALSE(refs.Has(9));
  EXPECT_FALSE(refs.Has(5));  // inside a string: data, not an opcode
  EXPECT_FALSE(refs.Has(0));
}

TEST(MemoReferences, StopsWhereTheReaderWouldStop) {
  // A code-executing opcode (REDUCE), an unknown one, a cut-off argument, STOP: nothing after
  // them is read by the reader, so nothing after them is recorded.
  for (const std::string_view stop : {std::string_view("R"), std::string_view("\xff"),
                                      std::string_view("."), std::string_view("J\x01")}) {
    std::string bytes = "N\x94h\x02";
    bytes += stop;
    bytes += "h\x03";
    const auto refs = MemoReferences::Scan(Bytes(bytes));
    EXPECT_TRUE(refs.Has(2)) << stop;
    EXPECT_FALSE(refs.Has(3)) << stop;
  }
}

TEST(MemoReferences, AnIndexBeyondTheBytesReadCostsAnEntryNotABitset) {
  // BINPUT and LONG_BINGET of 4,000,000,000 at byte 4: recorded in the sparse set.
  const auto refs =
      MemoReferences::Scan(Bytes(std::string("N\x94r\x00\x28\x6b\xeej\x00\x28\x6b\xee.", 13)));
  EXPECT_TRUE(refs.Has(4'000'000'000u));
  EXPECT_FALSE(refs.Has(3'999'999'999u));
}

TEST(MemoReferences, SaysWhatItHasRead) {
  // A list of 9 Mi Nones: the scan reports the bytes it has read, in order and without gaps, from
  // the start to the STOP.
  std::string bytes = "\x80\x04](";
  bytes.append(size_t{9} << 20, 'N');
  bytes += "e.";
  std::vector<std::pair<uint64_t, uint64_t>> reports;
  (void)MemoReferences::Scan(
      Bytes(bytes), [&](uint64_t begin, uint64_t end) { reports.emplace_back(begin, end); });
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].first, 0u);
  EXPECT_GE(reports[0].second, uint64_t{8} << 20);
  EXPECT_EQ(reports[1].first, reports[0].second);
  EXPECT_EQ(reports[1].second, bytes.size() - 1);  // up to the STOP
}

// --- two halves on two threads --------------------------------------------------------------

// A protocol-4 pickle of these FRAMEs, as pickle writes one: PROTO 4, then each frame's opcode
// and length before its bytes.
std::vector<uint8_t> Framed(const std::vector<std::string>& frames) {
  std::string out = "\x80\x04";
  for (const std::string& frame : frames) {
    out += '\x95';
    for (int i = 0; i < 8; ++i)
      out += static_cast<char>((uint64_t{frame.size()} >> (8 * i)) & 0xFF);
    out += frame;
  }
  return Bytes(out);
}
// `n` Nones, each memoized (slots first..first+n-1 by MEMOIZE's count), then a read of each
// `step`-th slot so far, alternately by BINGET and LONG_BINGET.
std::string Frame(uint64_t first, uint64_t n, uint64_t step) {
  std::string out;
  for (uint64_t i = 0; i < n; ++i) out += "N\x94";
  for (uint64_t slot = 0; slot < first + n; slot += step) {
    if (slot < 256 && slot % 2 == 0) {
      out += 'h';
      out += static_cast<char>(slot);
    } else {
      out += 'j';
      for (int i = 0; i < 4; ++i) out += static_cast<char>((slot >> (8 * i)) & 0xFF);
    }
  }
  return out;
}
std::vector<uint64_t> OnePass(const std::vector<uint8_t>& bytes) {
  return MemoReferences::Scan(bytes, {}, UINT64_MAX).Indices();
}
std::vector<uint64_t> TwoHalves(const std::vector<uint8_t>& bytes) {
  EXPECT_NE(MemoReferences::SplitPoint(bytes), 0u) << "the test means to split this input";
  return MemoReferences::Scan(bytes, {}, 0).Indices();
}

TEST(MemoReferences, TwoHalvesFindWhatOnePassFinds) {
  const auto bytes = Framed(
      {Frame(0, 300, 7), Frame(300, 300, 11), Frame(600, 300, 13), Frame(900, 300, 5) + "."});
  const std::vector<uint64_t> one = OnePass(bytes);
  EXPECT_EQ(TwoHalves(bytes), one);
  std::set<uint64_t> read;  // every 7th slot of the first 300, every 11th of 600, ...
  for (const auto& [slots, step] : {std::pair{300, 7}, {600, 11}, {900, 13}, {1200, 5}}) {
    for (int slot = 0; slot < slots; slot += step) read.insert(slot);
  }
  EXPECT_EQ(one, std::vector<uint64_t>(read.begin(), read.end()));
}

TEST(MemoReferences, AnOpcodeAcrossTheSplitIsReadAsOnePassReadsIt) {
  // The second frame ends inside a LONG_BINGET whose argument runs over the third frame's
  // header: the halves disagree on where opcodes start, so the second is read again.
  std::string second = Frame(300, 300, 11);
  second += "j\x05\x01";  // two of LONG_BINGET's four bytes; the next two are 0x95 and 0x..
  const auto bytes = Framed({Frame(0, 300, 7), second, Frame(600, 300, 13) + "h\x02."});
  const std::vector<uint64_t> one = OnePass(bytes);
  EXPECT_EQ(TwoHalves(bytes), one);
  EXPECT_FALSE(one.empty());
}

TEST(MemoReferences, AStopInTheFirstHalfEndsTheScan) {
  // What follows a STOP is never read by the reader: the second half's reads do not count.
  const auto bytes =
      Framed({Frame(0, 300, 7) + ".", Frame(300, 300, 1), Frame(600, 300, 1), Frame(900, 3, 1)});
  const std::vector<uint64_t> one = OnePass(bytes);
  EXPECT_EQ(TwoHalves(bytes), one);
  EXPECT_EQ(one.size(), 43u);
}

TEST(MemoReferences, NoSplitWithoutFramesToFollow) {
  EXPECT_EQ(MemoReferences::SplitPoint(Bytes("\x80\x02N\x94h\x00.")), 0u);  // protocol 2
  // Something between frames (a large string is written outside them) ends the walk.
  std::vector<uint8_t> bytes = Framed({Frame(0, 10, 1)});
  const std::string outside = "\x8c\x01x";
  bytes.insert(bytes.end(), outside.begin(), outside.end());
  const std::vector<uint8_t> more = Framed({Frame(10, 400, 1)});
  bytes.insert(bytes.end(), more.begin() + 2, more.end());
  EXPECT_EQ(MemoReferences::SplitPoint(bytes), 0u);
  EXPECT_EQ(MemoReferences::Scan(bytes, {}, 0).Indices(), OnePass(bytes));
}

}  // namespace
}  // namespace vramscope::pickle
