#include "native_capture/recorder.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <generated_nvtx_meta.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>

namespace vramscope::capture {

namespace {

// Its own copy of common/path_names.h's PathBasename: the recorder's library depends on no
// other stage (docs/design/architecture.md).
std::string_view Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

using vstrace::Api;
using vstrace::Encoder;
using vstrace::RecordKind;

constexpr int kMaxFrames = 128;

uint32_t ThreadId() {
  thread_local const auto tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return tid;
}

std::string ReadSmallFile(const char* path, size_t max_bytes) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string out(max_bytes, '\0');
  size_t done = 0;
  while (done < max_bytes) {
    const ssize_t n = ::read(fd, out.data() + done, max_bytes - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

// An NVTX message as UTF-8 (wide strings: their code points, best effort).
std::string MessageOf(const nvtxEventAttributes_t* attributes) {
  if (attributes == nullptr) return "<no attributes>";
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return attributes->message.ascii != nullptr ? attributes->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE: {
      std::string out;
      const wchar_t* w = attributes->message.unicode;
      for (size_t i = 0; w != nullptr && w[i] != 0 && out.size() < vstrace::kMaxNameBytes; ++i) {
        const auto c = static_cast<uint32_t>(w[i]);
        if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else if (c < 0x800) {
          out.push_back(static_cast<char>(0xC0 | (c >> 6)));
          out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else if (c < 0x10000) {
          out.push_back(static_cast<char>(0xE0 | (c >> 12)));
          out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
          out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        } else {
          out.push_back('?');
        }
      }
      return out;
    }
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return "<registered string>";
    default:
      return "<unnamed>";
  }
}

// A 64-bit hash of a stack's return addresses (a multiply-xorshift mix per address).
uint64_t HashPcs(void* const* pcs, int count) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(count);
  for (int i = 0; i < count; ++i) {
    h ^= static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pcs[i]));
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  return h;
}

std::string Text(const char* s) { return s != nullptr ? std::string(s) : std::string(); }

}  // namespace

RecorderOptions OptionsFromEnvironment() {
  RecorderOptions o;
  if (const char* dir = std::getenv("VRAMSCOPE_CAPTURE_DIR")) o.capture_dir = dir;
  if (const char* unwinder = std::getenv("VRAMSCOPE_NATIVE_UNWINDER")) o.unwinder = unwinder;
  if (const char* rank = std::getenv("RANK"); rank != nullptr && *rank != '\0') {
    char* end = nullptr;
    const long value = std::strtol(rank, &end, 10);
    if (end != nullptr && *end == '\0' && value >= 0 && value < (1L << 30)) {
      o.rank = static_cast<int32_t>(value);
    }
  }
  o.pid = static_cast<uint32_t>(::getpid());
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  o.start_realtime_ns =
      static_cast<uint64_t>(now.tv_sec) * 1000000000u + static_cast<uint64_t>(now.tv_nsec);

  char buffer[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n > 0) o.facts.emplace_back("exe", std::string(buffer, static_cast<size_t>(n)));
  std::string cmdline = ReadSmallFile("/proc/self/cmdline", 8192);
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.pop_back();
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  if (!cmdline.empty()) o.facts.emplace_back("cmdline", cmdline);
  if (::gethostname(buffer, sizeof(buffer)) == 0) {
    buffer[sizeof(buffer) - 1] = '\0';
    o.facts.emplace_back("hostname", buffer);
  }
  for (const char* name : {"LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"}) {
    if (const char* value = std::getenv(name)) o.facts.emplace_back(name, value);
  }
  const char* nvtx = std::getenv("NVTX_INJECTION64_PATH");
  if (nvtx == nullptr || *nvtx == '\0') {
    o.facts.emplace_back("nvtx",
                         "NVTX_INJECTION64_PATH is not set (vramscope run --native sets it to "
                         "libcupti.so, which forwards NVTX calls to CUPTI)");
  } else if (std::string_view(nvtx).find("libcupti") == std::string_view::npos) {
    o.facts.emplace_back("nvtx", std::string("NVTX_INJECTION64_PATH is ") + nvtx +
                                     ", not libcupti.so: another tool receives the NVTX calls");
  } else {
    o.facts.emplace_back("nvtx", "on");
  }
  return o;
}

std::string TraceLabel(const RecorderOptions& options) {
  return options.rank ? "rank" + std::to_string(*options.rank)
                      : "pid" + std::to_string(options.pid);
}

const std::vector<CUpti_CallbackId>& Recorder::DriverCallbacks() {
  static const std::vector<CUpti_CallbackId> kCallbacks = {
      CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
      CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
      CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
      CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
      CUPTI_DRIVER_TRACE_CBID_cuMemMap,
      CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
      CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve,
      CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
      CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
      CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
      CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
  };
  return kCallbacks;
}

Recorder::Recorder(CuptiApi* api, RecorderOptions options)
    : api_(api), options_(std::move(options)) {}

Recorder::~Recorder() = default;

bool Recorder::Start() noexcept {
  try {
    if (options_.capture_dir.empty()) {
      Disable("VRAMSCOPE_CAPTURE_DIR is not set; run the program under `vramscope run --native`",
              false);
      return false;
    }
    Dl_info self{};
    if (::dladdr(reinterpret_cast<void*>(&Recorder::Callback), &self) != 0) {
      own_module_ = self.dli_fbase;
    }
    unwinder_ = Unwinder::Load(options_.unwinder);

    vstrace::Header header;
    header.pid = options_.pid;
    header.rank = options_.rank.value_or(-1);
    header.start_realtime_ns = options_.start_realtime_ns;
    uint64_t now = 0;
    if (api_->GetTimestamp(&now) != CUPTI_SUCCESS) now = 0;
    header.start_clock_ns = now;
    last_timestamp_ = now;
    header.clock = "cuptiGetTimestamp, ns";
    const std::string label = TraceLabel(options_);
    trace_path_ = options_.capture_dir + "/" + label + ".vstrace";
    std::string error;
    if (::access(trace_path_.c_str(), F_OK) == 0) {
      // Another process of the same rank (a helper that initialized CUDA): keep both.
      trace_path_ =
          options_.capture_dir + "/" + label + ".pid" + std::to_string(options_.pid) + ".vstrace";
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      writer_ = vstrace::Writer::Create(trace_path_, header, &error, options_.write_fn,
                                        options_.allocate_fn);
      if (writer_ != nullptr) {
        std::string facts;
        auto all_facts = options_.facts;
        all_facts.emplace_back("unwinder", unwinder_->description());
        for (const auto& [key, value] : all_facts) {
          Encoder e;
          e.U16(static_cast<uint16_t>(std::min<size_t>(key.size(), 256)))
              .Bytes(std::string_view(key).substr(0, 256))
              .Text32(value, 8192);
          facts += vstrace::EncodeRecord(RecordKind::kProcessFact, e.bytes());
        }
        if (!WriteLocked(facts, &error)) {
          writer_.reset();
          error += "; nothing was recorded";
        }
      } else if (error.rfind("cannot create", 0) == 0) {
        error += "; check that VRAMSCOPE_CAPTURE_DIR exists and is writable";
      } else {
        error += "; nothing was recorded";
      }
    }
    if (writer_ == nullptr) {
      Disable(error, false);
      return false;
    }

    const CUptiResult subscribed = api_->Subscribe(
        &subscriber_, reinterpret_cast<CUpti_CallbackFunc>(&Recorder::Callback), this);
    if (subscribed != CUPTI_SUCCESS) {
      const bool taken = subscribed == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
      Disable(std::string("CUPTI would not subscribe (") + api_->ResultString(subscribed) +
                  (taken ? "): another tool holds CUPTI (Nsight Systems or Compute, a "
                           "framework's profiler); run without it, or without --native"
                         : "): check that the NVIDIA driver works and is at least as new as "
                           "the CUDA toolkit whose CUPTI was loaded"),
              true);
      return false;
    }
    subscribed_ = true;
    for (const CUpti_CallbackId cbid : DriverCallbacks()) {
      const CUptiResult r = api_->EnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
      if (r != CUPTI_SUCCESS) {
        Disable(std::string("CUPTI would not enable the driver API callback ") +
                    std::to_string(cbid) + " (" + api_->ResultString(r) +
                    "); the CUDA driver may be older than the CUPTI vramscope found",
                true);
        return false;
      }
    }
    const CUptiResult nvtx = api_->EnableDomain(1, subscriber_, CUPTI_CB_DOMAIN_NVTX);
    if (nvtx != CUPTI_SUCCESS) {
      Encoder e;
      e.U16(4).Bytes("nvtx").Text32(std::string("CUPTI would not enable NVTX callbacks (") +
                                    api_->ResultString(nvtx) + ")");
      std::string write_error;
      bool ok;
      {
        std::lock_guard<std::mutex> lock(mu_);
        ok = WriteLocked(vstrace::EncodeRecord(RecordKind::kProcessFact, e.bytes()), &write_error);
      }
      if (!ok) {
        Disable(write_error, false);
        return false;
      }
    }
    return true;
  } catch (const std::exception& e) {
    Disable(std::string("internal error while starting: ") + e.what() +
                "; please report it with the program's command line",
            false);
  } catch (...) {
    Disable("internal error while starting; please report it with the program's command line",
            false);
  }
  return false;
}

void Recorder::Stop(std::string_view reason) noexcept {
  try {
    if (disabled_.exchange(true)) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (writer_ == nullptr || ended_) return;
    EndLocked(reason);
  } catch (...) {
    // At exit there is nobody left to tell.
  }
}

void Recorder::Disable(const std::string& what, bool write_end) noexcept {
  try {
    if (announced_.exchange(true)) return;
    disabled_.store(true);
    if (write_end) {
      std::lock_guard<std::mutex> lock(mu_);
      if (writer_ != nullptr && !ended_) EndLocked("disabled: " + what);
    }
    std::string line = "vramscope: native capture disabled: " + what;
    std::replace(line.begin(), line.end(), '\n', ' ');
    line.push_back('\n');
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(options_.stderr_fd, line.data() + done, line.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (subscribed_) {
      subscribed_ = false;
      api_->Unsubscribe(subscriber_);
    }
  } catch (...) {
    disabled_.store(true);
  }
}

void CUPTIAPI Recorder::Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void* cbdata) noexcept {
  auto* self = static_cast<Recorder*>(userdata);
  if (self == nullptr || cbdata == nullptr || self->disabled_.load(std::memory_order_relaxed)) {
    return;
  }
  try {
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      self->OnDriver(cbid, *static_cast<const CUpti_CallbackData*>(cbdata));
    } else if (domain == CUPTI_CB_DOMAIN_NVTX) {
      self->OnNvtx(cbid, *static_cast<const CUpti_NvtxData*>(cbdata));
    }
  } catch (const std::exception& e) {
    self->Disable(std::string("internal error in a CUPTI callback: ") + e.what() +
                      "; please report it with the program's command line",
                  true);
  } catch (...) {
    self->Disable(
        "internal error in a CUPTI callback; please report it with the program's command line",
        true);
  }
}

void Recorder::OnDriver(CUpti_CallbackId cbid, const CUpti_CallbackData& data) {
  if (data.callbackSite != CUPTI_API_EXIT || data.functionParams == nullptr) return;
  const CUresult result = data.functionReturnValue != nullptr
                              ? *static_cast<const CUresult*>(data.functionReturnValue)
                              : CUDA_SUCCESS;
  const bool ok = result == CUDA_SUCCESS;
  Event e{};
  e.context = data.context;
  // An allocation: its record when it succeeded, a failed-alloc record when it did not.
  auto alloc = [&](Api api, const CUdeviceptr* out, uint64_t bytes, CUstream stream) {
    const auto stream_id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream));
    if (ok && out != nullptr) {
      e.kind = RecordKind::kAlloc;
      e.fields.U8(static_cast<uint8_t>(api)).U64(*out).U64(bytes).U64(stream_id);
    } else {
      e.kind = RecordKind::kAllocFailed;
      e.fields.U8(static_cast<uint8_t>(api))
          .U64(bytes)
          .U64(stream_id)
          .U32(static_cast<uint32_t>(result));
    }
    RecordEvent(e);
  };
  auto release = [&](Api api, CUdeviceptr address, CUstream stream) {
    if (!ok) return;
    e.kind = RecordKind::kFree;
    e.fields.U8(static_cast<uint8_t>(api))
        .U64(address)
        .U64(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(stream)));
    RecordEvent(e);
  };
  auto range = [&](RecordKind kind, CUdeviceptr address, size_t bytes) {
    if (!ok) return;
    e.kind = kind;
    e.fields.U64(address).U64(bytes);
    RecordEvent(e);
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      const auto* p = static_cast<const cuMemAlloc_v2_params*>(data.functionParams);
      alloc(Api::kMemAlloc, p->dptr, p->bytesize, nullptr);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const auto* p = static_cast<const cuMemAllocPitch_v2_params*>(data.functionParams);
      const uint64_t width = ok && p->pPitch != nullptr ? *p->pPitch : p->WidthInBytes;
      alloc(Api::kMemAllocPitch, p->dptr, width * p->Height, nullptr);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      const auto* p = static_cast<const cuMemAllocManaged_params*>(data.functionParams);
      alloc(Api::kMemAllocManaged, p->dptr, p->bytesize, nullptr);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync: {
      const auto* p = static_cast<const cuMemAllocAsync_params*>(data.functionParams);
      alloc(Api::kMemAllocAsync, p->dptr, p->bytesize, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      const auto* p = static_cast<const cuMemAllocAsync_ptsz_params*>(data.functionParams);
      alloc(Api::kMemAllocAsync, p->dptr, p->bytesize, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync: {
      const auto* p = static_cast<const cuMemAllocFromPoolAsync_params*>(data.functionParams);
      alloc(Api::kMemAllocFromPoolAsync, p->dptr, p->bytesize, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      const auto* p = static_cast<const cuMemAllocFromPoolAsync_ptsz_params*>(data.functionParams);
      alloc(Api::kMemAllocFromPoolAsync, p->dptr, p->bytesize, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: {
      const auto* p = static_cast<const cuMemFree_v2_params*>(data.functionParams);
      release(Api::kMemFree, p->dptr, nullptr);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync: {
      const auto* p = static_cast<const cuMemFreeAsync_params*>(data.functionParams);
      release(Api::kMemFreeAsync, p->dptr, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      const auto* p = static_cast<const cuMemFreeAsync_ptsz_params*>(data.functionParams);
      release(Api::kMemFreeAsync, p->dptr, p->hStream);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      const auto* p = static_cast<const cuMemCreate_params*>(data.functionParams);
      if (!ok || p->handle == nullptr) return;
      int32_t location = -1;
      if (p->prop != nullptr && p->prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        location = p->prop->location.id;
      }
      e.kind = RecordKind::kVmmCreate;
      e.device = location;
      e.fields.U64(static_cast<uint64_t>(*p->handle)).U64(p->size).I32(location);
      RecordEvent(e);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: {
      const auto* p = static_cast<const cuMemRelease_params*>(data.functionParams);
      if (!ok) return;
      e.kind = RecordKind::kVmmRelease;
      e.fields.U64(static_cast<uint64_t>(p->handle));
      RecordEvent(e);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      const auto* p = static_cast<const cuMemMap_params*>(data.functionParams);
      if (!ok) return;
      e.kind = RecordKind::kVmmMap;
      e.fields.U64(p->ptr).U64(p->size).U64(p->offset).U64(static_cast<uint64_t>(p->handle));
      RecordEvent(e);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      const auto* p = static_cast<const cuMemUnmap_params*>(data.functionParams);
      range(RecordKind::kVmmUnmap, p->ptr, p->size);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve: {
      const auto* p = static_cast<const cuMemAddressReserve_params*>(data.functionParams);
      if (p->ptr == nullptr) return;
      range(RecordKind::kVaReserve, *p->ptr, p->size);
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree: {
      const auto* p = static_cast<const cuMemAddressFree_params*>(data.functionParams);
      range(RecordKind::kVaFree, p->ptr, p->size);
      return;
    }
    default:
      return;
  }
}

void Recorder::OnNvtx(CUpti_CallbackId cbid, const CUpti_NvtxData& data) {
  const void* params = data.functionParams;
  if (params == nullptr && cbid != CUPTI_CBID_NVTX_nvtxRangePop) return;
  Encoder fields;
  RecordKind kind;
  const auto range_id = [&]() -> uint64_t {
    return data.functionReturnValue != nullptr
               ? *static_cast<const nvtxRangeId_t*>(data.functionReturnValue)
               : 0;
  };
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
      kind = RecordKind::kNvtxPush;
      fields.Text32(Text(static_cast<const nvtxRangePushA_params*>(params)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
      kind = RecordKind::kNvtxPush;
      fields.Text32(MessageOf(static_cast<const nvtxRangePushEx_params*>(params)->eventAttrib));
      break;
    case CUPTI_CBID_NVTX_nvtxRangePop:
      kind = RecordKind::kNvtxPop;
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartA:
      kind = RecordKind::kNvtxStart;
      fields.U64(range_id())
          .Text32(Text(static_cast<const nvtxRangeStartA_params*>(params)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
      kind = RecordKind::kNvtxStart;
      fields.U64(range_id())
          .Text32(MessageOf(static_cast<const nvtxRangeStartEx_params*>(params)->eventAttrib));
      break;
    case CUPTI_CBID_NVTX_nvtxRangeEnd:
      kind = RecordKind::kNvtxEnd;
      fields.U64(static_cast<const nvtxRangeEnd_params*>(params)->id);
      break;
    case CUPTI_CBID_NVTX_nvtxMarkA:
      kind = RecordKind::kNvtxMark;
      fields.Text32(Text(static_cast<const nvtxMarkA_params*>(params)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxMarkEx:
      kind = RecordKind::kNvtxMark;
      fields.Text32(MessageOf(static_cast<const nvtxMarkEx_params*>(params)->eventAttrib));
      break;
    default:
      return;
  }
  const uint32_t tid = ThreadId();
  std::string error;
  bool ok = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || writer_ == nullptr) return;
    Encoder payload;
    payload.U64(TimestampLocked()).U32(tid).Bytes(fields.bytes());
    ok = WriteLocked(vstrace::EncodeRecord(kind, payload.bytes()), &error);
  }
  if (!ok) Disable(error + "; the trace ends at its last complete record", false);
}

void Recorder::RecordEvent(Event& e) {
  void* pcs[kMaxFrames];
  const int count =
      e.with_stack && unwinder_
          ? unwinder_->Capture(pcs, std::clamp(options_.max_stack_frames, 1, kMaxFrames))
          : 0;
  const uint32_t tid = ThreadId();
  std::string error;
  bool ok = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_ || writer_ == nullptr) return;
    // Scratch buffers kept across events: no allocation once they have grown.
    std::string& bytes = record_scratch_;
    bytes.clear();
    const uint64_t time = TimestampLocked();
    const int32_t device = e.device >= 0 ? e.device : DeviceLocked(e.context);
    const uint32_t stack = count > 0 ? StackLocked(pcs, count, bytes) : 0;
    payload_scratch_.mutable_bytes().clear();
    payload_scratch_.U64(time).U32(tid).I32(device).U32(stack).Bytes(e.fields.bytes());
    vstrace::AppendRecord(bytes, e.kind, payload_scratch_.bytes());
    ok = WriteLocked(bytes, &error);
  }
  if (!ok) Disable(error + "; the trace ends at its last complete record", false);
}

bool Recorder::WriteLocked(std::string_view bytes, std::string* error) {
  if (writer_ == nullptr) return false;
  if (bytes.empty()) return true;
  if (writer_->AppendEncoded(bytes, error)) return true;
  ended_ = true;  // nothing more goes into a file that failed
  std::string ignored;
  writer_->Close(&ignored);
  return false;
}

void Recorder::EndLocked(std::string_view reason) {
  ended_ = true;
  Encoder e;
  e.U64(TimestampLocked()).Text32(reason);
  std::string ignored;
  writer_->AppendEncoded(vstrace::EncodeRecord(RecordKind::kEnd, e.bytes()), &ignored);
  writer_->Close(&ignored);
}

uint64_t Recorder::TimestampLocked() {
  uint64_t now = 0;
  if (api_->GetTimestamp(&now) != CUPTI_SUCCESS) now = last_timestamp_;
  last_timestamp_ = std::max(last_timestamp_, now);
  return last_timestamp_;
}

int32_t Recorder::DeviceLocked(CUcontext context) {
  if (context == nullptr) return -1;
  if (const auto it = devices_.find(context); it != devices_.end()) return it->second;
  uint32_t device = 0;
  const int32_t id =
      api_->GetDeviceId(context, &device) == CUPTI_SUCCESS ? static_cast<int32_t>(device) : -1;
  devices_.emplace(context, id);
  return id;
}

uint32_t Recorder::StringLocked(std::string_view text, std::string& defs) {
  if (text.empty()) return 0;
  const auto [it, added] =
      strings_.emplace(std::string(text), static_cast<uint32_t>(strings_.size() + 1));
  if (added) {
    Encoder e;
    e.U32(it->second).Text32(text, 16384);
    defs += vstrace::EncodeRecord(RecordKind::kString, e.bytes());
  }
  return it->second;
}

Recorder::PcInfo Recorder::FrameLocked(void* pc, std::string& defs) {
  if (const auto it = pcs_.find(pc); it != pcs_.end()) return it->second;
  Dl_info info{};
  const bool found = ::dladdr(pc, &info) != 0;
  const std::string_view module = found && info.dli_fname != nullptr ? info.dli_fname : "";
  PcInfo out;
  if (options_.skip_own_frames && found) {
    const std::string_view base = Basename(module);
    out.internal = info.dli_fbase == own_module_ || base.substr(0, 8) == "libcupti" ||
                   base.substr(0, 10) == "libcuda.so";
  }
  const uint32_t module_id = StringLocked(module, defs);
  const uint32_t symbol_id =
      found && info.dli_sname != nullptr ? StringLocked(info.dli_sname, defs) : 0;
  const auto address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pc));
  const uint64_t base =
      found ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(info.dli_fbase)) : 0;
  out.frame = next_frame_++;
  Encoder e;
  e.U32(out.frame).U64(address).U32(module_id).U64(address - base).U32(symbol_id);
  defs += vstrace::EncodeRecord(RecordKind::kFrame, e.bytes());
  pcs_.emplace(pc, out);
  return out;
}

uint32_t Recorder::StackLocked(void* const* pcs, int count, std::string& defs) {
  const uint64_t hash = HashPcs(pcs, count);
  const auto [first, last] = raw_stacks_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const std::vector<void*>& known = it->second.pcs;
    if (known.size() == static_cast<size_t>(count) && std::equal(known.begin(), known.end(), pcs)) {
      return it->second.id;
    }
  }
  std::vector<uint32_t> frames;
  bool leading = true;
  for (int i = 0; i < count; ++i) {
    const PcInfo info = FrameLocked(pcs[i], defs);
    if (leading && info.internal) continue;
    leading = false;
    if (frames.size() < vstrace::kMaxStackFrames) frames.push_back(info.frame);
  }
  uint32_t id = 0;
  if (!frames.empty()) {
    std::string key(reinterpret_cast<const char*>(frames.data()), frames.size() * 4);
    const auto [it, added] = stacks_by_frames_.emplace(std::move(key), next_stack_);
    id = it->second;
    if (added) {
      ++next_stack_;
      Encoder e;
      e.U32(id).U16(static_cast<uint16_t>(frames.size()));
      for (const uint32_t f : frames) e.U32(f);
      defs += vstrace::EncodeRecord(RecordKind::kStack, e.bytes());
    }
  }
  raw_stacks_.emplace(hash, RawStack{std::vector<void*>(pcs, pcs + count), id});
  return id;
}

}  // namespace vramscope::capture
