#include "pipeline/analyze.h"

#include <fmt/format.h>

namespace vramscope::pipeline {

Result<std::unique_ptr<Analyzed>> Analyze(Loaded loaded, const AnalyzeOptions& options) {
  auto out = std::make_unique<Analyzed>(std::move(loaded), options.project_root);
  out->analysis = analysis::Analyze(out->view(), out->root, out->simulations());
  if (options.what_if) {
    if (!out->loaded.simulations) {
      return InvalidInput(fmt::format(
          "{}: the input holds no alloc/free trace, so there is nothing to replay; record one "
          "with torch.cuda.memory._record_memory_history() before the step you want to see",
          out->loaded.input.Name()));
    }
    RETURN_IF_ERROR(analysis::AddWhatIfRuns(out->view(), *out->analysis->sites, *options.what_if,
                                            *out->loaded.simulations));
  }
  return out;
}

}  // namespace vramscope::pipeline
