#include <algorithm>
#include <vector>

#include "report/report_schema.h"
#include "report/sqlite_tables.h"

namespace vramscope::report {

namespace {

const char* BlockStateText(allocator::BlockView::State s) {
  switch (s) {
    case allocator::BlockView::State::kFree:
      return "inactive";
    case allocator::BlockView::State::kAllocated:
      return "active_allocated";
    case allocator::BlockView::State::kPendingFree:
      return "active_pending_free";
    case allocator::BlockView::State::kUnmapped:
      return "unmapped";
  }
  return "?";
}

}  // namespace

Status WriteSimulationTables(Db& db, const ReportInput& in, uint64_t* rows) {
  if (in.simulations == nullptr) return Status::Ok();
  Insert run_row(db, schema::InsertSql("vramscope_sim_runs"));
  Insert point(db, schema::InsertSql("vramscope_sim_timeline"));
  Insert seg(db, schema::InsertSql("vramscope_sim_segment_events"));
  Insert block(db, schema::InsertSql("vramscope_sim_final_blocks"));
  Insert note(db, schema::InsertSql("vramscope_sim_notes"));
  int64_t id = 0;
  for (const analysis::DeviceSimulation& dev : in.simulations->devices) {
    for (const analysis::SimulationRun& run : dev.runs) {
      const allocator::ReplayResult& r = run.result;
      const allocator::ReplayComparison& c = r.comparison;
      const bool cmp = r.follow_recording;
      auto opt = [&](uint64_t v) { return Insert::MaybeInt{static_cast<int64_t>(v), cmp}; };
      const bool limited = r.settings.capacity != allocator::kUnlimited;
      RETURN_IF_ERROR(run_row.Row(
          id, dev.device, run.label, run.alloc_conf,
          Insert::MaybeInt{static_cast<int64_t>(r.settings.capacity), limited},
          r.settings.memory_fraction > 0
              ? Insert::MaybeText{fmt::format("{}", r.settings.memory_fraction), true}
              : Insert::MaybeText{{}, false},
          r.events_replayed, r.initial_segments, r.initial_reserved, r.initial_blocks,
          r.stats.peak_reserved, Insert::Event(r.peak_reserved_event), r.allocated_at_peak_reserved,
          fmt::format("{:.6f}", r.FragmentationAtPeak()), r.stats.peak_allocated,
          r.stats.cuda_mallocs, r.stats.cuda_frees, r.stats.alloc_retries,
          Insert::Event(r.oom ? r.oom->event : model::kNoEvent),
          Insert::MaybeInt{r.oom ? static_cast<int64_t>(r.oom->requested) : 0, r.oom.has_value()},
          opt(c.allocs), opt(c.allocs_at_recorded_address), opt(c.recorded_segment_allocs),
          opt(c.segment_allocs_matched), opt(c.recorded_segment_frees),
          opt(c.segment_frees_matched), opt(c.compared_points), opt(c.reserved_equal_points),
          opt(c.final_segments_recorded), opt(c.final_segments_matched),
          opt(c.final_blocks_recorded), opt(c.final_blocks_matched), opt(c.divergence_count)));
      // Reduced while replaying (allocator/curve_reducer.h) to what this table keeps.
      static_assert(allocator::kDefaultCurvePoints == kTimelinePoints);
      for (const allocator::CurvePoint& p : r.curve) {
        RETURN_IF_ERROR(point.Row(id, p.event, p.allocated, p.reserved, p.requested));
      }
      int64_t seq = 0;
      for (const allocator::SimulatedSegmentEvent& e : r.segment_events) {
        RETURN_IF_ERROR(seg.Row(id, seq++, e.event, allocator::SegmentActionName(e.what.action),
                                model::PoolName(e.what.pool), e.what.addr, e.what.size,
                                e.what.stream));
      }
      for (const allocator::SegmentView& s : r.final_state) {
        for (const allocator::BlockView& b : s.blocks) {
          RETURN_IF_ERROR(block.Row(id, s.addr, model::PoolName(s.pool), s.expandable, s.stream,
                                    b.addr, b.size, b.requested, BlockStateText(b.state)));
        }
      }
      seq = 0;
      for (const std::string& n : r.notes) RETURN_IF_ERROR(note.Row(id, seq++, "note", n));
      for (const std::string& d : c.divergences) {
        RETURN_IF_ERROR(note.Row(id, seq++, "divergence", d));
      }
      ++id;
    }
  }
  *rows += run_row.rows() + point.rows() + seg.rows() + block.rows() + note.rows();
  return Status::Ok();
}

}  // namespace vramscope::report
