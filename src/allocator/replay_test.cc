#include "allocator/replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/mapped_file.h"
#include "sources/snapshot/snapshot_source.h"
namespace vramscope::allocator {
namespace {
TEST(Explore, Fixtures) {
  for (const char* name : {"snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
                           "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle",
                           "snapshot_torch2.6_cs336_2.7b_forward.pickle",
                           "snapshot_torch2.11_windows_cs336_compilectx.pickle"}) {
    auto file = MappedFile::Open(std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/" + name);
    ASSERT_TRUE(file.ok());
    auto trace = snapshot::LoadSnapshot(**file);
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    auto settings = SettingsFromSnapshot(trace->allocator_settings);
    ASSERT_TRUE(settings.ok());
    ReplayOptions o;
    o.settings = *settings;
    auto r = Replay(*trace, trace->devices.back(), o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto& c = r->comparison;
    fmt::print(
        "{}\n allocs {}/{} segallocs rec {} model {} matched {} segfrees rec {} matched {} bursts "
        "{} reserved eq {}/{} maxdiff {} final segs {}/{} blocks {}/{} div {} resync {}\n",
        name, c.allocs_at_recorded_address, c.allocs, c.recorded_segment_allocs,
        c.model_segment_allocs, c.segment_allocs_matched, c.recorded_segment_frees,
        c.segment_frees_matched, c.bursts.size(), c.reserved_equal_points, c.compared_points,
        c.max_reserved_difference, c.final_segments_matched, c.final_segments_recorded,
        c.final_blocks_matched, c.final_blocks_recorded, c.divergence_count, c.resyncs);
    for (auto& d : c.divergences) fmt::print("   {}\n", d);
    for (auto& n : r->notes) fmt::print("  note: {}\n", n);
  }
}
}  // namespace
}  // namespace vramscope::allocator
