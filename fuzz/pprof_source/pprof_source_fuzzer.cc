// libFuzzer target for the pprof source (JAX's device memory profile, uncompressed protobuf).
//
// Converts the input; a failure must be one input-error line naming the file. A success must
// hold the source's promises (allocs only, each with a category, devices contiguous and
// ascending, sizes as recorded) and survive every analysis a report runs. libprotobuf parses;
// what is fuzzed here is everything the source trusts after parsing: string, function and
// location references, values per sample, labels.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target pprof_source_fuzzer).
// Run:   pprof_source_fuzzer -max_len=8192 NEW_CORPUS_DIR fuzz/pprof_source/corpus
#include <cstddef>
#include <cstdint>
#include <span>

#include "sources/pprof/pprof_source.h"
#include "support/through_pipeline.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto trace = vramscope::pprof::TraceFromPprof(std::span<const uint8_t>(data, size), "fuzz");
  if (!trace.ok()) {
    vramscope::testing::CheckRefusal(trace.status());
    return 0;
  }
  const vramscope::model::Trace& t = *trace;
  const auto& ev = t.events;
  for (size_t i = 0; i < ev.count(); ++i) {
    Check(ev.action[i] == vramscope::model::Action::kAlloc && ev.size[i] > 0);
    Check(ev.category.contains(static_cast<uint32_t>(i)));
    if (i > 0) Check(ev.device[i] >= ev.device[i - 1]);
  }
  Check(t.devices.size() == t.device_event_ranges.size());
  Check(t.facts.frees_without_alloc == 0);
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
