#include "common/atomic_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>

namespace vramscope {

namespace {

// Temporary paths alive right now, for the signal handler. Fixed-size and lock-free: a handler
// may only touch async-signal-safe state.
constexpr size_t kMaxPending = 16;
std::array<std::atomic<const char*>, kMaxPending> g_pending{};

void Register(const std::string& path) {
  for (auto& slot : g_pending) {
    const char* expected = nullptr;
    if (slot.compare_exchange_strong(expected, path.c_str())) return;
  }
}
void Unregister(const std::string& path) {
  for (auto& slot : g_pending) {
    const char* expected = path.c_str();
    if (slot.compare_exchange_strong(expected, nullptr)) return;
  }
}

extern "C" void OnInterrupt(int) {
  for (auto& slot : g_pending) {
    if (const char* p = slot.load()) unlink(p);
  }
  _exit(130);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void InstallInterruptCleanup() {
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);
}

Result<AtomicOutput> AtomicOutput::Prepare(const std::string& target, bool overwrite) {
  if (target.empty()) return UsageError("the output path is empty");
  struct stat st {};
  if (stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return InvalidInput(
          fmt::format("{}: is a directory; give a file name for the report", target));
    }
    if (!overwrite) {
      return InvalidInput(fmt::format("{}: already exists; pass --force to overwrite it", target));
    }
  }
  const std::string dir = DirName(target);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidInput(fmt::format("{}: the folder {} does not exist", target, dir));
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return InvalidInput(
        fmt::format("{}: cannot write into {}: {}", target, dir, std::strerror(errno)));
  }
  std::random_device rd;
  const std::string temp =
      fmt::format("{}/.{}.tmp-{}-{:08x}", dir, BaseName(target), getpid(), rd());
  return AtomicOutput(target, temp, overwrite);
}

AtomicOutput::AtomicOutput(std::string target, std::string temp, bool overwrite)
    : target_(std::move(target)), temp_(std::move(temp)), overwrite_(overwrite) {
  Register(temp_);
}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : target_(std::move(other.target_)),
      temp_(),
      overwrite_(other.overwrite_),
      committed_(other.committed_) {
  Unregister(other.temp_);
  temp_ = std::move(other.temp_);
  other.temp_.clear();
  other.committed_ = true;
  if (!committed_) Register(temp_);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !temp_.empty()) {
    unlink(temp_.c_str());
    Unregister(temp_);
  }
}

Status AtomicOutput::Commit() {
  int rc;
  if (overwrite_) {
    rc = rename(temp_.c_str(), target_.c_str());
  } else {
    // Refuses to replace a file that appeared since Prepare().
    rc = renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      // Filesystems without RENAME_NOREPLACE: link() also refuses an existing target.
      rc = link(temp_.c_str(), target_.c_str());
      if (rc == 0) unlink(temp_.c_str());
    }
  }
  if (rc != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return InvalidInput(
          fmt::format("{}: appeared while the report was being written; pass "
                      "--force to overwrite it",
                      target_));
    }
    return InvalidInput(fmt::format("{}: cannot move the finished report into place: {}", target_,
                                    std::strerror(err)));
  }
  committed_ = true;
  Unregister(temp_);
  return Status::Ok();
}

}  // namespace vramscope
