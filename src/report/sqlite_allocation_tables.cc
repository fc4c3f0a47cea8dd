// vramscope_allocations, the report's largest table (a row of 28 columns per allocation), and the
// tables its ids point into: vramscope_rules, vramscope_sites, vramscope_owners.
#include <cstdint>
#include <unordered_map>

#include "report/report_schema.h"
#include "report/sqlite_tables.h"

namespace vramscope::report {

AllocationIds NumberRulesAndSites(const ReportInput& in) {
  const model::Trace& t = in.trace;
  AllocationIds ids;
  ids.rule_of.reserve(t.allocations.size());
  ids.site_of.reserve(t.allocations.size());
  std::unordered_map<uint8_t, int32_t> rule_ids;
  std::unordered_map<uint32_t, int32_t> site_ids;
  for (size_t i = 0; i < t.allocations.size(); ++i) {
    const uint8_t rule = in.attribution.allocations[i].rule_id;
    const auto [rule_it, new_rule] = rule_ids.emplace(rule, static_cast<int32_t>(ids.rules.size()));
    if (new_rule) ids.rules.push_back(rule);
    ids.rule_of.push_back(rule_it->second);
    const uint32_t site = in.sites.Site(t.allocations[i].alloc_stack);
    const auto [site_it, new_site] = site_ids.emplace(site, static_cast<int32_t>(ids.sites.size()));
    if (new_site) ids.sites.push_back(site);
    ids.site_of.push_back(site_it->second);
  }
  return ids;
}

Status WriteRuleSiteAndOwnerTables(Db& db, const ReportInput& in, const AllocationIds& ids,
                                   uint64_t* rows) {
  Insert rule(db, schema::InsertSql("vramscope_rules"));
  for (size_t id = 0; id < ids.rules.size(); ++id) {
    RETURN_IF_ERROR(rule.Row(static_cast<int64_t>(id), in.attribution.RuleText(ids.rules[id])));
  }
  Insert site(db, schema::InsertSql("vramscope_sites"));
  for (size_t id = 0; id < ids.sites.size(); ++id) {
    RETURN_IF_ERROR(site.Row(static_cast<int64_t>(id), in.sites.Label(ids.sites[id])));
  }
  // The analysis named every allocation's owner (analysis::OwnerNamer::NameAll).
  if (in.owners == nullptr) return InternalError("the report's input names no owners");
  Insert owner(db, schema::InsertSql("vramscope_owners"));
  for (uint32_t id = 0; id < in.owners->size(); ++id) {
    RETURN_IF_ERROR(owner.Row(id, in.owners->Label(id)));
  }
  *rows += rule.rows() + site.rows() + owner.rows();
  return Status::Ok();
}

Status WriteAllocationRows(Db& db, const ReportInput& in, const AllocationIds& ids, size_t begin,
                           size_t end, uint64_t* rows) {
  const model::Trace& t = in.trace;
  const model::Events& ev = t.events;
  if (in.owners == nullptr) return InternalError("the report's input names no owners");
  const analysis::OwnerNamer& owners = *in.owners;
  Insert alloc(db, schema::InsertSql("vramscope_allocations"));
  auto segment_of = [&](size_t i) -> int64_t {
    return in.segments != nullptr && i < in.segments->allocation_segment.size()
               ? in.segments->allocation_segment[i]
               : -1;
  };
  for (size_t i = begin; i < end && i < t.allocations.size(); ++i) {
    const model::Allocation& a = t.allocations[i];
    const attribution::AllocationInfo& info = in.attribution.allocations[i];
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
        attribution::ConfidenceName(info.confidence), ids.rule_of[i],
        Insert::MaybeText{in.attribution.Name(info.operation),
                          info.operation != model::kEmptyString},
        ids.site_of[i], text_of(ev.user_metadata), text_of(ev.compile_context),
        attribution::PhaseName(info.phase), in.attribution.phases.StepAt(a.alloc_event),
        owners.Id(i), model::SizeEvidenceName(in.view.SizeEvidenceOf(i)),
        Insert::MaybeInt{segment_of(i), segment_of(i) >= 0}));
  }
  *rows += alloc.rows();
  return Status::Ok();
}

}  // namespace vramscope::report
