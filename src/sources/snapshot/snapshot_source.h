// Source: PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot / _snapshot()).
//
// Turns a snapshot of any generation (1.13 bare segment lists and per-block `history`, 2.0
// device_traces, 2.1+ block frames, 2.2 times, 2.3 allocator_settings, 2.5+ annotations and
// compile_context, 2.10 user_metadata) into the event model, and records what the file could
// not tell as facts. Every key is optional except the core ones (a segment's address, total_size
// and blocks; a block's size and state; a trace entry's action); a wrong type or a missing core
// key is an error naming the path to the value, e.g. "segments[3].blocks[7]: 'size' is a str".
// The converted state must satisfy the allocator's invariants (segment_invariants.h: a device's
// segments are disjoint, blocks tile their segment, the segment totals equal the sums over its
// blocks, trace entries carry sizes PyTorch records); a file that breaks one is refused with one
// line naming the first offending segment, block or entry and what is wrong with its numbers.
// Fields a file lacks (older generations) are not checked.
#pragma once

#include <cstdint>
#include <functional>

#include "common/mapped_file.h"
#include "common/status.h"
#include "model/trace.h"
#include "sources/pickle/pickle_document.h"

namespace vramscope::snapshot {

struct LoadOptions {
  // Parse progress (bytes done, total); returning false stops the parse (Interrupted).
  std::function<bool(uint64_t, uint64_t)> progress;
  // Convert trace entries while parsing and release them (bounded memory for long traces).
  // Off only to compare with the whole-document path in tests.
  bool stream_trace = true;
  // A snapshot cut off before its end (a killed job, a full disk) is read up to the cut and
  // marked partial (TraceFacts::partial, with notes saying where the cut fell and what that
  // leaves out) instead of refused.
  bool read_partial = true;
};

struct LoadTimings {
  double parse_s = 0;
  double build_model_s = 0;
};

// Reads and converts `file`. Error messages start with the file's path.
Result<model::Trace> LoadSnapshot(const MappedFile& file, const LoadOptions& options = {},
                                  LoadTimings* timings = nullptr);

// Converts an already parsed pickle (tests and fuzzers use this directly).
Result<model::Trace> TraceFromPickle(const pickle::Document& doc);

}  // namespace vramscope::snapshot
