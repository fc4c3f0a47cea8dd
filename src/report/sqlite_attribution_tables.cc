#include "report/sqlite_tables.h"

namespace vramscope::report {

// The phases, iterations, bytes by category over time and owners at the peak.
Status WriteAttributionTables(Db& db, const ReportInput& in, uint64_t* rows) {
  const model::Trace& t = in.trace;
  const auto time_of = [&](int64_t e) {
    return Insert::Time(e == model::kNoEvent ? model::kNoTime : t.events.time_us[e]);
  };
  Insert phase(db, "INSERT INTO vramscope_phases VALUES (?,?,?,?,?,?,?)");
  for (const attribution::PhaseSpan& s : in.attribution.phases.spans) {
    RETURN_IF_ERROR(phase.Row(s.device, s.step, attribution::PhaseName(s.phase), s.first_event,
                              s.last_event, time_of(s.first_event), time_of(s.last_event)));
  }
  Insert iteration(db,
                   "INSERT INTO vramscope_iterations VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  Insert owner(db, "INSERT INTO vramscope_owners_at_peak VALUES (?,?,?,?,?)");
  for (const analysis::DeviceSummary& d : in.summary.devices) {
    for (const analysis::IterationSummary& it : d.iterations) {
      const auto& c = it.at_peak;
      RETURN_IF_ERROR(iteration.Row(
          d.device, it.step, it.first_event, it.last_event, Insert::Time(it.start_time_us),
          Insert::Time(it.end_time_us), Insert::Event(it.forward_begin),
          Insert::Event(it.backward_begin), Insert::Event(it.optimizer_begin), it.peak_allocated,
          Insert::Event(it.peak_event), attribution::PhaseName(it.peak_phase), c[0], c[1], c[2],
          c[3], c[4], c[5], c[6], c[7]));
    }
    for (const analysis::OwnerGroup& o : d.live_at_peak_by_owner) {
      RETURN_IF_ERROR(
          owner.Row(d.device, attribution::CategoryName(o.category), o.label, o.bytes, o.count));
    }
  }
  Insert point(db, "INSERT INTO vramscope_category_timeline VALUES (?,?,?,?,?,?,?,?,?,?,?)");
  if (in.category_timelines != nullptr) {
    for (size_t d = 0; d < in.category_timelines->size(); ++d) {
      const int32_t device = t.devices[d];
      for (const analysis::CategoryPoint& p : (*in.category_timelines)[d]) {
        const auto& c = p.bytes;
        RETURN_IF_ERROR(point.Row(device, Insert::Event(p.event), time_of(p.event), c[0], c[1],
                                  c[2], c[3], c[4], c[5], c[6], c[7]));
      }
    }
  }
  *rows += phase.rows() + iteration.rows() + owner.rows() + point.rows();
  return Status::Ok();
}

}  // namespace vramscope::report
