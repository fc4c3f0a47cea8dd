// The viewer's reader, one device at a time (report/viewer_data.h's LoadViewerReport calls it for
// each row of vramscope_devices): the device's allocations, events, segments, the allocator
// model's curves, phases, region bands and the summary the page shows, as columns.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "report/report_db.h"
#include "report/viewer_data.h"

namespace vramscope::report {

// The report-wide interning the devices share: operation strings and phase names (indices into
// ViewerReport::strings and ::phases), and vramscope_owners.id -> index into ViewerReport::owners.
struct ViewerIds {
  std::unordered_map<std::string, uint32_t> strings{{"", 0}};
  std::unordered_map<std::string, uint8_t> phases{{"unknown", 0}};
  std::vector<int64_t> owner_remap;
};

// Fills `d` (its `device` set) from the report; damage is one line naming the file.
Status LoadViewerDevice(ReportDb& db, ViewerReport& r, ViewerDevice& d, ViewerIds& ids);

// The owner grouping: the owners covering the most bytes x events get their own series.
void ChooseOwnerSeries(ViewerReport& r, ViewerDevice& d);

}  // namespace vramscope::report
