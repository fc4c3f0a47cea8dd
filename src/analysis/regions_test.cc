// Memory by region on a hand-worked snapshot in the shape PyTorch writes: compile_context on every
// entry ("N/A" in eager code, then the RecordFunction name of the running compiled region, as
// torch/csrc/cuda/memory_snapshot.cpp pushes it: "Torch-Compiled Region: 0/0"), nested
// external_annotations ranges with an END whose START the trace lost and a START never ended, an
// `annotate` entry labelling a live tensor, and FX-augmented frames of Inductor-generated code.
// Every figure below is worked out by hand in the comments; the real files are checked in
// tests/e2e/test_regions.py.
#include "analysis/regions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "analysis/analyze.h"
#include "sources/snapshot/snapshot_source.h"
#include "support/pickle_builder.h"

namespace vramscope::analysis {
namespace {

namespace tb = vramscope::testing;
using ::testing::HasSubstr;

constexpr uint64_t kBase = 0x7f0000000000ull;
constexpr uint64_t kMiB = 1 << 20;

tb::P Entry(const std::string& action, uint64_t addr, uint64_t size, int64_t time,
            const std::string& compile_context, tb::P frames,
            std::vector<std::pair<std::string, tb::P>> extra = {}) {
  std::vector<std::pair<std::string, tb::P>> pairs = {
      {"action", tb::Str(action)},    {"addr", tb::UInt(addr)},
      {"size", tb::UInt(size)},       {"stream", tb::Int(0)},
      {"time_us", tb::Int(time)},     {"compile_context", tb::Str(compile_context)},
      {"user_metadata", tb::Str("")}, {"frames", std::move(frames)}};
  for (auto& e : extra) pairs.push_back(std::move(e));
  return tb::Dict(std::move(pairs));
}

tb::P Block(uint64_t addr, uint64_t size, const std::string& state, uint64_t requested) {
  return tb::Dict({{"address", tb::UInt(addr)},
                   {"size", tb::UInt(size)},
                   {"requested_size", tb::UInt(requested)},
                   {"state", tb::Str(state)},
                   {"frames", tb::List({})}});
}

tb::P Range(const char* stage, const char* name, int64_t time) {
  return tb::Dict({{"stage", tb::Str(stage)},
                   {"name", tb::Str(name)},
                   {"device", tb::Int(0)},
                   {"time_us", tb::Int(time)}});
}

// Events (index: action, allocation, bytes, time, compile_context; "0/0" is short for
// "Torch-Compiled Region: 0/0"):
//   0 segment_alloc                20 MiB  1000  N/A
//   1 alloc A (weights)             1 MiB  1010  N/A
//   2 alloc B (FX addmm)            2 MiB  1100  0/0
//   3 alloc C (FX relu)             4 MiB  1200  0/0   <- peak: A+B+C = 7 MiB
//   4 annotate B "saved for backward"      1210  0/0
//   5 free_requested C                     1300  0/0
//   6 free_completed C                     1300  0/0
//   7 alloc D                     512 KiB  1400  1/0
//   8 free_requested B                     1500  1/0
//   9 free_completed B                     1500  1/0
//  10 alloc E                       1 MiB  1800  1/0
// Ranges: forward [1050, 1350] holding inner [1150, 1250]; an END of "orphan" at 1600 (taken from
// the trace's start, 1000); a START of "tail" at 1700 never ended (taken to 1800).
std::string Snapshot() {
  const tb::P user = tb::List({tb::Frame("/proj/train.py", 12, "step")});
  const std::string generated = "/tmp/torchinductor_u/ab/cabc123.py";
  const tb::P addmm = tb::List(
      {tb::Dict({{"filename", tb::Str(generated)},
                 {"line", tb::Int(40)},
                 {"name", tb::Str("call")},
                 {"fx_node_op", tb::Str("call_function")},
                 {"fx_node_name", tb::Str("addmm")},
                 {"fx_node_target", tb::Str("aten.addmm.default")},
                 {"fx_original_trace",
                  tb::Str("  File \"/proj/train.py\", line 30, in step\n    out = model(x)\n"
                          "  File \"/proj/model.py\", line 20, in forward\n"
                          "    a = self.net1(x)\n")}}),
       tb::Frame("/proj/train.py", 12, "step")});
  // A node without a stack trace: the generated line is all there is.
  const tb::P relu = tb::List({tb::Dict({{"filename", tb::Str(generated)},
                                         {"line", tb::Int(41)},
                                         {"name", tb::Str("call")},
                                         {"fx_node_op", tb::Str("call_function")},
                                         {"fx_node_name", tb::Str("relu")},
                                         {"fx_node_target", tb::Str("aten.relu.default")}})});
  // A damaged FX field (not a str): left out and noted, the frame kept.
  const tb::P damaged = tb::List({tb::Dict({{"filename", tb::Str(generated)},
                                            {"line", tb::Int(50)},
                                            {"name", tb::Str("call")},
                                            {"fx_node_name", tb::Int(3)}})});
  const tb::P none = tb::List({});
  const tb::P trace = tb::List({
      Entry("segment_alloc", kBase, 20 * kMiB, 1000, "N/A", user),
      Entry("alloc", kBase, kMiB, 1010, "N/A", user),
      Entry("alloc", kBase + kMiB, 2 * kMiB, 1100, "Torch-Compiled Region: 0/0", addmm),
      Entry("alloc", kBase + 3 * kMiB, 4 * kMiB, 1200, "Torch-Compiled Region: 0/0", relu),
      tb::Dict({{"action", tb::Str("annotate")},
                {"addr", tb::UInt(kBase + kMiB)},
                {"size", tb::Int(0)},
                {"stream", tb::Int(0)},
                {"time_us", tb::Int(1210)},
                {"compile_context", tb::Str("Torch-Compiled Region: 0/0")},
                {"user_metadata", tb::Str("saved for backward")},
                {"frames", none}}),
      Entry("free_requested", kBase + 3 * kMiB, 4 * kMiB, 1300, "Torch-Compiled Region: 0/0", relu),
      Entry("free_completed", kBase + 3 * kMiB, 4 * kMiB, 1300, "Torch-Compiled Region: 0/0", relu),
      Entry("alloc", kBase + 3 * kMiB, kMiB / 2, 1400, "Torch-Compiled Region: 1/0", user),
      Entry("free_requested", kBase + kMiB, 2 * kMiB, 1500, "Torch-Compiled Region: 1/0", addmm),
      Entry("free_completed", kBase + kMiB, 2 * kMiB, 1500, "Torch-Compiled Region: 1/0", addmm),
      Entry("alloc", kBase + 4 * kMiB, kMiB, 1800, "Torch-Compiled Region: 1/0", damaged),
  });
  const uint64_t live = kMiB + kMiB / 2 + kMiB;
  const tb::P segment = tb::Dict({
      {"device", tb::Int(0)},
      {"address", tb::UInt(kBase)},
      {"total_size", tb::UInt(20 * kMiB)},
      {"allocated_size", tb::UInt(live)},
      {"active_size", tb::UInt(live)},
      {"requested_size", tb::UInt(live)},
      {"stream", tb::Int(0)},
      {"segment_type", tb::Str("large")},
      {"segment_pool_id", tb::Tuple({tb::Int(0), tb::Int(0)})},
      {"is_expandable", tb::Bool(false)},
      {"frames", user},
      {"blocks", tb::List({Block(kBase, kMiB, "active_allocated", kMiB),
                           Block(kBase + kMiB, 2 * kMiB, "inactive", 0),
                           Block(kBase + 3 * kMiB, kMiB / 2, "active_allocated", kMiB / 2),
                           Block(kBase + 3 * kMiB + kMiB / 2, kMiB / 2, "inactive", 0),
                           Block(kBase + 4 * kMiB, kMiB, "active_allocated", kMiB),
                           Block(kBase + 5 * kMiB, 15 * kMiB, "inactive", 0)})},
  });
  const tb::P annotations = tb::List({
      Range("START", "forward", 1050), Range("START", "inner", 1150), Range("END", "inner", 1250),
      Range("END", "forward", 1350), Range("END", "orphan", 1600), Range("START", "tail", 1700),
      tb::Dict({{"stage", tb::Str("START")}, {"device", tb::Int(0)}}),  // no name, no time
  });
  return tb::PickleWriter(4).Dump(tb::Dict({{"segments", tb::List({segment})},
                                            {"device_traces", tb::List({trace})},
                                            {"external_annotations", annotations}}));
}

class RegionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string bytes = Snapshot();
    const auto file = MappedFile::FromBytes(
        "regions.pickle", std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    auto t = snapshot::LoadSnapshot(*file);
    ASSERT_TRUE(t.ok()) << t.status().message();
    trace_ = std::make_unique<model::Trace>(std::move(*t));
    analysis_ = Analyze(model::Uninterpreted(*trace_), root_).value();
  }
  // The rows of one kind, by name.
  std::map<std::string, Region> Kind(RegionKind kind) const {
    std::map<std::string, Region> out;
    for (const Region& r : analysis_->regions.regions) {
      if (r.kind == kind) out.emplace(r.name, r);
    }
    return out;
  }
  ProjectRoot root_{"/proj"};
  std::unique_ptr<model::Trace> trace_;
  std::unique_ptr<const Analysis> analysis_;
};

TEST_F(RegionsTest, ThePeakIsTheOneWorkedByHand) {
  ASSERT_EQ(analysis_->summary.devices.size(), 1u);
  const DeviceSummary& d = analysis_->summary.devices[0];
  EXPECT_EQ(d.peak_allocated, int64_t{7 * kMiB});
  EXPECT_EQ(d.peak_allocated_event, 3);
  EXPECT_EQ(d.live_at_peak_bytes, 7 * kMiB);
}

TEST_F(RegionsTest, ByCompileContext) {
  const auto rows = Kind(RegionKind::kCompileContext);
  ASSERT_EQ(rows.size(), 3u);
  const Region& na = rows.at("N/A");
  EXPECT_EQ(na.allocations, 1u);
  EXPECT_EQ(na.allocated_bytes, kMiB);
  EXPECT_EQ(na.live_at_peak_bytes, kMiB);
  EXPECT_EQ(na.peak_bytes, int64_t{kMiB});
  EXPECT_EQ(na.peak_event, 1);
  EXPECT_EQ(na.first_event, 0);  // the segment_alloc carries it too
  EXPECT_EQ(na.last_event, 1);
  const Region& g0 = rows.at("Torch-Compiled Region: 0/0");
  EXPECT_EQ(g0.allocations, 2u);
  EXPECT_EQ(g0.allocated_bytes, 6 * kMiB);
  EXPECT_EQ(g0.live_at_peak_bytes, 6 * kMiB);
  EXPECT_EQ(g0.live_at_peak_count, 2u);
  EXPECT_EQ(g0.peak_bytes, int64_t{6 * kMiB});
  EXPECT_EQ(g0.peak_event, 3);
  EXPECT_EQ(g0.first_event, 2);
  EXPECT_EQ(g0.last_event, 6);
  EXPECT_EQ(g0.start_time_us, 1100);
  EXPECT_EQ(g0.end_time_us, 1300);
  const Region& g1 = rows.at("Torch-Compiled Region: 1/0");
  EXPECT_EQ(g1.allocated_bytes, kMiB + kMiB / 2);
  EXPECT_EQ(g1.live_at_peak_bytes, 0u);
  // B (0/0) is freed at 8 and E allocated at 10: D and E are live together only from 10 on.
  EXPECT_EQ(g1.peak_bytes, int64_t{kMiB + kMiB / 2});
  EXPECT_EQ(g1.peak_event, 10);
  // The largest at the peak is listed first.
  EXPECT_EQ(analysis_->regions.regions[0].name, "Torch-Compiled Region: 0/0");
}

TEST_F(RegionsTest, ByAnnotationRanges) {
  const auto rows = Kind(RegionKind::kRange);
  ASSERT_EQ(rows.size(), 4u);
  // A (1010) and D (1400) fall only in the orphan END's range [1000, 1600].
  EXPECT_EQ(rows.at("orphan").allocated_bytes, kMiB + kMiB / 2);
  EXPECT_EQ(rows.at("orphan").live_at_peak_bytes, kMiB);
  EXPECT_EQ(rows.at("orphan").peak_bytes, int64_t{kMiB + kMiB / 2});
  EXPECT_EQ(rows.at("orphan").peak_event, 7);
  // B (1100) is in forward; C (1200) in inner, nested in forward: the innermost range takes it.
  EXPECT_EQ(rows.at("forward").live_at_peak_bytes, 2 * kMiB);
  EXPECT_EQ(rows.at("inner").live_at_peak_bytes, 4 * kMiB);
  EXPECT_EQ(rows.at("inner").allocated_bytes, 4 * kMiB);
  EXPECT_EQ(rows.at("tail").allocated_bytes, kMiB);
  EXPECT_EQ(rows.at("tail").live_at_peak_bytes, 0u);
  EXPECT_EQ(rows.at("forward").start_time_us, 1050);
  EXPECT_EQ(rows.at("forward").end_time_us, 1350);
  EXPECT_EQ(rows.at("forward").first_event, 2);  // 1100 .. 1300: events 2 to 6
  EXPECT_EQ(rows.at("forward").last_event, 6);

  const auto& ranges = analysis_->regions.ranges;
  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[0].name, "orphan");
  EXPECT_TRUE(ranges[0].unmatched_start);
  EXPECT_EQ(ranges[0].start_time_us, 1000);
  EXPECT_EQ(ranges[1].name, "forward");
  EXPECT_EQ(ranges[1].depth, 0);
  EXPECT_EQ(ranges[2].name, "inner");
  EXPECT_EQ(ranges[2].depth, 1);
  EXPECT_EQ(ranges[3].name, "tail");
  EXPECT_TRUE(ranges[3].unmatched_end);
  EXPECT_EQ(ranges[3].end_time_us, 1800);
  EXPECT_EQ(analysis_->regions.regions[ranges[2].region].name, "inner");
  EXPECT_THAT(analysis_->regions.notes,
              ::testing::Contains(HasSubstr("1 START(s) without an END")));
  EXPECT_THAT(analysis_->regions.notes, ::testing::Contains(HasSubstr("1 external annotation(s) "
                                                                      "lack a name")));
}

TEST_F(RegionsTest, ByTensorAnnotation) {
  const auto rows = Kind(RegionKind::kTensorAnnotation);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.at("saved for backward").live_at_peak_bytes, 2 * kMiB);
  EXPECT_EQ(rows.at("saved for backward").first_event, 4);
  EXPECT_EQ(rows.at(kRegionNone).live_at_peak_bytes, 5 * kMiB);
  EXPECT_TRUE(rows.at(kRegionNone).remainder);
}

TEST_F(RegionsTest, EveryKindAddsUpToTheLiveBytesAtThePeak) {
  for (int k = 0; k < kRegionKindCount; ++k) {
    uint64_t live = 0, allocated = 0;
    for (const Region& r : analysis_->regions.regions) {
      if (static_cast<int>(r.kind) != k) continue;
      live += r.live_at_peak_bytes;
      allocated += r.allocated_bytes;
    }
    if (static_cast<RegionKind>(k) == RegionKind::kUserMetadata) {
      EXPECT_EQ(live, 0u);  // every entry's user_metadata is "": no such regions
      continue;
    }
    EXPECT_EQ(live, 7 * kMiB) << RegionKindName(static_cast<RegionKind>(k));
    EXPECT_EQ(allocated, 9 * kMiB - kMiB / 2) << RegionKindName(static_cast<RegionKind>(k));
  }
}

TEST_F(RegionsTest, FxFramesNameTheModelLineAndTheNode) {
  ASSERT_EQ(trace_->fx_frames.size(), 2u);  // addmm and relu; the damaged one kept none
  const auto& sites = analysis_->summary.devices[0].live_at_peak_by_site;
  std::vector<std::string> labels;
  for (const SiteGroup& g : sites) labels.push_back(g.label);
  // B: the generated line maps back to model.py:20 (the innermost entry of the node's trace).
  EXPECT_THAT(labels, ::testing::Contains("model.py:20 forward (FX addmm)"));
  // C: no stack trace on the node: the generated line, with the node's name.
  EXPECT_THAT(labels, ::testing::Contains("torchinductor_u/ab/cabc123.py:41 call (FX relu)"));
  EXPECT_THAT(trace_->facts.notes, ::testing::Contains(HasSubstr("1 FX frame field(s)")));
}

// A crafted file may leave many ranges open and end others it never started: pairing stays
// linear (a scan of the open ranges per END would take hours here), and every range is kept.
TEST(Regions, ManyUnmatchedRangesStayCheap) {
  constexpr int kRanges = 100000;
  std::vector<tb::P> marks;
  marks.reserve(2 * kRanges);
  for (int i = 0; i < kRanges; ++i) marks.push_back(Range("START", "open", 1000 + i));
  for (int i = 0; i < kRanges; ++i) marks.push_back(Range("END", "never started", 200000 + i));
  const tb::P user = tb::List({tb::Frame("/proj/train.py", 12, "step")});
  const tb::P trace = tb::List({
      Entry("segment_alloc", kBase, 2 * kMiB, 500, "N/A", user),
      Entry("alloc", kBase, kMiB, 150000, "N/A", user),
  });
  const tb::P segment = tb::Dict({
      {"device", tb::Int(0)},
      {"address", tb::UInt(kBase)},
      {"total_size", tb::UInt(2 * kMiB)},
      {"allocated_size", tb::UInt(kMiB)},
      {"active_size", tb::UInt(kMiB)},
      {"requested_size", tb::UInt(kMiB)},
      {"stream", tb::Int(0)},
      {"segment_type", tb::Str("large")},
      {"blocks", tb::List({Block(kBase, kMiB, "active_allocated", kMiB),
                           Block(kBase + kMiB, kMiB, "inactive", 0)})},
  });
  const std::string bytes =
      tb::PickleWriter(4).Dump(tb::Dict({{"segments", tb::List({segment})},
                                         {"device_traces", tb::List({trace})},
                                         {"external_annotations", tb::List(std::move(marks))}}));
  const auto file = MappedFile::FromBytes(
      "many.pickle", std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  auto t = snapshot::LoadSnapshot(*file);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const ProjectRoot root("/proj");
  const auto a = Analyze(model::Uninterpreted(*t), root).value();
  EXPECT_EQ(a->regions.ranges.size(), 2u * kRanges);
  EXPECT_THAT(a->regions.notes,
              ::testing::Contains(HasSubstr("100000 START(s) without an END (taken to run to the "
                                            "end of the trace), 100000 END(s) without a START")));
  // The allocation at 150000 is inside every open range: the innermost is the last opened.
  for (const Region& r : a->regions.regions) {
    if (r.kind == RegionKind::kRange && r.name == "open") {
      EXPECT_EQ(r.live_at_peak_bytes, kMiB);
      EXPECT_EQ(r.ranges, uint32_t{kRanges});
    }
  }
}

TEST(LastTracebackEntry, InnermostEntryAndDamage) {
  const auto e = model::LastTracebackEntry(
      "  File \"/a/x.py\", line 3, in f\n    g()\n  File \"C:\\m\\y.py\", line 44, in g\n    h\n");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->file, "C:\\m\\y.py");
  EXPECT_EQ(e->line, 44);
  EXPECT_EQ(e->function, "g");
  // A damaged last entry: the one before it.
  const auto d = model::LastTracebackEntry("File \"/a/x.py\", line 3, in f\nFile \"/b\", line x");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->file, "/a/x.py");
  EXPECT_FALSE(model::LastTracebackEntry("no traceback here").has_value());
  EXPECT_FALSE(model::LastTracebackEntry("File \"/a\", line 99999999999, in f").has_value());
}

}  // namespace
}  // namespace vramscope::analysis
