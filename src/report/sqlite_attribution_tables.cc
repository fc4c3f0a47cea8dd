#include <array>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "report/prediction_fit.h"
#include "report/report_schema.h"
#include "report/sqlite_tables.h"

namespace vramscope::report {

// The phases, iterations, bytes by category over time and owners at the peak.
Status WriteAttributionTables(Db& db, const ReportInput& in, uint64_t* rows) {
  const model::Trace& t = in.trace;
  const auto time_of = [&](int64_t e) {
    return Insert::Time(e == model::kNoEvent ? model::kNoTime : t.events.time_us[e]);
  };
  Insert phase(db, schema::InsertSql("vramscope_phases"));
  for (const attribution::PhaseSpan& s : in.attribution.phases.spans) {
    RETURN_IF_ERROR(phase.Row(s.device, s.step, attribution::PhaseName(s.phase), s.first_event,
                              s.last_event, time_of(s.first_event), time_of(s.last_event)));
  }
  Insert iteration(db, schema::InsertSql("vramscope_iterations"));
  Insert owner(db, schema::InsertSql("vramscope_owners_at_peak"));
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
  Insert point(db, schema::InsertSql("vramscope_category_timeline"));
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

// Every out-of-memory the trace records, explained (analysis/oom.h), and who held the bytes then.
Status WriteOomTables(Db& db, const ReportInput& in, uint64_t* rows) {
  Insert oom(db, schema::InsertSql("vramscope_oom"));
  Insert owner(db, schema::InsertSql("vramscope_owners_at_oom"));
  const auto text = [](const std::string& s) { return Insert::MaybeText{s, !s.empty()}; };
  const auto bytes_if = [](bool known, uint64_t v) {
    return Insert::MaybeInt{static_cast<int64_t>(v), known};
  };
  for (const analysis::DeviceSummary& d : in.summary.devices) {
    for (const analysis::OomExplanation& o : d.ooms) {
      std::array<uint64_t, attribution::kCategoryCount> c{};
      for (const analysis::CategoryShare& share : o.live.by_category) {
        c[static_cast<size_t>(share.category)] = share.bytes;
      }
      const bool cap = o.limit == analysis::OomLimit::kAllocatorCap;
      RETURN_IF_ERROR(oom.Row(
          o.device, o.event, Insert::Time(o.time_us), o.step, attribution::PhaseName(o.phase),
          o.requested_bytes, o.block_bytes, o.segment_bytes, o.small_pool ? "small" : "large",
          o.stream, o.stack, text(o.site), text(o.operation),
          bytes_if(o.device_free_known, o.device_free_bytes), o.allocated_bytes, o.reserved_bytes,
          o.reserved_free_bytes, bytes_if(o.state_known, o.largest_free_block_bytes),
          bytes_if(o.state_known, o.usable_free_bytes), bytes_if(o.state_known, o.free_block_bytes),
          text(o.state_note), o.expandable_segments, o.fragmentation,
          analysis::OomLimitName(o.limit), bytes_if(cap, o.cap_at_least_bytes),
          bytes_if(cap, o.cap_below_bytes), o.live.bytes, o.live.count, c[0], c[1], c[2], c[3],
          c[4], c[5], c[6], c[7], o.verdict, o.hint));
      for (const analysis::OwnerGroup& g : o.live.by_owner) {
        RETURN_IF_ERROR(owner.Row(o.device, o.event, attribution::CategoryName(g.category), g.label,
                                  g.bytes, g.count));
      }
    }
  }
  *rows += oom.rows() + owner.rows();
  return Status::Ok();
}

// What `vramscope predict` assumed and found. Fixed keys first, then the verdict against the
// capacity when one was given (report/prediction_fit.h), assumption.1, assumption.2, ... and the
// prediction's own facts under their keys (fact.KEY where a key is taken).
Status WritePredictionTable(Db& db, const ReportInput& in, uint64_t* rows) {
  if (!in.trace.prediction) return Status::Ok();
  const model::PredictionInfo& p = *in.trace.prediction;
  std::vector<std::pair<std::string, std::string>> entries = {
      {"model", p.model},
      {"setup", p.setup},
      {"gpu", p.gpu},
      {"torch_version", p.torch_version},
      {"parameters", std::to_string(p.parameters)},
      {"trainable_parameters", std::to_string(p.trainable_parameters)},
      {"parameter_bytes", std::to_string(p.parameter_bytes)},
      {"buffer_bytes", std::to_string(p.buffer_bytes)},
      {"capacity_bytes", std::to_string(p.capacity)},
  };
  if (const auto fit = FitOfPrediction(in)) {
    entries.emplace_back("peak_reserved_bytes", std::to_string(fit->peak_reserved));
    entries.emplace_back("needed_bytes", std::to_string(fit->needed));
    entries.emplace_back("fits", fit->fits ? "true" : "false");
    entries.emplace_back("headroom_bytes", std::to_string(fit->headroom));
    if (fit->oom) {
      entries.emplace_back("oom_event", std::to_string(fit->oom_event));
      entries.emplace_back("oom_requested_bytes", std::to_string(fit->oom_requested));
      entries.emplace_back("oom_reserved_bytes", std::to_string(fit->reserved_at_oom));
    }
  }
  for (size_t i = 0; i < p.assumptions.size(); ++i) {
    entries.emplace_back("assumption." + std::to_string(i + 1), p.assumptions[i]);
  }
  std::set<std::string> fixed;
  for (const auto& entry : entries) fixed.insert(entry.first);
  std::map<std::string, size_t> fact_rows;
  for (const auto& [key, value] : p.facts) {
    std::string name = key;
    if (name.empty() || fixed.count(name) != 0 || name.rfind("assumption.", 0) == 0) {
      name = "fact." + key;
    }
    // A fact given twice keeps its last value, as in the JSON summary.
    const auto [it, added] = fact_rows.emplace(name, entries.size());
    if (added) {
      entries.emplace_back(std::move(name), value);
    } else {
      entries[it->second].second = value;
    }
  }
  Insert row(db, schema::InsertSql("vramscope_prediction"));
  for (const auto& [key, value] : entries) RETURN_IF_ERROR(row.Row(key, value));
  *rows += row.rows();
  return Status::Ok();
}

}  // namespace vramscope::report
