// The readable summary printed after `vramscope report`: per device, the peaks (allocated and
// reserved, with when), the state at the dump and the gap between reserved and allocated, and
// what was live at the peak by category and by allocation site. A device whose run ran out of
// memory opens with the out-of-memory explained (analysis/oom.h) and one hint.
#pragma once

#include <optional>
#include <string>

#include "report/report_input.h"

namespace vramscope::report {

struct TerminalOptions {
  int top_sites = 10;
  int top_owners = 3;             // owners listed under each category at the peak
  std::optional<int32_t> device;  // only this device
};

std::string RenderTerminalSummary(const ReportInput& input, const TerminalOptions& options);

}  // namespace vramscope::report
