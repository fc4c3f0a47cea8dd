#include "common/atomic_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace vramscope {

namespace {

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
    : target_(std::move(target)), temp_(std::move(temp)), overwrite_(overwrite) {}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : target_(std::move(other.target_)),
      temp_(),
      overwrite_(other.overwrite_),
      committed_(other.committed_) {
  temp_ = std::move(other.temp_);
  other.temp_.clear();
  other.committed_ = true;
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !temp_.empty()) unlink(temp_.c_str());
}

Status AtomicOutput::WriteAll(std::string_view bytes, const Control& control) {
  std::FILE* f = std::fopen(temp_.c_str(), "wb");
  if (f == nullptr) {
    return InvalidInput(
        fmt::format("{}: cannot write {}: {}", target_, temp_, std::strerror(errno)));
  }
  size_t done = 0;
  Status status;
  while (done < bytes.size()) {
    if (status = control.CheckCancelled("writing the output"); !status.ok()) break;
    const size_t n = std::min(kWriteChunk, bytes.size() - done);
    if (std::fwrite(bytes.data() + done, 1, n, f) != n) {
      status =
          InvalidInput(fmt::format("{}: writing it failed: {}", target_, std::strerror(errno)));
      break;
    }
    done += n;
    control.Update(done, bytes.size());
  }
  if (std::fclose(f) != 0 && status.ok()) {
    status = InvalidInput(fmt::format("{}: writing it failed: {}", target_, std::strerror(errno)));
  }
  if (status.ok()) status = control.CheckCancelled("writing the output");
  return status;
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
  return Status::Ok();
}

}  // namespace vramscope
