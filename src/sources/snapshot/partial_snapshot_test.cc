// Snapshots cut off before their end (a killed job, a full disk): every cut of a real snapshot
// reads as the snapshot up to the cut, marked partial. The real files are cut here at many
// bytes; what each cut must give is derived from the whole file's reading, not written down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "model/trace.h"
#include "sources/snapshot/snapshot_source.h"

namespace vramscope::snapshot {
namespace {

using ::testing::HasSubstr;

const std::string kFixtures = std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/";

std::vector<std::string> SnapshotFiles() {
  std::vector<std::string> paths = {std::string(VRAMSCOPE_SOURCE_DIR) +
                                    "/examples/synthetic_mlp_adam_step.pickle"};
  if (std::filesystem::exists(kFixtures)) {
    for (const auto& e : std::filesystem::directory_iterator(kFixtures)) {
      if (e.path().extension() == ".pickle") paths.push_back(e.path().string());
    }
  }
  return paths;
}

Result<model::Trace> LoadPrefix(const MappedFile& whole, size_t n, bool stream = true) {
  const auto file = MappedFile::FromBytes(whole.path(), whole.bytes().first(n));
  LoadOptions options;
  options.stream_trace = stream;
  return LoadSnapshot(*file, options);
}

bool HasNote(const model::Trace& t, std::string_view text) {
  for (const std::string& note : t.facts.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

// The cuts: evenly spread, and the last few bytes (a STOP or a closing opcode cut off).
std::vector<size_t> Cuts(size_t size, size_t count) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i <= count; ++i) cuts.push_back(size * i / (count + 1));
  for (size_t back = 1; back <= 3 && back < size; ++back) cuts.push_back(size - back);
  return cuts;
}

TEST(PartialSnapshot, EveryCutReadsThePrefixOfTheTraceMarkedPartial) {
  for (const std::string& path : SnapshotFiles()) {
    SCOPED_TRACE(path);
    auto file = MappedFile::Open(path);
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto whole = LoadSnapshot(**file);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    EXPECT_FALSE(whole->facts.partial);
    const model::Events& all = whole->events;
    size_t events_before = 0, in_trace = 0;
    for (const size_t n : Cuts((*file)->bytes().size(), 60)) {
      SCOPED_TRACE("cut at byte " + std::to_string(n));
      auto cut = LoadPrefix(**file, n);
      if (!cut.ok()) {
        // Only a cut before anything of the snapshot was written has nothing to report.
        EXPECT_EQ(events_before, 0u);
        EXPECT_THAT(cut.status().message(), HasSubstr("before any segment or trace entry"));
        continue;
      }
      const model::Trace& t = *cut;
      EXPECT_TRUE(t.facts.partial);
      EXPECT_EQ(t.facts.cut_at_byte, n);
      EXPECT_TRUE(HasNote(t, "partial file: it ends at byte " + std::to_string(n)));
      // The events read are the whole file's first ones, in order, and more with a later cut.
      ASSERT_LE(t.events.count(), all.count());
      EXPECT_GE(t.events.count(), events_before);
      events_before = t.events.count();
      for (size_t i = 0; i < t.events.count(); ++i) {
        ASSERT_EQ(t.events.action[i], all.action[i]) << "event " << i;
        ASSERT_EQ(t.events.addr[i], all.addr[i]) << "event " << i;
        ASSERT_EQ(t.events.size[i], all.size[i]) << "event " << i;
      }
      // Whatever allocator state is kept is consistent.
      EXPECT_THAT(model::CheckStateInvariants(t), ::testing::IsEmpty());
      if (!t.facts.has_allocator_state) {
        // Cut inside the trace: levels start from the dump's untouched blocks, one allocation
        // each, and no allocation is bigger than what the dump held.
        EXPECT_TRUE(HasNote(t, "the cut falls in the trace"));
        ++in_trace;
        EXPECT_TRUE(t.segments.empty() && t.blocks.empty());
        ASSERT_EQ(t.start_levels.size(), t.devices.size());
      }
    }
    if (all.count() > 1000) EXPECT_GT(in_trace, 10u) << "cuts that fall in a long trace";
    // Cut just before the STOP, everything is there.
    auto last = LoadPrefix(**file, (*file)->bytes().size() - 1);
    ASSERT_TRUE(last.ok());
    EXPECT_EQ(last->events.count(), all.count());
    EXPECT_EQ(last->segments.size(), whole->segments.size());
    EXPECT_TRUE(HasNote(*last, "the cut falls after the segments and the trace"));
  }
}

// Every byte around the start of the trace: the cut falls before its first entry, inside it,
// between entries, inside a frame, before a batch closes.
TEST(PartialSnapshot, EveryByteAroundTheStartOfTheTrace) {
  for (const std::string& path : SnapshotFiles()) {
    SCOPED_TRACE(path);
    auto file = MappedFile::Open(path);
    ASSERT_TRUE(file.ok());
    const auto bytes = (*file)->bytes();
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const size_t key = text.find("device_traces");
    ASSERT_NE(key, std::string_view::npos);
    size_t events_before = 0;
    // Every byte of the small files; every few bytes of the big ones (each cut reads it all).
    const size_t step = 1 + bytes.size() / 300'000;
    for (size_t n = key; n < std::min(bytes.size(), key + 2000); n += step) {
      SCOPED_TRACE("cut at byte " + std::to_string(n));
      auto cut = LoadPrefix(**file, n);
      ASSERT_TRUE(cut.ok()) << cut.status().message();
      ASSERT_GE(cut->events.count(), events_before);
      events_before = cut->events.count();
    }
    EXPECT_GT(events_before, 0u);
  }
}

// The reading that streams trace entries out while parsing and the one that builds the whole
// document first agree at every cut.
TEST(PartialSnapshot, StreamedAndWholeDocumentReadingsAgreeAtEveryCut) {
  for (const std::string& path : SnapshotFiles()) {
    SCOPED_TRACE(path);
    auto file = MappedFile::Open(path);
    ASSERT_TRUE(file.ok());
    for (const size_t n : Cuts((*file)->bytes().size(), 15)) {
      SCOPED_TRACE("cut at byte " + std::to_string(n));
      auto streamed = LoadPrefix(**file, n, true);
      auto whole = LoadPrefix(**file, n, false);
      ASSERT_EQ(streamed.ok(), whole.ok());
      if (!streamed.ok()) {
        EXPECT_EQ(streamed.status().message(), whole.status().message());
        continue;
      }
      EXPECT_EQ(streamed->events.count(), whole->events.count());
      EXPECT_EQ(streamed->segments.size(), whole->segments.size());
      EXPECT_EQ(streamed->blocks.size(), whole->blocks.size());
      EXPECT_EQ(streamed->allocations.size(), whole->allocations.size());
      EXPECT_EQ(streamed->facts.notes, whole->facts.notes);
    }
  }
}

// A cut in the trace keeps what was allocated before the trace one allocation per block, with
// its size and stack, as the whole file has it: the categories of the weights and gradients
// a step started with survive the cut.
TEST(PartialSnapshot, ACutInTheTraceKeepsTheBlocksAllocatedBeforeIt) {
  const std::string path = kFixtures + "snapshot_torch2.6_cs336_2.7b_forward.pickle";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  auto whole = LoadSnapshot(**file);
  ASSERT_TRUE(whole.ok());
  auto cut = LoadPrefix(**file, 3'000'000);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  ASSERT_FALSE(cut->facts.has_allocator_state);
  ASSERT_GT(cut->events.count(), 8000u);
  // Allocated before the trace in the whole file: blocks at the dump the trace never made.
  uint64_t before_whole = 0, before_cut = 0;
  size_t count_whole = 0, count_cut = 0;
  for (const model::Allocation& a : whole->allocations) {
    if (a.alloc_event == model::kNoEvent && a.block >= 0) {
      before_whole += a.size;
      ++count_whole;
    }
  }
  for (const model::Allocation& a : cut->allocations) {
    if (a.alloc_event == model::kNoEvent && a.addr != 0) {
      before_cut += a.size;
      ++count_cut;
    }
  }
  // The lost events (the trace's last 46) touch no block the dump holds from before the trace,
  // so the cut finds the same ones, plus the blocks those lost events allocated and kept.
  EXPECT_GE(before_cut, before_whole);
  EXPECT_GE(count_cut, count_whole);
  EXPECT_LE(before_cut - before_whole, uint64_t{64} << 20);
  EXPECT_THAT(cut->facts.notes, ::testing::Contains(HasSubstr("allocated before the trace")));
}

TEST(PartialSnapshot, AnEmptyFileSaysWhatUsuallyCausesIt) {
  const auto file = MappedFile::FromBytes("dump.pickle", {});
  auto trace = LoadSnapshot(*file);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("dump.pickle: the file is empty (0 bytes)"));
  EXPECT_THAT(trace.status().message(), HasSubstr("killed while dumping or a full disk"));
}

TEST(PartialSnapshot, ReadingPartialFilesCanBeSwitchedOff) {
  const std::string path =
      std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/synthetic_mlp_adam_step.pickle";
  auto file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  const auto prefix =
      MappedFile::FromBytes("cut.pickle", (*file)->bytes().first((*file)->bytes().size() / 2));
  LoadOptions strict;
  strict.read_partial = false;
  auto trace = LoadSnapshot(*prefix, strict);
  ASSERT_FALSE(trace.ok());
  EXPECT_THAT(trace.status().message(), HasSubstr("cut.pickle: byte"));
}

}  // namespace
}  // namespace vramscope::snapshot
