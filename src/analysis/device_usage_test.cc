#include "analysis/device_usage.h"

#include <gtest/gtest.h>

namespace vramscope::analysis {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// A fake NVML's samples, as the sidecar carries them: an H100 with this process and two others.
model::DeviceUsage FakeUsage() {
  model::DeviceUsage u;
  u.available = true;
  u.device_name = "NVIDIA H100 80GB HBM3";
  model::DeviceUsageSample start;
  start.at = "start";
  start.phase = "setup";
  start.device_total = 80 * kGiB;
  start.device_used = 6 * kGiB;
  start.process_used = 600 * kMiB;
  start.torch_reserved = 0;
  model::DeviceUsageSample peak = start;
  peak.at = "phase_end";
  peak.step = 2;
  peak.phase = "backward";
  peak.torch_reserved = 40 * kGiB;
  peak.torch_allocated = 38 * kGiB;
  // This process: 40 GiB reserved + 686 MiB the model expects + 100 MiB it does not explain.
  peak.process_used = 40 * kGiB + 686 * kMiB + 100 * kMiB;
  peak.other_processes = std::vector<model::DeviceUsageProcess>{{101, 3 * kGiB}, {102, 2 * kGiB}};
  // + 5 GiB of others + 300 MiB held by no listed process.
  peak.device_used = *peak.process_used + 5 * kGiB + 300 * kMiB;
  u.samples = {start, peak};
  return u;
}

TEST(DecomposeDeviceUsage, PartsAddUpToNvidiaSmiAtTheHighestSample) {
  const auto d = DecomposeDeviceUsage(FakeUsage());
  ASSERT_TRUE(d.available);
  EXPECT_EQ(d.samples, 2u);
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.phase, "backward");
  EXPECT_EQ(d.gpu, "NVIDIA H100 80GB HBM3");
  int64_t sum = 0;
  for (const DeviceUsagePart& p : d.parts) sum += p.bytes;
  EXPECT_EQ(sum, static_cast<int64_t>(d.device_used));
  // reserved, CUDA context, libraries' kernels, this process's rest, 2 others, nobody's.
  ASSERT_EQ(d.parts.size(), 6u);
  EXPECT_EQ(d.parts[0].bytes, static_cast<int64_t>(40 * kGiB));
  EXPECT_EQ(d.parts[1].what, "CUDA context");
  EXPECT_EQ(d.parts[1].bytes, static_cast<int64_t>(610 * kMiB));
  EXPECT_EQ(d.parts[2].bytes, static_cast<int64_t>(76 * kMiB));
  ASSERT_TRUE(d.unexplained.has_value());
  EXPECT_EQ(*d.unexplained, static_cast<int64_t>(100 * kMiB));
  EXPECT_EQ(d.parts[4].what, "2 other processes");
  EXPECT_EQ(d.parts[4].bytes, static_cast<int64_t>(5 * kGiB));
  EXPECT_EQ(d.parts[5].bytes, static_cast<int64_t>(300 * kMiB));
}

TEST(DecomposeDeviceUsage, ContainerWithoutOwnFigureLeavesOneRest) {
  model::DeviceUsage u = FakeUsage();
  for (auto& s : u.samples) s.process_used.reset();
  u.pid_note = "this pid is not in NVML's list (a container)";
  const auto d = DecomposeDeviceUsage(u);
  ASSERT_TRUE(d.available);
  EXPECT_FALSE(d.unexplained.has_value());
  int64_t sum = 0;
  for (const DeviceUsagePart& p : d.parts) sum += p.bytes;
  EXPECT_EQ(sum, static_cast<int64_t>(d.device_used));
  EXPECT_NE(d.parts.back().what.find("a container"), std::string::npos);
}

TEST(DecomposeDeviceUsage, SaysWhyWhenThereIsNothingToDecompose) {
  EXPECT_FALSE(DecomposeDeviceUsage(std::nullopt).recorded);
  model::DeviceUsage u;
  u.why_not = "nvidia-ml-py is not installed";
  const auto d = DecomposeDeviceUsage(u);
  EXPECT_TRUE(d.recorded);
  EXPECT_FALSE(d.available);
  EXPECT_EQ(d.why_not, "nvidia-ml-py is not installed");
  // Override of the model's figures, as --cuda-context gives them.
  device::OutsideSetup setup;
  setup.context_bytes = 1 * kGiB;
  const auto e = DecomposeDeviceUsage(FakeUsage(), setup);
  EXPECT_EQ(e.parts[1].bytes, static_cast<int64_t>(kGiB));
  EXPECT_EQ(*e.unexplained,
            static_cast<int64_t>(100 * kMiB + 610 * kMiB) - static_cast<int64_t>(kGiB));
}

}  // namespace
}  // namespace vramscope::analysis
