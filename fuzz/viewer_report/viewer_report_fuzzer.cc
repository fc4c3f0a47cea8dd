// libFuzzer target for the report-database readers behind `vramscope view`
// (LoadViewerReport + BuildViewerLod + EncodeViewerBlob) and `vramscope diff` (ReadDiffSide).
//
// The input is the bytes of a SQLite file: it is written to a temporary file and read as a
// report, as `vramscope view report.sqlite` does. A failure must be one InvalidInput line naming
// the file. A success must hold the contract the page relies on (docs/design/viewer.md): every
// column of a device as long as its count, every index (frame, stack parent, owner, operation,
// phase, segment, owner series, allocation per event) inside what it indexes, lifetimes inside
// the device's events, the level-of-detail pyramid complete; what it loads is bounded by the
// input's size (a damaged database must not make the reader allocate without bound); and the
// blob it encodes is the documented layout.
//
// Seeds: small real reports of `vramscope report` on tiny inputs, VACUUMed
// (fuzz/viewer_report/corpus/README.md says how they were made).
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target viewer_report_fuzzer).
// Run:   viewer_report_fuzzer -max_len=65536 -dict=src/report/viewer_report_fuzzer.dict
//          NEW_CORPUS_DIR fuzz/viewer_report/corpus
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "common/gzip.h"
#include "report/diff_outputs.h"
#include "report/diff_side_reader.h"
#include "report/viewer_data.h"

namespace {

using vramscope::report::kViewerCategories;
using vramscope::report::ViewerDevice;
using vramscope::report::ViewerReport;

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

// One private folder for the whole run, removed at exit; the report file is rewritten for every
// input.
struct RunFolder {
  std::string dir = [] {
    std::string d = (std::filesystem::temp_directory_path() / "vramscope_view_fuzz_XXXXXX");
    Check(mkdtemp(d.data()) != nullptr);
    return d;
  }();
  ~RunFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
};
const std::string& ReportPath() {
  static const RunFolder folder;
  static const std::string path = folder.dir + "/report.sqlite";
  return path;
}

void WriteInput(const std::string& path, const uint8_t* data, size_t size) {
  // A journal or WAL beside the file from an earlier input must not be read with this one.
  for (const char* suffix : {"-journal", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  FILE* f = std::fopen(path.c_str(), "wb");
  Check(f != nullptr);
  Check(size == 0 || std::fwrite(data, 1, size, f) == size);
  Check(std::fclose(f) == 0);
}

template <typename T>
bool SameLength(size_t n, const T& column) {
  return column.size() == n;
}

void CheckDevice(const ViewerReport& r, const ViewerDevice& d, size_t input_size) {
  Check(d.events >= 0);
  const auto events = static_cast<size_t>(d.events);
  // Bounded by the input: every event is an end of an allocation or a row of its own.
  Check(events <= input_size);
  Check(d.has_time ? SameLength(events, d.time_delta_us) : d.time_delta_us.empty());
  Check(SameLength(events, d.ev_alloc) && SameLength(events, d.ev_sign));
  const auto& a = d.allocations;
  const size_t n = a.count();
  Check(SameLength(n, a.end) && SameLength(n, a.free_completed) && SameLength(n, a.size) &&
        SameLength(n, a.requested) && SameLength(n, a.address) && SameLength(n, a.category) &&
        SameLength(n, a.phase) && SameLength(n, a.owner_group) && SameLength(n, a.owner) &&
        SameLength(n, a.op) && SameLength(n, a.stack) && SameLength(n, a.step) &&
        SameLength(n, a.segment));
  for (size_t i = 0; i < n; ++i) {
    Check(a.start[i] >= -1 && a.start[i] < d.events);
    Check(a.start[i] <= a.end[i] && a.end[i] <= a.free_completed[i] &&
          a.free_completed[i] <= d.events);
    Check(a.category[i] < kViewerCategories);
    Check(a.phase[i] < r.phases.size());
    Check(a.owner[i] < r.owners.size());
    Check(a.op[i] < r.strings.size());
    Check(a.stack[i] < r.stack_parent.size());
    Check(a.segment[i] >= -1 && a.segment[i] < static_cast<int64_t>(d.segments.count()));
    Check(a.owner_group[i] < d.owner_series.size());
  }
  Check(d.owner_series.size() <= vramscope::report::kViewerOwnerSeries + 1);
  for (size_t e = 0; e < events; ++e) {
    Check(d.ev_alloc[e] >= -1 && d.ev_alloc[e] < static_cast<int64_t>(n));
    Check(d.ev_sign[e] >= -1 && d.ev_sign[e] <= 1);
    Check((d.ev_alloc[e] == -1) == (d.ev_sign[e] == 0));
  }
  const auto& s = d.segments;
  const size_t m = s.count();
  Check(SameLength(m, s.size) && SameLength(m, s.stream) && SameLength(m, s.start) &&
        SameLength(m, s.end) && SameLength(m, s.pool));
  Check(s.source == "recorded" || s.source == "model" || s.source == "none");
  for (size_t i = 0; i < m; ++i) {
    Check(s.pool[i] <= 1);
    Check(s.start[i] >= -1 && s.start[i] <= d.events && s.end[i] >= 0 && s.end[i] <= d.events);
  }
  // Step curves: change points in event order, inside the events.
  for (const auto* curve : {&d.reserved, &d.predicted_allocated, &d.predicted_reserved}) {
    Check(curve->event.size() == curve->value.size());
    for (size_t i = 0; i < curve->event.size(); ++i) {
      Check(curve->event[i] >= 0 && curve->event[i] <= std::max(d.events - 1, 0));
    }
  }
  Check(!d.has_predicted || !d.predicted_reserved.event.empty());
  // The pyramid: finest first, each level four times coarser, the last small enough to draw.
  Check(!d.levels.empty());
  const size_t series = d.owner_series.size();
  for (size_t l = 0; l < d.levels.size(); ++l) {
    const auto& v = d.levels[l];
    const size_t b = v.count();
    Check(b >= 1 && v.bucket >= 1);
    if (l > 0) Check(v.bucket == d.levels[l - 1].bucket * 4);
    Check(static_cast<int64_t>(b - 1) * v.bucket < std::max<int64_t>(d.events, 1));
    Check(SameLength(b, v.allocated) && SameLength(b, v.reserved) &&
          SameLength(b * kViewerCategories, v.category) && SameLength(b * series, v.owner));
    Check(l == 0 ? SameLength(b * kViewerCategories, v.category_start) &&
                       SameLength(b * series, v.owner_start)
                 : v.category_start.empty() && v.owner_start.empty());
    for (size_t k = 0; k < b; ++k) {
      Check(v.peak_event[k] >= 0 && v.peak_event[k] < std::max(d.events, 1));
    }
  }
  Check(d.levels.back().count() <= 1024);
  Check(d.levels.front().count() <= 16384);
}

void CheckReport(const ViewerReport& r, size_t input_size) {
  // Index 0 of each table is "none"; the rest come from rows of the input.
  Check(!r.phases.empty() && r.phases.size() <= 256);  // phase indices are one byte
  Check(!r.strings.empty() && !r.owners.empty() && !r.frames.empty());
  Check(r.frames.size() <= input_size + 1 && r.owners.size() <= input_size + 1 &&
        r.stack_parent.size() <= input_size + 1);
  Check(r.stack_parent.size() == r.stack_frame.size());
  for (size_t i = 0; i < r.stack_parent.size(); ++i) {
    Check(r.stack_parent[i] < std::max<size_t>(i, 1));  // a parent precedes its child
    Check(r.stack_frame[i] < r.frames.size());
  }
  for (const ViewerDevice& d : r.devices) CheckDevice(r, d, input_size);
}

// The blob is gzip of "VSV1", a header length, the JSON header and 8-byte aligned columns that
// all lie inside it.
void CheckBlob(const ViewerReport& r) {
  const std::string blob = vramscope::report::EncodeViewerBlob({&r});
  auto raw =
      vramscope::Gunzip({reinterpret_cast<const uint8_t*>(blob.data()), blob.size()}, "blob");
  Check(raw.ok() && raw->size() >= 8 && raw->compare(0, 4, "VSV1") == 0);
  uint32_t length = 0;
  std::memcpy(&length, raw->data() + 4, 4);
  Check(8 + static_cast<size_t>(length) <= raw->size());
  const auto header = nlohmann::json::parse(raw->begin() + 8, raw->begin() + 8 + length, nullptr,
                                            /*allow_exceptions=*/false);
  Check(!header.is_discarded() && header["reports"].size() == 1);
  const size_t binary = (8 + length + 7) / 8 * 8;
  for (const auto& c : header["columns"]) {
    const size_t offset = c["offset"];
    const std::string type = c["type"];
    const size_t width = type == "f64" ? 8 : (type == "u8" || type == "i8") ? 1 : 4;
    Check(offset % 8 == 0 && binary + offset + width * c["length"].get<size_t>() <= raw->size());
  }
}

}  // namespace

// `vramscope diff`'s reader of the same file (report/diff_side_reader.h): a failure is one
// input-error line naming the file; a side it reads compares with itself as no change, and
// renders.
void CheckDiffSide(const std::string& path) {
  auto side = vramscope::report::ReadDiffSide(path, "fuzz", {});
  if (!side.ok()) {
    const std::string& message = side.status().message();
    Check(side.status().IsInputError());
    Check(message.rfind(path + ": ", 0) == 0);
    Check(message.find('\n') == std::string::npos);
    return;
  }
  auto diff = vramscope::analysis::CompareReports(*side, *side, std::nullopt);
  if (!diff.ok()) return;  // no device: nothing to compare
  for (const auto& device : diff->devices) {
    Check(device.peak_allocated.Delta() == 0 && device.owners.empty() && device.sites.empty());
  }
  vramscope::report::DiffResult result{std::move(diff).value(), {}};
  Check(!vramscope::report::DiffText(result, 10).empty());
  Check(vramscope::report::DiffJson(result).is_object());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = ReportPath();
  WriteInput(path, data, size);
  CheckDiffSide(path);
  auto report = vramscope::report::LoadViewerReport(path);
  if (!report.ok()) {
    const std::string& message = report.status().message();
    Check(report.status().IsInputError());
    Check(message.rfind(path + ": ", 0) == 0);
    Check(message.find('\n') == std::string::npos);
    return 0;
  }
  vramscope::report::BuildViewerLod(*report);
  CheckReport(*report, size);
  CheckBlob(*report);
  return 0;
}
