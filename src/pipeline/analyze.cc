#include "pipeline/analyze.h"

#include <fmt/format.h>

namespace vramscope::pipeline {

Result<std::unique_ptr<Analyzed>> Analyze(Loaded loaded, const AnalyzeOptions& options) {
  auto out = std::make_unique<Analyzed>(std::move(loaded), options.project_root);
  out->analysis = analysis::Analyze(out->view(), out->root, out->simulations(), options.progress);
  if (options.what_if) {
    if (!out->loaded.simulations) {
      return InvalidInput(fmt::format(
          "{}: the input holds no alloc/free trace, so there is nothing to replay; record one "
          "with torch.cuda.memory._record_memory_history() before the step you want to see",
          out->loaded.input.Name()));
    }
    ProgressStage(options.progress,
                  fmt::format("running the allocator model under {} what-if setting(s)",
                              options.what_if->what_if.size()));
    RETURN_IF_ERROR(analysis::AddWhatIfRuns(out->view(), *out->analysis->sites, *options.what_if,
                                            *out->loaded.simulations));
  }
  return out;
}

}  // namespace vramscope::pipeline
