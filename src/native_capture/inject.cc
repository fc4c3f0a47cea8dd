// libvramscope_inject.so: the native capture, loaded by the CUDA driver when the process
// initializes CUDA because CUDA_INJECTION64_PATH names it (`vramscope run --native` sets it,
// with NVTX_INJECTION64_PATH pointing at libcupti.so so that NVTX ranges reach CUPTI, and
// VRAMSCOPE_CAPTURE_DIR). See docs/design/native-trace.md.
//
// The driver calls InitializeInjection once. From then on the recorder (recorder.h) appends to
// $VRAMSCOPE_CAPTURE_DIR/<label>.vstrace; at exit it writes an end record. Nothing here throws
// into the host or exits it: on failure capture is disabled with one line on stderr.
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <string>

#include "native_capture/cupti_api.h"
#include "native_capture/recorder.h"

namespace {

using vramscope::capture::Recorder;

// Both live until the process ends: callbacks may arrive from other threads while static
// destructors run, so they are never destroyed.
vramscope::capture::CuptiApi* g_api = nullptr;
Recorder* g_recorder = nullptr;

void StopAtExit() {
  if (g_recorder != nullptr) g_recorder->Stop("exit");
}

// A forked child shares the parent's file; it must not write into the parent's trace.
void SilenceInChild() {
  if (g_recorder != nullptr) g_recorder->Silence();
}

void Announce(const std::string& what) {
  const std::string line = "vramscope: native capture disabled: " + what + "\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) noexcept {
  try {
    if (g_recorder != nullptr) return 1;  // called twice: already recording
    std::string error;
    std::unique_ptr<vramscope::capture::CuptiApi> api = vramscope::capture::LoadCupti(&error);
    if (api == nullptr) {
      Announce(error);
      return 0;
    }
    vramscope::capture::RecorderOptions options = vramscope::capture::OptionsFromEnvironment();
    options.facts.emplace_back("cupti", api->Describe());
    g_api = api.release();
    g_recorder = new Recorder(g_api, std::move(options));
    if (!g_recorder->Start()) return 0;
    std::atexit(&StopAtExit);
    pthread_atfork(nullptr, nullptr, &SilenceInChild);
    return 1;
  } catch (...) {
    Announce("internal error while starting; please report it with the program's command line");
  }
  return 0;
}
