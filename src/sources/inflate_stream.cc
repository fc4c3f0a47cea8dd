#include "sources/inflate_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "sources/inflate_input.h"

namespace vramscope::sources {

InflatingSource::InflatingSource(const MappedFile& file, const InputLimits& limits)
    : thread_([this, &file, limits] { Inflate(file, limits); }) {}

InflatingSource::~InflatingSource() { Stop(); }

void InflatingSource::Stop() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void InflatingSource::Inflate(const MappedFile& file, const InputLimits& limits) {
  const std::string& what = file.path();
  const uint64_t compressed = file.bytes().size();
  const uint64_t limit = InflatedBound(compressed, limits);
  uint64_t produced = 0;
  GzipCut cut;
  Status status = GunzipChunks(
      file.bytes(), what,
      [&](std::string_view chunk) -> Status {
        produced += chunk.size();
        if (produced > limit) return TooMuchInflated(what, compressed, limits);
        std::unique_lock lock(mutex_);
        room_.wait(lock, [&] { return stop_ || queue_.size() < kQueuedChunks; });
        if (stop_) return Interrupted("the reader stopped");
        queue_.emplace_back(chunk);
        lock.unlock();
        ready_.notify_one();
        return Status::Ok();
      },
      &cut);
  {
    const std::lock_guard lock(mutex_);
    status_ = std::move(status);
    cut_ = cut;
    finished_ = true;
  }
  ready_.notify_all();
}

bool InflatingSource::NextChunk() {
  std::unique_lock lock(mutex_);
  ready_.wait(lock, [&] { return finished_ || !queue_.empty(); });
  if (queue_.empty()) return false;
  current_ = std::move(queue_.front());
  queue_.pop_front();
  current_at_ = 0;
  lock.unlock();
  room_.notify_one();
  return true;
}

std::string_view InflatingSource::Peek(size_t n) {
  // The head is gathered into current_ (a chunk is 64 KiB, so this is rarely more than one).
  while (current_.size() - current_at_ < n) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return finished_ || !queue_.empty(); });
    if (queue_.empty()) break;
    current_.append(queue_.front());
    queue_.pop_front();
    lock.unlock();
    room_.notify_one();
  }
  return std::string_view(current_).substr(current_at_, n);
}

size_t InflatingSource::Read(char* out, size_t size) {
  size_t done = 0;
  while (done < size) {
    if (current_at_ == current_.size()) {
      // Hand over what there is before waiting for more: the parser works while this inflates.
      if (done > 0) {
        const std::lock_guard lock(mutex_);
        if (queue_.empty()) break;
      }
      if (!NextChunk()) break;
    }
    const size_t n = std::min(size - done, current_.size() - current_at_);
    std::memcpy(out + done, current_.data() + current_at_, n);
    current_at_ += n;
    done += n;
  }
  return done;
}

}  // namespace vramscope::sources
