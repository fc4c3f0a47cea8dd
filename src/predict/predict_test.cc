// The predictor against PyTorch on a real GPU: the goldens recorded on an NVIDIA H200
// (goldens/h200, torch 2.11) carry max_memory_allocated/reserved and memory_allocated/reserved
// after every phase of every step. For the single Linear layer and the two-layer MLP, trained
// with SGD and Adam in fp32 and under bf16 autocast, every one of those figures is predicted to
// the byte.
#include "predict/predict.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "allocator/caching_allocator.h"

namespace vramscope::predict {
namespace {

struct PhaseMemory {
  uint64_t allocated = 0, max_allocated = 0, reserved = 0, max_reserved = 0;
};
using PhaseKey = std::pair<int, std::string>;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

// Runs the stream through the allocator model and records, per (step, phase label), the memory
// PyTorch's counters would show: the level at the phase's end and the maximum within it (the
// goldens reset the peak statistics when each phase begins).
std::map<PhaseKey, PhaseMemory> PhaseMemories(const TensorStream& stream,
                                              const allocator::AllocatorSettings& settings) {
  allocator::SyntheticAddresses addresses(0x7e0000000000ULL);
  allocator::CachingAllocator alloc(settings, &addresses);
  std::unordered_map<uint64_t, allocator::BlockId> live;
  std::map<PhaseKey, PhaseMemory> out;
  PhaseMemory* current = nullptr;
  auto observe = [&] {
    if (current == nullptr) return;
    current->allocated = alloc.stats().allocated;
    current->reserved = alloc.stats().reserved;
    current->max_allocated = std::max(current->max_allocated, current->allocated);
    current->max_reserved = std::max(current->max_reserved, current->reserved);
  };
  for (const StreamEvent& e : stream.events) {
    if (e.kind == StreamEvent::Kind::kPhase) {
      current = &out[{e.step, std::string(stream.strings.Get(e.name))}];
      observe();
    } else if (e.kind == StreamEvent::Kind::kAlloc) {
      const auto r = alloc.Malloc(e.bytes, 0);
      EXPECT_TRUE(r.ok());
      live[e.id] = r.block;
      observe();
    } else if (e.kind == StreamEvent::Kind::kFree) {
      alloc.Free(live.at(e.id));
      live.erase(e.id);
      observe();
    }
  }
  return out;
}

struct GoldenCase {
  const char* name;
  const char* model;
  const char* optimizer;
  bool autocast;
};

class LinearAndMlpGoldens : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(LinearAndMlpGoldens, EveryPhaseToTheByte) {
  const GoldenCase& c = GetParam();
  const std::string root = VRAMSCOPE_SOURCE_DIR;
  const nlohmann::json sidecar =
      ReadJson(root + "/goldens/h200/" + std::string(c.name) + ".sidecar.json");
  PredictRequest request;
  request.model = root + "/examples/predict/" + c.model + ".json";
  request.setup.batch = 64;
  request.setup.steps = 3;
  request.setup.optimizer.kind =
      std::string(c.optimizer) == "sgd" ? OptimizerKind::kSgd : OptimizerKind::kAdam;
  if (c.autocast) request.setup.precision.autocast = DType::kBF16;
  ASSERT_TRUE(FindGpu("h200").ok());
  request.gpu = *FindGpu("h200");
  auto model = LoadModel(request.model);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto stream = PredictStream(*model, request);
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  auto settings = SettingsFor(request);
  ASSERT_TRUE(settings.ok());
  const auto predicted = PhaseMemories(*stream, *settings);
  int compared = 0;
  for (const auto& phase : sidecar["phases"]) {
    const PhaseKey key{phase["step"].get<int>(), phase["phase"].get<std::string>()};
    const auto it = predicted.find(key);
    ASSERT_NE(it, predicted.end())
        << "no predicted phase " << key.second << " of step " << key.first;
    const auto& m = phase["memory"];
    const std::string where =
        std::string(c.name) + " step " + std::to_string(key.first) + " " + key.second;
    EXPECT_EQ(it->second.allocated, m["allocated"].get<uint64_t>()) << where;
    EXPECT_EQ(it->second.max_allocated, m["max_allocated"].get<uint64_t>()) << where;
    EXPECT_EQ(it->second.reserved, m["reserved"].get<uint64_t>()) << where;
    EXPECT_EQ(it->second.max_reserved, m["max_reserved"].get<uint64_t>()) << where;
    ++compared;
  }
  EXPECT_EQ(compared, 1 + 3 * 6);  // set-up, then six phases per step
  // And the whole run, through the trace the report reads.
  auto built = Predict(*model, request);
  ASSERT_TRUE(built.ok());
  EXPECT_EQ(built->peak_allocated, sidecar["peak"]["max_allocated"].get<uint64_t>());
  EXPECT_EQ(built->peak_reserved, sidecar["peak"]["max_reserved"].get<uint64_t>());
}

INSTANTIATE_TEST_SUITE_P(H200, LinearAndMlpGoldens,
                         ::testing::Values(GoldenCase{"linear_sgd_fp32", "linear", "sgd", false},
                                           GoldenCase{"linear_sgd_bf16", "linear", "sgd", true},
                                           GoldenCase{"linear_adam_fp32", "linear", "adam", false},
                                           GoldenCase{"linear_adam_bf16", "linear", "adam", true},
                                           GoldenCase{"mlp_sgd_fp32", "mlp", "sgd", false},
                                           GoldenCase{"mlp_sgd_bf16", "mlp", "sgd", true},
                                           GoldenCase{"mlp_adam_fp32", "mlp", "adam", false},
                                           GoldenCase{"mlp_adam_bf16", "mlp", "adam", true}),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace vramscope::predict
