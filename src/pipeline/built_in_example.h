// The built-in example: a real memory snapshot recorded on an NVIDIA H200 with torch 2.11 and
// _record_memory_history(stacks="all") — a 2-layer MLP (Linear(1024, 4096) -> GELU ->
// Linear(4096, 1024), fp32, batch 64, MSE) trained with Adam for 3 steps. It is the golden
// goldens/h200/mlp_adam_fp32.pickle.gz, embedded gzipped into the binary at build time and read
// like a file (the gzip is detected by content), so `vramscope report` with no input has a real
// capture to show. PyTorch's own peaks for the run are in goldens/h200/mlp_adam_fp32.sidecar.json.
#pragma once

#include <cstdint>
#include <span>

namespace vramscope::pipeline {

std::span<const uint8_t> BuiltInExampleSnapshot();
inline constexpr const char* kBuiltInExampleName = "goldens/h200/mlp_adam_fp32.pickle.gz";

}  // namespace vramscope::pipeline
