#include "sources/snapshot/snapshot_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "sources/pickle/pickle_reader.h"
#include "support/pickle_builder.h"
#include "support/snapshot_parts.h"

namespace vramscope::snapshot {
namespace {

using model::Action;
using ::testing::HasSubstr;
namespace tb = vramscope::testing;

const std::string kFixtures = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/";

// ---- real fixtures: the figures of ../shared/fixtures/real/README.md, exactly ----------------

struct FixtureFacts {
  const char* file;
  std::vector<int32_t> segment_devices;
  size_t segments, small_segments, blocks, active_blocks;
  uint64_t reserved, allocated;
  std::map<std::pair<int32_t, std::string>, size_t> actions;
  const char* generation;
};

const FixtureFacts kFixtureFacts[] = {
    {"snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
     {0},
     10,
     4,
     54,
     40,
     134217728ull,
     48760832ull,
     {{{0, "alloc"}, 1935},
      {{0, "segment_alloc"}, 7},
      {{0, "free_requested"}, 1926},
      {{0, "free_completed"}, 1926},
      {{0, "snapshot"}, 9}},
     "torch 2.2+"},
    {"snapshot_feb2024_diffusers_cuda1_nohistory.pickle",
     {1},
     673,
     240,
     6644,
     6240,
     11274289152ull,
     10715782144ull,
     {{{0, "snapshot"}, 1}, {{1, "free_completed"}, 1}},
     "torch 2.2+"},
    {"snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle",
     {0},
     215,
     51,
     1079,
     802,
     6471811072ull,
     2297283072ull,
     {{{0, "alloc"}, 3505},
      {{0, "free_requested"}, 3325},
      {{0, "free_completed"}, 3325},
      {{0, "segment_alloc"}, 152}},
     "torch 2.1"},
    {"snapshot_torch2.0_flexgen_opt_oom.pickle",
     {0},
     176,
     2,
     463,
     460,
     11844714496ull,
     11840159744ull,
     {{{0, "snapshot"}, 1}},
     "torch 2.0"},
    {"snapshot_torch2.11_windows_cs336_compilectx.pickle",
     {0},
     216,
     8,
     455,
     229,
     14180941824ull,
     1377753600ull,
     {{{0, "alloc"}, 1721}, {{0, "free_requested"}, 1721}, {{0, "free_completed"}, 1721}},
     "torch 2.10+"},
    {"snapshot_torch2.6_cs336_2.7b_forward.pickle",
     {0},
     961,
     12,
     2077,
     1841,
     34898706432ull,
     34094880256ull,
     {{{0, "segment_free"}, 742},
      {{0, "alloc"}, 3020},
      {{0, "free_requested"}, 2377},
      {{0, "free_completed"}, 2377},
      {{0, "segment_alloc"}, 178}},
     "torch 2.5+"},
};

class RealFixture : public ::testing::TestWithParam<FixtureFacts> {};

TEST_P(RealFixture, FiguresMatchTheFixtureReadme) {
  const FixtureFacts& want = GetParam();
  const std::string path = kFixtures + want.file;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto trace = LoadSnapshot(**file);
  ASSERT_TRUE(trace.ok()) << trace.status().message();

  size_t small = 0, active = 0;
  uint64_t reserved = 0, allocated = 0;
  std::vector<int32_t> devices;
  for (const auto& s : trace->segments) {
    small += s.pool == model::Pool::kSmall;
    reserved += s.total_size;
    allocated += s.allocated_size;
    if (devices.empty() || devices.back() != s.device) devices.push_back(s.device);
  }
  for (const auto& b : trace->blocks) active += model::IsActive(b.state);
  std::map<std::pair<int32_t, std::string>, size_t> actions;
  for (size_t i = 0; i < trace->events.count(); ++i) {
    ++actions[{trace->events.device[i], model::ActionName(trace->events.action[i])}];
  }
  EXPECT_EQ(devices, want.segment_devices);
  EXPECT_EQ(trace->segments.size(), want.segments);
  EXPECT_EQ(small, want.small_segments);
  EXPECT_EQ(trace->blocks.size(), want.blocks);
  EXPECT_EQ(active, want.active_blocks);
  EXPECT_EQ(reserved, want.reserved);
  EXPECT_EQ(allocated, want.allocated);
  EXPECT_EQ(actions, want.actions);
  EXPECT_EQ(trace->source.generation, want.generation);
  EXPECT_EQ(trace->source.pickle_protocol, 4);
  // The allocator-state invariants hold for every segment.
  const auto problems = model::CheckStateInvariants(*trace);
  EXPECT_TRUE(problems.empty()) << problems.front();
  // Every live block is accounted for by exactly one allocation alive at the end.
  size_t live = 0;
  for (const auto& a : trace->allocations) live += a.alive_at_end && a.block >= 0;
  EXPECT_EQ(live, active);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealFixture, ::testing::ValuesIn(kFixtureFacts),
                         [](const auto& info) {
                           std::string name = info.param.file;
                           name = name.substr(0, name.rfind('.'));
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(RealFixtures, StacksStayShared) {
  const std::string path = kFixtures + "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto trace = LoadSnapshot(**file);
  ASSERT_TRUE(trace.ok());
  // About a million frame references (829k C++ + 178k Python) collapse to a few thousand
  // stack nodes and a few hundred distinct frames.
  EXPECT_LT(trace->frames.size(), 2000u);
  EXPECT_LT(trace->stacks.size(), 20000u);
  EXPECT_TRUE(trace->facts.has_native_frames);
  EXPECT_TRUE(trace->facts.has_python_frames);
  EXPECT_FALSE(trace->facts.has_times);
}

// ---- synthetic snapshots: what no real file shows ---------------------------------------------

TEST(SyntheticSnapshot, NewestSchemaWithExpandableSegmentsOomAndMetadata) {
  const uint64_t base = 0x7f0000000000ull;
  const tb::P stack =
      tb::List({tb::Frame("/proj/train.py", 12, "step"), tb::Frame("/proj/train.py", 40, "main")});
  const tb::P segments =
      tb::List({Segment(base, 20 << 20,
                        {Block(base, 2 << 20, 2000000, "active_allocated", stack),
                         Block(base + (2 << 20), 18 << 20, 0, "inactive")},
                        /*expandable=*/true, "large", 2 << 20, 2 << 20, 2000000)});
  const tb::P trace = tb::List({
      Entry("segment_map", base, 20 << 20, stack),
      Entry("alloc", base, 2000000, stack,
            {{"user_metadata", tb::Str("step=3")}, {"compile_context", tb::Str("graph 0")}}),
      tb::Dict({{"action", tb::Str("oom")},
                {"device_free", tb::Int(123456)},
                {"size", tb::Int(1 << 30)},
                {"stream", tb::Int(0)},
                {"frames", stack}}),
      Entry("teleport_block", 0, 0, tb::List({})),
      Entry("alloc", base + (2 << 20), 4096, stack),
      Entry("free_requested", base + (2 << 20), 4096, stack),
      Entry("free_completed", base + (2 << 20), 4096, stack),
      Entry("segment_unmap", base + (20 << 20), 2 << 20, tb::List({})),
  });
  const tb::P settings =
      tb::Dict({{"PYTORCH_CUDA_ALLOC_CONF", tb::Str("expandable_segments:True")},
                {"max_split_size", tb::Int(-1)},
                {"garbage_collection_threshold", tb::Float(0.0)},
                {"expandable_segments", tb::Bool(true)},
                {"roundup_power2_divisions", tb::Dict({{"1", tb::Int(0)}, {"2", tb::Int(4)}})},
                {"trace_alloc_overflowed", tb::Bool(true)}});
  const tb::P annotations = tb::List({tb::Dict({{"device", tb::Int(0)},
                                                {"time_us", tb::Int(1700000000000001)},
                                                {"stage", tb::Str("START")},
                                                {"name", tb::Str("forward")}})});
  const tb::P root = tb::Dict({{"segments", segments},
                               {"device_traces", tb::List({trace})},
                               {"allocator_settings", settings},
                               {"external_annotations", annotations}});
  auto t = FromBytes(tb::PickleWriter(5).Dump(root));
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->events.count(), 8u);
  EXPECT_EQ(t->events.action[0], Action::kSegmentMap);
  EXPECT_EQ(t->events.action[2], Action::kOom);
  EXPECT_EQ(t->events.oom_device_free.at(2), 123456u);
  EXPECT_EQ(t->events.action[3], Action::kOther);
  EXPECT_EQ(t->strings.Get(t->events.other_action.at(3)), "teleport_block");
  EXPECT_EQ(t->strings.Get(t->events.user_metadata.at(1)), "step=3");
  EXPECT_EQ(t->strings.Get(t->events.compile_context.at(1)), "graph 0");
  EXPECT_EQ(t->events.action[7], Action::kSegmentUnmap);
  EXPECT_TRUE(t->segments[0].is_expandable);
  // One shared frames list -> one stack for every entry that uses it.
  EXPECT_EQ(t->events.stack[0], t->events.stack[1]);
  EXPECT_EQ(t->blocks[0].stack, t->events.stack[0]);
  EXPECT_EQ(t->stacks.depth(t->events.stack[0]), 2u);
  EXPECT_TRUE(t->facts.ring_buffer_overflowed);
  EXPECT_TRUE(t->facts.has_segment_events);
  EXPECT_EQ(t->source.generation, "torch 2.10+");
  EXPECT_EQ(t->source.pickle_protocol, 5);
  std::map<std::string, std::string> s(t->allocator_settings.begin(), t->allocator_settings.end());
  EXPECT_EQ(s["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True");
  EXPECT_EQ(s["max_split_size"], "-1");
  EXPECT_EQ(s["expandable_segments"], "True");
  EXPECT_EQ(s["roundup_power2_divisions.2"], "4");
  ASSERT_EQ(t->annotations.size(), 1u);
  EXPECT_EQ(t->annotations[0].time_us, 1700000000000001);
  EXPECT_EQ(t->annotations[0].fields.size(), 2u);
  EXPECT_TRUE(model::CheckStateInvariants(*t).empty());
  // The live 2 MB block is the allocation made at event 1, with its exact size.
  ASSERT_FALSE(t->allocations.empty());
  EXPECT_EQ(t->allocations[0].alloc_event, 1);
  EXPECT_TRUE(t->allocations[0].alive_at_end);
  EXPECT_EQ(t->allocations[0].size, 2u << 20);
}

TEST(SyntheticSnapshot, Torch113BareListWithHistory) {
  // torch.cuda.memory_snapshot() in 1.13: a list of segments; blocks have no address, only a
  // history of {addr, real_size, frames}; 2.0 may add cpp_frames strings.
  const uint64_t base = 0x7f1000000000ull;
  const tb::P py = tb::List({tb::Frame("/proj/model.py", 7, "__init__")});
  const tb::P history = tb::List({tb::Dict({{"addr", tb::UInt(base)},
                                            {"real_size", tb::Int(1000)},
                                            {"frames", py},
                                            {"cpp_frames", tb::List({tb::Str("at::empty")})}})});
  const tb::P blocks = tb::List(
      {tb::Dict(
           {{"size", tb::Int(1024)}, {"state", tb::Str("active_allocated")}, {"history", history}}),
       tb::Dict({{"size", tb::Int((2 << 20) - 1024)},
                 {"state", tb::Str("inactive")},
                 {"history", tb::List({})}})});
  const tb::P root = tb::List({tb::Dict({{"device", tb::Int(0)},
                                         {"address", tb::UInt(base)},
                                         {"total_size", tb::Int(2 << 20)},
                                         {"allocated_size", tb::Int(1024)},
                                         {"active_size", tb::Int(1024)},
                                         {"stream", tb::Int(0)},
                                         {"segment_type", tb::Str("small")},
                                         {"blocks", blocks}})});
  auto t = FromBytes(tb::PickleWriter(2).Dump(root));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->source.generation, "torch 1.x");
  ASSERT_EQ(t->blocks.size(), 2u);
  EXPECT_EQ(t->blocks[0].address, base);
  EXPECT_EQ(t->blocks[1].address, base + 1024);  // tiled from the segment start
  EXPECT_EQ(t->blocks[0].requested_size, 1000u);
  const auto frames = t->stacks.Frames(t->blocks[0].stack);
  ASSERT_EQ(frames.size(), 2u);  // the C++ frame first (more specific), then Python
  EXPECT_EQ(t->strings.Get(t->frames.Get(frames[0]).function), "at::empty");
  EXPECT_EQ(t->strings.Get(t->frames.Get(frames[1]).function), "__init__");
  EXPECT_FALSE(t->facts.has_trace);
  EXPECT_EQ(t->allocations.size(), 1u);
  EXPECT_EQ(t->segments[0].pool, model::Pool::kSmall);
}

TEST(SyntheticSnapshot, Protocol2AndProtocol4AgreeAndBigIntegersWork) {
  const tb::P stack = tb::List({tb::Frame("a.py", 1, "f")});
  const tb::P root = tb::Dict(
      {{"segments", tb::List({Segment(0x7fffffff0000ull, 2 << 20,
                                      {Block(0x7fffffff0000ull, 2 << 20, 0, "inactive")})})},
       {"device_traces",
        tb::List({tb::List({Entry("alloc", 0x7fffffff0000ull, 512, stack),
                            Entry("free_requested", 0x7fffffff0000ull, 512, stack),
                            Entry("free_completed", 0x7fffffff0000ull, 512, stack)})})}});
  auto t2 = FromBytes(tb::PickleWriter(2).Dump(root));
  auto t4 = FromBytes(tb::PickleWriter(4).Dump(root));
  ASSERT_TRUE(t2.ok()) << t2.status().message();
  ASSERT_TRUE(t4.ok()) << t4.status().message();
  EXPECT_EQ(t2->events.addr, t4->events.addr);
  EXPECT_EQ(t2->events.addr[0], 0x7fffffff0000ull);
  EXPECT_EQ(t2->segments[0].address, 0x7fffffff0000ull);
}

TEST(SyntheticSnapshot, PendingFreeStateAliasIsAccepted) {
  const tb::P root =
      tb::Dict({{"segments", tb::List({Segment(4096, 2 << 20,
                                               {Block(4096, 512, 100, "active_awaiting_free"),
                                                Block(4608, (2 << 20) - 512, 0, "inactive")},
                                               false, "small", 0, 512, 100)})}});
  auto t = FromBytes(tb::PickleWriter().Dump(root));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->blocks[0].state, model::BlockState::kActivePendingFree);
  EXPECT_TRUE(model::CheckStateInvariants(*t).empty());
}

// ---- errors name the path to the bad value ----------------------------------------------------

std::string ErrorOf(const tb::P& root) {
  auto t = FromBytes(tb::PickleWriter().Dump(root), "bad.pickle");
  EXPECT_FALSE(t.ok());
  return t.ok() ? std::string() : t.status().message();
}

TEST(SnapshotErrors, NameThePathToTheBadValue) {
  EXPECT_THAT(ErrorOf(tb::Int(3)), HasSubstr("the pickle holds an int"));
  EXPECT_THAT(ErrorOf(tb::Dict({{"model", tb::Int(1)}, {"optimizer", tb::Int(2)}})),
              HasSubstr("without 'segments' (its keys: 'model', 'optimizer')"));
  // Found by input_file_fuzzer: a key holding a newline made the one-line message two.
  EXPECT_THAT(ErrorOf(tb::Dict({{std::string("a\0\0\0\nss", 7), tb::Int(1)}})),
              HasSubstr("(its keys: 'a\\x00\\x00\\x00\\nss')"));
  EXPECT_THAT(ErrorOf(tb::Dict({{"segments", tb::Dict({})}})),
              HasSubstr("segments: is a dict, expected a list"));
  EXPECT_THAT(ErrorOf(tb::Dict({{"segments", tb::List({tb::Dict({{"address", tb::Int(0)},
                                                                 {"blocks", tb::List({})}})})}})),
              HasSubstr("segments[0]: missing 'total_size'"));
  const tb::P bad_block = tb::Dict({{"size", tb::Str("big")}, {"state", tb::Str("inactive")}});
  EXPECT_THAT(
      ErrorOf(tb::Dict(
          {{"segments", tb::List({Segment(0, 512, {Block(0, 512, 0, "inactive"), bad_block})})}})),
      HasSubstr("segments[0].blocks[1]: 'size' is a str, expected a size in bytes (an integer)"));
  EXPECT_THAT(ErrorOf(tb::Dict(
                  {{"segments", tb::List({Segment(0, 512, {Block(0, 512, 0, "levitating")})})}})),
              HasSubstr("unknown block state 'levitating'"));
  const tb::P no_action = tb::Dict({{"addr", tb::Int(0)}});
  EXPECT_THAT(
      ErrorOf(tb::Dict(
          {{"segments", tb::List({})},
           {"device_traces",
            tb::List({tb::List({Entry("alloc", 0, 512, tb::List({})),
                                Entry("free_requested", 0, 512, tb::List({})), no_action})})}})),
      HasSubstr("device_traces[0][2]: missing 'action'"));
  EXPECT_THAT(
      ErrorOf(tb::Dict(
          {{"segments", tb::List({})},
           {"device_traces",
            tb::List({tb::List({Entry("alloc", 0, 0, tb::List({}), {{"size", tb::Int(-5)}})})})}})),
      HasSubstr("device_traces[0][0]: 'size' is -5, expected a size in bytes: an integer from 0 "
                "to 2^50"));
  const tb::P bad_frame = tb::List({tb::Dict({{"filename", tb::Int(3)}})});
  EXPECT_THAT(ErrorOf(tb::Dict(
                  {{"segments", tb::List({})},
                   {"device_traces", tb::List({tb::List({Entry("alloc", 0, 512, bad_frame)})})}})),
              HasSubstr("device_traces[0][0].frames[0]: 'filename' is an int"));
}

// ---- integers out of their range: unknown where that means something, else a clear error ------

// torch.compile on torch 2.6 / Python 3.13: PyTorch stores a frame's line unsigned and writes an
// unsigned -1 for generated code without one, which pickle writes as a 9-byte LONG1 (no int64
// holds it). Such a frame is read with an unknown line (0); the frames around it keep theirs.
TEST(SnapshotIntegers, TorchCompileFrameWithUnsignedMinusOneLineHasAnUnknownLine) {
  const uint64_t base = 0x7f2000000000ull;
  const tb::P compiled = tb::Dict({{"filename", tb::Str("/tmp/torchinductor_root/ab/cabxyz.py")},
                                   {"line", tb::UInt(UINT64_MAX)},
                                   {"name", tb::Str("call")}});
  const tb::P stack = tb::List(
      {compiled,
       tb::Frame("/usr/lib/python3.13/site-packages/torch/_dynamo/eval_frame.py", 574, "_fn"),
       tb::Frame("/proj/train.py", 30, "train_step")});
  const tb::P root = tb::Dict(
      {{"segments", tb::List({Segment(base, 2 << 20,
                                      {Block(base, 1024, 1000, "active_allocated", stack),
                                       Block(base + 1024, (2 << 20) - 1024, 0, "inactive")},
                                      false, "small", 1024, 1024, 1000)})},
       {"device_traces", tb::List({tb::List({Entry("alloc", base, 1000, stack)})})}});
  for (const int protocol : {2, 4}) {
    SCOPED_TRACE(protocol);
    const std::string bytes = tb::PickleWriter(protocol).Dump(root);
    // The shape of the real file: LONG1 with 9 bytes, ff x 8 then a 0 sign byte.
    ASSERT_NE(bytes.find(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00", 11)),
              std::string::npos);
    auto t = FromBytes(bytes);
    ASSERT_TRUE(t.ok()) << t.status().message();
    const auto frames = t->stacks.Frames(t->events.stack[0]);
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(t->strings.Get(t->frames.Get(frames[0]).function), "call");
    EXPECT_EQ(t->frames.Get(frames[0]).line, 0);  // unknown
    EXPECT_EQ(t->frames.Get(frames[0]).kind, model::FrameKind::kPython);
    EXPECT_EQ(t->frames.Get(frames[1]).line, 574);
    EXPECT_EQ(t->frames.Get(frames[2]).line, 30);
    EXPECT_EQ(t->blocks[0].stack, t->events.stack[0]);
  }
}

TEST(SnapshotIntegers, LinesNoSourceHasAreUnknownAndANonIntegerLineIsNamed) {
  auto line_of = [](tb::P line) -> Result<int32_t> {
    const tb::P stack = tb::List({tb::Dict(
        {{"filename", tb::Str("/proj/a.py")}, {"line", std::move(line)}, {"name", tb::Str("f")}})});
    const tb::P root =
        tb::Dict({{"segments", tb::List({})},
                  {"device_traces", tb::List({tb::List({Entry("alloc", 4096, 512, stack)})})}});
    auto t = FromBytes(tb::PickleWriter().Dump(root), "bad.pickle");
    if (!t.ok()) return t.status();
    return t->frames.Get(t->stacks.Frames(t->events.stack[0])[0]).line;
  };
  EXPECT_EQ(*line_of(tb::Int(-1)), 0);                  // a signed -1
  EXPECT_EQ(*line_of(tb::Int(int64_t{1} << 40)), 0);    // past any file's length
  EXPECT_EQ(*line_of(tb::UInt(uint64_t{1} << 63)), 0);  // past int64
  EXPECT_EQ(*line_of(tb::None()), 0);
  EXPECT_EQ(*line_of(tb::Int(7)), 7);
  EXPECT_EQ(*line_of(tb::Int(INT32_MAX)), INT32_MAX);
  const auto text = line_of(tb::Str("12"));
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(
      text.status().message(),
      HasSubstr("bad.pickle: device_traces[0][0].frames[0]: 'line' is a str, expected a "
                "line number (an integer, or None); the snapshot is damaged or was not "
                "written by PyTorch: dump it again with torch.cuda.memory._dump_snapshot()"));
}

// Replaces the 8-byte LONG1 that PickleWriter wrote for `placeholder` with a 10-byte one
// (2^72 + 1): an integer no 64-bit type holds.
std::string WithWideInteger(std::string bytes, uint64_t placeholder) {
  std::string old("\x8a\x08", 2);
  for (int k = 0; k < 8; ++k) old.push_back(static_cast<char>((placeholder >> (8 * k)) & 0xFF));
  const size_t at = bytes.find(old);
  EXPECT_NE(at, std::string::npos);
  if (at == std::string::npos) return bytes;
  return bytes.replace(at, old.size(), std::string("\x8a\x0a\x01\0\0\0\0\0\0\0\0\x01", 12));
}

TEST(SnapshotIntegers, ImpossibleSizesAreRefusedNamingTheFieldAndTheRange) {
  const uint64_t base = 0x7f3000000000ull;
  const tb::P no_frames = tb::List({});
  auto error_of_entry = [&](tb::P entry) {
    return ErrorOf(tb::Dict(
        {{"segments", tb::List({})},
         {"device_traces",
          tb::List({tb::List({Entry("alloc", base, 512, no_frames), std::move(entry)})})}}));
  };
  // An unsigned -1 as a size: no device holds it, and it would wrap every sum.
  EXPECT_THAT(
      error_of_entry(Entry("free_requested", base, 0, no_frames, {{"size", tb::UInt(UINT64_MAX)}})),
      HasSubstr("bad.pickle: device_traces[0][1]: 'size' is 18446744073709551615, expected a size "
                "in bytes: an integer from 0 to 2^50 (1 PiB: more than any GPU holds); the "
                "snapshot is damaged or was not written by PyTorch: dump it again with "
                "torch.cuda.memory._dump_snapshot() (if PyTorch wrote it as it is, please report "
                "it to vramscope with the torch version)"));
  EXPECT_THAT(
      error_of_entry(tb::Dict(
          {{"action", tb::Str("oom")}, {"device_free", tb::Int(-1)}, {"size", tb::Int(1 << 20)}})),
      HasSubstr("device_traces[0][1]: 'device_free' is -1, expected a size in bytes"));
  EXPECT_THAT(error_of_entry(Entry("alloc", 0, 512, no_frames, {{"addr", tb::Int(-4096)}})),
              HasSubstr("device_traces[0][1]: 'addr' is -4096, expected a device address: an "
                        "integer from 0 to 2^64-1"));
  // Wider than 64 bits (LONG1 of 10 bytes).
  const uint64_t placeholder = 0x1122334455667788ull;
  const std::string wide = WithWideInteger(
      tb::PickleWriter().Dump(tb::Dict(
          {{"segments", tb::List({})},
           {"device_traces", tb::List({tb::List({Entry("alloc", base, 0, no_frames,
                                                       {{"size", tb::UInt(placeholder)}})})})}})),
      placeholder);
  auto t = FromBytes(wide, "wide.pickle");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(),
              HasSubstr("wide.pickle: device_traces[0][0]: 'size' is an integer wider than 64 "
                        "bits, expected a size in bytes"));
  // Segments and blocks.
  EXPECT_THAT(ErrorOf(tb::Dict({{"segments", tb::List({Segment(base, uint64_t{1} << 51, {})})}})),
              HasSubstr("segments[0]: 'total_size' is 2251799813685248, expected a size in bytes"));
  const tb::P huge_block = tb::Dict({{"address", tb::UInt(base)},
                                     {"size", tb::UInt(UINT64_MAX)},
                                     {"state", tb::Str("inactive")}});
  EXPECT_THAT(
      ErrorOf(tb::Dict({{"segments", tb::List({Segment(base, 2 << 20, {huge_block})})}})),
      HasSubstr("segments[0].blocks[0]: 'size' is 18446744073709551615, expected a size in bytes"));
  const tb::P seg_on_device = tb::Dict({{"device", tb::Int(-1)},
                                        {"address", tb::UInt(base)},
                                        {"total_size", tb::Int(2 << 20)},
                                        {"blocks", tb::List({})}});
  EXPECT_THAT(ErrorOf(tb::Dict({{"segments", tb::List({seg_on_device})}})),
              HasSubstr("segments[0]: 'device' is -1, expected a device ordinal: an integer from "
                        "0 to 2^16-1"));
}

TEST(SnapshotIntegers, UnsignedMinusOneWhereItMeansUnknownOrIsNotASize) {
  const uint64_t base = 0x7f4000000000ull;
  const tb::P no_frames = tb::List({});
  tb::P seg = Segment(base, 2 << 20, {Block(base, 2 << 20, 0, "inactive")});
  // A private pool's id past INT64_MAX keeps its identity (its 64 bits), not the default pool's.
  auto pooled = std::const_pointer_cast<tb::Obj>(seg);
  for (auto& [key, value] : pooled->pairs) {
    if (key == "segment_pool_id") value = tb::Tuple({tb::Int(0), tb::UInt(UINT64_MAX)});
  }
  const tb::P root =
      tb::Dict({{"segments", tb::List({seg})},
                {"device_traces",
                 tb::List({tb::List({
                     // A time no clock holds: unknown, like None.
                     Entry("alloc", base, 512, no_frames, {{"time_us", tb::UInt(UINT64_MAX)}}),
                     Entry("free_requested", base, 512, no_frames),
                     Entry("free_completed", base, 512, no_frames),
                     // Not a memory action: its size is not bytes the device held.
                     Entry("user_defined", 0, 0, no_frames, {{"size", tb::UInt(UINT64_MAX)}}),
                 })})}});
  auto t = FromBytes(tb::PickleWriter().Dump(root));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->events.time_us[0], model::kNoTime);
  EXPECT_EQ(t->events.time_us[1], 1700000000000000);
  EXPECT_EQ(t->events.size[3], UINT64_MAX);
  EXPECT_EQ(t->segments[0].pool_id[0], 0);
  EXPECT_EQ(t->segments[0].pool_id[1], -1);  // the same 64 bits
}

TEST(SnapshotErrors, NonPickleInputsAreNamed) {
  auto json = FromBytes("{\"traceEvents\": []}", "trace.json");
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(json.status().message(), HasSubstr("trace.json: this is a JSON file"));
  auto empty = FromBytes("", "empty.pickle");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("empty.pickle: the file is empty"));
  auto gz = FromBytes(std::string("\x1f\x8b\x08\x00", 4), "x.gz");
  ASSERT_FALSE(gz.ok());
  EXPECT_THAT(gz.status().message(), HasSubstr("gzip"));
  auto truncated = FromBytes(std::string("\x80\x04\x95\x10", 4), "t.pickle");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(),
              HasSubstr("t.pickle: byte 2: the file is truncated at byte 4, before the pickle "
                        "holds any value: it was cut off while being written"));
}

}  // namespace
}  // namespace vramscope::snapshot

namespace vramscope::snapshot {
namespace {

// ---- allocator-state invariants (segment_invariants.h): refused with one exact line -----------

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f5000000000ull;
const std::string kRemedyText =
    "the snapshot is damaged or was not written by PyTorch: dump it again with "
    "torch.cuda.memory._dump_snapshot() (if PyTorch wrote it as it is, please report it to "
    "vramscope with the torch version)";

// The whole error line for a refusal of bad.pickle.
std::string Refusal(const std::string& what) { return "bad.pickle: " + what + "; " + kRemedyText; }

tb::P WithKey(tb::P obj, const std::string& key, tb::P value) {
  auto o = std::const_pointer_cast<tb::Obj>(obj);
  for (auto& [k, v] : o->pairs) {
    if (k == key) {
      v = std::move(value);
      return obj;
    }
  }
  o->pairs.emplace_back(key, std::move(value));
  return obj;
}
tb::P Without(tb::P obj, const std::string& key) {
  auto o = std::const_pointer_cast<tb::Obj>(obj);
  std::erase_if(o->pairs, [&](const auto& kv) { return kv.first == key; });
  return obj;
}
tb::P Snap(std::vector<tb::P> segments, std::vector<tb::P> entries = {}) {
  return tb::Dict({{"segments", tb::List(std::move(segments))},
                   {"device_traces", tb::List({tb::List(std::move(entries))})}});
}
// One free 2 MiB segment at `address`.
tb::P FreeSegment(uint64_t address, uint64_t total = 2 * kMiB) {
  return Segment(address, total, {Block(address, total, 0, "inactive")});
}
// A 2 MiB segment holding an allocated block (512 B, 100 asked), a pending free one (512 B, 200
// asked) and a free tail; its totals as given.
tb::P BusySegment(uint64_t allocated, uint64_t active, uint64_t requested) {
  return Segment(kBase, 2 * kMiB,
                 {Block(kBase, 512, 100, "active_allocated"),
                  Block(kBase + 512, 512, 200, "active_pending_free"),
                  Block(kBase + 1024, 2 * kMiB - 1024, 0, "inactive")},
                 false, "small", allocated, active, requested);
}

TEST(SnapshotInvariants, AConsistentStateLoads) {
  const tb::P no_frames = tb::List({});
  const tb::P root = Snap(
      {// Device 0: two adjacent segments (one ends where the next starts). An inactive block
       // keeps a stale requested_size larger than itself, as real files show.
       Segment(kBase, 20 * kMiB,
               {Block(kBase, 2 * kMiB, 2000000, "active_allocated"),
                Block(kBase + 2 * kMiB, 512, 100, "active_pending_free"),
                Block(kBase + 2 * kMiB + 512, 18 * kMiB - 512, 99999999, "inactive")},
               false, "large", 2 * kMiB, 2 * kMiB + 512, 2000100),
       FreeSegment(kBase + 20 * kMiB),
       // Device 1: the same address as device 0's first segment, 13 MiB (large_segment_size_mb
       // may be any whole number of MiB above 10).
       WithKey(
           Segment(kBase, 13 * kMiB, {Block(kBase, 13 * kMiB, 13 * kMiB - 5, "active_allocated")},
                   false, "large", 13 * kMiB, 13 * kMiB, 13 * kMiB - 5),
           "device", tb::Int(1))},
      {Entry("segment_alloc", kBase, 20 * kMiB, no_frames),
       Entry("segment_map", kBase, 13 * kMiB, no_frames),
       Entry("alloc", kBase, 1, no_frames),  // a requested size: not rounded
       Entry("free_requested", kBase, 1, no_frames), Entry("free_completed", kBase, 1, no_frames),
       tb::Dict({{"action", tb::Str("oom")}, {"device_free", tb::Int(0)}, {"size", tb::Int(512)}}),
       Entry("snapshot", 0, 12345, no_frames),                  // no rule for snapshot entries
       Without(Entry("alloc", kBase, 0, no_frames), "size")});  // no size: nothing to check
  auto t = FromBytes(tb::PickleWriter().Dump(root));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->segments.size(), 3u);
  EXPECT_TRUE(model::CheckStateInvariants(*t).empty());
}

TEST(SnapshotInvariants, OverlappingSegmentsOfADeviceAreRefused) {
  // Three segments at address 0: the second is the first to overlap.
  EXPECT_EQ(ErrorOf(Snap({FreeSegment(0), FreeSegment(0), FreeSegment(0)})),
            Refusal("segments[1]: [0x0, 0x200000) overlaps segments[0] [0x0, 0x200000) on device "
                    "0: the segments of a device are disjoint"));
  // A segment inside another, listed first: named by its place in the file.
  EXPECT_EQ(ErrorOf(Snap({FreeSegment(kBase + 2 * kMiB), FreeSegment(kBase, 20 * kMiB)})),
            Refusal("segments[0]: [0x7f5000200000, 0x7f5000400000) overlaps segments[1] "
                    "[0x7f5000000000, 0x7f5001400000) on device 0: the segments of a device are "
                    "disjoint"));
}

TEST(SnapshotInvariants, ASegmentPastTheEndOfTheAddressSpaceIsRefused) {
  const uint64_t top = UINT64_MAX - kMiB + 1;  // 1 MiB below 2^64
  EXPECT_EQ(ErrorOf(Snap({FreeSegment(top)})),
            Refusal("segments[0]: 'address' 0xfffffffffff00000 + 'total_size' 2097152 passes the "
                    "end of the 64-bit address space"));
}

TEST(SnapshotInvariants, SegmentAndBlockSizesPyTorchCannotProduceAreRefused) {
  EXPECT_EQ(ErrorOf(Snap({FreeSegment(kBase, 4096)})),
            Refusal("segments[0]: 'total_size' is 4096, expected a positive multiple of 1 MiB "
                    "(1048576 bytes: PyTorch's segments are 2 MiB, 20 MiB or a request rounded "
                    "up to 2 MiB)"));
  EXPECT_EQ(ErrorOf(Snap({Segment(kBase, 0, {})})),
            Refusal("segments[0]: 'total_size' is 0, expected a positive multiple of 1 MiB "
                    "(1048576 bytes: PyTorch's segments are 2 MiB, 20 MiB or a request rounded "
                    "up to 2 MiB)"));
  EXPECT_EQ(ErrorOf(Snap({Segment(kBase, 2 * kMiB,
                                  {Block(kBase, 1000, 1000, "active_allocated"),
                                   Block(kBase + 1000, 2 * kMiB - 1000, 0, "inactive")},
                                  false, "small", 1000, 1000, 1000)})),
            Refusal("segments[0].blocks[0]: 'size' is 1000, expected a positive multiple of 512 "
                    "(PyTorch rounds every block to 512 bytes)"));
}

TEST(SnapshotInvariants, BlocksThatDoNotTileTheirSegmentAreRefused) {
  auto error_of = [](std::vector<tb::P> blocks) {
    return ErrorOf(Snap({Segment(kBase, 2 * kMiB, std::move(blocks))}));
  };
  const char* const kTile = ": the blocks of a segment tile it without gaps or overlaps";
  EXPECT_EQ(error_of({Block(kBase + 512, 2 * kMiB - 512, 0, "inactive")}),
            Refusal(std::string("segments[0].blocks[0]: starts at 0x7f5000000200, expected "
                                "0x7f5000000000 (the segment's address)") +
                    kTile));
  // A gap; the blocks are listed out of order, and the message names the file's positions.
  EXPECT_EQ(error_of({Block(kBase + kMiB + 512, kMiB - 512, 0, "inactive"),
                      Block(kBase, kMiB, 0, "inactive")}),
            Refusal(std::string("segments[0].blocks[0]: starts at 0x7f5000100200, expected "
                                "0x7f5000100000 (where the previous block ends)") +
                    kTile));
  // Two blocks over the same bytes.
  EXPECT_EQ(error_of({Block(kBase, kMiB, 0, "inactive"), Block(kBase + 512, kMiB, 0, "inactive"),
                      Block(kBase + kMiB + 512, kMiB - 512, 0, "inactive")}),
            Refusal(std::string("segments[0].blocks[1]: starts at 0x7f5000000200, expected "
                                "0x7f5000100000 (where the previous block ends)") +
                    kTile));
  EXPECT_EQ(
      error_of({Block(kBase, kMiB, 0, "inactive"), Block(kBase + kMiB, 2 * kMiB, 0, "inactive")}),
      Refusal("segments[0].blocks[1]: ends at 0x7f5000300000, past the end of its segment "
              "(0x7f5000200000 = 'address' 0x7f5000000000 + 'total_size' 2097152)"));
  EXPECT_EQ(error_of({Block(kBase, kMiB, 0, "inactive")}),
            Refusal("segments[0]: its blocks end at 0x7f5000100000, short of its end "
                    "0x7f5000200000 ('address' 0x7f5000000000 + 'total_size' 2097152): they "
                    "cover 1048576 of its 2097152 bytes"));
  EXPECT_EQ(error_of({}),
            Refusal("segments[0]: its blocks end at 0x7f5000000000, short of its end "
                    "0x7f5000200000 ('address' 0x7f5000000000 + 'total_size' 2097152): they "
                    "cover 0 of its 2097152 bytes"));
}

TEST(SnapshotInvariants, SegmentTotalsThatDisagreeWithTheBlocksAreRefused) {
  ASSERT_TRUE(FromBytes(tb::PickleWriter().Dump(Snap({BusySegment(512, 1024, 300)}))).ok());
  EXPECT_EQ(ErrorOf(Snap({BusySegment(1024, 1024, 300)})),
            Refusal("segments[0]: 'allocated_size' is 1024, but its active_allocated blocks' "
                    "sizes sum to 512"));
  EXPECT_EQ(ErrorOf(Snap({BusySegment(512, 512, 300)})),
            Refusal("segments[0]: 'active_size' is 512, but its active blocks' sizes "
                    "(active_allocated and active_pending_free) sum to 1024"));
  EXPECT_EQ(ErrorOf(Snap({BusySegment(512, 1024, 100)})),
            Refusal("segments[0]: 'requested_size' is 100, but its active blocks' requested "
                    "sizes sum to 300"));
  EXPECT_EQ(ErrorOf(Snap({Segment(kBase, 2 * kMiB,
                                  {Block(kBase, 512, 600, "active_allocated"),
                                   Block(kBase + 512, 2 * kMiB - 512, 0, "inactive")},
                                  false, "small", 512, 512, 600)})),
            Refusal("segments[0].blocks[0]: 'requested_size' is 600, more than its 'size' 512 "
                    "(an active block holds at least what was requested)"));
}

TEST(SnapshotInvariants, FieldsTheFileLacksAreNotChecked) {
  // Older files lack the totals: the model holds 0 for them, which is no disagreement.
  tb::P seg = BusySegment(0, 0, 0);
  for (const char* key : {"allocated_size", "active_size", "requested_size"}) {
    seg = Without(seg, key);
  }
  auto t = FromBytes(tb::PickleWriter().Dump(Snap({seg})));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->segments[0].allocated_size, 0u);
  // 1.13 blocks carry no requested_size (the model takes it from the history record): the
  // segment's requested_size is not compared with it.
  const tb::P history =
      tb::List({tb::Dict({{"addr", tb::UInt(kBase)}, {"real_size", tb::Int(7)}})});
  const tb::P old_blocks = tb::List(
      {tb::Dict(
           {{"size", tb::Int(512)}, {"state", tb::Str("active_allocated")}, {"history", history}}),
       tb::Dict({{"size", tb::Int(2 * kMiB - 512)}, {"state", tb::Str("inactive")}})});
  const tb::P old = tb::Dict({{"address", tb::UInt(kBase)},
                              {"total_size", tb::Int(2 * kMiB)},
                              {"allocated_size", tb::Int(512)},
                              {"active_size", tb::Int(512)},
                              {"requested_size", tb::Int(100)},
                              {"blocks", old_blocks}});
  auto o = FromBytes(tb::PickleWriter().Dump(tb::List({old})));
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->blocks[0].requested_size, 7u);
}

TEST(SnapshotInvariants, TheFirstOffendingSegmentInTheFileIsNamed) {
  // segments[0] lies above segments[1] and is checked first all the same: the file's order.
  EXPECT_EQ(
      ErrorOf(Snap({WithKey(FreeSegment(kBase + 64 * kMiB), "allocated_size", tb::Int(512)),
                    FreeSegment(kBase, 3 * kMiB / 2)})),
      Refusal("segments[0]: 'allocated_size' is 512, but its active_allocated blocks' sizes sum "
              "to 0"));
}

TEST(SnapshotInvariants, TraceEntrySizesPyTorchCannotRecordAreRefused) {
  const tb::P no_frames = tb::List({});
  auto error_of = [&](tb::P entry) {
    return ErrorOf(Snap({}, {Entry("alloc", kBase, 512, no_frames), std::move(entry)}));
  };
  EXPECT_EQ(error_of(Entry("alloc", kBase, 0, no_frames)),
            Refusal("device_traces[0][1]: 'size' of an alloc entry is 0, expected at least 1 (the "
                    "requested bytes: PyTorch's allocator never sees a request of 0 bytes)"));
  EXPECT_EQ(error_of(Entry("free_completed", kBase, 0, no_frames)),
            Refusal("device_traces[0][1]: 'size' of a free_completed entry is 0, expected at "
                    "least 1 (the requested bytes: PyTorch's allocator never sees a request of 0 "
                    "bytes)"));
  const std::string kSegmentRule =
      ", expected a positive multiple of 1 MiB (1048576 bytes: PyTorch's segments and pages are "
      "2 MiB, 20 MiB or a request rounded up to 2 MiB)";
  EXPECT_EQ(error_of(Entry("segment_alloc", kBase, 4096, no_frames)),
            Refusal("device_traces[0][1]: 'size' of a segment_alloc entry is 4096" + kSegmentRule));
  EXPECT_EQ(error_of(Entry("segment_unmap", kBase, 0, no_frames)),
            Refusal("device_traces[0][1]: 'size' of a segment_unmap entry is 0" + kSegmentRule));
  EXPECT_EQ(
      error_of(tb::Dict(
          {{"action", tb::Str("oom")}, {"device_free", tb::Int(0)}, {"size", tb::Int(1000)}})),
      Refusal("device_traces[0][1]: 'size' of an oom entry is 1000, expected a positive "
              "multiple of 512 (the request as PyTorch rounds it)"));
  // The same line when the trace is converted after the parse rather than while streaming.
  const std::string bytes = tb::PickleWriter().Dump(Snap(
      {}, {Entry("alloc", kBase, 512, no_frames), Entry("segment_free", kBase, 4096, no_frames)}));
  const auto file = MappedFile::FromBytes(
      "bad.pickle", std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  LoadOptions whole;
  whole.stream_trace = false;
  for (const auto& options : {LoadOptions(), whole}) {
    auto t = LoadSnapshot(*file, options);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(
        t.status().message(),
        Refusal("device_traces[0][1]: 'size' of a segment_free entry is 4096" + kSegmentRule));
  }
}

}  // namespace
}  // namespace vramscope::snapshot
