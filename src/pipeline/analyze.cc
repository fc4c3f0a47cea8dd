#include "pipeline/analyze.h"

#include <fmt/format.h>

namespace vramscope::pipeline {

Result<std::unique_ptr<const Analyzed>> Analyze(Loaded loaded, const AnalyzeRequest& request) {
  auto out = std::make_unique<Analyzed>(std::move(loaded), request.project_root);
  out->simulations = std::move(out->loaded.simulations);
  out->loaded.simulations.reset();
  if (request.what_if && !out->simulations) {
    return InvalidInput(fmt::format(
        "{}: the input holds no alloc/free trace, so there is nothing to replay; record one "
        "with torch.cuda.memory._record_memory_history() before the step you want to see",
        out->loaded.input.Name()));
  }
  analysis::Simulations* sims = out->simulations ? &*out->simulations : nullptr;
  ASSIGN_OR_RETURN(out->analysis, analysis::Analyze(out->view(), out->root, sims,
                                                    request.what_if ? &*request.what_if : nullptr,
                                                    request.control));
  if (!out->loaded.ranks.empty()) out->ranks_compared = analysis::CompareRanks(out->loaded.ranks);
  return std::unique_ptr<const Analyzed>(std::move(out));
}

}  // namespace vramscope::pipeline
