// The reader's memo pre-scan (memo_references.h); how the reader uses it is in
// pickle_reader_test.cc (ListSink.AListNothingReadsBackIsDroppedWithItsBatch).
#include "sources/pickle/memo_references.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
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

TEST(MemoReferences, SaysHowFarItHasRead) {
  // A list of 9 Mi Nones: the scan reports once it is past 8 MiB, never past the end.
  std::string bytes = "\x80\x04](";
  bytes.append(size_t{9} << 20, 'N');
  bytes += "e.";
  std::vector<uint64_t> reports;
  (void)MemoReferences::Scan(Bytes(bytes), [&](uint64_t done) { reports.push_back(done); });
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_GE(reports[0], uint64_t{8} << 20);
  EXPECT_LE(reports[0], bytes.size());
}

}  // namespace
}  // namespace vramscope::pickle
