// The converter on a file cut off while it was written (LoadOptions::read_partial).
#include "sources/snapshot/snapshot_converter.h"

namespace vramscope::snapshot::converter {

// The trace was cut: its events stop at the cut, and the segments and blocks the file holds
// are the allocator's state when the snapshot was taken, a moment the events never reach. Like
// a source without an allocator state, the trace then starts from levels (model::StartLevels):
// what was allocated before it began is what the dump holds at addresses no event read ever
// touches (blocks PyTorch kept alive throughout, such as the weights; anything the lost part
// of the trace allocated at a new address and kept is counted too, which the note says), and
// reserved memory the dump's segments no segment event touches, plus the segments the events
// free without having made them.
void Converter::StartFromTheCut() {
  started_from_cut_ = true;
  const model::Events& ev = trace_.events;
  std::map<int32_t, std::unordered_set<uint64_t>> touched, segment_touched, segment_made;
  for (size_t i = 0; i < ev.count(); ++i) {
    const int32_t d = ev.device[i];
    switch (ev.action[i]) {
      case Action::kAlloc:
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        touched[d].insert(ev.addr[i]);
        break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        segment_made[d].insert(ev.addr[i]);
        segment_touched[d].insert(ev.addr[i]);
        break;
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        if (segment_made[d].count(ev.addr[i]) == 0) {
          start_reserved_[d] += static_cast<int64_t>(ev.size[i]);
        }
        segment_touched[d].insert(ev.addr[i]);
        break;
      default:
        break;
    }
  }
  for (const model::Segment& seg : trace_.segments) {
    if (segment_touched[seg.device].count(seg.address) != 0) continue;
    start_reserved_[seg.device] += static_cast<int64_t>(seg.total_size);
    untouched_segment_bytes_ += seg.total_size;
    for (uint32_t b = seg.first_block; b < seg.first_block + seg.block_count; ++b) {
      const model::Block& block = trace_.blocks[b];
      if (!IsActive(block.state) || touched[seg.device].count(block.address) != 0) continue;
      start_allocated_[seg.device] += static_cast<int64_t>(block.size);
      start_known_[seg.device].push_back(
          {block.address, block.size, block.requested_size, seg.stream, block.stack});
      ++untouched_blocks_;
      untouched_block_bytes_ += block.size;
    }
  }
  dump_segments_ = trace_.segments.size();
  trace_.segments.clear();
  trace_.blocks.clear();
}

void Converter::DescribeCut(Value segments, Value traces) {
  model::TraceFacts& f = trace_.facts;
  f.partial = true;
  f.cut_at_byte = parse_info_.cut_at;
  f.notes.push_back(fmt::format(
      "partial file: it ends at byte {} before the snapshot does (a job killed or a disk filled "
      "while it was written); this report holds what was written before the cut",
      parse_info_.cut_at));
  const uint64_t cut_short = parse_info_.dropped_records + cut_entries_;
  if (doc_->IsIncomplete(segments)) {
    f.notes.push_back(fmt::format(
        "the cut falls in the allocator state ('segments'): {} segment(s) were read whole; the "
        "others{} were never written, so totals are lower bounds of the state at the dump",
        trace_.segments.size(), has_device_traces_ ? "" : " and the whole trace"));
  } else if (started_from_cut_) {
    f.notes.push_back(fmt::format(
        "the cut falls in the trace: its first {} events were read and the rest is lost; the "
        "dump's {} segment(s) describe a later moment, so levels start from what the dump holds "
        "at addresses the events read never touch: {} in {} block(s) allocated before the trace "
        "(some may have been allocated after the cut) and {} reserved",
        trace_.events.count(), dump_segments_,
        FormatBytes(static_cast<int64_t>(untouched_block_bytes_)), untouched_blocks_,
        FormatBytes(static_cast<int64_t>(untouched_segment_bytes_))));
  } else {
    (void)traces;
    f.notes.push_back(
        "the cut falls after the segments and the trace, which are complete; only what follows "
        "them (allocator settings, annotations) may be missing");
  }
  if (cut_short > 0) {
    f.notes.push_back(fmt::format("{} record(s) the cut fell in were left out", cut_short));
  }
}

}  // namespace vramscope::snapshot::converter
