// Prototype for docs/design/python-api.md: the native route (nanobind) of the Python API,
// measured against driving the bundled binary through its versioned JSON (json_route.py). Not
// shipped: built only with -DVRAMSCOPE_BUILD_API_PROTOTYPE=ON by bench/api_prototype/measure.py.
//
// report(path) loads and analyses a file through the same pipeline the CLI uses and returns the
// figures the API's report result needs: the peaks, the bytes by category at the peak and the
// allocated curve as a NumPy array (one int64 per event).
// explain_nothing() is the smallest call (the call-overhead figure).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/category.h"
#include "pipeline/analyze.h"
#include "pipeline/input.h"
#include "pipeline/load.h"

namespace nb = nanobind;
using namespace vramscope;

namespace {

nb::dict Report(const std::string& path) {
  std::unique_ptr<const pipeline::Analyzed> analyzed;
  {
    // The analysis runs without the GIL: a notebook's other threads go on meanwhile.
    nb::gil_scoped_release release;
    pipeline::LoadRequest load;
    load.input = pipeline::ClassifyInput(path);
    auto root = pipeline::ResolveProjectRoot("");
    load.project_root = root.ok() ? root.value() : "/";
    auto loaded = pipeline::Load(load);
    if (!loaded.ok()) {
      nb::gil_scoped_acquire acquire;
      throw nb::value_error(loaded.status().message().c_str());
    }
    pipeline::AnalyzeRequest request;
    request.project_root = load.project_root;
    auto result = pipeline::Analyze(std::move(loaded).value(), request);
    if (!result.ok()) {
      nb::gil_scoped_acquire acquire;
      throw nb::value_error(result.status().message().c_str());
    }
    analyzed = std::move(result).value();
  }
  const auto& summary = analyzed->analysis->summary;
  nb::dict out;
  if (summary.devices.empty()) return out;
  const auto& device = summary.devices.front();
  out["peak_allocated"] = device.peak_allocated;
  out["peak_reserved"] = device.peak_reserved;
  nb::dict categories;
  for (const auto& share : device.live_at_peak_by_category) {
    categories[model::CategoryName(share.category)] = share.bytes;
  }
  out["by_category"] = categories;
  // The curve: copied once into a vector the array owns (a capsule frees it with the array).
  const auto& timeline = analyzed->analysis->timelines.devices.front();
  auto* curve = new std::vector<int64_t>(timeline.allocated);
  nb::capsule owner(curve, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  out["allocated"] = nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(curve->data(), {curve->size()},
                                                                   owner);
  return out;
}

}  // namespace

NB_MODULE(vramscope_native_proto, m) {
  m.def("report", &Report, nb::arg("path"));
  m.def("explain_nothing", []() { return 0; });
}
