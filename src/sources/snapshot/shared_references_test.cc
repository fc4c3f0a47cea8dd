// The snapshot source against shared references (issue 19): PyTorch writes each segment, block,
// trace entry and trace list once, so a second reference to one is refused at once, with the
// place; the stacks and frames PyTorch does share stay as cheap as one copy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "sources/snapshot/snapshot_source.h"
#include "support/pickle_builder.h"

namespace vramscope::snapshot {
namespace {

namespace tb = vramscope::testing;
using ::testing::HasSubstr;

Result<model::Trace> Load(const tb::P& root, bool stream = true) {
  const std::string bytes = tb::PickleWriter().Dump(root);
  const auto file = MappedFile::FromBytes(
      "shared.pickle", std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  LoadOptions options;
  options.stream_trace = stream;
  return LoadSnapshot(*file, options);
}

tb::P Block(uint64_t address, uint64_t size) {
  return tb::Dict({{"address", tb::UInt(address)},
                   {"size", tb::UInt(size)},
                   {"requested_size", tb::UInt(size)},
                   {"state", tb::Str("active_allocated")}});
}

tb::P Segment(uint64_t address, tb::P blocks, uint64_t total) {
  return tb::Dict({{"device", tb::Int(0)},
                   {"address", tb::UInt(address)},
                   {"total_size", tb::UInt(total)},
                   {"allocated_size", tb::UInt(total)},
                   {"active_size", tb::UInt(total)},
                   {"requested_size", tb::UInt(total)},
                   {"stream", tb::Int(0)},
                   {"segment_type", tb::Str("large")},
                   {"blocks", std::move(blocks)}});
}

tb::P Entry(const char* action, uint64_t addr, uint64_t size, tb::P frames,
            tb::P cpp_frames = nullptr) {
  std::vector<std::pair<std::string, tb::P>> pairs = {{"action", tb::Str(action)},
                                                      {"addr", tb::UInt(addr)},
                                                      {"size", tb::UInt(size)},
                                                      {"stream", tb::Int(0)},
                                                      {"frames", std::move(frames)}};
  if (cpp_frames) pairs.emplace_back("cpp_frames", std::move(cpp_frames));
  return tb::Dict(std::move(pairs));
}

tb::P Snapshot(std::vector<tb::P> segments, std::vector<tb::P> entries) {
  return tb::Dict({{"segments", tb::List(std::move(segments))},
                   {"device_traces", tb::List({tb::List(std::move(entries))})}});
}

TEST(SharedReferences, ASegmentReferencedTwiceIsRefused) {
  const tb::P seg = Segment(1 << 21, tb::List({Block(1 << 21, 1 << 21)}), 1 << 21);
  const auto trace = Load(Snapshot({seg, seg}, {}));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().message(),
            "shared.pickle: segments[1]: this segment is the same object as one read before (a "
            "shared pickle reference); PyTorch writes each segment once, so the file was crafted "
            "or damaged: dump the snapshot again with torch.cuda.memory._dump_snapshot()");
}

TEST(SharedReferences, ABlockReferencedTwiceIsRefusedWithItsPlace) {
  const tb::P block = Block(1 << 21, 1 << 20);
  const auto trace = Load(Snapshot({Segment(1 << 21, tb::List({block, block}), 1 << 21)}, {}));
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(),
              HasSubstr("segments[0].blocks[1]: this block is the same object as one read "
                        "before"));
}

TEST(SharedReferences, TheBlocksOfOneSegmentInTwoSegmentsAreRefused) {
  // The bomb in miniature: two segments sharing one blocks list.
  const tb::P blocks = tb::List({Block(1 << 21, 1 << 21)});
  const auto trace =
      Load(Snapshot({Segment(1 << 21, blocks, 1 << 21), Segment(1 << 22, blocks, 1 << 21)}, {}));
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(),
              HasSubstr("segments[1].blocks[0]: this block is the same object"));
}

TEST(SharedReferences, ATraceEntryReferencedTwiceIsRefusedStreamedOrNot) {
  const tb::P entry = Entry("alloc", 1 << 21, 512, tb::List({}));
  for (const bool stream : {true, false}) {
    const auto trace = Load(
        Snapshot({}, {entry, Entry("free_requested", 1 << 21, 512, tb::List({})), entry}), stream);
    ASSERT_FALSE(trace.ok()) << stream;
    EXPECT_THAT(trace.status().message(),
                HasSubstr("device_traces[0][2]: this trace entry is the same object as one "
                          "read before"))
        << stream;
  }
}

TEST(SharedReferences, OneTraceListForTwoDevicesIsRefused) {
  const tb::P list = tb::List({Entry("alloc", 1 << 21, 512, tb::List({}))});
  const tb::P root =
      tb::Dict({{"segments", tb::List({})}, {"device_traces", tb::List({list, list})}});
  for (const bool stream : {true, false}) {
    const auto trace = Load(root, stream);
    ASSERT_FALSE(trace.ok()) << stream;
    EXPECT_THAT(trace.status().message(), HasSubstr("device_traces[1]")) << stream;
  }
}

TEST(SharedReferences, AStackThatIsAnEntryIsRefused) {
  const tb::P entry = Entry("alloc", 1 << 21, 512, tb::List({}));
  const tb::P second = Entry("alloc", 1 << 22, 512, tb::List({entry}));  // a frame: the entry
  const auto trace = Load(Snapshot({}, {entry, second}), /*stream=*/false);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(),
              HasSubstr("device_traces[0][1].frames[0]: a frame is the same object as a "
                        "segment, block or trace entry read before"));
}

// What PyTorch does share stays as cheap as one copy: 10,000 trace entries and 10,000 blocks'
// histories (with C++ frames) on one stack of 2,000 frames convert it once each (40 million
// frame references if each converted its own). Streamed too: a stack of over 1,000 frames is
// gathered while a batch of entries is open (this test found the reader cutting its frames off
// when it then reclaimed the batch).
TEST(SharedReferences, SharedStacksAndFramesAreReadOnce) {
  std::vector<tb::P> frames;
  for (int i = 0; i < 2000; ++i) frames.push_back(tb::Frame("train.py", i, "step"));
  const tb::P stack = tb::List(frames);
  const tb::P cpp = tb::List({tb::Str("malloc at alloc.cpp:1")});
  std::vector<tb::P> entries, blocks;
  const uint64_t base = uint64_t{1} << 30;
  for (int i = 0; i < 10000; ++i) {
    entries.push_back(Entry("alloc", base + 512 * uint64_t(i), 512, stack));
    blocks.push_back(
        tb::Dict({{"size", tb::UInt(512)},
                  {"state", tb::Str("active_allocated")},
                  {"history", tb::List({tb::Dict({{"addr", tb::UInt(base + 512 * uint64_t(i))},
                                                  {"real_size", tb::UInt(512)},
                                                  {"frames", stack},
                                                  {"cpp_frames", cpp}})})}}));
  }
  // The rest of a 5 MiB segment (PyTorch's segments are whole MiB), free.
  blocks.push_back(
      tb::Dict({{"size", tb::UInt(5 * 1048576 - 512 * 10000)}, {"state", tb::Str("inactive")}}));
  const tb::P segment = tb::Dict({{"device", tb::Int(0)},
                                  {"address", tb::UInt(base)},
                                  {"total_size", tb::UInt(5 * 1048576)},
                                  {"blocks", tb::List(std::move(blocks))}});
  const tb::P root = Snapshot({segment}, entries);
  for (const bool stream : {true, false}) {
    const auto trace = Load(root, stream);
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    EXPECT_EQ(trace->events.count(), 10000u);
    const std::set<model::StackId> entry_stacks(trace->events.stack.begin(),
                                                trace->events.stack.end());
    EXPECT_EQ(entry_stacks.size(), 1u);
    std::set<model::StackId> block_stacks;
    for (const model::Block& b : trace->blocks) {
      if (model::IsActive(b.state)) block_stacks.insert(b.stack);
    }
    EXPECT_EQ(block_stacks.size(), 1u);
    EXPECT_NE(*block_stacks.begin(), *entry_stacks.begin());  // the C++ frame makes it another
    EXPECT_EQ(trace->frames.size(), 2001u);
  }
}

}  // namespace
}  // namespace vramscope::snapshot
