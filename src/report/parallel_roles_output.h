// `vramscope predict --tp/--pp/--cp/--ep ...`: the memory of each rank role of a parallel layout
// (predict/parallel_layout.h) as the terminal table and as JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/parallel_prediction.h"

namespace vramscope::report {

using model::ParallelCapacity;

std::string RenderParallelRoles(const model::ParallelPrediction& p, const std::string& model,
                                const std::string& setup, const ParallelCapacity& capacity);
nlohmann::json ParallelRolesJson(const model::ParallelPrediction& p, const std::string& model,
                                 const std::string& setup, const ParallelCapacity& capacity);

}  // namespace vramscope::report
