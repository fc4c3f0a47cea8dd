// The conclusions `vramscope explain` draws, each checked with its arithmetic written out: on the
// real messages of tests/data/oom_messages whose thread states the cause, and on messages in
// PyTorch's exact wording for the causes no stored thread shows.
#include "analysis/oom_message_explain.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sources/oom_message/oom_message_text.h"

namespace vramscope::analysis {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

model::OomMessage Only(const std::string& text) {
  const auto found = sources::FindOomMessages(text);
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? model::OomMessage{} : found[0];
}

model::OomMessage RealCase(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/oom_messages";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      return sources::FindOomMessages(s.str()).at(0);
    }
  }
  ADD_FAILURE() << "no case " << prefix;
  return {};
}

const GpuShare* Share(const OomMessageExplanation& e, const std::string& what) {
  for (const GpuShare& s : e.shares) {
    if (s.what == what) return &s;
  }
  return nullptr;
}

bool Contains(ByteRange r, int64_t v) { return r.lo <= v && v <= r.hi; }
ByteRange R(const model::PrintedBytes& b) {
  return {static_cast<int64_t>(b.lo), static_cast<int64_t>(b.hi)};
}

// pytorch/TheRock#2118: "1.05 GiB allowed" with 275.86 GiB free; a test left a fraction set.
TEST(ExplainOomMessage, RealCapIsTheCauseWhenTheDeviceHadTheMemory) {
  const auto e = ExplainOomMessage(RealCase("20-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kMemoryFractionCap);
  ASSERT_FALSE(e.findings.empty());
  EXPECT_TRUE(e.findings[0].decisive);
  // reserved = allocated 1017.01 MiB + unallocated 54.99 MiB = 1072.00 MiB; + 2 MiB = 1074 MiB,
  // within the rounding of "1.05 GiB" (1070.08 to 1080.32 MiB): the figures cannot show the
  // excess, but 275.86 GiB free leaves only the cap to refuse 2 MiB.
  const GpuShare* reserved = Share(e, "reserved by PyTorch");
  ASSERT_NE(reserved, nullptr);
  EXPECT_TRUE(Contains(reserved->bytes, 1072 * kMiB));
  // The private pools' 17.00 MiB are cached blocks, not tensors: 1017.01 - 17.00 = 1000.01 MiB.
  const GpuShare* tensors = Share(e, "allocated to tensors");
  ASSERT_NE(tensors, nullptr);
  EXPECT_TRUE(Contains(tensors->bytes, 1000 * kMiB + 10 * 1024));
}

// Comfy-Org/ComfyUI#3278 (cudaMallocAsync): the maintainer blames other software's ~2 GB.
TEST(ExplainOomMessage, RealMemoryOutsidePyTorchUnderCudaMallocAsync) {
  const auto e = ExplainOomMessage(RealCase("27-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kOtherProcesses);
  // outside = 24.00 GiB - 0 free - 21.55 GiB allocated = 2.45 GiB (+-0.01 GiB of rounding);
  // a context and libraries are expected to take 686 MiB (no GPU of 24.00 GiB is known: an
  // H100's measured 610 + 76 MiB within 10%: at most 755 MiB, under the 766 MiB used); beyond
  // that at least 2.44 GiB - 766 MiB = 1.69 GiB >= the 952 MiB request.
  const GpuShare* outside = Share(e, "outside PyTorch (its context, other processes)");
  ASSERT_NE(outside, nullptr);
  EXPECT_TRUE(Contains(outside->bytes, 245 * kGiB / 100));
  EXPECT_TRUE(e.findings[0].decisive);
  EXPECT_GE(e.findings[0].bytes.lo, 2440 * kMiB - 766 * kMiB);
}

// rwth-i6/returnn#1469: 15 DDP workers each made a CUDA context on GPU 0.
TEST(ExplainOomMessage, RealOtherProcessesComeFirstWhenTheyHoldTheMost) {
  const auto e = ExplainOomMessage(RealCase("14-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kOtherProcesses);
  const GpuShare* others = Share(e, "15 other processes");
  ASSERT_NE(others, nullptr);
  // 15 processes of "1.19 GiB" (one of them more): at least 15 x 1.185 GiB = 17.78 GiB.
  EXPECT_GE(others->bytes.lo, 1777 * kGiB / 100);
  // This process: 13.82 GiB in all - (11.54 GiB + 677.26 MiB reserved) = 1.62 GiB outside.
  const GpuShare* own = Share(e, "this process's non-PyTorch memory");
  ASSERT_NE(own, nullptr);
  EXPECT_TRUE(Contains(own->bytes, 162 * kGiB / 100));
  bool advice_names_a_pid = false;
  for (const std::string& a : e.advice) advice_names_a_pid |= a.find("101553") != std::string::npos;
  EXPECT_TRUE(advice_names_a_pid);
}

// ResidualMaskingNetwork#15 (1.x): "other programs consume the GPU RAM".
TEST(ExplainOomMessage, RealLegacyMessageBlamesMemoryOutsidePyTorch) {
  const auto e = ExplainOomMessage(RealCase("06-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kOtherProcesses);
  // 10.76 GiB - 8.81 MiB free - 1010.00 MiB reserved = 9.77 GiB held outside this PyTorch.
  const GpuShare* outside = Share(e, "outside this PyTorch (its context, other processes)");
  ASSERT_NE(outside, nullptr);
  EXPECT_TRUE(Contains(outside->bytes, 1076 * kGiB / 100 - 881 * kMiB / 100 - 1010 * kMiB));
}

// Plain capacity, as the threads concluded: TGI#866 (one V100 too small for Flan-UL2),
// pytorch#16417's comment (batch 8 -> 4 fixed it), Langchain-Chatchat#3992 (128 GiB asked of a
// 23.65 GiB card).
TEST(ExplainOomMessage, RealCapacityCases) {
  for (const char* prefix : {"08-", "17-", "15-"}) {
    const auto e = ExplainOomMessage(RealCase(prefix), {});
    EXPECT_EQ(e.cause, OomMessageCause::kCapacity) << prefix;
    EXPECT_TRUE(e.findings.at(0).decisive) << prefix;
  }
  // pytorch#16417's comment: allocated 22.90 GiB + 22.00 MiB of the 23.65 GiB RTX 4090, less this
  // process's 0.50 GiB outside PyTorch (23.60 GiB in use - 23.10 GiB reserved): over 95%.
  const auto e = ExplainOomMessage(RealCase("17-"), {});
  ASSERT_EQ(e.gpus.size(), 1u);
  EXPECT_EQ(e.gpus[0].key, "rtx4090");
  // Fragmentation also decided this one request (11.06 MiB free + 194.87 MiB unallocated >= 22
  // MiB), and is said second.
  ASSERT_GE(e.findings.size(), 2u);
  EXPECT_EQ(e.findings[1].cause, OomMessageCause::kFragmentation);
}

// Qwen3#873: CUBLAS_STATUS_ALLOC_FAILED is not the caching allocator's.
TEST(ExplainOomMessage, RealLibraryErrorIsOutsideTheAllocator) {
  const auto e = ExplainOomMessage(RealCase("26-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kOutsideAllocator);
  EXPECT_FALSE(e.advice.empty());
}

// Our own H200 recording (goldens/h200/oom_gpt_fp32.json): a GPT step under a 3 GiB memory
// fraction, with the exact figures PyTorch had: cap 3,221,225,472 B, memory_reserved()
// 3,030,384,640 B, memory_allocated() 3,015,499,776 B, total 150,109,880,320 B.
TEST(ExplainOomMessage, OurH200RecordingUnderACapIsTheCap) {
  std::ifstream in(std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "goldens/h200/oom_gpt_fp32.json");
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  const size_t at = text.find("CUDA out of memory");
  ASSERT_NE(at, std::string::npos);
  const auto e = ExplainOomMessage(Only(text.substr(at)), {});
  EXPECT_EQ(e.cause, OomMessageCause::kMemoryFractionCap);
  EXPECT_TRUE(e.findings.at(0).decisive);
  ASSERT_EQ(e.gpus.size(), 1u);
  EXPECT_EQ(e.gpus[0].key, "h200");  // 139.80 GiB is the H200's 150,109,880,320 B
  const GpuShare* reserved = Share(e, "reserved by PyTorch");
  ASSERT_NE(reserved, nullptr);
  EXPECT_TRUE(Contains(reserved->bytes, 3030384640));
  // The cap's figure, "3.00 GiB allowed", holds the exact cap.
  EXPECT_TRUE(Contains(R(*e.message.allowed), 3221225472));
  // reserved 3,030,384,640 + 256 MiB = 3,298,820,096 > 3,221,225,472: the arithmetic is stated.
  EXPECT_NE(e.findings[0].arithmetic.find("allowed 3.00 GiB"), std::string::npos);
}

const char* kFragmented =
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process "
    "has 77.91 GiB memory in use. Of the allocated memory 60.10 GiB is allocated by PyTorch, and "
    "17.20 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

TEST(ExplainOomMessage, FragmentationAdviceDependsOnTheAllocatorSettings) {
  const model::OomMessage m = Only(kFragmented);
  ExplainOptions options;
  auto e = ExplainOomMessage(m, options);
  // free 1.19 GiB + unallocated 17.20 GiB = 18.39 GiB >= 2.00 GiB; and 60.10 GiB of tensors are
  // 77% of the 78.4 GiB this process could have: not near capacity.
  EXPECT_EQ(e.cause, OomMessageCause::kFragmentation);
  EXPECT_TRUE(e.findings[0].decisive);
  EXPECT_NE(e.findings[0].arithmetic.find("= 18.38 GiB to 18.40 GiB >= the request 2.00 GiB"),
            std::string::npos)
      << e.findings[0].arithmetic;
  ASSERT_FALSE(e.advice.empty());
  EXPECT_NE(e.advice[0].find("expandable_segments:True"), std::string::npos);
  EXPECT_NE(e.advice[0].find("unless it is already on"), std::string::npos);
  ASSERT_EQ(e.gpus.size(), 1u);
  EXPECT_EQ(e.gpus[0].key, "h100-80gb");
  // Already on (pytorch#173049: PyTorch suggests it anyway): another piece of advice.
  options.alloc_conf = "expandable_segments:True,garbage_collection_threshold:0.8";
  e = ExplainOomMessage(m, options);
  EXPECT_EQ(e.advice[0].find("set PYTORCH_CUDA_ALLOC_CONF"), std::string::npos);
  EXPECT_NE(e.advice[0].find("already on"), std::string::npos);
}

TEST(ExplainOomMessage, NonPyTorchMemoryOfThisProcess) {
  // 79.11 GiB H100: this process holds 50.00 GiB, PyTorch reserved 38.00 + 0.50 GiB, so 11.50 GiB
  // lie outside PyTorch; a context and libraries explain 686 MiB (at most 755 MiB with the
  // figures' spread); 11.50 GiB - 755 MiB = 10.76 GiB, + 0.50 GiB free >= 4.00 GiB.
  const auto e = ExplainOomMessage(
      Only("CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.11 "
           "GiB of which 512.00 MiB is free. Process 4242 has 28.50 GiB memory in use. Including "
           "non-PyTorch memory, this process has 50.00 GiB memory in use. Of the allocated memory "
           "38.00 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but "
           "unallocated."),
      {});
  EXPECT_EQ(e.cause, OomMessageCause::kOtherProcesses);  // 28.50 GiB takes more
  ASSERT_GE(e.findings.size(), 2u);
  EXPECT_EQ(e.findings[1].cause, OomMessageCause::kNonPyTorchMemory);
  EXPECT_TRUE(e.findings[1].decisive);
  // (each figure off by up to 0.005 GiB: 50.00 - 38.00 - 0.50 GiB loses at most 0.02 GiB)
  EXPECT_GE(e.findings[1].bytes.lo, 1150 * kGiB / 100 - 766 * kMiB - 2 * kGiB / 100);
  // What predict --fit should fit into: 79.11 GiB less the other process's 28.50 GiB.
  ASSERT_TRUE(e.available_to_pytorch.has_value());
  EXPECT_TRUE(Contains(*e.available_to_pytorch, 7911 * kGiB / 100 - 2850 * kGiB / 100));
}

TEST(ExplainOomMessage, ContainerPidIsTakenAsThisProcess) {
  // FoundationVision/GenerateU#10: the only process listed holds what PyTorch reserved.
  const auto e = ExplainOomMessage(RealCase("13-"), {});
  bool taken = false;
  for (const GpuShare& s : e.shares)
    taken |= s.what.find("taken to be this one") != std::string::npos;
  EXPECT_TRUE(taken);
  EXPECT_EQ(Share(e, "1 other process"), nullptr);
}

TEST(ExplainOomMessage, FreeMemoryAtLeastTheRequestIsSaidNotGuessed) {
  // pytorch#16417 (1.0): 9.28 GiB free, 12.50 MiB refused: none of the causes applies.
  const auto e = ExplainOomMessage(RealCase("01-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kUnknown);
  ASSERT_EQ(e.findings.size(), 1u);
  EXPECT_NE(e.findings[0].meaning.find("reported the request free"), std::string::npos);
}

TEST(ExplainOomMessage, CutShortMessageAsksForTheWholeOne) {
  const auto e = ExplainOomMessage(RealCase("19-"), {});
  EXPECT_EQ(e.cause, OomMessageCause::kUnknown);
  ASSERT_EQ(e.advice.size(), 1u);
  EXPECT_NE(e.advice[0].find("paste the whole message"), std::string::npos);
}

}  // namespace
}  // namespace vramscope::analysis
