// Unit tests for the safe pickle reader: real Python output of every protocol, refusal of
// code-executing opcodes, corrupt, truncated and hostile input, the real snapshots, and a file
// cut before STOP (ParseOptions::recover_truncated). Pickles are written as hex, as in
// pickle_reader_test.cc.
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

#include "sources/pickle/pickle_reader.h"
#include "sources/pickle/pickle_test_support.h"

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
