#include "cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace vramscope::cli {

namespace {

CancelToken g_token;
std::atomic<int> g_signals{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnInterrupt(int) {
  // Async-signal-safe only: a lock-free store, then at the second signal _exit.
  if (g_signals.fetch_add(1, std::memory_order_relaxed) > 0) _exit(130);
  g_token.Cancel();
}

}  // namespace

const CancelToken& InterruptToken() { return g_token; }

void InstallInterruptHandler() {
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace vramscope::cli
