// XLA's reservation from a native trace: on the real H100 capture of a JAX program
// (goldens/h100/run/jax_native.vstrace: `vramscope run --native` on a jitted loop, XLA's default
// preallocation) the pool is the one 59.38 GiB mapping made by xla_cuda_plugin.so, and cuBLAS's
// and cuDNN's workspaces are outside it. No GPU run has yet recorded a device memory profile
// beside a native trace (scripts/capture_run_goldens.py's jax_native case keeps one from the next
// GPU session on), so the join is checked with a real CPU profile standing in for it
// (tests/data/pprof), renamed into a capture folder beside the native trace: the arithmetic, not
// the pairing, is what these tests hold. The same split from the pool size XLA's allocator
// reports (a GPU sidecar's memory_stats) is checked with a sidecar written as the bootstrap
// writes one on a GPU.
#include "pipeline/xla_reservation.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "pipeline/load.h"

namespace vramscope::pipeline {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = VRAMSCOPE_SOURCE_DIR;
const fs::path kNative = kRepo / "goldens/h100/run/jax_native.vstrace";
const fs::path kProfile = kRepo / "tests/data/pprof/mlp_adam_after_step_roles.prof";

constexpr uint64_t kMiB = 1024 * 1024;

Loaded LoadFile(const fs::path& path) {
  LoadRequest r;
  r.input = ClassifyInput(path.string());
  Result<Loaded> loaded = Load(r);
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  return loaded.ok() ? std::move(*loaded) : Loaded{};
}

TEST(XlaReservation, TheH100PoolIsXlasMappingAndTheWorkspacesAreOutside) {
  const Loaded native = LoadFile(kNative);
  const std::vector<XlaReservation> r = XlaReservations(native.trace);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].device, 0);
  // The report of the native trace: 59.45 GiB at the peak, of which cuBLAS 64.13 MiB and cuDNN
  // 49.51 KiB; XLA's mapping is the rest, about 75% of the H100's 79.18 GiB.
  EXPECT_EQ(r[0].pool_bytes + r[0].other_bytes, 63'831'198'216u);
  EXPECT_EQ(r[0].pool_bytes, 60'810 * kMiB);  // 59.38 GiB
  ASSERT_EQ(r[0].other_owners.size(), 2u);
  EXPECT_TRUE(r[0].other_owners[0].starts_with("libcublas.so.13 64.13 MiB"));
  EXPECT_TRUE(r[0].other_owners[1].starts_with("libcudnn_graph.so.9 49.51 KiB"));
}

TEST(XlaReservation, LibrariesOfXlaAndJax) {
  EXPECT_TRUE(IsXlaLibrary("/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"));
  EXPECT_TRUE(IsXlaLibrary("/site-packages/jaxlib/_jax.so"));
  EXPECT_FALSE(IsXlaLibrary("/usr/lib/libcublas.so.13"));
  EXPECT_FALSE(IsXlaLibrary("libtorch_cuda.so"));
}

TEST(XlaReservation, AFolderWithAProfileAndANativeTraceSplitsTheReservation) {
  const fs::path dir = fs::temp_directory_path() / "vramscope_xla_reservation_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kNative, dir / "pid7.vstrace");
  fs::copy_file(kProfile, dir / "pid7.jax.prof");
  const Loaded loaded = LoadFile(dir);
  const model::Trace& t = loaded.trace;
  EXPECT_TRUE(t.facts.reserved_known);
  ASSERT_EQ(t.start_levels.size(), 1u);
  const XlaReservation pool = XlaReservations(LoadFile(kNative).trace)[0];
  EXPECT_EQ(t.start_levels[0].reserved, static_cast<int64_t>(pool.pool_bytes));
  bool said = false;
  for (const std::string& n : loaded.interpretation.notes) {
    said |=
        n.starts_with("device 0: reserved is XLA's pool") &&
        n.find(
            "= the live buffers here (18.27 MiB) + XLA's free pool (59.37 GiB); outside "
            "it the driver held 64.17 MiB more (libcublas.so.13 64.13 MiB") != std::string::npos;
  }
  EXPECT_TRUE(said) << ::testing::PrintToString(loaded.interpretation.notes);
  fs::remove_all(dir);
}

// Without a native trace, the pool XLA's allocator reported at the end (the sidecar the
// bootstrap writes on a GPU: PJRT's memory_stats names, here 48 GiB preallocated).
TEST(XlaReservation, ThePoolXlasAllocatorReportedSplitsTheReservation) {
  const fs::path dir = fs::temp_directory_path() / "vramscope_xla_pool_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kProfile, dir / "pid7.jax.prof");
  std::ofstream(dir / "pid7.sidecar.json") << R"({"format": "vramscope-capture", "version": 1,
    "snapshot": null, "profile": "pid7.jax.prof",
    "process": {"pid": 7, "hostname": "h100-node", "torch": null, "jax": "0.10.2",
                "backend": "gpu", "device_name": "NVIDIA H100 80GB HBM3", "framework": "jax",
                "allocator": {"settings": {},
                              "memory_stats": {"bytes_in_use": 19155584,
                                               "peak_bytes_in_use": 38177760,
                                               "pool_bytes": 51539607552,
                                               "bytes_limit": 63763906560}}},
    "recording": {"profile": "jax", "started_us": 1, "cpu_test_mode": false, "on_oom": false},
    "end": {"reason": "exit", "steps_completed": 0, "time_us": 2, "exception": null},
    "phases": [], "tensors": [], "oom": null})";
  const Loaded loaded = LoadFile(dir);
  EXPECT_TRUE(loaded.trace.facts.reserved_known);
  EXPECT_EQ(loaded.trace.start_levels[0].reserved, int64_t{48} << 30);
  bool said = false;
  for (const std::string& n : loaded.interpretation.notes) {
    said |= n ==
            "device 0: reserved is XLA's pool, as XLA's allocator gave it at the end "
            "(memory_stats pool_bytes) (48.00 GiB) = the live buffers here (18.27 MiB) + "
            "XLA's free pool (47.98 GiB)";
  }
  EXPECT_TRUE(said) << ::testing::PrintToString(loaded.interpretation.notes);
  fs::remove_all(dir);
}

TEST(XlaReservation, APoolSmallerThanTheLiveBuffersIsNotTheSameRun) {
  Loaded profile = LoadFile(kProfile);
  XlaReservation small;
  small.device = 0;
  small.pool_bytes = kMiB;  // the profile holds 18.27 MiB
  std::vector<std::string> notes;
  ApplyXlaReservations({small}, "n.vstrace", profile.trace, notes);
  EXPECT_FALSE(profile.trace.facts.reserved_known);
  EXPECT_EQ(profile.trace.start_levels[0].reserved, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(notes[0].find("not the same run?") != std::string::npos);
}

}  // namespace
}  // namespace vramscope::pipeline
