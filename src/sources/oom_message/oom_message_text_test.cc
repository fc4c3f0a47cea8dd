#include "sources/oom_message/oom_message_text.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace vramscope::sources {
namespace {

using model::OomMessageKind;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

TEST(PrintedBytes, TwoDecimalsStandForHalfALastDigitEitherSide) {
  const auto b = ParsePrintedBytes("20.00 MiB");
  ASSERT_TRUE(b.has_value());
  // 19.995 MiB = 20,966,277.12 B -> 20,966,278; 20.005 MiB = 20,976,762.88 B -> 20,976,762.
  EXPECT_EQ(b->lo, 20966278u);
  EXPECT_EQ(b->hi, 20976762u);
  EXPECT_EQ(b->text, "20.00 MiB");
  const auto g = ParsePrintedBytes("79.11 GiB");
  ASSERT_TRUE(g.has_value());
  EXPECT_LE(g->lo, 7911 * kGiB / 100);
  EXPECT_GE(g->hi, 7911 * kGiB / 100);
  EXPECT_LT(g->hi - g->lo, kGiB / 100 + 1);
}

TEST(PrintedBytes, BytesAreExactAndUnitsStartAboveTheirThreshold) {
  EXPECT_EQ(ParsePrintedBytes("512 bytes")->lo, 512u);
  EXPECT_EQ(ParsePrintedBytes("512 bytes")->hi, 512u);
  // format_size prints sizes up to 1024 in bytes, so "1.00 KiB" is 1025 B or more.
  EXPECT_EQ(ParsePrintedBytes("1.00 KiB")->lo, 1025u);
  EXPECT_EQ(ParsePrintedBytes("1.00 GiB")->lo, kGiB + 1);
  EXPECT_EQ(ParsePrintedBytes("0 bytes")->hi, 0u);
  EXPECT_FALSE(ParsePrintedBytes("20.00").has_value());
  EXPECT_FALSE(ParsePrintedBytes("MiB").has_value());
  EXPECT_FALSE(ParsePrintedBytes("20.00 MiBs").has_value());
  EXPECT_FALSE(ParsePrintedBytes("99999999999999999999999 GiB").has_value());
}

TEST(FindOomMessages, ReadsTheTwoPointXMessageWithProcessesAndPrivatePools) {
  const std::string text =
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
      "capacity of 79.11 GiB of which 1.19 GiB is free. Process 1234 has 3.50 GiB memory in use. "
      "Including non-PyTorch memory, this process has 74.41 GiB memory in use. Of the allocated "
      "memory 70.10 GiB is allocated by PyTorch, with 1.25 GiB allocated in private pools (e.g., "
      "CUDA Graphs), and 3.20 GiB is reserved by PyTorch but unallocated. If reserved but "
      "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
      "to avoid fragmentation.  See documentation for Memory Management  "
      "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n";
  const auto found = FindOomMessages(text);
  ASSERT_EQ(found.size(), 1u);
  const model::OomMessage& m = found[0];
  EXPECT_EQ(m.kind, OomMessageKind::kAllocator);
  EXPECT_EQ(m.backend, "CUDA");
  EXPECT_EQ(m.tried_to_allocate->text, "2.00 GiB");
  EXPECT_EQ(*m.gpu, 0);
  EXPECT_EQ(m.total_capacity->text, "79.11 GiB");
  EXPECT_EQ(m.free->text, "1.19 GiB");
  ASSERT_EQ(m.processes.size(), 1u);
  EXPECT_EQ(m.processes[0].pid, 1234);
  EXPECT_EQ(m.processes[0].in_use.text, "3.50 GiB");
  EXPECT_EQ(m.this_process_in_use->text, "74.41 GiB");
  EXPECT_EQ(m.allocated_by_pytorch->text, "70.10 GiB");
  EXPECT_EQ(m.private_pools->text, "1.25 GiB");
  EXPECT_EQ(m.reserved_unallocated->text, "3.20 GiB");
  EXPECT_FALSE(m.allowed.has_value());
  EXPECT_TRUE(m.suggests_expandable_segments);
  EXPECT_EQ(m.line, 1u);
}

TEST(FindOomMessages, ReadsTheOneXMessageWithACapAndTheOldestCachedOne) {
  const auto found = FindOomMessages(
      "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.80 GiB total "
      "capacity; 6.34 GiB already allocated; 14.50 MiB free; 7.00 GiB allowed; 6.45 GiB reserved "
      "in total by PyTorch) If reserved memory is >> allocated memory try setting "
      "max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
      "PYTORCH_CUDA_ALLOC_CONF\n"
      "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 1; 11.17 GiB total "
      "capacity; 10.65 GiB already allocated; 5.81 MiB free; 176.09 MiB cached)\n");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].kind, OomMessageKind::kAllocatorLegacy);
  EXPECT_EQ(found[0].already_allocated->text, "6.34 GiB");
  EXPECT_EQ(found[0].free->text, "14.50 MiB");
  EXPECT_EQ(found[0].allowed->text, "7.00 GiB");
  EXPECT_EQ(found[0].reserved_total->text, "6.45 GiB");
  EXPECT_TRUE(found[0].suggests_max_split_size);
  EXPECT_FALSE(found[0].cached.has_value());
  EXPECT_EQ(*found[1].gpu, 1);
  // "cached" was reserved minus allocated, not the total.
  EXPECT_FALSE(found[1].reserved_total.has_value());
  EXPECT_EQ(found[1].cached->text, "176.09 MiB");
  EXPECT_EQ(found[1].line, 2u);
}

TEST(FindOomMessages, ReadsALogWithColoursRanksAndWrappedLines) {
  const std::string log =
      "step 10 loss 2.3\n"
      "\x1b[31m[rank1]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 512.00 MiB. "
      "GPU 1 has a total\n"
      "[rank1]:   capacity of 191.98 GiB of which 100.00 MiB is free. Of the allocated memory "
      "180.00 GiB is allocated by PyTorch, and 11.00 GiB is reserved by PyTorch but "
      "unallocated.\x1b[0m\n"
      "[rank0]: RuntimeError: CUDA error: out of memory\n"
      "[rank0]: CUDA kernel errors might be asynchronously reported\n"
      "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n";
  const auto found = FindOomMessages(log);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].backend, "HIP");
  EXPECT_EQ(found[0].kind, OomMessageKind::kAllocator);
  EXPECT_EQ(*found[0].rank, 1);
  EXPECT_EQ(found[0].line, 2u);
  EXPECT_EQ(found[0].total_capacity->text, "191.98 GiB");
  EXPECT_EQ(found[0].reserved_unallocated->text, "11.00 GiB");
  EXPECT_TRUE(found[0].processes.empty());
  EXPECT_EQ(found[1].kind, OomMessageKind::kDriverError);
  EXPECT_EQ(*found[1].rank, 0);
  EXPECT_EQ(found[2].kind, OomMessageKind::kLibraryError);
  EXPECT_EQ(found[2].library, "cuBLAS");
  EXPECT_EQ(found[2].line, 6u);
}

TEST(FindOomMessages, ReadsTheDeviceGenericWording) {
  const auto found = FindOomMessages(
      "torch.OutOfMemoryError: Out of memory. Tried to allocate 64.00 MiB. GPU 3 has a total "
      "capacity of 93.10 GiB of which 12.00 MiB is free. Of the allocated memory 90.00 GiB is "
      "allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated. If reserved but "
      "unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, OomMessageKind::kAllocator);
  EXPECT_EQ(found[0].backend, "");
  EXPECT_EQ(*found[0].gpu, 3);
  EXPECT_EQ(found[0].reserved_unallocated->text, "1.50 GiB");
}

TEST(FindOomMessages, TextWithoutAMessageGivesNothingAndManyAreCapped) {
  EXPECT_TRUE(FindOomMessages("loss 2.3\nall good\n").empty());
  EXPECT_TRUE(FindOomMessages("").empty());
  std::string many;
  for (int i = 0; i < 50; ++i) many += "CUDA error: out of memory\n";
  size_t left_out = 0;
  EXPECT_EQ(FindOomMessages(many, 10, &left_out).size(), 10u);
  EXPECT_EQ(left_out, 40u);
}

// The real messages of tests/data/oom_messages (public issue threads, figures read by hand):
// every figure the manifest states is read exactly, and no other.
std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void ExpectFigure(const nlohmann::json& expected, const char* key,
                  const std::optional<model::PrintedBytes>& got, const std::string& where) {
  if (!expected.contains(key) || expected[key].is_null()) {
    EXPECT_FALSE(got.has_value()) << where << ": " << key << " read as " << got->text;
    return;
  }
  ASSERT_TRUE(got.has_value()) << where << ": " << key << " not read";
  EXPECT_EQ(got->text, expected[key].get<std::string>()) << where << ": " << key;
  const auto parsed = ParsePrintedBytes(expected[key].get<std::string>());
  ASSERT_TRUE(parsed.has_value()) << where << ": " << key;
  EXPECT_EQ(got->lo, parsed->lo) << where << ": " << key;
}

TEST(FindOomMessages, ReadsEveryRealMessageToItsStatedFigures) {
  const std::filesystem::path dir =
      std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/oom_messages";
  const nlohmann::json manifest = nlohmann::json::parse(ReadFile(dir / "cases.json"));
  const auto& cases = manifest.at("cases");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    const std::string file = c.at("file").get<std::string>();
    const auto found = FindOomMessages(ReadFile(dir / file));
    const auto& expected = c.at("messages");
    ASSERT_EQ(found.size(), expected.size()) << file;
    for (size_t i = 0; i < found.size(); ++i) {
      const std::string where = file + " message " + std::to_string(i + 1);
      // The manifest names the figures of cudaMallocAsync's and MPS's messages as they print
      // them; the model keeps them in the fields that mean the same.
      nlohmann::json e = expected[i];
      for (const auto& [from, to] :
           {std::pair<const char*, const char*>{"currently_allocated", "allocated_by_pytorch"},
            {"pytorch_limit", "allowed"},
            {"mps_allocated", "allocated_by_pytorch"},
            {"max_allowed", "allowed"}}) {
        if (e.contains(from) && !e[from].is_null()) e[to] = e[from];
      }
      const model::OomMessage& m = found[i];
      for (const model::OomMessageFigure& f : model::OomMessageFigures()) {
        if (std::find(m.not_available.begin(), m.not_available.end(), f.key) !=
            m.not_available.end()) {
          // NVML's "not available" (2^64 B) printed there: never read as a size.
          EXPECT_FALSE((m.*f.field).has_value()) << where << ": " << f.key;
          EXPECT_EQ(e.value(f.key, std::string()).rfind("1717986918", 0), 0u) << where;
          continue;
        }
        ExpectFigure(e, f.key, m.*f.field, where);
      }
      if (e.contains("gpu") && !e["gpu"].is_null()) {
        ASSERT_TRUE(m.gpu.has_value()) << where;
        EXPECT_EQ(*m.gpu, e["gpu"].get<int>()) << where;
      }
      const auto processes = e.value("processes", nlohmann::json::array());
      ASSERT_EQ(m.processes.size(), processes.is_array() ? processes.size() : 0) << where;
      for (size_t p = 0; p < m.processes.size(); ++p) {
        EXPECT_EQ(m.processes[p].pid, processes[p].at("pid").get<int64_t>()) << where;
        EXPECT_EQ(m.processes[p].in_use.text, processes[p].at("in_use").get<std::string>())
            << where;
      }
    }
  }
}

TEST(XlaMessage, TheRequestIsExactAndTheHostWordingNamesTheCpu) {
  const auto found = FindOomMessages(
      "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory allocating 17592186044416 "
      "bytes.\n");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, OomMessageKind::kXla);
  EXPECT_EQ(found[0].backend, "XLA");
  EXPECT_EQ(found[0].device, "CPU");
  ASSERT_TRUE(found[0].tried_to_allocate.has_value());
  EXPECT_EQ(found[0].tried_to_allocate->lo, 17592186044416u);
  EXPECT_EQ(found[0].tried_to_allocate->hi, 17592186044416u);
}

TEST(XlaMessage, BufferAssignmentStatsAreThePrograms) {
  // XLA's HumanReadableNumBytes: no space before the unit, one decimal for KiB.
  const auto found = FindOomMessages(
      "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4096 bytes.\n"
      "BufferAssignment OOM Debugging.\nBufferAssignment stats:\n"
      "             parameter allocation:   56.25MiB\n"
      "              constant allocation:    48.5KiB\n"
      "        maybe_live_out allocation:    9.64GiB\n"
      "     preallocated temp allocation:         0B\n"
      "                 total allocation:   14.44GiB\n");
  ASSERT_EQ(found.size(), 1u);
  const model::OomMessage& m = found[0];
  EXPECT_EQ(m.device, "");  // a GPU's wording, but no device named
  EXPECT_EQ(m.program_parameters->text, "56.25MiB");
  EXPECT_LE(m.program_constants->lo, 48 * 1024 + 512u);
  EXPECT_GE(m.program_constants->hi, 48 * 1024 + 512u);
  EXPECT_EQ(m.program_temp->hi, 0u);
  EXPECT_GE(m.program_total->hi, 1444 * kGiB / 100);
  EXPECT_EQ(m.program_outputs->text, "9.64GiB");
}

TEST(XlaMessage, TheBfcLogBeforeTheErrorGivesThePool) {
  // TensorFlow's warning with the same words that is "not a failure" is skipped; the failure's
  // line names the allocator, and the Stats printed last give the pool.
  const std::string text =
      "W bfc_allocator.cc:275] Allocator (GPU_1_bfc) ran out of memory trying to allocate "
      "2.10GiB with freed_by_count=0. The caller indicates that this is not a failure, but may "
      "mean that there could be performance gains if more memory were available.\n"
      "W bfc_allocator.cc:485] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
      "8.00GiB (rounded to 8589934592)requested by op\n"
      "I bfc_allocator.cc:1100] Stats: \n"
      "Limit:                     61496778752\n"
      "InUse:                     55834574848\n"
      "MaxInUse:                  57982058496\n"
      "NumAllocs:                        1040\n"
      "LargestFreeBlock:           4294967296\n\n"
      "E pjrt_stream_executor_client.cc:2985] Execution of replica 0 failed: RESOURCE_EXHAUSTED: "
      "Out of memory while trying to allocate 8589934592 bytes.\n"
      "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
      "allocate 8589934592 bytes.\n";
  const auto found = FindOomMessages(text);
  // The runtime's log line and the exception are one failure: one message.
  ASSERT_EQ(found.size(), 1u);
  const model::OomMessage& m = found[0];
  EXPECT_EQ(m.allocator, "GPU_0_bfc");
  EXPECT_EQ(m.device, "GPU:0");
  ASSERT_TRUE(m.gpu.has_value());
  EXPECT_EQ(*m.gpu, 0);
  EXPECT_EQ(m.pool_limit->lo, 61496778752u);
  EXPECT_EQ(m.pool_in_use->hi, 55834574848u);
  EXPECT_EQ(m.pool_peak_in_use->lo, 57982058496u);
  EXPECT_EQ(m.largest_free_block->lo, 4294967296u);
  EXPECT_EQ(m.tried_to_allocate->lo, 8589934592u);
}

TEST(TensorflowMessage, TheTensorsBytesAreItsShapeTimesItsDtype) {
  const auto found = FindOomMessages(
      "ResourceExhaustedError: OOM when allocating tensor with shape[16,112,112,147] and type "
      "half on /job:localhost/replica:0/task:0/device:GPU:3 by allocator GPU_3_bfc\n");
  ASSERT_EQ(found.size(), 1u);
  const model::OomMessage& m = found[0];
  EXPECT_EQ(m.kind, OomMessageKind::kTensorflow);
  EXPECT_EQ(m.tensor_shape, "[16,112,112,147]");
  EXPECT_EQ(m.tensor_dtype, "half");
  EXPECT_EQ(m.tried_to_allocate->lo, 16u * 112 * 112 * 147 * 2);
  EXPECT_EQ(m.tried_to_allocate->hi, m.tried_to_allocate->lo);
  EXPECT_EQ(m.device, "GPU:3");
  EXPECT_EQ(m.allocator, "GPU_3_bfc");
  EXPECT_EQ(*m.gpu, 3);
}

TEST(TensorflowMessage, AnUnknownDtypeOrAnAbsurdShapeLeavesTheBytesUnsaid) {
  for (const char* text :
       {"OOM when allocating tensor with shape[4,4] and type mystery on /device:GPU:0",
        "OOM when allocating tensor with shape[99999999999,99999999999,99999999999,9999] and "
        "type float on /device:GPU:0",
        "OOM when allocating tensor with shape[4,x] and type float on /device:GPU:0",
        "OOM when allocating tensor with shape[4,4"}) {
    const auto found = FindOomMessages(text);
    ASSERT_EQ(found.size(), 1u) << text;
    EXPECT_FALSE(found[0].tried_to_allocate.has_value()) << text;
  }
}

}  // namespace
}  // namespace vramscope::sources
