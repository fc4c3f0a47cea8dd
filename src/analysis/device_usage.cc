#include "analysis/device_usage.h"

#include <fmt/format.h>

namespace vramscope::analysis {

DeviceUsageDecomposition DecomposeDeviceUsage(const std::optional<model::DeviceUsage>& usage,
                                              device::OutsideSetup setup) {
  DeviceUsageDecomposition out;
  if (!usage) return out;
  out.recorded = true;
  out.samples = usage->samples.size();
  if (!usage->available || usage->samples.empty()) {
    out.why_not = usage->available ? "NVML gave no sample on torch's device" : usage->why_not;
    return out;
  }
  const model::DeviceUsageSample* top = &usage->samples.front();
  for (const model::DeviceUsageSample& s : usage->samples) {
    if (s.device_used > top->device_used) top = &s;
  }
  if (!top->torch_reserved) {
    out.why_not = "the samples carry no torch counters (not a GPU run)";
    return out;
  }
  out.available = true;
  out.step = top->step;
  out.phase = top->phase;
  out.at = top->at;
  out.time_us = top->time_us;
  out.device_total = top->device_total;
  out.device_used = top->device_used;
  if (const device::GpuSpec* gpu = device::FindGpuByName(usage->device_name)) {
    setup.vendor = gpu->vendor;
    setup.sm = gpu->sm;
    out.gpu = gpu->name;
  } else {
    out.gpu = usage->device_name.empty()
                  ? "an unknown GPU (an H100's figures)"
                  : usage->device_name + " (not in vramscope's catalog: an H100's figures)";
  }
  out.expected = device::EstimateOutsideAllocator(setup);

  const int64_t used = static_cast<int64_t>(top->device_used);
  const int64_t reserved = static_cast<int64_t>(*top->torch_reserved);
  int64_t accounted = 0;
  auto add = [&](std::string what, int64_t bytes, std::string how) {
    out.parts.push_back({std::move(what), bytes, std::move(how)});
    accounted += bytes;
  };
  add("reserved by PyTorch", reserved, "measured (torch.cuda.memory_reserved)");
  for (const device::OutsideFigure& f : out.expected.figures) {
    add(f.item, static_cast<int64_t>(f.bytes),
        fmt::format("model, {}: {}", device::EvidenceName(f.evidence), f.source));
  }
  if (top->process_used) {
    const int64_t rest = static_cast<int64_t>(*top->process_used) - accounted;
    out.unexplained = rest;
    add("this process, not explained by the model", rest,
        "the rest: NVML's figure for this process - the above");
  }
  int64_t others = 0;
  size_t listed = 0;
  if (top->other_processes) {
    for (const model::DeviceUsageProcess& p : *top->other_processes) {
      if (p.used) {
        others += static_cast<int64_t>(*p.used);
        ++listed;
      }
    }
  }
  if (listed > 0 || top->other_processes_more > 0) {
    add(fmt::format("{} other process{}", listed, listed == 1 ? "" : "es"), others,
        top->other_processes_more > 0
            ? fmt::format("measured (NVML), {} more not listed", top->other_processes_more)
            : "measured (NVML)");
  }
  add(top->process_used
          ? "held by no listed process (the driver's reservation, processes NVML "
            "cannot see)"
          : "the rest (this process's own figure is not listed by NVML: " +
                (usage->pid_note.empty() ? std::string("a container's pid") : usage->pid_note) +
                ")",
      used - accounted, "the rest: the device's used memory - the above");
  return out;
}

}  // namespace vramscope::analysis
