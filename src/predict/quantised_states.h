// Adam's states under the quantised formats of bitsandbytes and torchao, tensor by tensor as the
// libraries allocate them (StateFormat in step_simulator.h says which). One rule for the step
// simulator (one GPU, DDP, ZeRO) and the per-rank estimate of parallel layouts (role_stream.h),
// so that both count the same bytes for the same tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "predict/step_simulator.h"

namespace vramscope::predict {

struct QuantisedState {
  std::string suffix;  // after the parameter's name: ".exp_avg (codes)"
  uint64_t bytes = 0;
  const char* op = "";
  // bitsandbytes' paged codes: cudaMallocManaged, outside the caching allocator.
  bool paged = false;
};

// What the optimizer makes once, whatever it steps: bitsandbytes' two quantisation maps.
std::vector<QuantisedState> SharedQuantisationMaps(StateFormat format);

// One parameter's states: `n` of its elements on this rank (a ZeRO shard, or all), `param_bytes`
// those elements in the parameter's dtype (what torchao's zeros_like(param) takes for a tensor
// it does not quantise). `format` is not kNative.
std::vector<QuantisedState> QuantisedAdamStates(StateFormat format, uint64_t n,
                                                uint64_t param_bytes);

}  // namespace vramscope::predict
