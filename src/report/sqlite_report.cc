#include "report/sqlite_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "report/prediction_fit.h"
#include "report/rank_table.h"
#include "report/report_schema.h"
#include "report/sqlite_tables.h"

namespace vramscope::report {

const char* const kSkylineSchema = R"sql(CREATE TABLE weight_entries (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  grad_size_bytes INTEGER NOT NULL
);
CREATE TABLE activation_entries (
  id INTEGER PRIMARY KEY,
  operation_name TEXT NOT NULL,
  size_bytes INTEGER NOT NULL
);
CREATE TABLE entry_types (
  entry_type INTEGER PRIMARY KEY,
  name TEXT NOT NULL
);
CREATE TABLE stack_correlation (
  correlation_id INTEGER PRIMARY KEY,
  entry_id INTEGER NOT NULL,
  entry_type INTEGER NOT NULL,
  UNIQUE (correlation_id, entry_id)
);
CREATE UNIQUE INDEX entry_type_and_id
  ON stack_correlation(entry_type, entry_id);
CREATE TABLE stack_frames (
  correlation_id INTEGER NOT NULL,
  ordering INTEGER NOT NULL,
  file_path TEXT NOT NULL,
  line_number INTEGER NOT NULL,
  PRIMARY KEY (correlation_id, ordering)
);
CREATE TABLE misc_sizes (
  key TEXT PRIMARY KEY,
  size_bytes INT NOT NULL
);
)sql";

namespace {

// Devices that hold memory: the rows of vramscope_devices.
std::string DeviceList(const analysis::Summary& summary) {
  std::vector<int32_t> devices;
  for (const auto& d : summary.devices) devices.push_back(d.device);
  return fmt::format("{}", fmt::join(devices, ","));
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status WriteSkylineTables(Db& db, const ReportInput& in, uint64_t* rows) {
  Insert weight(db, "INSERT INTO weight_entries VALUES (?, ?, ?, ?)");
  Insert activation(db, "INSERT INTO activation_entries VALUES (?, ?, ?)");
  Insert correlation(db, "INSERT INTO stack_correlation VALUES (?, ?, ?)");
  Insert frame(db, "INSERT INTO stack_frames VALUES (?, ?, ?, ?)");
  Insert misc(db, "INSERT INTO misc_sizes VALUES (?, ?)");
  RETURN_IF_ERROR(db.Exec("INSERT INTO entry_types VALUES (1, 'weight'), (2, 'activation')"));
  int64_t correlation_id = 0;
  auto add_stack = [&](int64_t entry_id, int entry_type, model::StackId stack) -> Status {
    ++correlation_id;
    RETURN_IF_ERROR(correlation.Row(correlation_id, entry_id, static_cast<int64_t>(entry_type)));
    int64_t ordering = 0;
    for (const auto& [path, line] : in.sites.ProjectFrames(stack)) {
      RETURN_IF_ERROR(frame.Row(correlation_id, ordering++, path, static_cast<int64_t>(line)));
    }
    return Status::Ok();
  };
  int64_t id = 0;
  for (const auto& w : in.entries.weights) {
    RETURN_IF_ERROR(weight.Row(++id, w.name, w.size_bytes, w.grad_size_bytes));
    RETURN_IF_ERROR(add_stack(id, 1, w.stack));
  }
  id = 0;
  for (const auto& a : in.entries.activations) {
    RETURN_IF_ERROR(activation.Row(++id, a.operation_name, a.size_bytes));
    RETURN_IF_ERROR(add_stack(id, 2, a.stack));
  }
  // peak_usage_bytes is Skyline's figure (peak allocated); the other keys are ours.
  const analysis::Summary& s = in.summary;
  RETURN_IF_ERROR(misc.Row("peak_usage_bytes", s.peak_usage_bytes));
  // activation_entries hold the activations when they peak, which is before the memory peak
  // when that falls in the optimizer step.
  int64_t activations = 0;
  for (const auto& a : in.entries.activations) activations += static_cast<int64_t>(a.size_bytes);
  RETURN_IF_ERROR(misc.Row("activations_at_their_peak_bytes", activations));
  int64_t peak_reserved = 0, allocated_dump = 0, reserved_dump = 0;
  for (const auto& d : s.devices) {
    peak_reserved = std::max(peak_reserved, d.peak_reserved);
    allocated_dump += d.allocated_at_dump;
    reserved_dump += d.reserved_at_dump;
  }
  RETURN_IF_ERROR(misc.Row("peak_reserved_bytes", peak_reserved));
  RETURN_IF_ERROR(misc.Row("allocated_at_dump_bytes", allocated_dump));
  RETURN_IF_ERROR(misc.Row("reserved_at_dump_bytes", reserved_dump));
  // Every byte live at the peak, by category, so the entries' shortfall is visible.
  if (!s.devices.empty()) {
    const auto& peak_device = *std::max_element(
        s.devices.begin(), s.devices.end(),
        [](const auto& x, const auto& y) { return x.peak_allocated < y.peak_allocated; });
    for (const auto& share : peak_device.live_at_peak_by_category) {
      RETURN_IF_ERROR(misc.Row(
          fmt::format("peak_{}_bytes", attribution::CategoryName(share.category)), share.bytes));
    }
  }
  *rows += weight.rows() + activation.rows() + correlation.rows() + frame.rows() + misc.rows() + 2;
  return Status::Ok();
}

Status WriteVramscopeTables(Db& db, const ReportInput& in, uint64_t* rows) {
  const model::Trace& t = in.trace;
  {
    Insert meta(db, schema::InsertSql("vramscope_metadata"));
    const model::SourceInfo& src = t.source;
    const model::TraceFacts& f = t.facts;
    const std::pair<const char*, std::string> entries[] = {
        {"tool", "vramscope"},
        {"tool_version", kToolVersion},
        // The version of the vramscope_* tables (report/report_schema.json); absent: version 1.
        {schema::kVersionKey.data(), std::to_string(schema::ReportSchema().version)},
        {"created_utc", UtcNow()},
        {"source_path", src.path},
        {"source_format", in.view.Format()},
        {"source_generation", src.generation},
        {"source_generation_evidence", src.generation_evidence},
        {"source_bytes", std::to_string(src.file_bytes)},
        {"pickle_protocol", std::to_string(src.pickle_protocol)},
        {"built_in_example", src.built_in_example ? "1" : "0"},
        {"predicted", IsPredictedTrace(t) ? "true" : "false"},
        {"project_root", in.project_root.path()},
        {"devices", DeviceList(in.summary)},
        {"device_type", src.device_type},
        {"has_trace", f.has_trace ? "1" : "0"},
        {"has_times", f.has_times ? "1" : "0"},
        {"has_stacks", f.has_stacks ? "1" : "0"},
        {"has_python_frames", f.has_python_frames ? "1" : "0"},
        {"has_native_frames", f.has_native_frames ? "1" : "0"},
        {"trace_starts_mid_run", f.starts_mid_run ? "1" : "0"},
        {"ring_buffer_overflowed", f.ring_buffer_overflowed ? "1" : "0"},
        {"partial", f.partial ? "1" : "0"},
        {"cut_at_byte", std::to_string(f.cut_at_byte)},
        {"skipped_actions", fmt::format("{}", fmt::join(f.skipped_actions, ","))},
        {"frees_without_alloc", std::to_string(f.frees_without_alloc)},
        {"allocations_alive_before_trace", std::to_string(f.allocations_alive_before_trace)},
        {"attribution",
         "per allocation: what the source or a capture recorded, else C++ and Python frames, "
         "lifetimes against the detected phases, and sizes (docs/design/attribution.md); "
         "vramscope_allocations.rule_id names the rule"},
        {"allocated_semantics",
         "bytes of blocks handed to tensors (torch.cuda.memory_allocated), counted from alloc to "
         "free_requested; a block's size is the one the source recorded, else the one the "
         "allocator model's replay established, else the request rounded to 512 B "
         "(vramscope_allocations.size_evidence)"},
        {"reserved_known", f.reserved_known ? "1" : "0"},
        {"synthetic_segment_addresses", f.synthetic_segment_addresses ? "1" : "0"},
        {"reserved_semantics", "bytes of cudaMalloc'd segments (torch.cuda.memory_reserved)"},
    };
    for (const auto& [k, v] : entries) RETURN_IF_ERROR(meta.Row(k, v));
    *rows += meta.rows();
    Insert note(db, schema::InsertSql("vramscope_notes"));
    int64_t n = 0;
    for (const auto& text : in.view.Notes()) RETURN_IF_ERROR(note.Row(++n, text));
    for (const auto& text : in.attribution.notes) RETURN_IF_ERROR(note.Row(++n, text));
    if (in.regions != nullptr) {
      for (const auto& text : in.regions->notes) RETURN_IF_ERROR(note.Row(++n, text));
    }
    *rows += note.rows();
  }
  {
    Insert dev(db, schema::InsertSql("vramscope_devices"));
    for (const auto& d : in.summary.devices) {
      RETURN_IF_ERROR(dev.Row(
          d.device, d.events, d.segments, d.blocks, d.allocated_at_dump, d.reserved_at_dump,
          d.active_at_dump, d.requested_at_dump, d.peak_allocated,
          Insert::Event(d.peak_allocated_event), Insert::Time(d.peak_allocated_time_us),
          d.peak_reserved, Insert::Event(d.peak_reserved_event),
          Insert::Time(d.peak_reserved_time_us), d.reserved_at_peak_allocated, d.estimated_sizes));
    }
    *rows += dev.rows();
  }
  {
    Insert setting(db, "INSERT OR REPLACE INTO vramscope_allocator_settings VALUES (?, ?)");
    for (const auto& [k, v] : t.allocator_settings) RETURN_IF_ERROR(setting.Row(k, v));
    *rows += setting.rows();
  }
  {
    Insert frame(db, schema::InsertSql("vramscope_frames"));
    for (size_t i = 0; i < t.frames.size(); ++i) {
      const model::Frame& f = t.frames.Get(static_cast<model::FrameId>(i));
      RETURN_IF_ERROR(frame.Row(static_cast<int64_t>(i), t.strings.Get(f.filename),
                                static_cast<int64_t>(f.line), t.strings.Get(f.function),
                                f.kind == model::FrameKind::kPython ? "python" : "native"));
    }
    // FX metadata of generated-code frames (augment_with_fx_traces=True), by frame id, in id
    // order so that the table does not depend on the hash map's order.
    Insert fx(db, schema::InsertSql("vramscope_fx_frames"));
    std::vector<model::FrameId> fx_ids;
    fx_ids.reserve(t.fx_frames.size());
    for (const auto& [id, x] : t.fx_frames) fx_ids.push_back(id);
    std::sort(fx_ids.begin(), fx_ids.end());
    for (const model::FrameId id : fx_ids) {
      const model::FxFrame& x = t.fx_frames.at(id);
      auto text = [&](model::StringId v) {
        return Insert::MaybeText{t.strings.Get(v), v != model::kEmptyString};
      };
      RETURN_IF_ERROR(
          fx.Row(static_cast<int64_t>(id), text(x.node_op), text(x.node_name), text(x.node_target),
                 text(x.original_trace), text(x.original_file),
                 Insert::MaybeInt{x.original_line, x.original_file != model::kEmptyString},
                 text(x.original_function)));
    }
    *rows += fx.rows();
    Insert stack(db, schema::InsertSql("vramscope_stacks"));
    for (size_t i = 1; i < t.stacks.size(); ++i) {
      const auto id = static_cast<model::StackId>(i);
      RETURN_IF_ERROR(stack.Row(static_cast<int64_t>(i), t.stacks.parent(id), t.stacks.frame(id),
                                t.stacks.depth(id)));
    }
    *rows += frame.rows() + stack.rows();
  }
  {
    Insert seg(db, schema::InsertSql("vramscope_segments"));
    for (size_t i = 0; i < t.segments.size(); ++i) {
      const model::Segment& s = t.segments[i];
      RETURN_IF_ERROR(seg.Row(static_cast<int64_t>(i), s.device, s.address, s.total_size,
                              s.allocated_size, s.active_size, s.requested_size, s.stream,
                              model::PoolName(s.pool), s.pool_id[0], s.pool_id[1], s.is_expandable,
                              s.stack));
    }
    Insert block(db, schema::InsertSql("vramscope_blocks"));
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      const model::Block& b = t.blocks[i];
      RETURN_IF_ERROR(block.Row(static_cast<int64_t>(i), b.segment, b.address, b.size,
                                b.requested_size, model::BlockStateName(b.state), b.stack));
    }
    *rows += seg.rows() + block.rows();
  }
  {
    // Alloc/free events live in vramscope_allocations (each is one end of a lifetime); this
    // table keeps every other event (segments, OOMs, snapshot markers, annotations) with the
    // allocated / reserved levels after it.
    Insert event(db, schema::InsertSql("vramscope_events"));
    Insert point(db, schema::InsertSql("vramscope_timeline"));
    const model::Events& ev = t.events;
    for (size_t d = 0; d < t.devices.size(); ++d) {
      const analysis::DeviceTimeline& tl = in.timelines.devices[d];
      for (size_t i = tl.begin; i < tl.end; ++i) {
        const model::Action action = ev.action[i];
        if (action == model::Action::kAlloc || action == model::Action::kFreeRequested ||
            action == model::Action::kFreeCompleted) {
          continue;
        }
        const auto index = static_cast<uint32_t>(i);
        const auto other = ev.other_action.find(index);
        const std::string_view name = other != ev.other_action.end()
                                          ? t.strings.Get(other->second)
                                          : std::string_view(model::ActionName(action));
        const auto free = ev.oom_device_free.find(index);
        const Insert::MaybeInt device_free{
            free != ev.oom_device_free.end() ? static_cast<int64_t>(free->second) : 0,
            free != ev.oom_device_free.end()};
        RETURN_IF_ERROR(event.Row(static_cast<int64_t>(i), ev.device[i], name, ev.addr[i],
                                  ev.size[i], ev.stream[i], Insert::Time(ev.time_us[i]),
                                  ev.stack[i], device_free, tl.allocated[i - tl.begin],
                                  tl.ReservedAfter(i)));
      }
      for (const size_t i : analysis::ReduceTimeline(tl, kTimelinePoints)) {
        RETURN_IF_ERROR(point.Row(tl.device, static_cast<int64_t>(i), Insert::Time(ev.time_us[i]),
                                  tl.allocated[i - tl.begin], tl.ReservedAfter(i)));
      }
    }
    *rows += event.rows() + point.rows();
  }
  RETURN_IF_ERROR(WriteAttributionTables(db, in, rows));
  RETURN_IF_ERROR(WriteOomTables(db, in, rows));
  if (in.segments != nullptr) {
    Insert seg(db, schema::InsertSql("vramscope_segment_timeline"));
    const analysis::SegmentTimeline& st = *in.segments;
    for (size_t k = 0; k < st.segments.size(); ++k) {
      const analysis::SegmentSpan& s = st.segments[k];
      const analysis::DeviceSegments* dev = nullptr;
      for (const auto& d : st.devices) {
        if (d.device == s.device) dev = &d;
      }
      RETURN_IF_ERROR(
          seg.Row(static_cast<int64_t>(k), s.device, s.address, s.size, s.stream,
                  model::PoolName(s.pool), analysis::PoolEvidenceName(s.pool_evidence),
                  s.expandable, Insert::Event(s.first_event), Insert::Event(s.end_event),
                  analysis::SegmentSourceName(dev != nullptr ? dev->source
                                                             : analysis::SegmentSource::kRecorded),
                  dev != nullptr && dev->synthetic_addresses, s.pool_id[0], s.pool_id[1]));
    }
    *rows += seg.rows();
  }
  if (in.regions != nullptr) {
    // Memory by region (analysis/regions.h); ids are positions in RegionBreakdowns::regions.
    Insert region(db, schema::InsertSql("vramscope_regions"));
    Insert range(db, schema::InsertSql("vramscope_region_ranges"));
    const analysis::RegionBreakdowns& rb = *in.regions;
    for (size_t k = 0; k < rb.regions.size(); ++k) {
      const analysis::Region& r = rb.regions[k];
      RETURN_IF_ERROR(
          region.Row(static_cast<int64_t>(k), r.device, analysis::RegionKindName(r.kind), r.name,
                     r.remainder, r.allocations, r.allocated_bytes, r.live_at_peak_bytes,
                     r.live_at_peak_count, r.peak_bytes, Insert::Event(r.peak_event),
                     Insert::Event(r.first_event), Insert::Event(r.last_event),
                     Insert::Time(r.start_time_us), Insert::Time(r.end_time_us), r.ranges));
    }
    for (size_t k = 0; k < rb.ranges.size(); ++k) {
      const analysis::RegionRange& r = rb.ranges[k];
      RETURN_IF_ERROR(range.Row(static_cast<int64_t>(k), r.device, r.region, r.name, r.depth,
                                Insert::Time(r.start_time_us), Insert::Time(r.end_time_us),
                                Insert::Event(r.first_event), Insert::Event(r.last_event),
                                r.unmatched_start, r.unmatched_end));
    }
    *rows += region.rows() + range.rows();
  }
  {
    Insert live(db, schema::InsertSql("vramscope_live_at_peak"));
    Insert cat(db, schema::InsertSql("vramscope_categories_at_peak"));
    for (const auto& d : in.summary.devices) {
      for (const auto& g : d.live_at_peak_by_site) {
        RETURN_IF_ERROR(
            live.Row(d.device, g.label, attribution::CategoryName(g.category), g.bytes, g.count));
      }
      for (const auto& c : d.live_at_peak_by_category) {
        RETURN_IF_ERROR(cat.Row(d.device, attribution::CategoryName(c.category), c.bytes, c.count));
      }
    }
    *rows += live.rows() + cat.rows();
  }
  {
    Insert ann(db, schema::InsertSql("vramscope_annotations"));
    int64_t id = 0;
    for (const auto& a : t.annotations) {
      for (const auto& [k, v] : a.fields) {
        RETURN_IF_ERROR(ann.Row(++id, a.device, Insert::Time(a.time_us), k, v));
      }
    }
    *rows += ann.rows();
  }
  return Status::Ok();
}

}  // namespace

namespace {

// SQLite's progress handler: a non-zero return interrupts the statement running (SQLITE_INTERRUPT).
extern "C" int StopWhenCancelled(void* token) {
  return static_cast<const CancelToken*>(token)->cancelled() ? 1 : 0;
}

// Opens `path` for one writer: cancellable (every few thousand virtual-machine steps, so a
// statement in flight stops within microseconds), and set for bulk appends. The file is private
// until renamed into place: no journal, no fsync. Large pages make the big tables cheaper to
// append to; the page cache stays bounded (dirty pages spill). `*created`: the file is there.
Status OpenForBulkWrite(Db& db, const std::string& path, const Control& control,
                        bool* created = nullptr) {
  RETURN_IF_ERROR(db.Open(path));
  if (created != nullptr) *created = true;
  if (control.cancel != nullptr) {
    sqlite3_progress_handler(db.get(), 4096, StopWhenCancelled,
                             const_cast<CancelToken*>(control.cancel));
  }
  return db.Exec(
      "PRAGMA page_size = 65536; PRAGMA journal_mode = OFF; "
      "PRAGMA synchronous = OFF; PRAGMA locking_mode = EXCLUSIVE; "
      "PRAGMA cache_size = -4096; PRAGMA user_version = 1;");
}

// The rows of allocations [begin, end), written on a second thread into a database of their own
// beside the report while the caller writes every other table: SQLite appends to one file from
// one thread at a time, and these rows are about half of a report's insert time. Wait() joins
// the thread; the file, once opened, is removed when this object goes, whatever happened.
class AllocationRowsOnSecondThread {
 public:
  AllocationRowsOnSecondThread(std::string path, const ReportInput& input, const AllocationIds& ids,
                               size_t begin, size_t end, const Control& control)
      : path_(std::move(path)) {
    thread_ = std::thread([this, &input, &ids, begin, end, &control] {
      status_ = Write(input, ids, begin, end, control);
    });
  }
  ~AllocationRowsOnSecondThread() {
    if (thread_.joinable()) thread_.join();
    if (opened_) std::remove(path_.c_str());
  }
  AllocationRowsOnSecondThread(const AllocationRowsOnSecondThread&) = delete;
  AllocationRowsOnSecondThread& operator=(const AllocationRowsOnSecondThread&) = delete;

  Status Wait() {
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  const std::string& path() const { return path_; }
  uint64_t rows() const { return rows_; }

 private:
  Status Write(const ReportInput& input, const AllocationIds& ids, size_t begin, size_t end,
               const Control& control) {
    Db db;
    RETURN_IF_ERROR(OpenForBulkWrite(db, path_, control, &opened_));
    RETURN_IF_ERROR(db.Exec("BEGIN"));
    RETURN_IF_ERROR(db.Exec(
        schema::CreateTableSql(*schema::ReportSchema().Find("vramscope_allocations")).c_str()));
    RETURN_IF_ERROR(WriteAllocationRows(db, input, ids, begin, end, &rows_));
    return db.Exec("COMMIT");
  }

  std::string path_;
  Status status_ = Status::Ok();
  uint64_t rows_ = 0;
  bool opened_ = false;  // the file is this writer's to remove
  std::thread thread_;
};

// Appends the second thread's rows to the report's vramscope_allocations. An INSERT ... SELECT *
// between tables of the same definition is SQLite's transfer optimisation: records are copied as
// they are, not decoded and encoded again, and appended, their ids being past the table's last.
Status MergeAllocationRows(Db& db, const std::string& part_path) {
  sqlite3_stmt* attach = nullptr;
  if (sqlite3_prepare_v2(db.get(), "ATTACH DATABASE ?1 AS allocations_part", -1, &attach,
                         nullptr) != SQLITE_OK) {
    return db.Error("cannot attach the allocation rows");
  }
  sqlite3_bind_text(attach, 1, part_path.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(attach);
  sqlite3_finalize(attach);
  if (rc != SQLITE_DONE) return db.Error("cannot attach the allocation rows");
  RETURN_IF_ERROR(db.Exec("BEGIN"));
  RETURN_IF_ERROR(
      db.Exec("INSERT INTO main.vramscope_allocations SELECT * FROM "
              "allocations_part.vramscope_allocations"));
  RETURN_IF_ERROR(db.Exec("COMMIT"));
  return db.Exec("DETACH DATABASE allocations_part");
}

// The first thread writes every other table (on the 1M-entry benchmark about as many rows again,
// for 0.43 s) and the second the allocation rows (0.58 s for all of them): the first eighth of the
// allocations goes to the first thread, so that both end about together.
constexpr size_t kFirstThreadAllocationShare = 8;

Status WriteDatabase(const std::string& path, const ReportInput& input, SqliteReportInfo* info,
                     const Control& control) {
  const AllocationIds ids = NumberRulesAndSites(input);
  const size_t split = input.trace.allocations.size() / kFirstThreadAllocationShare;
  AllocationRowsOnSecondThread second(path + "-allocations", input, ids, split,
                                      input.trace.allocations.size(), control);
  Db db;
  RETURN_IF_ERROR(OpenForBulkWrite(db, path, control));
  RETURN_IF_ERROR(db.Exec("BEGIN"));
  RETURN_IF_ERROR(db.Exec(kSkylineSchema));
  // Our own tables, made from the schema's data (report/report_schema.h). Sizes are bytes; event
  // ids index vramscope_events; stack ids index vramscope_stacks (0 = no stack recorded).
  RETURN_IF_ERROR(db.Exec(schema::CreateTablesSql("report").c_str()));
  uint64_t rows = 0;
  RETURN_IF_ERROR(WriteSkylineTables(db, input, &rows));
  RETURN_IF_ERROR(WriteVramscopeTables(db, input, &rows));
  RETURN_IF_ERROR(WriteRuleSiteAndOwnerTables(db, input, ids, &rows));
  RETURN_IF_ERROR(WriteAllocationRows(db, input, ids, 0, split, &rows));
  RETURN_IF_ERROR(WriteSimulationTables(db, input, &rows));
  if (IsPredictedTrace(input.trace)) {
    RETURN_IF_ERROR(db.Exec(schema::CreateTablesSql("prediction").c_str()));
    RETURN_IF_ERROR(WritePredictionTable(db, input, &rows));
  }
  if (input.ranks != nullptr && !input.ranks->empty()) {
    RETURN_IF_ERROR(WriteRankTable(db, *input.ranks));
    rows += input.ranks->size();
  }
  RETURN_IF_ERROR(db.Exec("COMMIT"));
  RETURN_IF_ERROR(second.Wait());
  RETURN_IF_ERROR(MergeAllocationRows(db, second.path()));
  rows += second.rows();
  if (info != nullptr) {
    info->rows = rows;
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db.get(),
                           "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                           "name LIKE 'vramscope\\_%' ESCAPE '\\'",
                           -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      info->vramscope_tables = sqlite3_column_int(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  return Status::Ok();
}

}  // namespace

Status WriteSqliteReport(const std::string& path, const ReportInput& input, SqliteReportInfo* info,
                         const Control& control) {
  RETURN_IF_ERROR(control.CheckCancelled("writing the report"));
  const Status written = WriteDatabase(path, input, info, control);
  // A statement the progress handler stopped fails with "interrupted": the cancellation, not a
  // broken database.
  if (!written.ok() && control.cancelled()) return control.CheckCancelled("writing the report");
  return written;
}

}  // namespace vramscope::report
