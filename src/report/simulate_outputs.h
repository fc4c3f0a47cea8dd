// `vramscope simulate`'s outputs (and the Python API's): the result of pipeline::Simulate as
// terminal text and as the versioned JSON document, with the capacity a GPU leaves the allocator
// when the request named one, and the report database when one was written.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "pipeline/simulate.h"

namespace vramscope::report {

// The version of `simulate --json`: raised with every change to its keys or their meaning.
inline constexpr int kSimulateJsonVersion = 1;

// The database `simulate -o` wrote.
struct SimulateDatabase {
  std::string path;
  uint64_t rows = 0;
};

nlohmann::json SimulateJson(const pipeline::SimulateResult& result, std::optional<int32_t> device,
                            const std::optional<SimulateDatabase>& database);
std::string SimulateText(const pipeline::SimulateResult& result, std::optional<int32_t> device,
                         const std::optional<SimulateDatabase>& database);

}  // namespace vramscope::report
