// The native capture's recorder against a fake CUPTI: the fake calls the recorder's real
// callback with the CUPTI-shaped data the driver would pass (CUpti_CallbackData holding the
// driver API's *_params structs from generated_cuda_meta.h, cbids from cupti_driver_cbid.h;
// CUpti_NvtxData for NVTX), and the trace file it writes is read back with the real reader.
#include <generated_nvtx_meta.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "native_capture/fake_cupti.h"
#include "native_capture/recorder.h"
#include "sources/native_trace/native_trace_source.h"
#include "sources/native_trace/vstrace_reader.h"

namespace vramscope::capture {
namespace {

namespace fs = std::filesystem;
using native_trace::ParsedTrace;
using native_trace::Record;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using vstrace::Api;
using vstrace::RecordKind;

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/vramscope_capture_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    stderr_path_ = dir_ / "stderr.txt";
    stderr_fd_ = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(stderr_fd_, 0);
  }
  void TearDown() override {
    EXPECT_EQ(cupti_.misdirected, 0);
    ::close(stderr_fd_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  RecorderOptions Options() {
    RecorderOptions o;
    o.capture_dir = dir_.string();
    o.rank = 0;
    o.pid = 777;
    o.start_realtime_ns = 1'700'000'000'000'000'000;
    o.facts = {{"exe", "/usr/bin/test"}, {"nvtx", "on"}};
    o.skip_own_frames = false;
    o.stderr_fd = stderr_fd_;
    return o;
  }

  std::string Stderr() const {
    std::ifstream in(stderr_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static std::string ReadFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  ParsedTrace ReadTrace(const fs::path& path) {
    const std::string bytes = ReadFile(path);
    auto parsed = native_trace::ReadNativeTrace(
        {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, path.string());
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    return parsed.ok() ? std::move(parsed).value() : ParsedTrace{};
  }

  fs::path dir_;
  fs::path stderr_path_;
  int stderr_fd_ = -1;
  FakeCupti cupti_;
};

// Exported (the test is linked with ENABLE_EXPORTS) so dladdr names it in the recorded stack.
extern "C" __attribute__((noinline, used)) void VramscopeTestAllocateOnDevice3(FakeCupti* cupti,
                                                                               CUdeviceptr address,
                                                                               size_t bytes) {
  CUdeviceptr out = address;
  cuMemAlloc_v2_params params{&out, bytes};
  cupti->Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &params, CUDA_SUCCESS,
                kContext3);
  asm volatile("" ::: "memory");  // keeps the call from being a tail call
}

TEST_F(RecorderTest, StartSubscribesToTheAllocationCallbacksAndNvtx) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  EXPECT_EQ(recorder.trace_path(), (dir_ / "rank0.vstrace").string());
  for (const CUpti_CallbackId cbid : Recorder::DriverCallbacks()) {
    EXPECT_EQ(cupti_.driver_enabled.count(cbid), 1u) << cbid;
  }
  EXPECT_EQ(cupti_.driver_enabled.count(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz), 1u);
  EXPECT_EQ(cupti_.domains_enabled.count(CUPTI_CB_DOMAIN_NVTX), 1u);
  recorder.Stop("exit");
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_EQ(p.header.pid, 777u);
  EXPECT_EQ(p.header.rank, 0);
  EXPECT_EQ(p.header.start_clock_ns, 1'000'000u);
  EXPECT_EQ(p.header.clock, "cuptiGetTimestamp, ns");
  ASSERT_EQ(p.facts.size(), 3u);
  EXPECT_EQ(p.facts[0], (std::pair<std::string, std::string>{"exe", "/usr/bin/test"}));
  EXPECT_EQ(p.facts[2].first, "unwinder");  // which one: UnwinderTest below
  EXPECT_TRUE(p.ended);
  EXPECT_EQ(p.end_reason, "exit");
  EXPECT_TRUE(p.stopped.empty());
  EXPECT_EQ(Stderr(), "");
}

TEST_F(RecorderTest, DriverAllocationsAndFreesAreRecordedWithDeviceTimeAndStack) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  // One call site (a loop the compiler cannot unroll: its bound is `volatile`), two allocations.
  volatile int count = 2;
  for (int i = 0; i < count; ++i) {
    VramscopeTestAllocateOnDevice3(&cupti_, 0x7f0000000000 + i * 0x100000, 1 << 20);
  }
  CUdeviceptr pitched = 0x7f1000000000;
  size_t pitch = 512;
  cuMemAllocPitch_v2_params pitch_params{&pitched, &pitch, 500, 10, 4};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, "cuMemAllocPitch_v2", &pitch_params);
  CUdeviceptr managed = 0x7f2000000000;
  cuMemAllocManaged_params managed_params{&managed, 4096, CU_MEM_ATTACH_GLOBAL};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, "cuMemAllocManaged", &managed_params);
  CUdeviceptr failed = 0;
  cuMemAlloc_v2_params failed_params{&failed, size_t{1} << 40};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &failed_params,
                CUDA_ERROR_OUT_OF_MEMORY);
  cuMemFree_v2_params free_params{0x7f0000000000};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", &free_params, CUDA_SUCCESS,
                kContext3);
  cuMemFree_v2_params bad_free{0x1234};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", &bad_free,
                CUDA_ERROR_INVALID_VALUE);  // a failed free frees nothing: not recorded
  recorder.Stop("exit");

  const ParsedTrace p = ReadTrace(recorder.trace_path());
  ASSERT_EQ(p.records.size(), 7u);
  const Record& a = p.records[0];
  EXPECT_EQ(a.kind, RecordKind::kAlloc);
  EXPECT_EQ(a.api, static_cast<uint8_t>(Api::kMemAlloc));
  EXPECT_EQ(a.address, 0x7f0000000000u);
  EXPECT_EQ(a.bytes, 1u << 20);
  EXPECT_EQ(a.device, 3);
  EXPECT_EQ(a.tid, static_cast<uint32_t>(::gettid()));
  EXPECT_GT(a.time_ns, p.header.start_clock_ns);
  EXPECT_GT(p.records[1].time_ns, a.time_ns);
  // The same call site twice: one stack, written once; one stack per call site.
  ASSERT_NE(a.stack, 0u);
  EXPECT_EQ(p.records[1].stack, a.stack);
  std::set<uint32_t> used;
  for (const Record& r : p.records) {
    if (r.stack != 0) used.insert(r.stack);
  }
  EXPECT_EQ(used.size(), 5u);
  EXPECT_EQ(p.stacks.size(), used.size());
  bool named = false;
  for (const uint32_t f : p.stacks.at(a.stack)) {
    const auto& frame = p.frames.at(f);
    if (frame.symbol != 0 && p.strings.at(frame.symbol) == "VramscopeTestAllocateOnDevice3") {
      named = true;
      EXPECT_THAT(p.strings.at(frame.module), HasSubstr("capture_recorder_test"));
      EXPECT_LT(frame.offset, frame.pc);
    }
  }
  EXPECT_TRUE(named) << "dladdr did not name the allocating function";

  EXPECT_EQ(p.records[2].api, static_cast<uint8_t>(Api::kMemAllocPitch));
  EXPECT_EQ(p.records[2].bytes, 512u * 10);
  EXPECT_EQ(p.records[2].device, 0);
  EXPECT_EQ(p.records[3].api, static_cast<uint8_t>(Api::kMemAllocManaged));
  EXPECT_EQ(p.records[4].kind, RecordKind::kAllocFailed);
  EXPECT_EQ(p.records[4].bytes, uint64_t{1} << 40);
  EXPECT_EQ(p.records[4].result, static_cast<uint32_t>(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(p.records[5].kind, RecordKind::kFree);
  EXPECT_EQ(p.records[5].address, 0x7f0000000000u);
  EXPECT_EQ(p.records[6].kind, RecordKind::kEnd);

  // And the source makes segments and allocations of them.
  const std::string bytes = ReadFile(recorder.trace_path());
  auto trace = native_trace::TraceFromNativeTrace(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "t");
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->devices, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(trace->allocations.size(), 4u);
  EXPECT_TRUE(trace->facts.has_native_frames);
}

TEST_F(RecorderTest, VirtualMemoryAndStreamOrderedCallsAreRecorded) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  CUdeviceptr va = 0;
  cuMemAddressReserve_params reserve{&va, 64 << 20, 0, 0, 0};
  va = 0x7e0000000000;
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, "cuMemAddressReserve", &reserve);
  CUmemGenericAllocationHandle handle = 0xfeed;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 2;
  cuMemCreate_params create{&handle, 2 << 20, &prop, 0};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, "cuMemCreate", &create);
  cuMemMap_params map{va, 2 << 20, 0, handle, 0};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemMap, "cuMemMap", &map);
  cuMemUnmap_params unmap{va, 2 << 20};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, "cuMemUnmap", &unmap);
  cuMemRelease_params release{handle};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemRelease, "cuMemRelease", &release);
  cuMemAddressFree_params address_free{va, 64 << 20};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree, "cuMemAddressFree", &address_free);

  const CUstream stream = reinterpret_cast<CUstream>(0x5151);
  CUdeviceptr async_ptr = 0x7d0000000000;
  cuMemAllocAsync_params async{&async_ptr, 8192, stream};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, "cuMemAllocAsync", &async);
  CUdeviceptr pool_ptr = 0x7d0000100000;
  cuMemAllocFromPoolAsync_ptsz_params pool{&pool_ptr, 4096, reinterpret_cast<CUmemoryPool>(0x9),
                                           stream};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
                "cuMemAllocFromPoolAsync_ptsz", &pool);
  cuMemFreeAsync_params free_async{async_ptr, stream};
  cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, "cuMemFreeAsync", &free_async);
  recorder.Stop("exit");

  const ParsedTrace p = ReadTrace(recorder.trace_path());
  std::vector<RecordKind> kinds;
  for (const Record& r : p.records) kinds.push_back(r.kind);
  EXPECT_EQ(kinds,
            (std::vector<RecordKind>{
                RecordKind::kVaReserve, RecordKind::kVmmCreate, RecordKind::kVmmMap,
                RecordKind::kVmmUnmap, RecordKind::kVmmRelease, RecordKind::kVaFree,
                RecordKind::kAlloc, RecordKind::kAlloc, RecordKind::kFree, RecordKind::kEnd}));
  EXPECT_EQ(p.records[0].address, 0x7e0000000000u);
  EXPECT_EQ(p.records[0].bytes, 64u << 20);
  EXPECT_EQ(p.records[1].handle, 0xfeedu);
  EXPECT_EQ(p.records[1].bytes, 2u << 20);
  EXPECT_EQ(p.records[1].location_device, 2);
  EXPECT_EQ(p.records[1].device, 2);
  EXPECT_EQ(p.records[2].address, 0x7e0000000000u);
  EXPECT_EQ(p.records[2].handle, 0xfeedu);
  EXPECT_EQ(p.records[3].bytes, 2u << 20);
  EXPECT_EQ(p.records[4].handle, 0xfeedu);
  EXPECT_EQ(p.records[6].api, static_cast<uint8_t>(Api::kMemAllocAsync));
  EXPECT_EQ(p.records[6].stream, 0x5151u);
  EXPECT_EQ(p.records[7].api, static_cast<uint8_t>(Api::kMemAllocFromPoolAsync));
  EXPECT_EQ(p.records[7].address, 0x7d0000100000u);
  EXPECT_EQ(p.records[8].api, static_cast<uint8_t>(Api::kMemFreeAsync));
  EXPECT_EQ(p.records[8].stream, 0x5151u);
}

TEST_F(RecorderTest, NvtxRangesAreRecordedAndBecomeEventPaths) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  nvtxRangePushA_params step{"train_step"};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePushA, "nvtxRangePushA", &step);
  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = "forward";
  nvtxRangePushEx_params forward{&attributes};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePushEx, "nvtxRangePushEx", &forward);
  VramscopeTestAllocateOnDevice3(&cupti_, 0x7f0000000000, 4096);
  nvtxRangePop_params pop{};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", &pop);
  const nvtxRangeId_t id = 42;
  nvtxRangeStartA_params start{"backward"};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangeStartA, "nvtxRangeStartA", &start, &id);
  nvtxRangeEnd_params end{42};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangeEnd, "nvtxRangeEnd", &end);
  nvtxMarkA_params mark{"checkpoint"};
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxMarkA, "nvtxMarkA", &mark);
  cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", &pop);
  recorder.Stop("exit");

  const ParsedTrace p = ReadTrace(recorder.trace_path());
  ASSERT_EQ(p.records.size(), 9u);
  EXPECT_EQ(p.records[0].kind, RecordKind::kNvtxPush);
  EXPECT_EQ(p.records[0].name, "train_step");
  EXPECT_EQ(p.records[1].name, "forward");
  EXPECT_EQ(p.records[2].kind, RecordKind::kAlloc);
  EXPECT_EQ(p.records[3].kind, RecordKind::kNvtxPop);
  EXPECT_EQ(p.records[4].kind, RecordKind::kNvtxStart);
  EXPECT_EQ(p.records[4].range_id, 42u);
  EXPECT_EQ(p.records[4].name, "backward");
  EXPECT_EQ(p.records[5].kind, RecordKind::kNvtxEnd);
  EXPECT_EQ(p.records[5].range_id, 42u);
  EXPECT_EQ(p.records[6].kind, RecordKind::kNvtxMark);
  EXPECT_EQ(p.records[6].name, "checkpoint");

  const std::string bytes = ReadFile(recorder.trace_path());
  auto trace = native_trace::TraceFromNativeTrace(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "t");
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const auto it = trace->events.user_metadata.find(1);
  ASSERT_NE(it, trace->events.user_metadata.end());
  EXPECT_EQ(trace->strings.Get(it->second), "train_step/forward");
  ASSERT_FALSE(trace->phase_marks.empty());
  EXPECT_EQ(trace->phase_marks[0].phase, model::Phase::kForward);
}

TEST_F(RecorderTest, ASubscribeFailureDisablesWithOneLineAndNoException) {
  cupti_.subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  Recorder recorder(&cupti_, Options());
  EXPECT_FALSE(recorder.Start());
  EXPECT_TRUE(recorder.disabled());
  EXPECT_EQ(Stderr(),
            "vramscope: native capture disabled: CUPTI would not subscribe "
            "(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): another tool holds CUPTI "
            "(Nsight Systems or Compute, a framework's profiler); run without it, or without "
            "--native\n");
  EXPECT_EQ(cupti_.unsubscribes, 0);
  recorder.Stop("exit");  // nothing more, no second line
  const std::string err = Stderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1);
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_TRUE(p.ended);
  EXPECT_THAT(p.end_reason, StartsWith("disabled: CUPTI would not subscribe"));
}

TEST_F(RecorderTest, AFailedEnableUnsubscribes) {
  cupti_.enable_result = CUPTI_ERROR_UNKNOWN;
  Recorder recorder(&cupti_, Options());
  EXPECT_FALSE(recorder.Start());
  EXPECT_EQ(cupti_.unsubscribes, 1);
  EXPECT_THAT(Stderr(), StartsWith("vramscope: native capture disabled: CUPTI would not enable "
                                   "the driver API callback"));
}

TEST_F(RecorderTest, AMissingCaptureDirDisablesWithOneLine) {
  RecorderOptions options = Options();
  options.capture_dir = (dir_ / "missing").string();
  Recorder recorder(&cupti_, options);
  EXPECT_FALSE(recorder.Start());
  EXPECT_EQ(Stderr(), "vramscope: native capture disabled: cannot create " +
                          (dir_ / "missing" / "rank0.vstrace").string() +
                          ": No such file or directory; check that VRAMSCOPE_CAPTURE_DIR exists "
                          "and is writable\n");
  options.capture_dir.clear();
  Recorder unset(&cupti_, options);
  EXPECT_FALSE(unset.Start());
  EXPECT_THAT(Stderr(), HasSubstr("VRAMSCOPE_CAPTURE_DIR is not set; run the program under "
                                  "`vramscope run --native`\n"));
}

TEST_F(RecorderTest, AFullDiskAtTheHeaderDisablesWithOneLine) {
  RecorderOptions options = Options();
  options.rank.reset();  // the label is pid777
  // The disk is full from the first write (the header).
  options.write_fn = [](int, const void*, size_t) -> ssize_t {
    errno = ENOSPC;
    return -1;
  };
  Recorder recorder(&cupti_, options);
  EXPECT_FALSE(recorder.Start());
  EXPECT_EQ(Stderr(), "vramscope: native capture disabled: writing " +
                          (dir_ / "pid777.vstrace").string() +
                          " failed: No space left on device; nothing was recorded\n");
  EXPECT_EQ(cupti_.unsubscribes, 0);
}

std::atomic<int> g_writes_left{0};
ssize_t FailingWrite(int fd, const void* data, size_t bytes) {
  if (g_writes_left.fetch_sub(1) <= 0) {
    errno = ENOSPC;
    return -1;
  }
  return ::write(fd, data, bytes);
}

TEST_F(RecorderTest, AWriteFailureMidRunDisablesAndUnsubscribes) {
  RecorderOptions options = Options();
  options.write_fn = &FailingWrite;
  g_writes_left = 4;  // header, facts, two allocations
  Recorder recorder(&cupti_, options);
  ASSERT_TRUE(recorder.Start());
  for (int i = 0; i < 5; ++i) VramscopeTestAllocateOnDevice3(&cupti_, 0x1000 * (i + 1), 4096);
  EXPECT_TRUE(recorder.disabled());
  EXPECT_EQ(cupti_.unsubscribes, 1);
  const std::string err = Stderr();
  EXPECT_EQ(err, "vramscope: native capture disabled: writing " + recorder.trace_path() +
                     " failed: No space left on device; the trace ends at its last complete "
                     "record\n");
  // Callbacks that still arrive (CUPTI may deliver in-flight ones) are ignored.
  Recorder::Callback(&recorder, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
                     nullptr);
  recorder.Stop("exit");
  EXPECT_EQ(Stderr(), err);
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_EQ(p.records.size(), 2u);
  EXPECT_FALSE(p.ended);
  EXPECT_TRUE(p.stopped.empty());
}

// What a kill leaves: the file as it is before the recorder stops (a killed process never runs
// Stop or the writer's destructor), its reserved chunk's unused part zeros.
TEST_F(RecorderTest, ATraceNeverClosedEndsInZerosTheReaderSkips) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  for (int i = 0; i < 3; ++i) VramscopeTestAllocateOnDevice3(&cupti_, 0x1000 * (i + 1), 4096);
  const fs::path path = recorder.trace_path();
  EXPECT_EQ(fs::file_size(path), vstrace::kMappedChunkBytes);
  const ParsedTrace killed = ReadTrace(path);
  EXPECT_EQ(killed.records.size(), 3u);
  EXPECT_FALSE(killed.ended);
  EXPECT_TRUE(killed.stopped.empty()) << killed.stopped;
  EXPECT_EQ(killed.valid_bytes + killed.reserved_tail_bytes, vstrace::kMappedChunkBytes);
  // Stopping cuts the file at its end record.
  recorder.Stop("exit");
  const ParsedTrace stopped = ReadTrace(path);
  EXPECT_EQ(fs::file_size(path), stopped.valid_bytes);
  EXPECT_EQ(stopped.reserved_tail_bytes, 0u);
  EXPECT_TRUE(stopped.ended);
  EXPECT_EQ(stopped.records.size(), 4u);  // and the end record
}

// Records cross chunk boundaries: tens of thousands of events in several chunks read back whole.
TEST_F(RecorderTest, RecordsAcrossManyChunksReadBackInOrder) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  constexpr int kEvents = 50000;  // about 2.5 MB: three chunks
  for (int i = 0; i < kEvents; ++i) {
    VramscopeTestAllocateOnDevice3(&cupti_, 0x1000ull * (i + 1), 512 + i);
  }
  recorder.Stop("exit");
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_GT(p.valid_bytes, 2 * vstrace::kMappedChunkBytes);
  ASSERT_EQ(p.records.size(), static_cast<size_t>(kEvents) + 1);  // and the end record
  for (int i = 0; i < kEvents; ++i) {
    ASSERT_EQ(p.records[static_cast<size_t>(i)].bytes, static_cast<uint64_t>(512 + i)) << i;
  }
  EXPECT_TRUE(p.ended);
  EXPECT_TRUE(p.stopped.empty()) << p.stopped;
}

std::atomic<int> g_chunks_left{0};
int FailingAllocate(int fd, off_t offset, off_t bytes) {
  if (g_chunks_left.fetch_sub(1) <= 0) return ENOSPC;
  return ::posix_fallocate(fd, offset, bytes);
}

TEST_F(RecorderTest, AFullDiskWhenReservingAChunkDisablesAtTheLastCompleteRecord) {
  RecorderOptions options = Options();
  options.allocate_fn = &FailingAllocate;
  g_chunks_left = 1;  // the first chunk only
  Recorder recorder(&cupti_, options);
  ASSERT_TRUE(recorder.Start());
  int made = 0;
  for (; made < 100000 && !recorder.disabled(); ++made) {
    VramscopeTestAllocateOnDevice3(&cupti_, 0x1000ull * (made + 1), 4096);
  }
  ASSERT_TRUE(recorder.disabled());
  EXPECT_EQ(cupti_.unsubscribes, 1);
  EXPECT_EQ(Stderr(), "vramscope: native capture disabled: reserving space in " +
                          recorder.trace_path() +
                          " failed: No space left on device; the trace ends at its last "
                          "complete record\n");
  recorder.Stop("exit");
  // The file is cut before the record that did not fit: every record in it is whole.
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_TRUE(p.stopped.empty()) << p.stopped;
  EXPECT_EQ(p.reserved_tail_bytes, 0u);
  EXPECT_EQ(fs::file_size(recorder.trace_path()), p.valid_bytes);
  EXPECT_LE(p.valid_bytes, vstrace::kMappedChunkBytes);
  EXPECT_EQ(p.records.size(), static_cast<size_t>(made - 1));
}

TEST_F(RecorderTest, NoSpaceForTheFirstChunkRecordsNothing) {
  RecorderOptions options = Options();
  options.allocate_fn = &FailingAllocate;
  g_chunks_left = 0;
  Recorder recorder(&cupti_, options);
  EXPECT_FALSE(recorder.Start());
  EXPECT_EQ(Stderr(), "vramscope: native capture disabled: reserving space in " +
                          recorder.trace_path() +
                          " failed: No space left on device; nothing was recorded\n");
  EXPECT_EQ(cupti_.unsubscribes, 0);
}

TEST_F(RecorderTest, AnotherProcessOfTheSameRankKeepsItsOwnFile) {
  std::ofstream(dir_ / "rank0.vstrace") << "first";
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  EXPECT_EQ(recorder.trace_path(), (dir_ / "rank0.pid777.vstrace").string());
  EXPECT_EQ(ReadFile(dir_ / "rank0.vstrace"), "first");
}

TEST_F(RecorderTest, CallbacksFromManyThreadsMakeAnIntactTrace) {
  Recorder recorder(&cupti_, Options());
  ASSERT_TRUE(recorder.Start());
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const CUdeviceptr address = 0x100000000ull * (t + 1) + 0x1000ull * i;
        VramscopeTestAllocateOnDevice3(&cupti_, address, 4096);
        nvtxRangePushA_params push{"work"};
        cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePushA, "nvtxRangePushA", &push);
        cuMemFree_v2_params free_params{address};
        cupti_.Driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", &free_params,
                      CUDA_SUCCESS, kContext3);
        nvtxRangePop_params pop{};
        cupti_.Nvtx(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", &pop);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  recorder.Stop("exit");
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  EXPECT_TRUE(p.stopped.empty()) << p.stopped;
  EXPECT_EQ(p.records.size(), size_t{kThreads} * kEach * 4 + 1);
  uint64_t last = 0;
  for (const Record& r : p.records) {
    EXPECT_GE(r.time_ns, last);  // stamped under the lock: in file order
    last = r.time_ns;
  }
  const std::string bytes = ReadFile(recorder.trace_path());
  auto trace = native_trace::TraceFromNativeTrace(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "t");
  ASSERT_TRUE(trace.ok());
  EXPECT_EQ(trace->allocations.size(), size_t{kThreads} * kEach);
  for (const auto& a : trace->allocations) EXPECT_NE(a.free_completed_event, model::kNoEvent);
}

TEST_F(RecorderTest, OptionsComeFromTheEnvironment) {
  ::setenv("RANK", "5", 1);
  ::setenv("VRAMSCOPE_CAPTURE_DIR", dir_.c_str(), 1);
  ::unsetenv("NVTX_INJECTION64_PATH");
  const RecorderOptions o = OptionsFromEnvironment();
  ::unsetenv("RANK");
  ::unsetenv("VRAMSCOPE_CAPTURE_DIR");
  EXPECT_EQ(o.capture_dir, dir_.string());
  ASSERT_TRUE(o.rank.has_value());
  EXPECT_EQ(*o.rank, 5);
  EXPECT_EQ(TraceLabel(o), "rank5");
  EXPECT_EQ(o.pid, static_cast<uint32_t>(::getpid()));
  EXPECT_GT(o.start_realtime_ns, 1'600'000'000'000'000'000u);
  std::map<std::string, std::string> facts(o.facts.begin(), o.facts.end());
  EXPECT_THAT(facts["nvtx"], StartsWith("NVTX_INJECTION64_PATH is not set"));
  EXPECT_THAT(facts["exe"], HasSubstr("capture_recorder_test"));
  RecorderOptions no_rank = o;
  no_rank.rank.reset();
  EXPECT_EQ(TraceLabel(no_rank), "pid" + std::to_string(::getpid()));
}

// Both unwinders, called from one function, return the same stack: the same addresses from the
// caller's caller out (the innermost differs: the two calls are at two places in the function).
__attribute__((noinline)) void CaptureWithBoth(const Unwinder& a, const Unwinder& b,
                                               std::vector<void*>* from_a,
                                               std::vector<void*>* from_b) {
  from_a->resize(64);
  from_b->resize(64);
  from_a->resize(static_cast<size_t>(a.Capture(from_a->data(), 64)));
  from_b->resize(static_cast<size_t>(b.Capture(from_b->data(), 64)));
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void CaptureFromDepth(int depth, const Unwinder& a, const Unwinder& b,
                                                std::vector<void*>* from_a,
                                                std::vector<void*>* from_b) {
  if (depth == 0) {
    CaptureWithBoth(a, b, from_a, from_b);
  } else {
    CaptureFromDepth(depth - 1, a, b, from_a, from_b);
  }
  asm volatile("" ::: "memory");
}

TEST(UnwinderTest, LibunwindAndGlibcReturnTheSameStack) {
  const Unwinder fast = Unwinder::Load("auto");
  const Unwinder glibc = Unwinder::Load("glibc");
  EXPECT_FALSE(glibc.fast());
  EXPECT_EQ(glibc.description(), "glibc backtrace() (VRAMSCOPE_NATIVE_UNWINDER=glibc)");
  if (!fast.fast()) GTEST_SKIP() << "libunwind.so.8 is not installed: " << fast.description();
  EXPECT_EQ(fast.description(), "libunwind unw_backtrace (libunwind.so.8)");
  std::vector<void*> from_fast;
  std::vector<void*> from_glibc;
  CaptureFromDepth(12, fast, glibc, &from_fast, &from_glibc);
  // glibc's goes through one more frame of ours first (GlibcBacktrace, in unwinder.cc), and
  // under ASan through the sanitizer's own backtrace() too: compare from the outside in, all
  // but the innermost frame of libunwind's (its call site in CaptureWithBoth).
  ASSERT_GE(from_fast.size(), 15u);
  ASSERT_GE(from_glibc.size(), from_fast.size() + 1);
  const std::vector<void*> outer_fast(from_fast.begin() + 1, from_fast.end());
  const std::vector<void*> outer_glibc(
      from_glibc.end() - static_cast<std::ptrdiff_t>(outer_fast.size()), from_glibc.end());
  EXPECT_EQ(outer_fast, outer_glibc);
}

TEST(UnwinderTest, AnUnknownSettingIsAutoAndSaidSo) {
  const Unwinder u = Unwinder::Load("frame-pointers");
  EXPECT_THAT(u.description(), HasSubstr("; VRAMSCOPE_NATIVE_UNWINDER=frame-pointers is not one "
                                         "of auto, libunwind, glibc, so auto was used"));
}

TEST_F(RecorderTest, TheUnwinderIsAProcessFact) {
  RecorderOptions options = Options();
  options.unwinder = "glibc";
  Recorder recorder(&cupti_, options);
  ASSERT_TRUE(recorder.Start());
  VramscopeTestAllocateOnDevice3(&cupti_, 0x7f0000000000, 4096);
  recorder.Stop("exit");
  const ParsedTrace p = ReadTrace(recorder.trace_path());
  ASSERT_EQ(p.facts.size(), 3u);
  EXPECT_EQ(p.facts[2], (std::pair<std::string, std::string>{
                            "unwinder", "glibc backtrace() (VRAMSCOPE_NATIVE_UNWINDER=glibc)"}));
  // glibc's stack names the test's function, as the default unwinder's does (the test above).
  ASSERT_FALSE(p.records.empty());
  EXPECT_EQ(p.records[0].kind, RecordKind::kAlloc);
  ASSERT_NE(p.records[0].stack, 0u);
  bool named = false;
  for (const uint32_t f : p.stacks.at(p.records[0].stack)) {
    const auto& frame = p.frames.at(f);
    named |= frame.symbol != 0 && p.strings.at(frame.symbol) == "VramscopeTestAllocateOnDevice3";
  }
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace vramscope::capture
