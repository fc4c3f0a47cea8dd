// vramscope_allocations, the report's largest table (a row of 28 columns per allocation), and the
// tables its ids point into: vramscope_rules, vramscope_sites, vramscope_owners.
#include <cstdint>
#include <unordered_map>

#include "report/report_schema.h"
#include "report/sqlite_tables.h"

namespace vramscope::report {

Status WriteAllocationTables(Db& db, const ReportInput& in, uint64_t* rows) {
  const model::Trace& t = in.trace;
  // Rules and sites are few and repeated by many allocations: one row each, referenced by id.
  std::unordered_map<uint8_t, int64_t> rule_ids;
  std::unordered_map<uint32_t, int64_t> site_ids;
  Insert rule(db, schema::InsertSql("vramscope_rules"));
  Insert site(db, schema::InsertSql("vramscope_sites"));
  Insert alloc(db, schema::InsertSql("vramscope_allocations"));
  const model::Events& ev = t.events;
  // The analysis named every allocation's owner (analysis::OwnerNamer::NameAll).
  if (in.owners == nullptr) return InternalError("the report's input names no owners");
  const analysis::OwnerNamer& owners = *in.owners;
  auto segment_of = [&](size_t i) -> int64_t {
    return in.segments != nullptr && i < in.segments->allocation_segment.size()
               ? in.segments->allocation_segment[i]
               : -1;
  };
  for (size_t i = 0; i < t.allocations.size(); ++i) {
    const model::Allocation& a = t.allocations[i];
    const attribution::AllocationInfo& info = in.attribution.allocations[i];
    auto [rule_it, new_rule] = rule_ids.emplace(info.rule_id, rule_ids.size());
    if (new_rule) RETURN_IF_ERROR(rule.Row(rule_it->second, in.attribution.RuleText(info.rule_id)));
    const uint32_t site_frame = in.sites.Site(a.alloc_stack);
    auto [site_it, new_site] = site_ids.emplace(site_frame, site_ids.size());
    if (new_site) RETURN_IF_ERROR(site.Row(site_it->second, in.sites.Label(site_frame)));
    auto text_of = [&](const std::unordered_map<uint32_t, model::StringId>& column) {
      const auto it = a.alloc_event == model::kNoEvent
                          ? column.end()
                          : column.find(static_cast<uint32_t>(a.alloc_event));
      return it == column.end() ? Insert::MaybeText{{}, false}
                                : Insert::MaybeText{t.strings.Get(it->second), true};
    };
    const auto time_of = [&](int64_t e) {
      return Insert::Time(e == model::kNoEvent ? model::kNoTime : ev.time_us[e]);
    };
    RETURN_IF_ERROR(alloc.Row(
        static_cast<int64_t>(i), a.device, a.addr, a.requested_size, in.view.BlockSize(i),
        in.view.SizeExact(i), a.stream, a.alive_at_end, Insert::Event(a.alloc_event),
        time_of(a.alloc_event), a.alloc_stack, Insert::Event(a.free_requested_event),
        time_of(a.free_requested_event), a.free_stack, Insert::Event(a.free_completed_event),
        time_of(a.free_completed_event), attribution::CategoryName(info.category),
        attribution::ConfidenceName(info.confidence), rule_it->second,
        Insert::MaybeText{in.attribution.Name(info.operation),
                          info.operation != model::kEmptyString},
        site_it->second, text_of(ev.user_metadata), text_of(ev.compile_context),
        attribution::PhaseName(info.phase), in.attribution.phases.StepAt(a.alloc_event),
        owners.Id(i), model::SizeEvidenceName(in.view.SizeEvidenceOf(i)),
        Insert::MaybeInt{segment_of(i), segment_of(i) >= 0}));
  }
  *rows += alloc.rows() + rule.rows() + site.rows();
  Insert owner(db, schema::InsertSql("vramscope_owners"));
  for (uint32_t id = 0; id < owners.size(); ++id) {
    RETURN_IF_ERROR(owner.Row(id, owners.Label(id)));
  }
  *rows += owner.rows();
  return Status::Ok();
}

}  // namespace vramscope::report
