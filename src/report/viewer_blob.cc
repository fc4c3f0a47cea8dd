#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "common/gzip.h"
#include "model/vocabulary.h"
#include "report/report_input.h"
#include "report/viewer_data.h"

// EncodeViewerBlob: the viewer's columns as the gzip blob the page decodes; its format is the
// contract with the page's scripts (docs/design/viewer.md).
namespace vramscope::report {

namespace {

// The page names a segment's pool (model::Pool's code, the column) from "pool_names".
static_assert(model::kPoolSpellings[0].pool == model::Pool::kSmall &&
                  model::kPoolSpellings[1].pool == model::Pool::kLarge,
              "pool_names is indexed by code");
nlohmann::json PoolNames() {
  nlohmann::json names = nlohmann::json::array();
  for (const model::PoolSpelling& p : model::kPoolSpellings) names.push_back(p.name);
  return names;
}

// Collects columns into the binary section, each 8-byte aligned, and names them in the header.
class ColumnWriter {
 public:
  template <typename T>
  nlohmann::json Add(const std::string& name, const std::vector<T>& values) {
    static_assert(std::is_arithmetic_v<T>);
    const char* type = std::is_same_v<T, double>     ? "f64"
                       : std::is_same_v<T, int32_t>  ? "i32"
                       : std::is_same_v<T, uint32_t> ? "u32"
                       : std::is_same_v<T, uint8_t>  ? "u8"
                       : std::is_same_v<T, int8_t>   ? "i8"
                                                     : nullptr;
    static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8);
    while (binary_.size() % 8 != 0) binary_.push_back('\0');
    const size_t offset = binary_.size();
    // Little-endian hosts only (x86-64, arm64): the bytes are the column.
    binary_.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    columns_.push_back(
        {{"name", name}, {"type", type}, {"offset", offset}, {"length", values.size()}});
    return {{"col", columns_.size() - 1}};
  }
  const nlohmann::json& columns() const { return columns_; }
  const std::string& binary() const { return binary_; }

 private:
  nlohmann::json columns_ = nlohmann::json::array();
  std::string binary_;
};

nlohmann::json EncodeDevice(ColumnWriter& w, const ViewerDevice& d, const std::string& p) {
  nlohmann::json j;
  j["device"] = d.device;
  j["events"] = d.events;
  j["has_time"] = d.has_time;
  if (d.has_time) {
    j["time_us"] = w.Add(p + "time_us", d.time_delta_us);
    j["time0_us"] = d.time0_us;
  }
  j["ev_alloc"] = w.Add(p + "ev_alloc", d.ev_alloc);
  j["ev_sign"] = w.Add(p + "ev_sign", d.ev_sign);
  j["reserved"] = {{"event", w.Add(p + "reserved.event", d.reserved.event)},
                   {"bytes", w.Add(p + "reserved.bytes", d.reserved.value)}};
  if (d.has_predicted) {
    // Both model curves on one event axis: the reserved curve's change points, with the
    // allocated value at each.
    j["predicted"] = {
        {"label", "allocator model"},
        {"event", w.Add(p + "predicted.event", d.predicted_reserved.event)},
        {"reserved", w.Add(p + "predicted.reserved", d.predicted_reserved.value)},
        {"allocated_event", w.Add(p + "predicted.allocated_event", d.predicted_allocated.event)},
        {"allocated", w.Add(p + "predicted.allocated", d.predicted_allocated.value)}};
  } else {
    j["predicted"] = nullptr;
  }
  const ViewerAllocations& a = d.allocations;
  const std::string q = p + "alloc.";
  j["allocations"] = {{"count", a.count()},
                      {"start", w.Add(q + "start", a.start)},
                      {"end", w.Add(q + "end", a.end)},
                      {"free_completed", w.Add(q + "free_completed", a.free_completed)},
                      {"size", w.Add(q + "size", a.size)},
                      {"requested", w.Add(q + "requested", a.requested)},
                      {"address", w.Add(q + "address", a.address)},
                      {"category", w.Add(q + "category", a.category)},
                      {"owner", w.Add(q + "owner", a.owner)},
                      {"op", w.Add(q + "op", a.op)},
                      {"stack", w.Add(q + "stack", a.stack)},
                      {"phase", w.Add(q + "phase", a.phase)},
                      {"step", w.Add(q + "step", a.step)},
                      {"segment", w.Add(q + "segment", a.segment)},
                      {"owner_group", w.Add(q + "owner_group", a.owner_group)}};
  const ViewerSegments& s = d.segments;
  const std::string g = p + "seg.";
  j["segments"] = {{"source", s.source},
                   {"count", s.count()},
                   {"address", w.Add(g + "address", s.address)},
                   {"size", w.Add(g + "size", s.size)},
                   {"start", w.Add(g + "start", s.start)},
                   {"end", w.Add(g + "end", s.end)},
                   {"stream", w.Add(g + "stream", s.stream)},
                   {"pool", w.Add(g + "pool", s.pool)},
                   {"pool_names", PoolNames()}};
  if (!s.private_pools.empty()) {
    j["segments"]["private_pool"] = w.Add(g + "private_pool", s.private_pool);
    j["segments"]["private_pools"] = s.private_pools;
  }
  j["phases"] = d.phases;
  j["regions"] = d.regions;
  j["summary"] = d.summary;
  nlohmann::json categories = nlohmann::json::array();
  for (const char* name : kViewerCategoryNames) categories.push_back(name);
  j["lod"]["groups"] = {{"category", {{"series", categories}}},
                        {"owner", {{"series", d.owner_series}}}};
  j["lod"]["levels"] = nlohmann::json::array();
  for (size_t l = 0; l < d.levels.size(); ++l) {
    const ViewerLevel& v = d.levels[l];
    const std::string k = fmt::format("{}lod{}.", p, l);
    nlohmann::json level = {{"bucket", v.bucket},
                            {"count", v.count()},
                            {"peak_event", w.Add(k + "peak_event", v.peak_event)},
                            {"allocated", w.Add(k + "allocated", v.allocated)},
                            {"reserved", w.Add(k + "reserved", v.reserved)},
                            {"category", w.Add(k + "category", v.category)},
                            {"owner", w.Add(k + "owner", v.owner)}};
    if (l == 0) {
      level["category_start"] = w.Add(k + "category_start", v.category_start);
      level["owner_start"] = w.Add(k + "owner_start", v.owner_start);
    }
    j["lod"]["levels"].push_back(std::move(level));
  }
  return j;
}

}  // namespace

std::string EncodeViewerBlob(const std::vector<const ViewerReport*>& reports) {
  ColumnWriter w;
  nlohmann::json header;
  header["format"] = 1;
  header["generator"] = std::string("vramscope ") + kToolVersion;
  header["reports"] = nlohmann::json::array();
  for (size_t ri = 0; ri < reports.size(); ++ri) {
    const ViewerReport& r = *reports[ri];
    nlohmann::json j;
    j["title"] = r.title;
    j["kind"] = r.kind;
    j["source"] = r.source;
    j["device_type"] = r.device_type;
    j["predicted"] = r.predicted;
    j["prediction"] = r.prediction;  // null unless the report holds vramscope_prediction
    j["ranks"] = r.ranks;            // null unless the report is of a capture folder's ranks
    nlohmann::json categories = nlohmann::json::array();
    for (const char* name : kViewerCategoryNames) categories.push_back(name);
    j["categories"] = categories;
    j["phases"] = r.phases;
    j["strings"] = r.strings;
    j["owners"] = r.owners;
    j["frames"] = nlohmann::json::array();
    for (const ViewerFrame& f : r.frames) {
      j["frames"].push_back({f.file, f.line, f.function, f.project});
    }
    const std::string p = fmt::format("r{}.", ri);
    j["stacks"] = {{"parent", w.Add(p + "stack.parent", r.stack_parent)},
                   {"frame", w.Add(p + "stack.frame", r.stack_frame)}};
    j["notes"] = r.notes;
    j["devices"] = nlohmann::json::array();
    for (const ViewerDevice& d : r.devices) {
      j["devices"].push_back(EncodeDevice(w, d, fmt::format("{}d{}.", p, d.device)));
    }
    header["reports"].push_back(std::move(j));
  }
  header["columns"] = w.columns();
  const std::string head = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string raw = "VSV1";
  const auto length = static_cast<uint32_t>(head.size());
  raw.append(reinterpret_cast<const char*>(&length), 4);
  raw += head;
  while (raw.size() % 8 != 0) raw.push_back('\0');
  raw += w.binary();
  return Gzip(raw, 6);
}

}  // namespace vramscope::report
