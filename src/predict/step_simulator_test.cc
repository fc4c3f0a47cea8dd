#include "predict/step_simulator.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <iostream>

#include "predict/layers.h"
#include "predict/model_description.h"
#include "predict/model_spec.h"

namespace vramscope::predict {
namespace {
std::string Render(const TensorStream& s, const StreamEvent& e) {
  using K = StreamEvent::Kind;
  switch (e.kind) {
    case K::kAlloc:
      return fmt::format("alloc #{} {} {} {} {} {}", e.id, e.bytes, model::CategoryName(e.category),
                         s.strings.Get(e.name), s.strings.Get(e.op),
                         e.thread == Thread::kMain ? "main" : "bw");
    case K::kFree:
      return fmt::format("free #{}", e.id);
    case K::kPhase:
      return fmt::format("phase {} {}", e.step, s.strings.Get(e.name));
    case K::kMatmul:
      return fmt::format("matmul {} {}", s.strings.Get(e.op),
                         e.thread == Thread::kMain ? "main" : "bw");
    default:
      return "other";
  }
}
TEST(Dump, Linear) {
  for (const char* f : {"linear", "mlp"}) {
    auto spec =
        LoadModelSpec(std::string(VRAMSCOPE_SOURCE_DIR) + "/examples/predict/" + f + ".json");
    ASSERT_TRUE(spec.ok());
    TrainingSetup setup;
    setup.batch = 64;
    setup.steps = 2;
    setup.optimizer.kind = OptimizerKind::kAdam;
    auto s = SimulateTraining(*spec, setup);
    ASSERT_TRUE(s.ok());
    std::cout << "=== " << f << "\n";
    for (const auto& e : s->events) std::cout << Render(*s, e) << "\n";
  }
}
}  // namespace
}  // namespace vramscope::predict
