// The verdict on real messages of tests/data/oom_messages, one for each class of issue 38 that
// `explain` used to get wrong, with the holder and the bytes each reading rests on. The agreement
// on the whole corpus is tests/e2e/test_oom_agreement.py's.
#include "analysis/oom_verdict.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "analysis/oom_message_explain.h"
#include "sources/oom_message/oom_message_text.h"

namespace vramscope::analysis {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

OomMessageExplanation ExplainCase(const std::string& file) {
  const std::filesystem::path path =
      std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/oom_messages" / file;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const auto found = sources::FindOomMessages(s.str());
  EXPECT_FALSE(found.empty()) << file;
  return found.empty() ? OomMessageExplanation{} : ExplainOomMessage(found.back(), {});
}

const OomHolding* Holding(const OomVerdict& v, OomHolder holder) {
  for (const OomHolding& h : v.holdings) {
    if (h.holder == holder) return &h;
  }
  return nullptr;
}

// Class 1: free below the request, other processes hold 38.88 GiB of a 39.38 GiB card.
TEST(OomVerdict, OtherProcessesHoldingTheCardAreNamed) {
  const auto e = ExplainCase("ai-toolkit-gpu0-services-3774011-277.txt");
  EXPECT_EQ(e.verdict.holder, OomHolder::kOtherProcesses);
  EXPECT_FALSE(e.verdict.close);
  ASSERT_FALSE(e.verdict.holdings.empty());
  EXPECT_EQ(e.verdict.holdings[0].holder, OomHolder::kOtherProcesses);
  EXPECT_GT(e.verdict.holdings[0].bytes.lo, 38 * kGiB);
  EXPECT_NE(e.verdict.sentence.find("Other processes hold 38.88 GiB"), std::string::npos)
      << e.verdict.sentence;
  // Ranked: each holding's midpoint at least the next one's.
  for (size_t i = 1; i < e.verdict.holdings.size(); ++i) {
    EXPECT_GE(e.verdict.holdings[i - 1].bytes.Mid(), e.verdict.holdings[i].bytes.Mid());
  }
}

// Class 2: "this process has 17179869184.00 GiB memory in use" is NVML's "not available".
TEST(OomVerdict, SentinelIsNeverAFigure) {
  const auto e = ExplainCase("torch2-capacty-s-wrapped-uint64-seamless-341.txt");
  EXPECT_FALSE(e.message.this_process_in_use.has_value());
  EXPECT_EQ(e.message.not_available, std::vector<std::string>{"this_process_in_use"});
  EXPECT_EQ(e.message.text.find("17179869184"), std::string::npos);
  EXPECT_EQ(e.verdict.holder, OomHolder::kTensors);
  for (const OomHolding& h : e.verdict.holdings) EXPECT_LT(h.bytes.hi, 7 * kGiB);
}

// Class 3: 22.50 GiB reserved on an 8 GiB card under Windows: the spill, not a negative
// "outside PyTorch".
TEST(OomVerdict, WindowsSpillPastTheCard) {
  const auto e = ExplainCase("win-sysmem-trt-175-22gib.txt");
  EXPECT_EQ(e.verdict.holder, OomHolder::kWddmSpill);
  for (const OomHolding& h : e.verdict.holdings) EXPECT_GE(h.bytes.lo, 0);
}

// Class 4: Strix Halo, 128 GiB "total", 69 GiB held by the host outside this PyTorch.
TEST(OomVerdict, UnifiedMemoryHostHoldsTheBulk) {
  const auto e = ExplainCase("hip-strix-halo-128gib-total-host-holds-70gib-toolbox-3.txt");
  EXPECT_EQ(e.verdict.holder, OomHolder::kUnifiedMemory);
  const OomHolding* host = Holding(e.verdict, OomHolder::kUnifiedMemory);
  ASSERT_NE(host, nullptr);
  EXPECT_GT(host->bytes.lo, 69 * kGiB);
  EXPECT_LT(host->bytes.hi, 70 * kGiB);
}

// Class 5: a free figure above the total (an underflow) is inconsistent, unless the tensors and
// the request exceed the card by themselves.
TEST(OomVerdict, InconsistentFiguresAndTheRequestAboveTheTotal) {
  EXPECT_EQ(ExplainCase("hip-capacty-free-wraps-igpu-512mib-comfyui-docker-54.txt").verdict.holder,
            OomHolder::kInconsistentFigures);
  EXPECT_EQ(ExplainCase("hip-capacty-free-wrapped-ci-pytorch-105280.txt").verdict.holder,
            OomHolder::kTensors);
  EXPECT_EQ(
      ExplainCase("hip-windows-gfx1201-333gib-request-driver-comfyui-11264.txt").verdict.holder,
      OomHolder::kTensors);
}

// Class 6: a 1.x message of a GPU the catalog does not have: the context is a range over the
// plausible architectures, assumed, and the 4.85 GiB outside PyTorch is beyond all of it.
TEST(OomVerdict, UnnamedGpuGetsAnAssumedRange) {
  const auto e = ExplainCase("torch1-5gib-outside-vscode-monodepth2-236.txt");
  EXPECT_TRUE(e.gpus.empty());
  EXPECT_TRUE(e.expected_outside_range.assumed);
  EXPECT_LT(e.expected_outside_range.bytes.lo, 300 * kMiB);
  EXPECT_GT(e.expected_outside_range.bytes.hi, 700 * kMiB);  // eager loading before 1.13
  EXPECT_EQ(e.verdict.holder, OomHolder::kOtherProcesses);
  const OomHolding* outside = Holding(e.verdict, OomHolder::kOtherProcesses);
  ASSERT_NE(outside, nullptr);
  EXPECT_TRUE(outside->assumed);
}

// Class 7 and the printed cap: "1.05 GiB allowed" with 275.86 GiB free is the cap; most of the
// card free with no cap printed and a small request is a contradiction the verdict says so.
TEST(OomVerdict, CapPrintedAndFreeMemoryThatContradictsTheFailure) {
  EXPECT_EQ(ExplainCase("20-hip-allowed-private-pools-therock-2118.txt").verdict.holder,
            OomHolder::kCap);
  const auto e = ExplainCase("11-torch1-plenty-free-wsl-chatglm.txt");
  EXPECT_EQ(e.verdict.holder, OomHolder::kInconsistentFigures);
  EXPECT_NE(e.verdict.sentence.find("cap the message does not print"), std::string::npos);
  // A request that needs nearly all that is free: the tensors' demand.
  EXPECT_EQ(ExplainCase("torch1-cached-free-above-request-structureflow-35.txt").verdict.holder,
            OomHolder::kTensors);
}

// Messages without figures have a verdict of their own.
TEST(OomVerdict, MessagesWithoutFigures) {
  const auto e = ExplainCase("26-cublas-alloc-failed-qwen3.txt");
  EXPECT_EQ(e.verdict.holder, OomHolder::kNoFigures);
  EXPECT_NE(e.verdict.sentence.find("cuBLAS"), std::string::npos);
  EXPECT_TRUE(e.verdict.holdings.empty());
}

TEST(OomVerdict, EveryHolderHasItsName) {
  ASSERT_EQ(AllOomHolders().size(), 10u);
  EXPECT_STREQ(OomHolderName(OomHolder::kProcessOutsidePyTorch), "process_outside_pytorch");
  EXPECT_STREQ(OomHolderName(OomHolder::kNoFigures), "no_figures");
}

}  // namespace
}  // namespace vramscope::analysis
