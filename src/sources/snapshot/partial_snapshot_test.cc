// Snapshots cut off before their end (a killed job, a full disk): every cut of a real snapshot
// reads as the snapshot up to the cut, marked partial. The real files are cut here at many
// bytes; what each cut must give is derived from the whole file's reading, not written down.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/gzip.h"
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

// Issue 41's check: three real snapshots, one of them gzipped, cut at 64 evenly spaced offsets
// and at every offset in their first and last 4 KiB (small real files, so that every cut is
// read whole in a few seconds): each cut that holds anything reads the whole file's first
// events, marked partial. The gzipped one is cut in its compressed bytes (a truncated deflate
// stream, inflated as far as it goes) as well as in its inflated ones.
std::vector<size_t> IssueCuts(size_t size) {
  std::vector<size_t> cuts;
  for (size_t i = 1; i <= 64; ++i) cuts.push_back(size * i / 65);
  for (size_t n = 1; n <= 4096 && n < size; ++n) cuts.push_back(n);
  for (size_t n = size > 4096 ? size - 4096 : 1; n < size; ++n) cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());  // a small file's overlap
  return cuts;
}

// The events of `cut` are the first ones of `whole`; false (with a failure) when not.
bool IsPrefixOf(const model::Trace& cut, const model::Trace& whole) {
  if (cut.events.count() > whole.events.count()) {
    ADD_FAILURE() << cut.events.count() << " events, the whole file has " << whole.events.count();
    return false;
  }
  for (size_t i = 0; i < cut.events.count(); ++i) {
    if (cut.events.action[i] != whole.events.action[i] ||
        cut.events.addr[i] != whole.events.addr[i] || cut.events.size[i] != whole.events.size[i]) {
      ADD_FAILURE() << "event " << i << " differs from the whole file's";
      return false;
    }
  }
  return true;
}

// Reads the prefix of `bytes` (plain snapshot bytes): ok and partial with its events a prefix of
// `whole`'s, or refused because nothing was written yet. The number of events read.
size_t CheckPlainCut(const std::string& name, std::span<const uint8_t> bytes, size_t n,
                     const model::Trace& whole) {
  const auto file = MappedFile::FromBytes(name, bytes.first(n));
  auto cut = LoadSnapshot(*file);
  if (!cut.ok()) {
    // Cut before a segment or trace entry was written: refused, saying so.
    EXPECT_THAT(cut.status().message(),
                ::testing::AnyOf(HasSubstr("before the pickle holds any value"),
                                 HasSubstr("before any segment or trace entry")))
        << "cut at byte " << n;
    return 0;
  }
  EXPECT_TRUE(cut->facts.partial) << "cut at byte " << n;
  EXPECT_TRUE(IsPrefixOf(*cut, whole)) << "cut at byte " << n;
  return cut->events.count();
}

TEST(PartialSnapshot, ThreeRealSnapshotsCutAtEveryOffsetOfTheirFirstAndLast4KiB) {
  const std::string source = VRAMSCOPE_SOURCE_DIR;
  // Real captures: flexgen's out-of-memory dump (shared fixtures: 1 event, its cuts fall in the
  // segments), and two runs of `vramscope run` on an H100 (thousands of events), gzipped as the
  // project keeps them.
  const std::string plain = kFixtures + "snapshot_torch2.0_flexgen_opt_oom.pickle";
  const std::vector<std::string> gzipped = {source + "/goldens/h100/run/oom_gpt_fp32.pickle.gz",
                                            source + "/goldens/h100/run/linear_sgd_fp32.pickle.gz"};
  struct Input {
    std::string name;
    std::string bytes;  // plain snapshot bytes
    std::string compressed;
  };
  std::vector<Input> inputs;
  if (std::filesystem::exists(plain)) {
    auto file = MappedFile::Open(plain);
    ASSERT_TRUE(file.ok());
    const auto b = (*file)->bytes();
    inputs.push_back({plain, std::string(b.begin(), b.end()), {}});
  }
  for (const std::string& path : gzipped) {
    auto file = MappedFile::Open(path);
    ASSERT_TRUE(file.ok()) << path;
    const auto b = (*file)->bytes();
    auto inflated = Gunzip(b, path, 64 << 20);
    ASSERT_TRUE(inflated.ok()) << inflated.status().message();
    inputs.push_back({path, std::move(*inflated), std::string(b.begin(), b.end())});
  }
  for (const Input& in : inputs) {
    SCOPED_TRACE(in.name);
    const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(in.bytes.data()),
                                                in.bytes.size());
    const auto whole_file = MappedFile::FromBytes(in.name, bytes);
    auto whole = LoadSnapshot(*whole_file);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    ASSERT_GT(whole->events.count(), 0u);
    size_t most = 0;
    for (const size_t n : IssueCuts(bytes.size())) {
      most = std::max(most, CheckPlainCut(in.name, bytes, n, *whole));
    }
    EXPECT_EQ(most, whole->events.count()) << "the last cuts hold every event";
    if (in.compressed.empty()) continue;
    // The compressed file cut: what inflates before the cut reads as a plain cut does.
    const auto compressed = std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(in.compressed.data()), in.compressed.size());
    size_t inflated_cuts = 0;
    for (const size_t n : IssueCuts(compressed.size())) {
      std::string inflated;
      GzipCut cut;
      const Status s = GunzipChunks(
          compressed.first(n), in.name,
          [&](std::string_view chunk) {
            inflated.append(chunk);
            return Status::Ok();
          },
          &cut);
      if (!s.ok() || inflated.empty()) continue;  // cut in the gzip header: nothing inflated
      ASSERT_TRUE(cut.truncated) << "cut at compressed byte " << n;
      // A cut in the deflate stream's last bytes (its end code) or in the gzip trailer (CRC
      // and size, 8 bytes) may have inflated the whole snapshot.
      if (inflated == in.bytes) {
        EXPECT_GE(n + 16, compressed.size());
        continue;
      }
      ASSERT_EQ(inflated, in.bytes.substr(0, inflated.size()));
      CheckPlainCut(in.name, bytes, inflated.size(), *whole);
      ++inflated_cuts;
      if (HasFailure()) return;
    }
    EXPECT_GT(inflated_cuts, compressed.size() / 2);
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
    // Every byte of the small files; every few of the big ones (each cut reads it all, and the
    // test above cuts small real files at every byte of their first and last 4 KiB).
    const size_t step = 1 + bytes.size() / 30'000;
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
  // A profiler trace's name gets the profiler's command.
  const auto trace_file = MappedFile::FromBytes("rank0.pt.trace.json.gz", {});
  auto empty_trace = LoadSnapshot(*trace_file);
  ASSERT_FALSE(empty_trace.ok());
  EXPECT_THAT(empty_trace.status().message(), HasSubstr("nothing of the profiler trace"));
  EXPECT_THAT(empty_trace.status().message(), HasSubstr("prof.export_chrome_trace"));
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
