// The device catalog and the model of memory outside the allocator, against what was measured:
// the H100's and the H200's own device overheads (goldens/<gpu>/device_overheads.json, recorded by
// scripts/measure_device_overheads.py in a GPU session) and PyTorch's total_memory of the H200.
#include "device/gpu_catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "device/non_pytorch_memory.h"

namespace vramscope::device {
namespace {

using ::testing::HasSubstr;
constexpr uint64_t kMiB = uint64_t{1} << 20;

nlohmann::json Overheads(const std::string& gpu) {
  std::ifstream in(std::string(VRAMSCOPE_SOURCE_DIR) + "/goldens/" + gpu +
                   "/device_overheads.json");
  EXPECT_TRUE(in) << gpu << ": no device_overheads.json (committed by a GPU session)";
  return in ? nlohmann::json::parse(in) : nlohmann::json::object();
}

TEST(GpuCatalog, KeysAreUniqueAndFoundHoweverSpelled) {
  std::set<std::string> keys;
  for (const GpuSpec& g : KnownGpus()) {
    EXPECT_TRUE(keys.insert(g.key).second) << g.key;
    EXPECT_GT(g.total_memory, uint64_t{8} << 30) << g.key;
    EXPECT_FALSE(g.memory_source.empty()) << g.key;
  }
  EXPECT_EQ(FindGpu("H100_80GB")->key, "h100-80gb");
  EXPECT_EQ(FindGpuByName("NVIDIA H100 80GB HBM3")->key, "h100-80gb");
  EXPECT_EQ(FindGpuByName("nvidia h200")->key, "h200");
  EXPECT_EQ(FindGpuByName(""), nullptr);
  const Result<GpuSpec> unknown = FindGpu("h300");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kUsage);
  EXPECT_THAT(unknown.status().message(), HasSubstr("--gpu h300: not a GPU vramscope knows"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("h100-80gb"));
}

TEST(GpuCatalog, AnOomMessagesRoundedCapacityPointsToItsGpus) {
  // "79.11 GiB total capacity": the H100 80GB (79.15 GiB is the A100's, outside a 0.005 range).
  const uint64_t lo = 7910 * (uint64_t{1} << 30) / 100, hi = 7912 * (uint64_t{1} << 30) / 100;
  const std::vector<GpuSpec> gpus = GpusWithCapacity(lo, hi);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus.front().key, "h100-80gb");
}

TEST(GpuCatalog, TheH200sMemoryIsWhatPyTorchMeasured) {
  const nlohmann::json h200 = Overheads("h200");
  ASSERT_TRUE(h200.contains("device"));
  EXPECT_EQ(FindGpu("h200")->total_memory, h200["device"]["total_memory"].get<uint64_t>());
}

// The model's figures for sm_90 are the ones measured on both Hopper parts.
TEST(OutsideAllocator, HopperFiguresAreTheMeasuredOnes) {
  for (const std::string gpu : {"h100", "h200"}) {
    const nlohmann::json figures = Overheads(gpu)["figures"];
    const OutsideMemory m =
        EstimateOutsideAllocator(SetupFor(*FindGpu(gpu == "h100" ? "h100-80gb" : "h200")));
    EXPECT_EQ(m.Of("CUDA context"), figures["context_lazy"].get<uint64_t>()) << gpu;
    EXPECT_EQ(m.Of("libraries' kernels"),
              figures["cublas_fp32"].get<uint64_t>() + figures["cudnn"].get<uint64_t>())
        << gpu;
    OutsideSetup eager = SetupFor(*FindGpu(gpu == "h100" ? "h100-80gb" : "h200"));
    eager.lazy_loading = false;
    EXPECT_EQ(EstimateOutsideAllocator(eager).Of("CUDA context"),
              figures["context_eager"].get<uint64_t>())
        << gpu;
  }
}

TEST(OutsideAllocator, OverridesAreGivenFiguresAndWhatIsLeftIsOneRule) {
  OutsideSetup s = SetupFor(*FindGpu("a100-80gb"));
  OutsideOverrides overrides;
  overrides.cuda_context_mib = 500;
  overrides.nccl_memory_mib = 1024;
  overrides.ApplyTo(s);
  const OutsideMemory m = EstimateOutsideAllocator(s);
  EXPECT_EQ(m.Of("CUDA context"), 500 * kMiB);
  EXPECT_EQ(m.Of("NCCL"), 1024 * kMiB);
  EXPECT_EQ(m.Total(), 500 * kMiB + 76 * kMiB + 1024 * kMiB);
  for (const OutsideFigure& f : m.figures) {
    if (f.item != "libraries' kernels") EXPECT_EQ(f.evidence, Evidence::kGiven) << f.item;
  }
  EXPECT_EQ(LeftToAllocator(80 * kMiB, 30 * kMiB), 50 * kMiB);
  EXPECT_EQ(LeftToAllocator(30 * kMiB, 30 * kMiB), 0u);
  EXPECT_EQ(LeftToAllocator(10 * kMiB, 30 * kMiB), 0u);
}

}  // namespace
}  // namespace vramscope::device
