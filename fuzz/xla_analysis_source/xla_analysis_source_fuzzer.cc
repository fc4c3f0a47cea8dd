// libFuzzer target for the XLA memory-analysis source (vramscope.xla's JSON).
//
// Converts the input; a failure must be one input-error line naming the file. A success must
// hold the source's promises (one device, a category and a name on every alloc, the temp buffer
// the only release, sizes as given), have its peak equal to the arguments + temp + new outputs
// the document lists, and survive every analysis a report runs.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target xla_analysis_source_fuzzer).
// Run:   xla_analysis_source_fuzzer -max_len=16384 \
//           -dict=fuzz/xla_analysis_source/xla_analysis_source_fuzzer.dict \
//           NEW_CORPUS_DIR fuzz/xla_analysis_source/corpus
#include <cstddef>
#include <cstdint>
#include <string>

#include "sources/xla_analysis/xla_analysis_source.h"
#include "support/through_pipeline.h"

namespace {

using vramscope::model::Action;

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto trace = vramscope::xla_analysis::TraceFromXlaMemoryAnalysis(input, "fuzz");
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  const size_t n = ev.count();
  Check(t.facts.has_trace == (n > 0));
  Check(!t.facts.has_allocator_state && t.facts.sizes_are_block_sizes);
  uint64_t live = 0, peak = 0;
  size_t releases = 0;
  for (size_t i = 0; i < n; ++i) {
    Check(ev.device[i] == 0 && ev.size[i] > 0 && ev.addr[i] % 512 == 0);
    if (ev.action[i] == Action::kAlloc) {
      Check(ev.category.contains(static_cast<uint32_t>(i)));
      Check(ev.tensor_name.contains(static_cast<uint32_t>(i)));
      live += ev.size[i];
    } else if (ev.action[i] == Action::kFreeCompleted) {
      Check(live >= ev.size[i]);
      live -= ev.size[i];
      ++releases;
    }
    peak = live > peak ? live : peak;
  }
  Check(releases <= 1);
  Check(t.facts.frees_without_alloc == 0);
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
