// A gzipped input inflated on a second thread while the parser reads it (json_sax::Source):
// neither the inflated text nor a temporary copy of it is ever whole, and inflating overlaps
// parsing on two cores.
//
// Contract: Peek shows the first inflated bytes before the parser starts (to recognise the
// content). At most kQueuedChunks chunks of at most 64 KiB wait between the two threads. The
// inflated size is bounded as InflateInput bounds it (InputLimits::max_inflate_ratio); corrupt
// data, a size past the bound, or a stream cut off (a killed job, a full disk) end the text
// early, and status() / cut() say which after Stop(). Stop (and the destructor) ends the
// inflating thread and waits for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/gzip.h"
#include "common/json_sax.h"
#include "common/mapped_file.h"
#include "common/status.h"
#include "sources/input_limits.h"

namespace vramscope::sources {

class InflatingSource : public json_sax::Source {
 public:
  static constexpr size_t kQueuedChunks = 32;

  InflatingSource(const MappedFile& file, const InputLimits& limits);
  ~InflatingSource() override;
  InflatingSource(const InflatingSource&) = delete;
  InflatingSource& operator=(const InflatingSource&) = delete;

  // Up to the first `n` inflated bytes (fewer when the text is shorter), without consuming them.
  std::string_view Peek(size_t n);
  size_t Read(char* out, size_t size) override;

  // Stops inflating (what was not read is dropped) and waits for the thread. Then status() says
  // why the text ended before the gzip data's end (Interrupted: Stop came first), and cut()
  // whether the data was cut off.
  void Stop();
  const Status& status() const { return status_; }
  const GzipCut& cut() const { return cut_; }

 private:
  void Inflate(const MappedFile& file, const InputLimits& limits);
  // Moves the next queued chunk into current_; false at the end of the text.
  bool NextChunk();

  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::string> queue_;
  bool finished_ = false;  // the inflating thread is done (status_ and cut_ are set)
  bool stop_ = false;      // the reader is gone: the inflating thread stops
  Status status_;
  GzipCut cut_;
  std::string current_;  // the chunk being read, from current_at_
  size_t current_at_ = 0;
  std::thread thread_;
};

}  // namespace vramscope::sources
