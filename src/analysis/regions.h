// Memory by region: which compiled graph, which recorded metadata and which named range of the
// run allocated the bytes. A pure function of (trace through its view, timelines, summary).
//
// Four kinds of region, each a partition of one device's allocations (every allocation falls in
// exactly one region of a kind, so a kind's regions add up to the device's live bytes at the
// peak):
//   compile_context    the trace entry's compile_context (PyTorch 2.5+): the torch.compile region
//                      running when the entry was recorded, as the RecordFunction that runs
//                      compiled code names it ("Torch-Compiled Region: 0/0": dynamo frame 0,
//                      compile 0; its id is torch._guards.CompileId), "N/A" in eager code;
//   user_metadata      the trace entry's user_metadata (2.10+,
//   torch.cuda.memory._set_memory_metadata); annotation_range   the innermost START/END range of
//   `external_annotations` (2.5+: dynamo_timed
//                      compilation stages, Optimizer.step#AdamW.step, record_function ranges)
//                      open at the allocation's time; ranges of one name are one region;
//   tensor_annotation  the labels of `annotate` trace entries (torch.cuda.memory._annotate_tensor,
//                      pytorch#190575: a timestamped entry whose addr is the live allocation's
//                      base address; its label is read from the entry's user_metadata) that
//                      name the allocation while it is live, joined in order. No recording in
//                      our hands has one yet: the shape is PyTorch's description of it.
// Allocations the kind says nothing about fall in one remainder region per kind ("(none)"), and
// allocations made before the trace began in "(before the trace)": the trace cannot place them.
// A kind is computed for a device only when the trace records it there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "analysis/timeline.h"
#include "model/interpretation.h"
#include "model/trace.h"

namespace vramscope::analysis {

enum class RegionKind : uint8_t { kCompileContext, kUserMetadata, kRange, kTensorAnnotation };
inline constexpr int kRegionKindCount = 4;
// "compile_context", "user_metadata", "annotation_range", "tensor_annotation".
const char* RegionKindName(RegionKind kind);

// The remainder regions' names.
inline constexpr const char* kRegionNone = "(none)";
inline constexpr const char* kRegionBeforeTrace = "(before the trace)";

struct Region {
  int32_t device = 0;
  RegionKind kind = RegionKind::kCompileContext;
  std::string name;
  bool remainder = false;  // "(none)" or "(before the trace)"
  // Allocations placed in it (made before the trace, for "(before the trace)") and their block
  // bytes summed: what it allocated over the whole trace.
  uint64_t allocations = 0;
  uint64_t allocated_bytes = 0;
  // Of the device's live allocations at its peak of allocated memory, those placed here.
  uint64_t live_at_peak_bytes = 0, live_at_peak_count = 0;
  // Its own peak: the most bytes of its allocations live at once, and after which event
  // (kNoEvent: at the start of the trace).
  int64_t peak_bytes = 0;
  int64_t peak_event = model::kNoEvent;
  // Its span. Ranges: the events whose time falls inside any of its ranges, and the ranges'
  // times. The other kinds: the first and last event that carries its value.
  int64_t first_event = model::kNoEvent, last_event = model::kNoEvent;
  int64_t start_time_us = model::kNoTime, end_time_us = model::kNoTime;
  uint32_t ranges = 0;  // annotation_range: the START/END ranges of this name
};

// One START/END range of external_annotations, for drawing (the viewer's bands).
struct RegionRange {
  int32_t device = 0;
  std::string name;
  uint32_t region = 0;  // index into RegionBreakdowns::regions
  int32_t depth = 0;    // 0: outermost; ranges open at its START, counted
  int64_t start_time_us = model::kNoTime, end_time_us = model::kNoTime;
  int64_t first_event = model::kNoEvent, last_event = model::kNoEvent;  // events inside, if any
  bool unmatched_start = false;  // an END without its START: drawn from the trace's beginning
  bool unmatched_end = false;    // a START never ended: drawn to the trace's end
};

struct RegionBreakdowns {
  // By device, then kind; within a kind the largest at the peak first, the remainders last.
  std::vector<Region> regions;
  std::vector<RegionRange> ranges;  // by device, then start time
  // What the user should know (unmatched ranges, annotate entries naming no live allocation).
  std::vector<std::string> notes;
};

RegionBreakdowns ComputeRegions(const model::TraceView& view, const Timelines& timelines,
                                const Summary& summary);

}  // namespace vramscope::analysis
