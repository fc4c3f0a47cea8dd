#include "analysis/segment_timeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "allocator/caching_allocator.h"

namespace vramscope::analysis {

using model::Action;
using model::kNoEvent;

const char* PoolEvidenceName(PoolEvidence evidence) {
  switch (evidence) {
    case PoolEvidence::kDump:
      return "dump";
    case PoolEvidence::kSegmentSize:
      return "segment_size";
    case PoolEvidence::kModel:
      return "model";
  }
  return "segment_size";
}

const char* SegmentSourceName(SegmentSource source) {
  switch (source) {
    case SegmentSource::kNone:
      return "none";
    case SegmentSource::kRecorded:
      return "recorded";
    case SegmentSource::kModel:
      return "model";
  }
  return "none";
}

namespace {

// Opens and closes spans as segment events come, by address.
class SpanBuilder {
 public:
  SpanBuilder(int32_t device, std::vector<SegmentSpan>& out) : device_(device), out_(out) {}

  void Grow(int64_t event, uint64_t address, uint64_t size, uint64_t stream, bool expandable,
            std::optional<model::Pool> pool) {
    open_[address] = out_.size();
    out_.push_back(Span(address, size, stream, expandable, pool));
    out_.back().first_event = event;
  }
  void Shrink(int64_t event, uint64_t address, uint64_t size, uint64_t stream, bool expandable,
              std::optional<model::Pool> pool) {
    if (const auto it = open_.find(address); it != open_.end()) {
      out_[it->second].end_event = event;
      open_.erase(it);
      return;
    }
    // Released in the trace, never made in it: it existed before the trace began.
    out_.push_back(Span(address, size, stream, expandable, pool));
    out_.back().end_event = event;
  }
  // A segment the dump holds: the open span at its address, or one that lived throughout.
  void AtDump(const model::Segment& seg) {
    if (const auto it = open_.find(seg.address); it != open_.end()) {
      SegmentSpan& s = out_[it->second];
      s.pool = seg.pool;
      s.pool_evidence = PoolEvidence::kDump;
      s.private_pool = seg.pool_id[0] != 0 || seg.pool_id[1] != 0;
      s.pool_id[0] = seg.pool_id[0];
      s.pool_id[1] = seg.pool_id[1];
      s.expandable = s.expandable || seg.is_expandable;
      return;
    }
    SegmentSpan s = Span(seg.address, seg.total_size, seg.stream, seg.is_expandable, seg.pool);
    s.pool_evidence = PoolEvidence::kDump;
    s.private_pool = seg.pool_id[0] != 0 || seg.pool_id[1] != 0;
    s.pool_id[0] = seg.pool_id[0];
    s.pool_id[1] = seg.pool_id[1];
    open_[seg.address] = out_.size();
    out_.push_back(s);
  }

 private:
  // A span alive throughout, with its pool: the one given (the model's, or the dump's), else the
  // allocator's segment sizes.
  SegmentSpan Span(uint64_t address, uint64_t size, uint64_t stream, bool expandable,
                   std::optional<model::Pool> pool) const {
    SegmentSpan s;
    s.device = device_;
    s.address = address;
    s.size = size;
    s.stream = stream;
    s.expandable = expandable;
    s.pool = pool ? *pool : allocator::PoolOfSegmentSize(size, expandable);
    s.pool_evidence = pool ? PoolEvidence::kModel : PoolEvidence::kSegmentSize;
    return s;
  }

  int32_t device_;
  std::vector<SegmentSpan>& out_;
  std::map<uint64_t, size_t> open_;
};

bool IsGrow(Action a) { return a == Action::kSegmentAlloc || a == Action::kSegmentMap; }
bool IsShrink(Action a) { return a == Action::kSegmentFree || a == Action::kSegmentUnmap; }

// Which segment held each allocation of `device`: one that contains its block at its address and
// existed when the allocation was made.
void AssignAllocations(const model::TraceView& view, int32_t device, size_t first_span,
                       SegmentTimeline& out) {
  const model::Trace& trace = view.trace;
  std::vector<size_t> by_address;
  uint64_t largest = 0;
  for (size_t k = first_span; k < out.segments.size(); ++k) {
    by_address.push_back(k);
    largest = std::max(largest, out.segments[k].size);
  }
  if (by_address.empty()) return;
  std::sort(by_address.begin(), by_address.end(),
            [&](size_t x, size_t y) { return out.segments[x].address < out.segments[y].address; });
  constexpr int64_t kForever = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < trace.allocations.size(); ++i) {
    const model::Allocation& a = trace.allocations[i];
    if (a.device != device) continue;
    const uint64_t size = view.BlockSize(i);
    const int64_t born = a.alloc_event;  // kNoEvent (-1): before the trace
    auto hi =
        std::upper_bound(by_address.begin(), by_address.end(), a.addr,
                         [&](uint64_t addr, size_t k) { return addr < out.segments[k].address; });
    while (hi != by_address.begin()) {
      --hi;
      const SegmentSpan& s = out.segments[*hi];
      if (s.address + largest <= a.addr) break;
      if (a.addr + size > s.address + s.size) continue;
      const int64_t end = s.end_event == kNoEvent ? kForever : s.end_event;
      if (s.first_event <= born && born < end) {
        out.allocation_segment[i] = static_cast<int32_t>(*hi);
        break;
      }
    }
  }
}

}  // namespace

SegmentTimeline ComputeSegmentTimeline(const model::TraceView& view, const Simulations* replay) {
  const model::Trace& trace = view.trace;
  const model::Events& ev = trace.events;
  SegmentTimeline out;
  out.allocation_segment.assign(trace.allocations.size(), -1);
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    DeviceSegments dev;
    dev.device = trace.devices[d];
    const auto [begin, end] = trace.device_event_ranges[d];
    const size_t first_span = out.segments.size();
    SpanBuilder spans(dev.device, out.segments);
    bool recorded = false;
    for (size_t i = begin; i < end; ++i) {
      const Action a = ev.action[i];
      if (IsGrow(a)) {
        spans.Grow(static_cast<int64_t>(i), ev.addr[i], ev.size[i], ev.stream[i],
                   a == Action::kSegmentMap, std::nullopt);
        recorded = true;
      } else if (IsShrink(a)) {
        spans.Shrink(static_cast<int64_t>(i), ev.addr[i], ev.size[i], ev.stream[i],
                     a == Action::kSegmentUnmap, std::nullopt);
        recorded = true;
      }
    }
    for (const model::Segment& seg : trace.segments) {
      if (seg.device != dev.device) continue;
      spans.AtDump(seg);
      recorded = true;
    }
    if (recorded) {
      dev.source = SegmentSource::kRecorded;
      dev.synthetic_addresses = trace.facts.synthetic_segment_addresses;
    } else if (replay != nullptr) {
      for (const DeviceSimulation& sim : replay->devices) {
        if (sim.device != dev.device || sim.runs.empty()) continue;
        for (const allocator::SimulatedSegmentEvent& e : sim.runs.front().result.segment_events) {
          const allocator::SegmentEvent& w = e.what;
          using allocator::SegmentAction;
          if (w.action == SegmentAction::kAlloc || w.action == SegmentAction::kMap) {
            spans.Grow(e.event, w.addr, w.size, w.stream, w.action == SegmentAction::kMap, w.pool);
          } else if (w.action == SegmentAction::kFree || w.action == SegmentAction::kUnmap) {
            spans.Shrink(e.event, w.addr, w.size, w.stream, w.action == SegmentAction::kUnmap,
                         w.pool);
          }
        }
        dev.source = SegmentSource::kModel;
      }
    }
    AssignAllocations(view, dev.device, first_span, out);
    out.devices.push_back(dev);
  }
  return out;
}

}  // namespace vramscope::analysis
