// The native capture's recorder: subscribes to CUPTI, decodes the driver API's allocation calls
// and NVTX ranges from the callbacks and appends them to a .vstrace file
// (docs/design/native-trace.md).
//
// It runs inside the user's process, so it never throws and never exits: every entry point is
// noexcept and catches everything, and on any failure (CUPTI will not subscribe, the file cannot
// be created, a write fails) it disables itself and prints exactly one line on stderr:
//   vramscope: native capture disabled: <what happened and what to do>
// Callbacks may come from any thread; one mutex serializes the recording (driver allocations are
// rare, and each record is a copy into the mapped file: vstrace::Writer).
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "native_capture/cupti_api.h"
#include "native_capture/unwinder.h"
#include "native_capture/vstrace_format.h"

namespace vramscope::capture {

struct RecorderOptions {
  std::string capture_dir;  // VRAMSCOPE_CAPTURE_DIR
  std::optional<int32_t> rank;
  uint32_t pid = 0;
  uint64_t start_realtime_ns = 0;  // CLOCK_REALTIME when the recorder starts
  std::vector<std::pair<std::string, std::string>> facts;  // written as process facts
  // Leading stack frames in this library, libcupti and libcuda are dropped (the capture's own
  // frames). Tests turn it off to see their own frames.
  bool skip_own_frames = true;
  int max_stack_frames = 64;
  // VRAMSCOPE_NATIVE_UNWINDER: how stacks are captured (native_capture/unwinder.h).
  std::string unwinder = "auto";
  // Set, records are written with it instead of a mapped file (tests make it fail).
  vstrace::WriteFunction write_fn = nullptr;
  vstrace::AllocateFunction allocate_fn = nullptr;  // posix_fallocate unless set (tests)
  int stderr_fd = 2;                                // where the one line goes
};

// RANK, VRAMSCOPE_CAPTURE_DIR, the pid, the clock and the process facts (exe, command line,
// hostname, whether NVTX reaches CUPTI) from the process's environment.
RecorderOptions OptionsFromEnvironment();

// "rank<RANK>" when a rank is set, else "pid<PID>".
std::string TraceLabel(const RecorderOptions& options);

class Recorder {
 public:
  Recorder(CuptiApi* api, RecorderOptions options);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Creates the trace file and subscribes to CUPTI. False when capture is disabled (the one
  // line was printed).
  bool Start() noexcept;
  // Writes the end record (`reason`: "exit") and stops recording; does not unsubscribe (at exit
  // CUPTI may already be shutting down). Idempotent.
  void Stop(std::string_view reason) noexcept;
  // Stops recording without a word: a forked child must not write into its parent's trace.
  void Silence() noexcept { disabled_.store(true); }
  bool disabled() const { return disabled_.load(); }
  const std::string& trace_path() const { return trace_path_; }

  // The function CUPTI calls; `userdata` is the Recorder.
  static void CUPTIAPI Callback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                const void* cbdata) noexcept;

  // The driver API callbacks the recorder enables (CUPTI_CB_DOMAIN_DRIVER_API).
  static const std::vector<CUpti_CallbackId>& DriverCallbacks();

 private:
  struct PcInfo {
    uint32_t frame = 0;
    bool internal = false;  // a frame of the capture itself (dropped when leading)
  };
  // One decoded call, ready to record.
  struct Event {
    vstrace::RecordKind kind;
    CUcontext context = nullptr;
    int32_t device = -1;  // >= 0: known without the context (cuMemCreate's location)
    bool with_stack = true;
    vstrace::Encoder fields;  // the fields after the event prefix
  };

  void OnDriver(CUpti_CallbackId cbid, const CUpti_CallbackData& data);
  void OnNvtx(CUpti_CallbackId cbid, const CUpti_NvtxData& data);
  void RecordEvent(Event& event);
  // Writes under the lock; on failure returns false with `error` set (the caller disables
  // after releasing the lock: unsubscribing may wait for callbacks that wait for the lock).
  bool WriteLocked(std::string_view bytes, std::string* error);
  // Writes the end record and closes the file (cut at its last record); ended_ after.
  void EndLocked(std::string_view reason);
  uint64_t TimestampLocked();
  int32_t DeviceLocked(CUcontext context);
  uint32_t StringLocked(std::string_view text, std::string& defs);
  uint32_t StackLocked(void* const* pcs, int count, std::string& defs);
  PcInfo FrameLocked(void* pc, std::string& defs);
  // Stops recording, prints the one line (once), unsubscribes; with `write_end`, first records
  // why in an end record. Never called with the lock held.
  void Disable(const std::string& what, bool write_end) noexcept;

  CuptiApi* api_;
  RecorderOptions options_;
  std::string trace_path_;
  std::atomic<bool> disabled_{false};
  std::atomic<bool> announced_{false};
  bool subscribed_ = false;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  const void* own_module_ = nullptr;
  std::optional<Unwinder> unwinder_;  // set by Start, before the first callback

  std::mutex mu_;  // guards everything below
  std::unique_ptr<vstrace::Writer> writer_;
  bool ended_ = false;
  uint64_t last_timestamp_ = 0;
  std::unordered_map<CUcontext, int32_t> devices_;
  std::unordered_map<std::string, uint32_t> strings_;
  std::unordered_map<void*, PcInfo> pcs_;
  // Raw pcs -> stack id, by a hash of the pcs (looked up without allocating: a training loop
  // repeats its stacks, so almost every event finds its stack here).
  struct RawStack {
    std::vector<void*> pcs;
    uint32_t id = 0;
  };
  std::unordered_multimap<uint64_t, RawStack> raw_stacks_;
  std::unordered_map<std::string, uint32_t> stacks_by_frames_;  // frame ids -> stack id
  std::string record_scratch_;                                  // RecordEvent's bytes
  vstrace::Encoder payload_scratch_;                            // RecordEvent's payload
  uint32_t next_frame_ = 1;
  uint32_t next_stack_ = 1;
};

}  // namespace vramscope::capture
