// The rows of Skyline's weight_entries and activation_entries tables.
//
// Weights: allocations attributed as weights that are live at their device's peak, named after
// the module kind and the line that created them (snapshots do not record parameter names; the
// capture sidecar of `vramscope run` will). A weight's gradient size is the size of a gradient
// allocation of the same requested size, matched one to one in order.
// Activations: allocations attributed as activations that are live when the activations of the
// device peak (the end of the forward pass that keeps the most for backward; the memory peak
// itself may fall in the optimizer step, when none is left), with the operation that made them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/sites.h"
#include "analysis/summary.h"
#include "attribution/attribution.h"
#include "model/trace.h"

namespace vramscope::analysis {

struct WeightEntry {
  std::string name;
  uint64_t size_bytes = 0;
  uint64_t grad_size_bytes = 0;
  model::StackId stack = model::kEmptyStack;
};

struct ActivationEntry {
  std::string operation_name;
  uint64_t size_bytes = 0;
  model::StackId stack = model::kEmptyStack;
};

struct SkylineEntries {
  std::vector<WeightEntry> weights;
  std::vector<ActivationEntry> activations;
};

SkylineEntries BuildSkylineEntries(const model::TraceView& view, const Summary& summary,
                                   const attribution::Attribution& attribution, SiteNamer& sites);

}  // namespace vramscope::analysis
