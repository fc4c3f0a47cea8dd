// Unit tests for the safe pickle reader.
//
// Every pickle here is written out as hex. Hand-built ones are commented opcode by opcode; the
// others were produced once by CPython 3.11's pickle module and pasted, with the Python expression
// that produced them next to them. Nothing is generated at test time except long lists, built in
// C++ in exactly the layout pickle uses (checked once against CPython's output).
#include "sources/pickle/pickle_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

// --- allocation tracking ----------------------------------------------------------------------
// The reader promises never to allocate more than the input can justify. To check it, the global
// operator new records the largest single request while a test has tracking switched on.
namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};

void* TrackedAlloc(size_t n) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return TrackedAlloc(n); }
void* operator new[](size_t n) { return TrackedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace vramscope::pickle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// "80 02 4b 05 2e" -> bytes. Whitespace is ignored.
std::vector<uint8_t> Hex(std::string_view hex) {
  std::vector<uint8_t> out;
  int high = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      EXPECT_TRUE(c == ' ' || c == '\n') << "bad character in hex literal: " << c;
      continue;
    }
    if (high < 0) {
      high = v;
    } else {
      out.push_back(static_cast<uint8_t>(high * 16 + v));
      high = -1;
    }
  }
  EXPECT_EQ(high, -1) << "odd number of hex digits";
  return out;
}

// Text-protocol pickles are easier to read as text.
std::vector<uint8_t> Text(std::string_view text) { return {text.begin(), text.end()}; }

// Owns the input bytes (the document points into them) and the parse result.
class Parsed {
 public:
  explicit Parsed(std::vector<uint8_t> bytes)
      : bytes_(std::move(bytes)), result_(Parse(bytes_, {}, &info_)) {}
  Parsed(const Parsed&) = delete;
  Parsed& operator=(const Parsed&) = delete;

  bool ok() const { return result_.ok(); }
  const std::string& error() const { return result_.status().message(); }
  const Document& doc() const { return result_.value(); }
  Value root() const { return doc().root(); }
  const ParseInfo& info() const { return info_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  // Shortcuts on the root value.
  Kind kind() const { return doc().kind(root()); }
  std::optional<int64_t> i64() const { return doc().AsInt64(root()); }
  std::optional<uint64_t> u64() const { return doc().AsUint64(root()); }
  std::optional<double> f64() const { return doc().AsDouble(root()); }
  std::optional<std::string_view> str() const { return doc().AsString(root()); }
  std::span<const Value> items() const { return doc().Items(root()); }

 private:
  std::vector<uint8_t> bytes_;
  ParseInfo info_;
  Result<Document> result_;
};

Parsed FromHex(std::string_view hex) { return Parsed(Hex(hex)); }
Parsed FromText(std::string_view text) { return Parsed(Text(text)); }

#define ASSERT_PARSES(p) ASSERT_TRUE((p).ok()) << (p).error()

// The error message for bytes that must not parse ("" and a test failure when they do).
std::string ErrorOf(const std::vector<uint8_t>& bytes) {
  const Result<Document> result = Parse(bytes);
  if (result.ok()) {
    ADD_FAILURE() << "parsed successfully, expected an error";
    return "";
  }
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidInput);
  return result.status().message();
}
std::string HexError(std::string_view hex) { return ErrorOf(Hex(hex)); }
std::string TextError(std::string_view text) { return ErrorOf(Text(text)); }

std::vector<int64_t> Ints(const Document& doc, std::span<const Value> items) {
  std::vector<int64_t> out;
  for (Value v : items) out.push_back(doc.AsInt64(v).value_or(-999999));
  return out;
}

// ============================================================================================
// Framing and control opcodes
// ============================================================================================

TEST(PickleReaderTest, ProtoSetsProtocol) {
  for (int proto : {2, 3, 4, 5}) {
    SCOPED_TRACE(proto);
    const std::string hex = "80 0" + std::to_string(proto) +  // PROTO n
                            " 4b 07"                          // BININT1 7
                            " 2e";                            // STOP
    const Parsed p = FromHex(hex);
    ASSERT_PARSES(p);
    EXPECT_EQ(p.info().protocol, proto);
    EXPECT_EQ(p.i64(), 7);
    EXPECT_EQ(p.info().opcodes, 3u);
  }
}

TEST(PickleReaderTest, NoProtoMeansProtocolZero) {
  const Parsed p = FromText("I5\n.");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.info().protocol, 0);
  EXPECT_EQ(p.i64(), 5);
}

TEST(PickleReaderTest, ProtocolSixIsRefused) {
  EXPECT_THAT(HexError("80 06 4b 01 2e"), StartsWith("byte 0: "));
  EXPECT_THAT(HexError("80 06 4b 01 2e"), HasSubstr("protocol 6"));
}

TEST(PickleReaderTest, Frame) {
  const Parsed p = FromHex(
      "80 04"                       // PROTO 4
      "95 03 00 00 00 00 00 00 00"  // FRAME 3
      "4b 07"                       // BININT1 7
      "2e");                        // STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 7);
}

TEST(PickleReaderTest, SeveralFrames) {
  const Parsed p = FromHex(
      "80 04"                       // PROTO 4
      "95 03 00 00 00 00 00 00 00"  // FRAME 3
      "5d 4b 01"                    // EMPTY_LIST, BININT1 1
      "95 02 00 00 00 00 00 00 00"  // FRAME 2
      "61 2e");                     // APPEND, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1}));
}

TEST(PickleReaderTest, StopEndsTheMachineAndIgnoresTrailingBytes) {
  // Like pickle.loads, which stops at STOP and ignores what follows.
  const Parsed p = FromHex("4e 2e ff ff ff");  // NONE, STOP, junk
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kNone);
  EXPECT_TRUE(p.doc().IsNone(p.root()));
}

TEST(PickleReaderTest, MarkAndPopMark) {
  const Parsed p = FromHex(
      "80 02"           // PROTO 2
      "4b 01"           // BININT1 1
      "28 4b 02 4b 03"  // MARK, BININT1 2, BININT1 3
      "31"              // POP_MARK: drops 2, 3 and the mark
      "2e");            // STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 1);
}

TEST(PickleReaderTest, Pop) {
  const Parsed p = FromHex("4b 01 4b 02 30 2e");  // BININT1 1, BININT1 2, POP, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 1);
}

TEST(PickleReaderTest, PopOnAMarkRemovesTheMark) {
  // As in CPython: POP with nothing above the mark discards the mark itself.
  const Parsed p = FromHex(
      "4b 01"    // BININT1 1
      "28 30"    // MARK, POP (removes the mark)
      "4b 02"    // BININT1 2
      "86 2e");  // TUPLE2 takes 1 and 2, STOP
  ASSERT_PARSES(p);
  ASSERT_EQ(p.kind(), Kind::kTuple);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1, 2}));
}

TEST(PickleReaderTest, Dup) {
  const Parsed p = FromHex("5d 32 86 2e");  // EMPTY_LIST, DUP, TUPLE2, STOP
  ASSERT_PARSES(p);
  ASSERT_EQ(p.items().size(), 2u);
  EXPECT_EQ(p.doc().ContainerId(p.items()[0]), p.doc().ContainerId(p.items()[1]));
  EXPECT_EQ(p.doc().container_count(), 2u);
}

// ============================================================================================
// Scalars
// ============================================================================================

TEST(PickleReaderTest, None) {
  const Parsed p = FromHex("80 02 4e 2e");  // PROTO 2, NONE, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kNone);
  EXPECT_TRUE(p.doc().IsNone(p.root()));
  EXPECT_FALSE(p.doc().IsMissing(p.root()));
  EXPECT_EQ(p.i64(), std::nullopt);
  EXPECT_EQ(p.doc().AsBool(p.root()), std::nullopt);
}

TEST(PickleReaderTest, NewTrueNewFalse) {
  const Parsed t = FromHex("80 02 88 2e");  // PROTO 2, NEWTRUE, STOP
  ASSERT_PARSES(t);
  EXPECT_EQ(t.kind(), Kind::kBool);
  EXPECT_EQ(t.doc().AsBool(t.root()), true);
  EXPECT_EQ(t.i64(), 1);  // bool is an int in Python

  const Parsed f = FromHex("80 02 89 2e");  // PROTO 2, NEWFALSE, STOP
  ASSERT_PARSES(f);
  EXPECT_EQ(f.kind(), Kind::kBool);
  EXPECT_EQ(f.doc().AsBool(f.root()), false);
  EXPECT_EQ(f.i64(), 0);
}

TEST(PickleReaderTest, IntText) {
  const Parsed p = FromText("I42\n.");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kInt);
  EXPECT_EQ(p.i64(), 42);

  const Parsed n = FromText("I-5\n.");  // pickle.dumps(-5, 0)
  ASSERT_PARSES(n);
  EXPECT_EQ(n.i64(), -5);
  EXPECT_EQ(n.u64(), std::nullopt);
}

TEST(PickleReaderTest, IntTextBooleans) {
  const Parsed t = FromText("I01\n.");  // pickle.dumps(True, 0)
  ASSERT_PARSES(t);
  EXPECT_EQ(t.kind(), Kind::kBool);
  EXPECT_EQ(t.doc().AsBool(t.root()), true);

  const Parsed f = FromText("I00\n.");  // pickle.dumps(False, 0)
  ASSERT_PARSES(f);
  EXPECT_EQ(f.kind(), Kind::kBool);
  EXPECT_EQ(f.doc().AsBool(f.root()), false);
}

TEST(PickleReaderTest, IntTextBigDecimals) {
  const Parsed max64 = FromText("I9223372036854775807\n.");
  ASSERT_PARSES(max64);
  EXPECT_EQ(max64.i64(), std::numeric_limits<int64_t>::max());

  const Parsed min64 = FromText("I-9223372036854775808\n.");
  ASSERT_PARSES(min64);
  EXPECT_EQ(min64.i64(), std::numeric_limits<int64_t>::min());

  const Parsed size_max = FromText("I18446744073709551615\n.");
  ASSERT_PARSES(size_max);
  EXPECT_EQ(size_max.u64(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(size_max.i64(), std::nullopt);

  const Parsed too_wide = FromText("I123456789012345678901234567890\n.");
  ASSERT_PARSES(too_wide);
  EXPECT_EQ(too_wide.kind(), Kind::kInt);
  EXPECT_EQ(too_wide.i64(), std::nullopt);
  EXPECT_EQ(too_wide.u64(), std::nullopt);

  const Parsed minus_zero = FromText("I-0\n.");
  ASSERT_PARSES(minus_zero);
  EXPECT_EQ(minus_zero.i64(), 0);
}

TEST(PickleReaderTest, IntTextRejectsNonNumbers) {
  EXPECT_THAT(TextError("Iabc\n."), HasSubstr("INT"));
  EXPECT_THAT(TextError("I\n."), StartsWith("byte 0: "));
  EXPECT_THAT(TextError("I12"), HasSubstr("newline"));
}

TEST(PickleReaderTest, LongText) {
  const Parsed p = FromText("L12345678901234567890L\n.");  // pickle.dumps(12345678901234567890, 0)
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kInt);
  EXPECT_EQ(p.u64(), 12345678901234567890ull);
  EXPECT_EQ(p.i64(), std::nullopt);

  const Parsed small = FromText("L2147483648L\n.");  // pickle.dumps(2**31, 0)
  ASSERT_PARSES(small);
  EXPECT_EQ(small.i64(), 2147483648);

  const Parsed negative = FromText("L-5L\n.");
  ASSERT_PARSES(negative);
  EXPECT_EQ(negative.i64(), -5);

  const Parsed no_suffix = FromText("L77\n.");  // the trailing L is optional
  ASSERT_PARSES(no_suffix);
  EXPECT_EQ(no_suffix.i64(), 77);

  EXPECT_THAT(TextError("LxyzL\n."), HasSubstr("LONG"));
}

TEST(PickleReaderTest, BinInt) {
  const Parsed p = FromHex("80 02 4a fe ff ff ff 2e");  // PROTO 2, BININT -2, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), -2);

  const Parsed max = FromHex("4a ff ff ff 7f 2e");  // BININT 2**31-1
  ASSERT_PARSES(max);
  EXPECT_EQ(max.i64(), 2147483647);

  const Parsed min = FromHex("4a 00 00 00 80 2e");  // BININT -2**31
  ASSERT_PARSES(min);
  EXPECT_EQ(min.i64(), -2147483648LL);
}

TEST(PickleReaderTest, BinInt1) {
  const Parsed p = FromHex("80 02 4b ff 2e");  // PROTO 2, BININT1 255 (unsigned), STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 255);
}

TEST(PickleReaderTest, BinInt2) {
  const Parsed p = FromHex("80 02 4d ff ff 2e");  // PROTO 2, BININT2 65535 (unsigned), STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 65535);

  const Parsed le = FromHex("4d 00 01 2e");  // BININT2 256 (little-endian)
  ASSERT_PARSES(le);
  EXPECT_EQ(le.i64(), 256);
}

TEST(PickleReaderTest, Long1ZeroBytes) {
  const Parsed p = FromHex("80 02 8a 00 2e");  // LONG1 with no bytes is 0
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kInt);
  EXPECT_EQ(p.i64(), 0);
}

TEST(PickleReaderTest, Long1Negatives) {
  const Parsed minus_one = FromHex("8a 01 ff 2e");  // LONG1 -1
  ASSERT_PARSES(minus_one);
  EXPECT_EQ(minus_one.i64(), -1);

  const Parsed minus_256 = FromHex("8a 02 00 ff 2e");  // LONG1 -256
  ASSERT_PARSES(minus_256);
  EXPECT_EQ(minus_256.i64(), -256);

  const Parsed minus_128 = FromHex("8a 01 80 2e");  // LONG1 -128
  ASSERT_PARSES(minus_128);
  EXPECT_EQ(minus_128.i64(), -128);

  const Parsed plus_255 = FromHex("8a 02 ff 00 2e");  // LONG1 255 (0x00 keeps it positive)
  ASSERT_PARSES(plus_255);
  EXPECT_EQ(plus_255.i64(), 255);
}

TEST(PickleReaderTest, Long1EightByteValues) {
  const Parsed max = FromHex("80 02 8a 08 ff ff ff ff ff ff ff 7f 2e");  // pickle.dumps(2**63-1, 2)
  ASSERT_PARSES(max);
  EXPECT_EQ(max.i64(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(max.u64(), uint64_t{std::numeric_limits<int64_t>::max()});

  const Parsed min = FromHex("8a 08 00 00 00 00 00 00 00 80 2e");  // LONG1 -2**63
  ASSERT_PARSES(min);
  EXPECT_EQ(min.i64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(min.u64(), std::nullopt);

  const Parsed address = FromHex("8a 06 00 00 00 00 3a 7f 2e");  // LONG1 0x7f3a00000000
  ASSERT_PARSES(address);
  EXPECT_EQ(address.u64(), 0x7f3a00000000ull);
}

TEST(PickleReaderTest, Long1SizeMax) {
  // pickle.dumps(2**64 - 1, 2): nine bytes, the last one a 0x00 sign byte.
  const Parsed p = FromHex("80 02 8a 09 ff ff ff ff ff ff ff ff 00 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kInt);
  EXPECT_EQ(p.u64(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(p.i64(), std::nullopt);
}

TEST(PickleReaderTest, Long1Edges) {
  // pickle.dumps([2**60-1, 2**60, -2**60, -2**60-1, 2**63, -2**63-1, 2**64, -2**64], 2):
  // the inline/boxed boundary (61 bits), then values just past int64 and uint64.
  const Parsed p = FromHex(
      "80025d7100288a08ffffffffffffff0f8a0800000000000000108a0800000000000000f08a08ffffffffffffffef"
      "8a090000000000000080008a09ffffffffffffff7fff8a090000000000000000018a090000000000000000ff65"
      "2e");
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  const auto items = p.items();
  ASSERT_EQ(items.size(), 8u);
  EXPECT_EQ(d.AsInt64(items[0]), (int64_t{1} << 60) - 1);
  EXPECT_EQ(d.AsInt64(items[1]), int64_t{1} << 60);
  EXPECT_EQ(d.AsInt64(items[2]), -(int64_t{1} << 60));
  EXPECT_EQ(d.AsInt64(items[3]), -(int64_t{1} << 60) - 1);
  EXPECT_EQ(d.AsInt64(items[4]), std::nullopt);  // 2**63
  EXPECT_EQ(d.AsUint64(items[4]), uint64_t{1} << 63);
  EXPECT_EQ(d.AsInt64(items[5]), std::nullopt);  // -2**63-1
  EXPECT_EQ(d.AsUint64(items[5]), std::nullopt);
  for (size_t i : {6, 7}) {  // 2**64 and -2**64: too wide for either accessor
    EXPECT_EQ(d.kind(items[i]), Kind::kInt);
    EXPECT_EQ(d.AsInt64(items[i]), std::nullopt);
    EXPECT_EQ(d.AsUint64(items[i]), std::nullopt);
  }
}

TEST(PickleReaderTest, Long1TooWide) {
  // pickle.dumps(2**120, 2): a 16-byte value.
  const Parsed p = FromHex("80 02 8a 10 00000000000000000000000000000001 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kInt);
  EXPECT_EQ(p.i64(), std::nullopt);
  EXPECT_EQ(p.u64(), std::nullopt);
  EXPECT_EQ(p.f64(), std::nullopt);
}

TEST(PickleReaderTest, Long1RedundantSignBytesAreDropped) {
  // 16 bytes that are just 5 followed by zero padding, and -1 padded with 0xff.
  const Parsed five = FromHex("8a 10 05 000000000000000000000000000000 2e");
  ASSERT_PARSES(five);
  EXPECT_EQ(five.i64(), 5);
  const Parsed minus_one = FromHex("8a 10 ffffffffffffffffffffffffffffffff 2e");
  ASSERT_PARSES(minus_one);
  EXPECT_EQ(minus_one.i64(), -1);
}

TEST(PickleReaderTest, Long4) {
  const Parsed p = FromHex("80 02 8b 02 00 00 00 ff 7f 2e");  // LONG4 with 2 bytes: 32767
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 32767);

  const Parsed wide = FromHex("8b 09 00 00 00 ff ff ff ff ff ff ff ff 00 2e");  // LONG4 2**64-1
  ASSERT_PARSES(wide);
  EXPECT_EQ(wide.u64(), std::numeric_limits<uint64_t>::max());

  const Parsed empty = FromHex("8b 00 00 00 00 2e");  // LONG4 with 0 bytes
  ASSERT_PARSES(empty);
  EXPECT_EQ(empty.i64(), 0);

  EXPECT_THAT(HexError("8b ff ff ff ff 2e"), HasSubstr("negative"));
}

TEST(PickleReaderTest, BinFloatIsBigEndian) {
  const Parsed pi = FromHex("80 02 47 40 09 21 fb 54 44 2d 18 2e");  // BINFLOAT 3.141592653589793
  ASSERT_PARSES(pi);
  EXPECT_EQ(pi.kind(), Kind::kFloat);
  EXPECT_EQ(pi.f64(), 3.141592653589793);
  EXPECT_EQ(pi.i64(), std::nullopt);

  const Parsed minus_zero = FromHex("47 80 00 00 00 00 00 00 00 2e");  // -0.0
  ASSERT_PARSES(minus_zero);
  ASSERT_TRUE(minus_zero.f64().has_value());
  EXPECT_EQ(*minus_zero.f64(), 0.0);
  EXPECT_TRUE(std::signbit(*minus_zero.f64()));

  const Parsed inf = FromHex("47 7f f0 00 00 00 00 00 00 2e");  // inf
  ASSERT_PARSES(inf);
  EXPECT_EQ(inf.f64(), std::numeric_limits<double>::infinity());

  const Parsed subnormal = FromHex("47 00 00 12 68 8b 70 e6 2b 2e");  // 1e-310
  ASSERT_PARSES(subnormal);
  EXPECT_EQ(subnormal.f64(), 1e-310);
}

TEST(PickleReaderTest, FloatText) {
  const Parsed p = FromText("F1.5\n.");  // pickle.dumps(1.5, 0)
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kFloat);
  EXPECT_EQ(p.f64(), 1.5);

  const Parsed exp = FromText("F-2.5e-3\n.");
  ASSERT_PARSES(exp);
  EXPECT_EQ(exp.f64(), -2.5e-3);

  const Parsed inf = FromText("Finf\n.");  // pickle.dumps(float('inf'), 0)
  ASSERT_PARSES(inf);
  EXPECT_EQ(inf.f64(), std::numeric_limits<double>::infinity());

  const Parsed nan = FromText("Fnan\n.");
  ASSERT_PARSES(nan);
  ASSERT_TRUE(nan.f64().has_value());
  EXPECT_TRUE(std::isnan(*nan.f64()));

  EXPECT_THAT(TextError("F1.5x\n."), HasSubstr("FLOAT"));
  EXPECT_THAT(TextError("F\n."), StartsWith("byte 0: "));
}

TEST(PickleReaderTest, AsDoubleAcceptsIntegers) {
  const Parsed p = FromHex("4b 07 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.f64(), 7.0);
}

// ============================================================================================
// Strings and bytes
// ============================================================================================

TEST(PickleReaderTest, ShortBinUnicode) {
  const Parsed p = FromHex("80 04 8c 05 68 65 6c 6c 6f 2e");  // SHORT_BINUNICODE 'hello'
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kString);
  EXPECT_EQ(p.str(), "hello");
  EXPECT_EQ(p.i64(), std::nullopt);

  const Parsed empty = FromHex("8c 00 2e");
  ASSERT_PARSES(empty);
  EXPECT_EQ(empty.str(), "");
}

TEST(PickleReaderTest, BinUnicodeNonAscii) {
  // BINUNICODE 'é€😀' (2 + 3 + 4 UTF-8 bytes)
  const Parsed p = FromHex("80 02 58 09 00 00 00 c3a9 e282ac f09f9880 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kString);
  EXPECT_EQ(p.str(), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");

  // Long ASCII run, then a multi-byte character (the validator's fast path, then the slow one).
  const Parsed mixed = FromHex("58 0c 00 00 00 61626364656667686969 c3a9 2e");
  ASSERT_PARSES(mixed);
  EXPECT_EQ(mixed.str(), "abcdefghii\xc3\xa9");
}

TEST(PickleReaderTest, BinUnicode8) {
  const Parsed p = FromHex("80 04 8d 03 00 00 00 00 00 00 00 c3 a9 21 2e");  // BINUNICODE8 'é!'
  ASSERT_PARSES(p);
  EXPECT_EQ(p.str(), "\xc3\xa9!");
}

TEST(PickleReaderTest, UnicodeTextWithEscapes) {
  const Parsed p = FromText("V\\u00e9t\\u00e9\n.");  // raw-unicode-escape of 'été'
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kString);
  EXPECT_EQ(p.str(), "\xc3\xa9t\xc3\xa9");

  // pickle.dumps('été', 0) writes Latin-1 bytes directly: b'V\xe9t\xe9\np0\n.'
  const Parsed latin1 = FromHex("56 e9 74 e9 0a 70 30 0a 2e");
  ASSERT_PARSES(latin1);
  EXPECT_EQ(latin1.str(), "\xc3\xa9t\xc3\xa9");

  const Parsed astral = FromText("V\\U0001f600 \\u005c\n.");  // '😀 \'
  ASSERT_PARSES(astral);
  EXPECT_EQ(astral.str(), "\xf0\x9f\x98\x80 \\");

  EXPECT_THAT(TextError("V\\u12\n."), HasSubstr("UNICODE"));
  EXPECT_THAT(TextError("V\\uzzzz\n."), HasSubstr("UNICODE"));
  EXPECT_THAT(TextError("V\\ud800\n."), HasSubstr("UNICODE"));
  EXPECT_THAT(TextError("V\\U00110000\n."), HasSubstr("UNICODE"));
}

TEST(PickleReaderTest, StringTextQuotedWithEscapes) {
  // Python 2 str repr with escapes: 'a\nb\x41\'c\101\\'
  const Parsed p = FromText("S'a\\nb\\x41\\'c\\101\\\\'\n.");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kString);
  EXPECT_EQ(p.str(), "a\nbA'cA\\");

  const Parsed dq = FromText("S\"it's\\t\"\n.");
  ASSERT_PARSES(dq);
  EXPECT_EQ(dq.str(), "it's\t");

  EXPECT_THAT(TextError("Sabc\n."), HasSubstr("STRING"));
  EXPECT_THAT(TextError("S'abc\"\n."), HasSubstr("STRING"));
  EXPECT_THAT(TextError("S'\\x4'\n."), HasSubstr("STRING"));
  EXPECT_THAT(TextError("S'\\xff'\n."), HasSubstr("STRING"));  // not UTF-8 text
}

TEST(PickleReaderTest, BinStringAndShortBinString) {
  const Parsed bin = FromHex("54 03 00 00 00 61 62 63 2e");  // BINSTRING 'abc'
  ASSERT_PARSES(bin);
  EXPECT_EQ(bin.kind(), Kind::kString);
  EXPECT_EQ(bin.str(), "abc");

  const Parsed shrt = FromHex("55 02 68 69 2e");  // SHORT_BINSTRING 'hi'
  ASSERT_PARSES(shrt);
  EXPECT_EQ(shrt.str(), "hi");

  EXPECT_THAT(HexError("54 ff ff ff ff 2e"), HasSubstr("negative"));
}

TEST(PickleReaderTest, BytesOpcodes) {
  struct Case {
    const char* what;
    const char* hex;
  };
  const Case cases[] = {
      // pickle.dumps(b"ab", 3): SHORT_BINBYTES 'ab', BINPUT 0, STOP
      {"SHORT_BINBYTES", "80034302616271002e"},
      {"BINBYTES", "80 03 42 03 00 00 00 00 ff 61 2e"},
      {"BINBYTES8", "80 04 8e 02 00 00 00 00 00 00 00 ff fe 2e"},
      // pickle.dumps(bytearray(b"ab"), 5): FRAME, BYTEARRAY8 'ab', MEMOIZE, STOP
      {"BYTEARRAY8", "8005950d000000000000009602000000000000006162942e"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Parsed p = FromHex(c.hex);
    ASSERT_PARSES(p);
    EXPECT_EQ(p.kind(), Kind::kBytes);
    EXPECT_EQ(p.str(), std::nullopt);  // bytes are not text
    EXPECT_EQ(p.i64(), std::nullopt);
  }
}

TEST(PickleReaderTest, InvalidUtf8IsRefused) {
  const char* cases[] = {
      "58 02 00 00 00 c3 28 2e",        // bad continuation byte
      "58 02 00 00 00 c0 80 2e",        // overlong NUL
      "58 03 00 00 00 e0 80 80 2e",     // overlong 3-byte
      "58 04 00 00 00 f4 90 80 80 2e",  // above U+10FFFF
      "58 01 00 00 00 c3 2e",           // sequence cut by the end of the string
      "58 01 00 00 00 c3 88 2e",        // the same, followed by NEWTRUE (0x88 looks like a
                                        // continuation byte but is not part of the string)
      "58 02 00 00 00 e2 82 85 2e",     // 3-byte sequence cut, followed by TUPLE1 (0x85)
      "58 01 00 00 00 ff 2e",           // never valid
      "58 0a 00 00 00 61626364656667 68 69 80 2e",  // stray continuation after an ASCII run
      "8c 02 e2 82 2e",                             // SHORT_BINUNICODE, truncated 3-byte sequence
  };
  for (const char* hex : cases) {
    SCOPED_TRACE(hex);
    const std::string error = HexError(hex);
    EXPECT_THAT(error, StartsWith("byte 0: "));
    EXPECT_THAT(error, HasSubstr("UTF-8"));
  }
}

// CPython pickles a lone surrogate ('\udc80', e.g. from a file name that was not valid UTF-8) as
// its 3-byte encoding and loads it back; we load it too, as U+FFFD, so the text stays valid UTF-8.
TEST(PickleReaderTest, LoneSurrogatesBecomeReplacementCharacters) {
  const Parsed p = FromHex("58 05 00 00 00 61 ed b2 80 62 2e");  // 'a\udc80b'
  ASSERT_PARSES(p);
  EXPECT_EQ(p.str(),
            "a\xEF\xBF\xBD"
            "b");
  const Parsed q = FromHex("8c 03 ed a0 80 2e");  // '\ud800'
  ASSERT_PARSES(q);
  EXPECT_EQ(q.str(), "\xEF\xBF\xBD");
}

// A sparse BINPUT index later reached by MEMOIZE's running count is one entry, not two
// (CPython loads this pickle as 9).
TEST(PickleReaderTest, MemoCountStaysRightWhenSparseIndicesAreFilledInOrder) {
  const Parsed p = FromHex("80 04 4b 01 71 01 4b 02 71 00 4b 03 71 01 30 30 30 4b 09 94 68 02 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 9);
}

TEST(PickleReaderTest, StopRefusesAValueBelowAnOpenMark) {
  EXPECT_THAT(HexError("4e 28 2e"), AllOf(StartsWith("byte 2: "), HasSubstr("MARK")));
}

TEST(PickleReaderTest, TextLinesMayEndInCrLf) {
  const Parsed p = FromText("I42\r\n.");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 42);
}

// ============================================================================================
// Containers
// ============================================================================================

TEST(PickleReaderTest, EmptyContainers) {
  struct Case {
    const char* hex;
    Kind kind;
  };
  const Case cases[] = {
      {"80 02 5d 2e", Kind::kList},   // EMPTY_LIST
      {"80 02 7d 2e", Kind::kDict},   // EMPTY_DICT
      {"80 02 29 2e", Kind::kTuple},  // EMPTY_TUPLE
      {"80 04 8f 2e", Kind::kSet},    // EMPTY_SET
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.hex);
    const Parsed p = FromHex(c.hex);
    ASSERT_PARSES(p);
    EXPECT_EQ(p.kind(), c.kind);
    EXPECT_TRUE(p.items().empty());
    EXPECT_EQ(p.doc().DictSize(p.root()), 0u);
    EXPECT_TRUE(p.doc().ContainerId(p.root()).has_value());
  }
}

TEST(PickleReaderTest, ListOpcode) {
  const Parsed p = FromHex("28 4b 01 4b 02 6c 2e");  // MARK, 1, 2, LIST, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kList);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1, 2}));
}

TEST(PickleReaderTest, DictOpcode) {
  const Parsed p = FromHex("28 8c 01 61 4b 01 8c 01 62 4e 64 2e");  // MARK 'a' 1 'b' None DICT
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  EXPECT_EQ(p.kind(), Kind::kDict);
  EXPECT_EQ(d.DictSize(p.root()), 2u);
  EXPECT_EQ(d.AsInt64(d.Get(p.root(), "a")), 1);
  EXPECT_TRUE(d.IsNone(d.Get(p.root(), "b")));
  EXPECT_TRUE(p.items().empty());  // Items() is for sequences only
  EXPECT_THAT(HexError("28 8c 01 61 64 2e"), HasSubstr("odd"));
}

TEST(PickleReaderTest, TupleOpcodes) {
  const Parsed t = FromHex("28 4b 01 4b 02 4b 03 4b 04 74 2e");  // MARK 1 2 3 4 TUPLE
  ASSERT_PARSES(t);
  EXPECT_EQ(t.kind(), Kind::kTuple);
  EXPECT_EQ(Ints(t.doc(), t.items()), (std::vector<int64_t>{1, 2, 3, 4}));

  const Parsed t1 = FromHex("80 02 4b 01 85 2e");  // TUPLE1
  ASSERT_PARSES(t1);
  EXPECT_EQ(t1.kind(), Kind::kTuple);
  EXPECT_EQ(Ints(t1.doc(), t1.items()), (std::vector<int64_t>{1}));

  const Parsed t2 = FromHex("80 02 4b 01 4b 02 86 2e");  // TUPLE2
  ASSERT_PARSES(t2);
  EXPECT_EQ(Ints(t2.doc(), t2.items()), (std::vector<int64_t>{1, 2}));

  const Parsed t3 = FromHex("80 02 4b 01 4b 02 4b 03 87 2e");  // TUPLE3
  ASSERT_PARSES(t3);
  EXPECT_EQ(Ints(t3.doc(), t3.items()), (std::vector<int64_t>{1, 2, 3}));
}

TEST(PickleReaderTest, FrozenSet) {
  // pickle.dumps(frozenset({1}), 4): FRAME, MARK, 1, FROZENSET, MEMOIZE, STOP
  const Parsed p = FromHex("8004950600000000000000284b0191942e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kSet);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1}));
}

TEST(PickleReaderTest, AddItems) {
  // pickle.dumps({1, 2}, 4): FRAME, EMPTY_SET, MEMOIZE, MARK, 1, 2, ADDITEMS, STOP
  const Parsed p = FromHex("80049509000000000000008f94284b014b02902e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.kind(), Kind::kSet);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1, 2}));
}

TEST(PickleReaderTest, AppendAndAppends) {
  const Parsed p = FromHex(
      "80 02 5d"           // PROTO 2, EMPTY_LIST
      "4b 01 61"           // 1, APPEND
      "28 4b 02 4b 03 65"  // MARK, 2, 3, APPENDS
      "28 65"              // MARK, APPENDS (nothing)
      "4b 04 61 2e");      // 4, APPEND, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(PickleReaderTest, SetItemAndSetItems) {
  const Parsed p = FromHex(
      "80 02 7d"                             // PROTO 2, EMPTY_DICT
      "8c 01 61 4b 01 73"                    // 'a', 1, SETITEM
      "28 8c 01 62 4b 02 8c 01 63 4b 03 75"  // MARK, 'b', 2, 'c', 3, SETITEMS
      "2e");
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  EXPECT_EQ(d.DictSize(p.root()), 3u);
  const auto pairs = d.DictItems(p.root());
  ASSERT_EQ(pairs.size(), 6u);
  EXPECT_EQ(d.AsString(pairs[0]), "a");  // insertion order
  EXPECT_EQ(d.AsString(pairs[2]), "b");
  EXPECT_EQ(d.AsString(pairs[4]), "c");
  EXPECT_EQ(d.AsInt64(d.Get(p.root(), "a")), 1);
  EXPECT_EQ(d.AsInt64(d.Get(p.root(), "b")), 2);
  EXPECT_EQ(d.AsInt64(d.Get(p.root(), "c")), 3);
}

TEST(PickleReaderTest, DictGetLastDuplicateWinsAndMissingKeys) {
  const Parsed p = FromHex(
      "80 02 7d 28"     // PROTO 2, EMPTY_DICT, MARK
      "8c 01 6b 4b 01"  // 'k': 1
      "4b 05 4b 06"     // 5: 6 (a key that is not a string)
      "8c 01 6b 4b 02"  // 'k': 2 again
      "75 2e");         // SETITEMS, STOP
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  EXPECT_EQ(d.AsInt64(d.Get(p.root(), "k")), 2);
  const Value missing = d.Get(p.root(), "nope");
  EXPECT_TRUE(d.IsMissing(missing));
  EXPECT_EQ(d.kind(missing), Kind::kMissing);
  EXPECT_EQ(d.AsInt64(missing), std::nullopt);
  EXPECT_TRUE(d.IsMissing(d.Get(p.root(), "")));
  EXPECT_TRUE(d.IsMissing(Value()));
}

TEST(PickleReaderTest, GetOnANonDictIsMissing) {
  const Parsed p = FromHex("28 8c 01 6b 4b 01 6c 2e");  // ['k', 1]
  ASSERT_PARSES(p);
  EXPECT_TRUE(p.doc().IsMissing(p.doc().Get(p.root(), "k")));
  EXPECT_TRUE(p.doc().DictItems(p.root()).empty());
  EXPECT_EQ(p.doc().DictSize(p.root()), 0u);
  const Value first = p.items()[0];
  EXPECT_TRUE(p.doc().IsMissing(p.doc().Get(first, "k")));  // a string is no dict either
  EXPECT_EQ(p.doc().ContainerId(first), std::nullopt);
}

// Lists filled in several batches, with other containers filled in between: the reader keeps
// each list's items in order even though they do not sit together while parsing.
TEST(PickleReaderTest, InterleavedBatchesKeepOrder) {
  const Parsed p = FromHex(
      "80 02"
      "5d 71 00 30"                    // A = [] (memo 0), POP
      "5d 71 01 30"                    // B = [] (memo 1), POP
      "68 00 28 4b 01 4b 02 65"        // A: MARK 1 2 APPENDS
      "4b 03 61 30"                    // A: 3 APPEND (contiguous), POP
      "68 01 28 4b 0a 65 30"           // B: MARK 10 APPENDS, POP
      "68 00 28 5d 4b 04 61 4b 05 65"  // A: MARK, C=[] 4 APPEND (C's items in between), 5, APPENDS
      "4b 06 61 30"                    // A: 6 APPEND, POP
      "68 01 28 4b 0b 4b 0c 65 30"     // B: MARK 11 12 APPENDS, POP
      "68 00 7d 61"                    // A: {} APPEND
      "28 7d 28 8c 01 6b 4b 07 75 65"  // A: MARK, D={} MARK 'k' 7 SETITEMS, APPENDS
      "4b 08 61 30"                    // A: 8 APPEND, POP
      "68 01 4b 0d 61 30"              // B: 13 APPEND, POP
      "68 00 68 01 86 2e");            // (A, B), STOP
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  ASSERT_EQ(p.items().size(), 2u);
  const Value a = p.items()[0];
  const Value b = p.items()[1];
  const auto a_items = d.Items(a);
  ASSERT_EQ(a_items.size(), 9u);
  EXPECT_EQ(d.AsInt64(a_items[0]), 1);
  EXPECT_EQ(d.AsInt64(a_items[1]), 2);
  EXPECT_EQ(d.AsInt64(a_items[2]), 3);
  ASSERT_EQ(d.kind(a_items[3]), Kind::kList);
  EXPECT_EQ(Ints(d, d.Items(a_items[3])), (std::vector<int64_t>{4}));
  EXPECT_EQ(d.AsInt64(a_items[4]), 5);
  EXPECT_EQ(d.AsInt64(a_items[5]), 6);
  EXPECT_EQ(d.kind(a_items[6]), Kind::kDict);
  EXPECT_EQ(d.DictSize(a_items[6]), 0u);
  ASSERT_EQ(d.kind(a_items[7]), Kind::kDict);
  EXPECT_EQ(d.AsInt64(d.Get(a_items[7], "k")), 7);
  EXPECT_EQ(d.AsInt64(a_items[8]), 8);
  EXPECT_EQ(Ints(d, d.Items(b)), (std::vector<int64_t>{10, 11, 12, 13}));
}

// Writes pickle.dumps([[i] for i in range(n)], 2) byte for byte: the outer list is filled by
// APPENDS in batches of 1000, and each batch contains nested lists whose own items (written with
// APPEND) land between the batches. Checked against CPython 3.11 for n in 1, 2, 1000, 1001, 3001.
std::vector<uint8_t> NestedListPickle(int n) {
  std::vector<uint8_t> out = {0x80, 0x02, 0x5d, 0x71, 0x00};  // PROTO 2, EMPTY_LIST, BINPUT 0
  auto put_le = [&](uint64_t v, int width) {
    for (int i = 0; i < width; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  for (int begin = 0; begin < n; begin += 1000) {
    const int end = std::min(n, begin + 1000);
    if (n > 1) out.push_back(0x28);  // MARK (a one-item list uses a lone APPEND instead)
    for (int i = begin; i < end; ++i) {
      out.push_back(0x5d);  // EMPTY_LIST
      const int memo = i + 1;
      if (memo < 256) {
        out.push_back(0x71);  // BINPUT
        put_le(memo, 1);
      } else {
        out.push_back(0x72);  // LONG_BINPUT
        put_le(memo, 4);
      }
      if (i < 256) {
        out.push_back(0x4b);  // BININT1
        put_le(i, 1);
      } else if (i < 65536) {
        out.push_back(0x4d);  // BININT2
        put_le(i, 2);
      } else {
        out.push_back(0x4a);  // BININT
        put_le(i, 4);
      }
      out.push_back(0x61);  // APPEND
    }
    out.push_back(n > 1 ? 0x65 : 0x61);  // APPENDS, or APPEND for a one-item list
  }
  out.push_back(0x2e);  // STOP
  return out;
}

TEST(PickleReaderTest, LongListInBatchesKeepsOrder) {
  const Parsed p(NestedListPickle(3001));  // three full batches and a batch of one
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  const auto items = p.items();
  ASSERT_EQ(items.size(), 3001u);
  for (size_t i = 0; i < items.size(); ++i) {
    const auto inner = d.Items(items[i]);
    ASSERT_EQ(inner.size(), 1u) << i;
    ASSERT_EQ(d.AsInt64(inner[0]), static_cast<int64_t>(i));
  }
  EXPECT_EQ(d.container_count(), 3002u);
}

// ============================================================================================
// Memo
// ============================================================================================

TEST(PickleReaderTest, MemoizeAndBinGet) {
  const Parsed p = FromHex(
      "80 04 8c 01 78 94"    // 'x', MEMOIZE (as 0)
      "8c 01 79 94"          // 'y', MEMOIZE (as 1)
      "30 30"                // POP, POP
      "68 01 68 00 86 2e");  // BINGET 1, BINGET 0, TUPLE2, STOP
  ASSERT_PARSES(p);
  ASSERT_EQ(p.items().size(), 2u);
  EXPECT_EQ(p.doc().AsString(p.items()[0]), "y");
  EXPECT_EQ(p.doc().AsString(p.items()[1]), "x");
}

TEST(PickleReaderTest, BinPutAndLongBinPut) {
  const Parsed p = FromHex(
      "80 02 4b 07 71 03 30"                 // 7, BINPUT 3, POP
      "4b 08 72 00 01 00 00 30"              // 8, LONG_BINPUT 256, POP
      "4b 09 72 ff ff ff ff 30"              // 9, LONG_BINPUT 2**32-1 (sparse; CPython's C
                                             // unpickler gives up here, pickle._Unpickler and
                                             // this reader do not), POP
      "68 03 6a 00 01 00 00 6a ff ff ff ff"  // BINGET 3, LONG_BINGET 256, LONG_BINGET 2**32-1
      "87 2e");                              // TUPLE3, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(Ints(p.doc(), p.items()), (std::vector<int64_t>{7, 8, 9}));
}

TEST(PickleReaderTest, PutAndGetText) {
  const Parsed p = FromText("Vx\np7\n0g7\n.");  // 'x', PUT 7, POP, GET 7, STOP
  ASSERT_PARSES(p);
  EXPECT_EQ(p.str(), "x");
  EXPECT_THAT(TextError("Vx\npq\n."), HasSubstr("PUT"));
  EXPECT_THAT(TextError("Vx\np0\ng-1\n."), HasSubstr("GET"));
}

TEST(PickleReaderTest, MemoSlotCanBeOverwritten) {
  const Parsed p = FromHex("4b 01 71 00 30 4b 02 71 00 30 68 00 2e");  // put 1, put 2, get
  ASSERT_PARSES(p);
  EXPECT_EQ(p.i64(), 2);
}

TEST(PickleReaderTest, MemoSharingKeepsOneContainer) {
  // l = [1]; pickle.dumps([l, l], 2)
  const Parsed p = FromHex("80025d7100285d71014b01616801652e");
  ASSERT_PARSES(p);
  const Document& d = p.doc();
  ASSERT_EQ(p.items().size(), 2u);
  const auto first = d.ContainerId(p.items()[0]);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first, d.ContainerId(p.items()[1]));  // a DAG, not a copy
  EXPECT_NE(first, d.ContainerId(p.root()));
  EXPECT_EQ(d.container_count(), 2u);
  EXPECT_EQ(Ints(d, d.Items(p.items()[0])), (std::vector<int64_t>{1}));
}

TEST(PickleReaderTest, SelfReferentialList) {
  // l = []; l.append(l); pickle.dumps(l, 2)
  const Parsed p = FromHex("80025d71006800612e");
  ASSERT_PARSES(p);
  ASSERT_EQ(p.items().size(), 1u);
  EXPECT_EQ(p.doc().ContainerId(p.items()[0]), p.doc().ContainerId(p.root()));
}

TEST(PickleReaderTest, BadMemoReference) {
  EXPECT_THAT(HexError("80 02 68 05 2e"), AllOf(StartsWith("byte 2: "), HasSubstr("memo")));
  EXPECT_THAT(HexError("80 02 4b 01 71 00 6a 01 00 00 00 2e"),
              AllOf(StartsWith("byte 6: "), HasSubstr("memo")));
  EXPECT_THAT(TextError("g3\n."), HasSubstr("memo"));
  EXPECT_THAT(HexError("71 00 2e"), HasSubstr("BINPUT"));  // nothing to memoize
  EXPECT_THAT(HexError("80 04 94 2e"), HasSubstr("MEMOIZE"));
}

// ============================================================================================
// Real Python output, protocols 0 to 5
// ============================================================================================

// obj = {"a": [1, -2, 3.5, None, True, False, "é", (1, 2), 2**64-1, -2**63, 2**40],
//        "b": {"x": "y"}}
// pickle.dumps(obj, protocol=N).hex()
constexpr const char* kRoundTripHex[] = {
    // protocol 0
    "286470300a56610a70310a286c70320a49310a61492d320a6146332e350a614e614930310a614930300a6156e90a"
    "70330a612849310a49320a7470340a614c31383434363734343037333730393535313631354c0a614c2d39323233"
    "3337323033363835343737353830384c0a614c313039393531313632373737364c0a617356620a70350a28647036"
    "0a56780a70370a56790a70380a73732e",
    // protocol 1
    "7d71002858010000006171015d7102284b014afeffffff47400c0000000000004e4930310a4930300a5802000000"
    "c3a97103284b014b027471044c31383434363734343037333730393535313631354c0a4c2d393232333337323033"
    "363835343737353830384c0a4c313039393531313632373737364c0a6558010000006271057d7106580100000078"
    "7107580100000079710873752e",
    // protocol 2
    "80027d71002858010000006171015d7102284b014afeffffff47400c0000000000004e88895802000000c3a97103"
    "4b014b028671048a09ffffffffffffffff008a0800000000000000808a060000000000016558010000006271057d"
    "71065801000000787107580100000079710873752e",
    // protocol 3
    "80037d71002858010000006171015d7102284b014afeffffff47400c0000000000004e88895802000000c3a97103"
    "4b014b028671048a09ffffffffffffffff008a0800000000000000808a060000000000016558010000006271057d"
    "71065801000000787107580100000079710873752e",
    // protocol 4
    "80049557000000000000007d94288c0161945d94284b014afeffffff47400c0000000000004e88898c02c3a9944b"
    "014b0286948a09ffffffffffffffff008a0800000000000000808a06000000000001658c0162947d948c0178948c"
    "01799473752e",
    // protocol 5
    "80059557000000000000007d94288c0161945d94284b014afeffffff47400c0000000000004e88898c02c3a9944b"
    "014b0286948a09ffffffffffffffff008a0800000000000000808a06000000000001658c0162947d948c0178948c"
    "01799473752e",
};

TEST(PickleReaderTest, RealPythonRoundTripAllProtocols) {
  for (int proto = 0; proto <= 5; ++proto) {
    SCOPED_TRACE(proto);
    const Parsed p = FromHex(kRoundTripHex[proto]);
    ASSERT_PARSES(p);
    EXPECT_EQ(p.info().protocol, proto >= 2 ? proto : 0);
    const Document& d = p.doc();
    ASSERT_EQ(p.kind(), Kind::kDict);
    EXPECT_EQ(d.DictSize(p.root()), 2u);
    const Value a = d.Get(p.root(), "a");
    ASSERT_EQ(d.kind(a), Kind::kList);
    const auto items = d.Items(a);
    ASSERT_EQ(items.size(), 11u);
    EXPECT_EQ(d.AsInt64(items[0]), 1);
    EXPECT_EQ(d.AsInt64(items[1]), -2);
    EXPECT_EQ(d.kind(items[2]), Kind::kFloat);
    EXPECT_EQ(d.AsDouble(items[2]), 3.5);
    EXPECT_TRUE(d.IsNone(items[3]));
    EXPECT_EQ(d.kind(items[4]), Kind::kBool);
    EXPECT_EQ(d.AsBool(items[4]), true);
    EXPECT_EQ(d.kind(items[5]), Kind::kBool);
    EXPECT_EQ(d.AsBool(items[5]), false);
    EXPECT_EQ(d.AsString(items[6]), "\xc3\xa9");
    ASSERT_EQ(d.kind(items[7]), Kind::kTuple);
    EXPECT_EQ(Ints(d, d.Items(items[7])), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(d.AsUint64(items[8]), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(d.AsInt64(items[9]), std::numeric_limits<int64_t>::min());
    EXPECT_EQ(d.AsInt64(items[10]), int64_t{1} << 40);
    const Value b = d.Get(p.root(), "b");
    ASSERT_EQ(d.kind(b), Kind::kDict);
    EXPECT_EQ(d.AsString(d.Get(b, "x")), "y");
  }
}

// A small snapshot-like object:
//
// fr = [{"filename": "a.py", "line": 1, "name": "f"}, {"filename": "??", "line": 0, "name": "g"}]
// obj = {"segments": [{"device": 0, "address": 2**44, "total_size": 2097152,
//                      "segment_type": "small", "segment_pool_id": (0, 0), "frames": fr,
//                      "blocks": [{"address": 2**44, "size": 512, "state": "active_allocated",
//                                  "frames": fr},
//                                 {"address": 2**44 + 512, "size": 2096640, "state": "inactive",
//                                  "frames": []}]}],
//        "device_traces": [[{"action": "alloc", "addr": 2**44, "size": 500,
//                            "time_us": 1700000000000000, "frames": fr},
//                           {"action": "oom", "device_free": 2**64 - 1, "size": -1,
//                            "frames": fr}]],
//        "allocator_settings": {"garbage_collection_threshold": 0.5,
//                               "expandable_segments": True}}
// pickle.dumps(obj, protocol=4).hex()   (533 bytes, one FRAME)
constexpr const char* kSnapshotP4 =
    "8004950a020000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c07616464"
    "72657373948a060000000000108c0a746f74616c5f73697a65944a000020008c0c7365676d656e745f7479706594"
    "8c05736d616c6c948c0f7365676d656e745f706f6f6c5f6964944b004b0086948c066672616d6573945d94287d94"
    "288c0866696c656e616d65948c04612e7079948c046c696e65944b018c046e616d65948c016694757d9428680e8c"
    "023f3f9468104b0068118c01679475658c06626c6f636b73945d94287d942868058a060000000000108c0473697a"
    "65944d00028c057374617465948c106163746976655f616c6c6f636174656494680b680c757d942868058a060002"
    "0000001068194a00fe1f00681a8c08696e61637469766594680b5d94756575618c0d6465766963655f7472616365"
    "73945d945d94287d94288c06616374696f6e948c05616c6c6f63948c0461646472948a0600000000001068194df4"
    "018c0774696d655f7573948a0700401e18240a06680b680c757d942868238c036f6f6d948c0b6465766963655f66"
    "726565948a09ffffffffffffffff0068194affffffff680b680c7565618c12616c6c6f6361746f725f7365747469"
    "6e6773947d94288c1c676172626167655f636f6c6c656374696f6e5f7468726573686f6c6494473fe00000000000"
    "008c13657870616e6461626c655f7365676d656e7473948875752e";

// The same object, pickle.dumps(obj, protocol=2).hex()   (660 bytes, no FRAME)
constexpr const char* kSnapshotP2 =
    "80027d71002858080000007365676d656e747371015d71027d710328580600000064657669636571044b00580700"
    "00006164647265737371058a06000000000010580a000000746f74616c5f73697a6571064a00002000580c000000"
    "7365676d656e745f7479706571075805000000736d616c6c7108580f0000007365676d656e745f706f6f6c5f6964"
    "71094b004b0086710a58060000006672616d6573710b5d710c287d710d28580800000066696c656e616d65710e58"
    "04000000612e7079710f58040000006c696e6571104b0158040000006e616d6571115801000000667112757d7113"
    "28680e58020000003f3f711468104b006811580100000067711575655806000000626c6f636b7371165d7117287d"
    "71182868058a06000000000010580400000073697a6571194d000258050000007374617465711a58100000006163"
    "746976655f616c6c6f6361746564711b680b680c757d711c2868058a0600020000001068194a00fe1f00681a5808"
    "000000696e616374697665711d680b5d711e75657561580d0000006465766963655f747261636573711f5d71205d"
    "7121287d7122285806000000616374696f6e71235805000000616c6c6f63712458040000006164647271258a0600"
    "000000001068194df401580700000074696d655f757371268a0700401e18240a06680b680c757d71272868235803"
    "0000006f6f6d7128580b0000006465766963655f6672656571298a09ffffffffffffffff0068194affffffff680b"
    "680c7565615812000000616c6c6f6361746f725f73657474696e6773712a7d712b28581c00000067617262616765"
    "5f636f6c6c656374696f6e5f7468726573686f6c64712c473fe00000000000005813000000657870616e6461626c"
    "655f7365676d656e7473712d8875752e";

TEST(PickleReaderTest, SnapshotLikePickle) {
  for (const char* hex : {kSnapshotP4, kSnapshotP2}) {
    const Parsed p = FromHex(hex);
    ASSERT_PARSES(p);
    const Document& d = p.doc();
    ASSERT_EQ(p.kind(), Kind::kDict);
    const auto segments = d.Items(d.Get(p.root(), "segments"));
    ASSERT_EQ(segments.size(), 1u);
    const Value seg = segments[0];
    EXPECT_EQ(d.AsUint64(d.Get(seg, "address")), uint64_t{1} << 44);
    EXPECT_EQ(d.AsInt64(d.Get(seg, "total_size")), 2097152);
    EXPECT_EQ(d.AsString(d.Get(seg, "segment_type")), "small");
    EXPECT_EQ(Ints(d, d.Items(d.Get(seg, "segment_pool_id"))), (std::vector<int64_t>{0, 0}));
    const auto blocks = d.Items(d.Get(seg, "blocks"));
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(d.AsString(d.Get(blocks[0], "state")), "active_allocated");
    EXPECT_EQ(d.AsString(d.Get(blocks[1], "state")), "inactive");
    EXPECT_EQ(d.AsInt64(d.Get(blocks[1], "size")), 2096640);
    EXPECT_TRUE(d.Items(d.Get(blocks[1], "frames")).empty());

    // The frames list is one object shared by the segment, a block and two trace entries.
    const auto frames_id = d.ContainerId(d.Get(seg, "frames"));
    ASSERT_TRUE(frames_id.has_value());
    EXPECT_EQ(d.ContainerId(d.Get(blocks[0], "frames")), frames_id);
    const auto frames = d.Items(d.Get(seg, "frames"));
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(d.AsString(d.Get(frames[0], "filename")), "a.py");
    EXPECT_EQ(d.AsInt64(d.Get(frames[0], "line")), 1);
    EXPECT_EQ(d.AsString(d.Get(frames[1], "filename")), "??");
    EXPECT_EQ(d.AsString(d.Get(frames[1], "name")), "g");

    const auto traces = d.Items(d.Get(p.root(), "device_traces"));
    ASSERT_EQ(traces.size(), 1u);
    const auto entries = d.Items(traces[0]);
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(d.AsString(d.Get(entries[0], "action")), "alloc");
    EXPECT_EQ(d.AsInt64(d.Get(entries[0], "size")), 500);
    EXPECT_EQ(d.AsInt64(d.Get(entries[0], "time_us")), 1700000000000000);
    EXPECT_EQ(d.ContainerId(d.Get(entries[0], "frames")), frames_id);
    EXPECT_EQ(d.AsString(d.Get(entries[1], "action")), "oom");
    EXPECT_EQ(d.AsUint64(d.Get(entries[1], "device_free")), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(d.AsInt64(d.Get(entries[1], "size")), -1);
    EXPECT_TRUE(d.IsMissing(d.Get(entries[1], "addr")));
    EXPECT_EQ(d.ContainerId(d.Get(entries[1], "frames")), frames_id);

    const Value settings = d.Get(p.root(), "allocator_settings");
    EXPECT_EQ(d.AsDouble(d.Get(settings, "garbage_collection_threshold")), 0.5);
    EXPECT_EQ(d.AsBool(d.Get(settings, "expandable_segments")), true);
  }
}

TEST(PickleReaderTest, ProgressCallbackReachesTheEnd) {
  const std::vector<uint8_t> bytes = Hex(kSnapshotP4);
  uint64_t last_done = 0;
  uint64_t last_total = 0;
  int calls = 0;
  ParseOptions options;
  options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
    ++calls;
    return true;
  };
  const Result<Document> result = Parse(bytes, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_GE(calls, 1);
  EXPECT_EQ(last_done, bytes.size());
  EXPECT_EQ(last_total, bytes.size());
}

// ============================================================================================
// Refusal of code-executing opcodes
// ============================================================================================

struct RefusalCase {
  const char* opcode;
  const char* hex;
  int offset;
};

TEST(PickleReaderTest, RefusesCodeExecutingOpcodes) {
  const RefusalCase cases[] = {
      // pickle.dumps(collections.OrderedDict(), 0): b'ccollections\nOrderedDict\np0\n(tRp1\n.'
      {"GLOBAL", "63636f6c6c656374696f6e730a4f726465726564446963740a70300a28745270310a2e", 0},
      // pickle.dumps(collections.OrderedDict(), 2)
      {"GLOBAL", "800263636f6c6c656374696f6e730a4f726465726564446963740a7100295271012e", 2},
      // The classic payload: b"cos\nsystem\n(S'echo pwned'\ntR."
      {"GLOBAL", "63 6f730a 73797374656d0a 28 53276563686f2070776e6564270a 74 52 2e", 0},
      // b"c__builtin__\neval\n(Vprint(1)\ntR."
      {"GLOBAL", "63 5f5f6275696c74696e5f5f0a 6576616c0a 28 567072696e742831290a 74 52 2e", 0},
      // After valid data: PROTO 2, EMPTY_LIST, 1, APPEND, then b"cos\nsystem\n"
      {"GLOBAL", "80 02 5d 4b 01 61 63 6f730a 73797374656d0a 2e", 6},
      // pickle.dumps(collections.OrderedDict(), 4): the STACK_GLOBAL sits at byte 39
      {"STACK_GLOBAL",
       "80049522000000000000008c0b636f6c6c656374696f6e73948c0b4f72646572656444696374949394295294"
       "2e",
       39},
      // PROTO 4, 'os', 'system', STACK_GLOBAL
      {"STACK_GLOBAL", "80 04 8c 02 6f73 8c 06 73797374656d 93 2e", 14},
      {"REDUCE", "80 02 4e 29 52 2e", 4},             // NONE, EMPTY_TUPLE, REDUCE
      {"BUILD", "80 02 7d 7d 62 2e", 4},              // EMPTY_DICT, EMPTY_DICT, BUILD
      {"INST", "28 69 6f730a 73797374656d0a 2e", 1},  // MARK, INST os system
      {"OBJ", "28 4e 6f 2e", 2},                      // MARK, NONE, OBJ
      {"NEWOBJ", "80 02 4e 29 81 2e", 4},             // NONE, EMPTY_TUPLE, NEWOBJ
      {"NEWOBJ_EX", "80 04 4e 29 7d 92 2e", 5},       // NONE, EMPTY_TUPLE, EMPTY_DICT, NEWOBJ_EX
      {"PERSID", "50 31 0a 2e", 0},                   // PERSID '1'
      {"PERSID", "4e 30 50 31 0a 2e", 2},             // NONE, POP, PERSID '1'
      {"BINPERSID", "80 02 4b 01 51 2e", 4},          // BININT1 1, BINPERSID
      {"EXT1", "80 02 82 01 2e", 2},
      {"EXT2", "80 02 83 01 00 2e", 2},
      {"EXT4", "80 02 84 01 00 00 00 2e", 2},
  };
  for (const RefusalCase& c : cases) {
    SCOPED_TRACE(std::string(c.opcode) + " " + c.hex);
    const std::string error = HexError(c.hex);
    EXPECT_THAT(error, StartsWith("byte " + std::to_string(c.offset) + ": "));
    EXPECT_THAT(error, HasSubstr(std::string("refusing opcode ") + c.opcode + " "));
  }
}

TEST(PickleReaderTest, RefusesOutOfBandBuffers) {
  const std::string next = HexError("80 05 97 2e");  // PROTO 5, NEXT_BUFFER
  EXPECT_THAT(next, StartsWith("byte 2: "));
  EXPECT_THAT(next, HasSubstr("NEXT_BUFFER"));
  const std::string readonly = HexError("80 05 4e 98 2e");  // PROTO 5, NONE, READONLY_BUFFER
  EXPECT_THAT(readonly, StartsWith("byte 3: "));
  EXPECT_THAT(readonly, HasSubstr("READONLY_BUFFER"));
}

TEST(PickleReaderTest, RefusesUnknownOpcodes) {
  EXPECT_THAT(HexError("80 02 ff 2e"), AllOf(StartsWith("byte 2: "), HasSubstr("0xff")));
  EXPECT_THAT(HexError("80 02 4e 00 2e"), AllOf(StartsWith("byte 3: "), HasSubstr("0x00")));
  EXPECT_THAT(HexError("7a"), StartsWith("byte 0: "));  // 'z' is no opcode
}

TEST(PickleReaderTest, OpcodeNamesInsideStringsAreJustData) {
  // SHORT_BINUNICODE "cos\nsystem\n" holds GLOBAL's bytes as text: nothing to refuse.
  const Parsed p = FromHex("80 04 8c 0b 636f730a73797374656d0a 2e");
  ASSERT_PARSES(p);
  EXPECT_EQ(p.str(), "cos\nsystem\n");
}

// ============================================================================================
// Robustness against corrupt input
// ============================================================================================

TEST(PickleReaderTest, EveryTruncationFails) {
  for (const char* hex : {kSnapshotP4, kSnapshotP2, kRoundTripHex[0], kRoundTripHex[1]}) {
    const std::vector<uint8_t> bytes = Hex(hex);
    ASSERT_TRUE(Parse(bytes).ok());
    for (size_t n = 0; n < bytes.size(); ++n) {
      const Result<Document> result = Parse(std::span<const uint8_t>(bytes.data(), n));
      ASSERT_FALSE(result.ok()) << "a prefix of " << n << " bytes parsed";
      ASSERT_THAT(result.status().message(), StartsWith("byte ")) << n;
    }
  }
}

// The same for a copy of the protocol-4 pickle without its FRAME opcode, so that truncations
// are not all caught by the frame's declared length.
TEST(PickleReaderTest, EveryTruncationFailsWithoutFrame) {
  std::vector<uint8_t> bytes = Hex(kSnapshotP4);
  ASSERT_EQ(bytes[2], 0x95);
  bytes.erase(bytes.begin() + 2, bytes.begin() + 11);
  ASSERT_TRUE(Parse(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Result<Document> result = Parse(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(result.ok()) << "a prefix of " << n << " bytes parsed";
    ASSERT_THAT(result.status().message(), StartsWith("byte ")) << n;
  }
}

TEST(PickleReaderTest, EmptyInput) {
  const std::string error = ErrorOf({});
  EXPECT_THAT(error, StartsWith("byte 0: "));
  EXPECT_THAT(error, HasSubstr("empty"));
}

TEST(PickleReaderTest, MissingStop) {
  EXPECT_THAT(HexError("80 02 4b 01"), AllOf(StartsWith("byte 4: "), HasSubstr("STOP")));
}

TEST(PickleReaderTest, AbsurdLengthsFailWithoutAllocating) {
  const char* cases[] = {
      "80 04 8d 00 00 00 00 00 00 00 40 61 2e",  // BINUNICODE8 of 2**62 bytes
      "80 04 8d ff ff ff ff ff ff ff ff 61 2e",  // BINUNICODE8 of 2**64-1 bytes
      "80 04 8e 00 00 00 00 00 00 00 40 61 2e",  // BINBYTES8 of 2**62 bytes
      "80 05 96 00 00 00 00 00 00 00 40 61 2e",  // BYTEARRAY8 of 2**62 bytes
      "80 04 95 00 00 00 00 00 00 00 40 4e 2e",  // FRAME of 2**62 bytes
      "80 04 95 ff ff ff ff ff ff ff ff 4e 2e",  // FRAME of 2**64-1 bytes
      "80 02 8b ff ff ff 7f 00 2e",              // LONG4 of 2**31-1 bytes (its maximum)
      "80 02 58 ff ff ff ff 61 2e",              // BINUNICODE of 2**32-1 bytes
      "80 02 42 ff ff ff ff 61 2e",              // BINBYTES of 2**32-1 bytes
      "80 02 54 ff ff ff 7f 61 2e",              // BINSTRING of 2**31-1 bytes
      "80 02 8a ff 00 2e",                       // LONG1 of 255 bytes
      "80 02 8c ff 61 2e",                       // SHORT_BINUNICODE of 255 bytes
  };
  for (const char* hex : cases) {
    SCOPED_TRACE(hex);
    const std::vector<uint8_t> bytes = Hex(hex);
    g_largest_allocation = 0;
    g_track_allocations = true;
    const Result<Document> result = Parse(bytes);
    g_track_allocations = false;
    ASSERT_FALSE(result.ok());
    EXPECT_THAT(result.status().message(), HasSubstr("truncated"));
    EXPECT_THAT(result.status().message(), StartsWith("byte 2: "));
    EXPECT_LT(g_largest_allocation.load(), size_t{64} << 10);
  }
}

TEST(PickleReaderTest, StackUnderflowAndMisuse) {
  struct Case {
    const char* what;
    const char* hex;
    const char* expect;
  };
  const Case cases[] = {
      {"APPEND on an empty stack", "80 02 61 2e", "APPEND"},
      {"APPEND with only the list", "80 02 5d 61 2e", "APPEND"},
      {"APPEND to a dict", "80 02 7d 4b 01 61 2e", "APPEND"},
      {"APPEND to a tuple", "80 02 29 4b 01 61 2e", "APPEND"},
      {"APPEND across a MARK", "80 02 5d 28 4b 01 61 2e", "APPEND"},
      {"SETITEM with two values", "80 02 7d 4b 01 73 2e", "SETITEM"},
      {"SETITEM on a list", "80 02 5d 4b 01 4b 02 73 2e", "SETITEM"},
      {"SETITEMS with an odd count", "80 02 7d 28 4b 01 75 2e", "SETITEMS"},
      {"SETITEMS on a list", "80 02 5d 28 4b 01 4b 02 75 2e", "SETITEMS"},
      {"TUPLE2 with one item", "80 02 4b 01 86 2e", "TUPLE2"},
      {"TUPLE1 on an empty stack", "80 02 85 2e", "TUPLE1"},
      {"TUPLE3 across a MARK", "80 02 4b 01 4b 02 28 4b 03 87 2e", "TUPLE3"},
      {"STOP on an empty stack", "80 02 2e", "STOP"},
      {"APPENDS without a MARK", "80 02 5d 4b 01 65 2e", "APPENDS"},
      {"APPENDS targeting a dict", "80 02 7d 28 4b 01 65 2e", "APPENDS"},
      {"APPENDS with no target", "80 02 28 4b 01 65 2e", "APPENDS"},
      {"APPENDS with a target below another MARK", "80 02 5d 28 28 4b 01 65 2e", "APPENDS"},
      {"ADDITEMS targeting a list", "80 04 5d 28 4b 01 90 2e", "ADDITEMS"},
      {"LIST without a MARK", "80 02 4b 01 6c 2e", "LIST"},
      {"DICT without a MARK", "80 02 64 2e", "DICT"},
      {"TUPLE without a MARK", "80 02 74 2e", "TUPLE"},
      {"FROZENSET without a MARK", "80 04 91 2e", "FROZENSET"},
      {"POP on an empty stack", "80 02 30 2e", "POP"},
      {"POP_MARK without a MARK", "80 02 4e 31 2e", "POP_MARK"},
      {"DUP on an empty stack", "80 02 32 2e", "DUP"},
      {"DUP across a MARK", "80 02 4e 28 32 2e", "DUP"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string error = HexError(c.hex);
    EXPECT_THAT(error, StartsWith("byte "));
    EXPECT_THAT(error, HasSubstr(c.expect));
  }
}

TEST(PickleReaderTest, ErrorsNameTheOffendingOpcodeOffset) {
  // PROTO 2, EMPTY_LIST, 1, APPEND, 2, TUPLE2 (fine), TUPLE3 with only one item left at byte 9.
  EXPECT_THAT(HexError("80 02 5d 4b 01 61 4b 02 86 87 2e"), StartsWith("byte 9: "));
}

// ============================================================================================
// Real snapshots from the shared folder (skipped when absent)
// ============================================================================================

TEST(PickleReaderTest, RealFixturesParse) {
  const std::filesystem::path dir = std::filesystem::path(VRAMSCOPE_SHARED_DIR) / "fixtures/real";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) GTEST_SKIP() << "no fixtures at " << dir;
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".pickle") continue;
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    ASSERT_TRUE(in.good());
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    ParseInfo info;
    const Result<Document> result = Parse(bytes, {}, &info);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const Document& d = *result;
    ASSERT_EQ(d.kind(d.root()), Kind::kDict);
    EXPECT_EQ(d.kind(d.Get(d.root(), "segments")), Kind::kList);
    EXPECT_GE(info.protocol, 2);
    ++parsed;
  }
  if (parsed == 0) GTEST_SKIP() << "no .pickle files in " << dir;
}

// --- a pickle cut off before STOP (ParseOptions::recover_truncated) ----------------------------

// pickle.dumps({'a': [{'x': 1, 'y': 2}, {'x': 3, 'y': 4}], 'b': [[5, 6]]}, protocol=4), CPython
// 3.11: the root's pairs under one MARK, 'a' two records under another, 'b' a one-item list
// written as `list item APPEND` (no MARK).
constexpr std::string_view kRecordsPickle =
    "80 04 95 38 00 00 00 00 00 00 00 7d 94 28 8c 01 61 94 5d 94 28 7d 94 28 8c 01 78 94 4b 01 "
    "8c 01 79 94 4b 02 75 7d 94 28 68 04 4b 03 68 05 4b 04 75 65 8c 01 62 94 5d 94 5d 94 28 4b "
    "05 4b 06 65 61 75 2e";

Result<Document> ParseCut(const std::vector<uint8_t>& bytes, size_t n, ParseInfo* info) {
  ParseOptions options;
  options.recover_truncated = true;
  return Parse(std::span(bytes.data(), n), options, info);
}

TEST(RecoverTruncated, EveryCutGivesTheRecordsWrittenBeforeIt) {
  const auto bytes = Hex(kRecordsPickle);
  ASSERT_EQ(bytes.size(), 67u);
  size_t records_before = 0;
  for (size_t n = 1; n < bytes.size(); ++n) {
    ParseInfo info;
    auto doc = ParseCut(bytes, n, &info);
    if (n <= 11) {  // before the root dict exists
      ASSERT_FALSE(doc.ok()) << n;
      EXPECT_THAT(doc.status().message(),
                  HasSubstr("before the pickle holds any value: it was cut off"))
          << n;
      continue;
    }
    ASSERT_TRUE(doc.ok()) << "cut at " << n << ": " << doc.status().message();
    EXPECT_TRUE(info.truncated);
    EXPECT_EQ(info.cut_at, n);
    const Value root = doc->root();
    ASSERT_EQ(doc->kind(root), Kind::kDict);
    EXPECT_TRUE(doc->IsIncomplete(root));
    // Every record 'a' holds is whole; there are never fewer than at an earlier cut.
    const Value a = doc->Get(root, "a");
    size_t records = 0;
    if (!doc->IsMissing(a)) {
      ASSERT_EQ(doc->kind(a), Kind::kList);
      for (const Value r : doc->Items(a)) {
        ASSERT_EQ(doc->kind(r), Kind::kDict) << n;
        EXPECT_FALSE(doc->IsIncomplete(r)) << n;
        EXPECT_TRUE(doc->AsInt64(doc->Get(r, "x")).has_value()) << n;
        EXPECT_TRUE(doc->AsInt64(doc->Get(r, "y")).has_value()) << n;
        ++records;
      }
    }
    EXPECT_GE(records, records_before) << n;
    records_before = records;
  }
}

TEST(RecoverTruncated, ARecordCutShortIsLeftOutAndItsListMarked) {
  const auto bytes = Hex(kRecordsPickle);
  ParseInfo info;
  auto doc = ParseCut(bytes, 45, &info);  // inside the second record, after its 'x'
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  const Value a = doc->Get(doc->root(), "a");
  ASSERT_EQ(doc->Items(a).size(), 1u);
  EXPECT_EQ(doc->AsInt64(doc->Get(doc->Items(a)[0], "y")), 2);
  EXPECT_TRUE(doc->IsIncomplete(a));
  EXPECT_EQ(info.dropped_records, 1u);
  EXPECT_EQ(info.closed_containers, 3u);  // the record, 'a', the root
  EXPECT_TRUE(doc->IsMissing(doc->Get(doc->root(), "b")));
}

TEST(RecoverTruncated, TheSingleAppendTheCutCameBeforeIsMade) {
  const auto bytes = Hex(kRecordsPickle);
  ParseInfo info;
  auto doc = ParseCut(bytes, 64, &info);  // [5, 6] is built, the APPEND into 'b' never came
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  const Value b = doc->Get(doc->root(), "b");
  ASSERT_EQ(doc->Items(b).size(), 1u);
  const auto inner = doc->Items(doc->Items(b)[0]);
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(doc->AsInt64(inner[1]), 6);
  EXPECT_TRUE(doc->IsIncomplete(b));
  EXPECT_FALSE(doc->IsIncomplete(doc->Items(b)[0])) << "closed by its own APPENDS";
  EXPECT_EQ(doc->Items(doc->Get(doc->root(), "a")).size(), 2u);
  EXPECT_FALSE(doc->IsIncomplete(doc->Get(doc->root(), "a")));
}

TEST(RecoverTruncated, OffUnlessAskedAndAWholePickleIsNotMarked) {
  const auto bytes = Hex(kRecordsPickle);
  auto strict = Parse(std::span(bytes.data(), 45));
  ASSERT_FALSE(strict.ok());
  EXPECT_THAT(strict.status().message(), HasSubstr("FRAME needs"));
  ParseInfo info;
  auto whole = ParseCut(bytes, bytes.size(), &info);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(info.truncated);
  EXPECT_FALSE(whole->IsIncomplete(whole->root()));
}

}  // namespace
}  // namespace vramscope::pickle

// ============================================================================================
// ListSink: consuming a list's items while it is parsed, and reclaiming their storage
// ============================================================================================
namespace vramscope::pickle {
namespace {

// Consumes the items of any list that sits right after the key "records".
class RecordSink : public ListSink {
 public:
  bool Wants(const Document& doc, std::span<const Value> context, Value) override {
    return !context.empty() && doc.AsString(context.back()) == "records";
  }
  Status Consume(const Document& doc, std::span<const Value> context, Value,
                 std::span<const Value> items) override {
    for (const Value item : items) {
      // Each record is {"n": int, "tag": <shared list of str>}; read them fully now.
      const auto n = doc.AsInt64(doc.Get(item, "n"));
      if (!n) return InvalidInput("record without n");
      seen.push_back(*n);
      std::string tags;
      for (const Value t : doc.Items(doc.Get(item, "tag"))) tags += *doc.AsString(t);
      tag_text.push_back(tags);
    }
    return Status::Ok();
  }
  void Reclaimed(uint64_t, std::span<const std::pair<uint64_t, uint64_t>> moved) override {
    ++reclaims;
    kept += moved.size();
  }
  std::vector<int64_t> seen;
  std::vector<std::string> tag_text;
  int reclaims = 0;
  size_t kept = 0;
};

// {"records": [ {"n": i, "tag": T(i)} for i in range(n) ], "after": T(0)} where T(i) is one of
// three shared lists, the third first created in the middle of the records (inside a batch).
// With `fresh_tags`, every record makes a list of its own instead (memoized, as pickle does),
// of which only the first is read back (by "after").
std::vector<uint8_t> RecordsPickle(int n, bool fresh_tags = false) {
  std::string out = "\x80\x04}\x94(";  // root dict, memo 0, MARK
  int memo = 1;
  auto str = [&](const std::string& s) {
    out += "\x8c";
    out.push_back(static_cast<char>(s.size()));
    out += s;
    out += "\x94";
    return memo++;
  };
  auto get = [&](int index) {
    out += "j";
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((index >> (8 * k)) & 0xFF));
  };
  str("records");
  out += "]\x94";  // the records list
  ++memo;
  int n_key = -1, tag_key = -1, tags[3] = {-1, -1, -1};
  for (int i = 0; i < n; ++i) {
    if (i % 1000 == 0) out += "(";  // batch MARK
    out += "}\x94";                 // record dict
    ++memo;
    out += "(";
    if (n_key < 0) {
      n_key = str("n");
    } else {
      get(n_key);
    }
    out += "J";
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((i >> (8 * k)) & 0xFF));
    if (tag_key < 0) {
      tag_key = str("tag");
    } else {
      get(tag_key);
    }
    const int which = i < n / 2 ? i % 2 : 2;
    if (fresh_tags && i > 0) {
      out += "]\x94(";
      ++memo;
      str("t");
      str(std::to_string(i));
      out += "e";
    } else if (tags[which] < 0) {
      out += "]\x94";
      tags[which] = memo++;
      out += "(";
      str("t");
      str(std::to_string(which));
      out += "e";
    } else {
      get(tags[which]);
    }
    out += "u";                                     // SETITEMS of the record
    if (i % 1000 == 999 || i == n - 1) out += "e";  // APPENDS of the batch
  }
  str("after");
  get(tags[0]);
  out += "u.";  // SETITEMS of the root, STOP
  return {out.begin(), out.end()};
}

TEST(ListSink, ConsumesBatchesAndKeepsWhatIsSharedAcrossThem) {
  const std::vector<uint8_t> bytes = RecordsPickle(2500);
  RecordSink sink;
  ParseOptions options;
  options.sink = &sink;
  ParseInfo info;
  auto doc = Parse(bytes, options, &info);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ASSERT_EQ(sink.seen.size(), 2500u);
  for (int i = 0; i < 2500; ++i) EXPECT_EQ(sink.seen[i], i);
  EXPECT_EQ(sink.tag_text[0], "t0");
  EXPECT_EQ(sink.tag_text[1], "t1");
  EXPECT_EQ(sink.tag_text[2499], "t2");  // created inside the second batch, kept and moved
  EXPECT_EQ(info.consumed_items, 2500u);
  EXPECT_EQ(info.reclaimed_batches, 3u);
  EXPECT_EQ(sink.reclaims, 3);
  EXPECT_GE(sink.kept, 3u);  // the shared tag lists
  // The consumed list is empty; what came after the records is intact.
  EXPECT_TRUE(doc->Items(doc->Get(doc->root(), "records")).empty());
  std::string after;
  for (const Value t : doc->Items(doc->Get(doc->root(), "after"))) after += *doc->AsString(t);
  EXPECT_EQ(after, "t0");
  // Without a sink, the same pickle parses into the full list.
  auto plain = Parse(bytes);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Items(plain->Get(plain->root(), "records")).size(), 2500u);
}

TEST(ListSink, AReferenceBackToAConsumedRecordIsAClearError) {
  std::vector<uint8_t> bytes = RecordsPickle(10);
  // Replace the final "after": T(0) reference with a reference to memo 4 (the first record).
  // The pickle ends with: LONG_BINGET <tags[0]> SETITEMS STOP.
  const size_t get = bytes.size() - 7;
  ASSERT_EQ(bytes[get], 'j');
  bytes[get + 1] = 3;  // memo 3: the first record dict (0 root, 1 "records", 2 list)
  bytes[get + 2] = bytes[get + 3] = bytes[get + 4] = 0;
  RecordSink sink;
  ParseOptions options;
  options.sink = &sink;
  auto doc = Parse(bytes, options);
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("already converted and released"));
  EXPECT_TRUE(Parse(bytes).ok());  // fine without a sink
}

// A memo slot nothing reads back keeps nothing: a record's own list goes with its batch (the
// shape of PyTorch's frames lists), and what the sink sees and the document holds are the same.
TEST(ListSink, AListNothingReadsBackIsDroppedWithItsBatch) {
  const std::vector<uint8_t> bytes = RecordsPickle(2500, /*fresh_tags=*/true);
  auto parse = [&](bool drop_unread_memo, RecordSink* sink) {
    ParseOptions options;
    options.sink = sink;
    options.drop_unread_memo = drop_unread_memo;
    return Parse(bytes, options);
  };
  RecordSink trimmed, kept_all;
  auto doc = parse(true, &trimmed);
  auto reference = parse(false, &kept_all);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(trimmed.seen, kept_all.seen);
  EXPECT_EQ(trimmed.tag_text, kept_all.tag_text);
  EXPECT_EQ(trimmed.tag_text[1234], "t1234");
  // Kept: the first record's list, which "after" reads, not the 2,499 others.
  EXPECT_EQ(trimmed.kept, 1u);
  EXPECT_EQ(kept_all.kept, 2500u);
  EXPECT_LT(doc->container_count(), 8u);
  EXPECT_GT(reference->container_count(), 2500u);
  std::string after;
  for (const Value t : doc->Items(doc->Get(doc->root(), "after"))) after += *doc->AsString(t);
  EXPECT_EQ(after, "t0");
}

}  // namespace
}  // namespace vramscope::pickle
