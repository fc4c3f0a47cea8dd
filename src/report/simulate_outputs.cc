#include "report/simulate_outputs.h"

#include <fmt/format.h>

#include "common/units.h"
#include "report/explain_output.h"
#include "report/report_input.h"
#include "report/simulation_summary.h"

namespace vramscope::report {

nlohmann::json SimulateJson(const pipeline::SimulateResult& result, std::optional<int32_t> device,
                            const std::optional<SimulateDatabase>& database) {
  nlohmann::json json = RenderSimulationJson(ReportInput::From(*result.analyzed), device);
  json["schema_version"] = kSimulateJsonVersion;
  json["report"] = database ? nlohmann::json{{"path", database->path}, {"rows", database->rows}}
                            : nlohmann::json(nullptr);
  if (const auto& gpu = result.gpu) {
    json["capacity_from_gpu"] = {{"gpu", gpu->gpu.key},
                                 {"total_memory", gpu->gpu.total_memory},
                                 {"outside_allocator", OutsideMemoryJson(gpu->outside)},
                                 {"capacity", gpu->capacity}};
  }
  return json;
}

std::string SimulateText(const pipeline::SimulateResult& result, std::optional<int32_t> device,
                         const std::optional<SimulateDatabase>& database) {
  std::string out;
  if (const auto& gpu = result.gpu) {
    std::string parts;
    for (const device::OutsideFigure& f : gpu->outside.figures) {
      parts +=
          fmt::format("{}{} {} ({})", parts.empty() ? "" : ", ", f.item,
                      FormatBytes(static_cast<int64_t>(f.bytes)), device::EvidenceName(f.evidence));
    }
    out += fmt::format("capacity: {} ({}) less {} outside the allocator ({}) = {}\n\n",
                       gpu->gpu.name, FormatBytes(static_cast<int64_t>(gpu->gpu.total_memory)),
                       FormatBytes(static_cast<int64_t>(gpu->outside.Total())), parts,
                       FormatBytes(static_cast<int64_t>(gpu->capacity)));
  }
  out += RenderSimulationText(ReportInput::From(*result.analyzed), device);
  if (database) {
    out +=
        fmt::format("\nreport written to {} (with the simulation in the vramscope_sim_* tables)\n",
                    database->path);
  }
  return out;
}

}  // namespace vramscope::report
