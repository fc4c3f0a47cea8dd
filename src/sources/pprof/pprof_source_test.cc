// The pprof source on JAX device memory profiles recorded with jax[cpu] 0.10.2 and optax 0.2.8
// (tests/data/pprof/README.md): an MLP 512-1024-1024-10 with Adam, saved after optax's init and
// after three jitted steps. jax.live_arrays() held 19,155,580 B (21 arrays) and 19,155,584 B
// (22) then; the parameters are 6,340,648 B and Adam's state 12,681,300 B. The third file is
// the second's profile as vramscope.jax_memory.save_profile writes it: a sample per live array
// with its role.
#include "sources/pprof/pprof_source.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/mapped_file.h"
#include "pprof_profile.pb.h"
#include "sources/load_source.h"

namespace vramscope::pprof {
namespace {

using model::Category;

const std::filesystem::path kData =
    std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/pprof";

model::Trace Load(const std::string& name) {
  auto file = MappedFile::Open((kData / name).string());
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto trace = sources::LoadTrace(**file);  // gzipped, picked by content
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? std::move(*trace) : model::Trace{};
}

size_t Allocations(const model::Trace& t) {
  size_t n = 0;
  for (size_t i = 0; i < t.events.count(); ++i) n += t.events.action[i] == model::Action::kAlloc;
  return n;
}

uint64_t Bytes(const model::Trace& t, std::optional<Category> category = std::nullopt) {
  uint64_t sum = 0;
  for (size_t i = 0; i < t.events.count(); ++i) {
    if (t.events.action[i] != model::Action::kAlloc) continue;
    const auto c = t.events.category.find(static_cast<uint32_t>(i));
    if (!category || (c != t.events.category.end() && c->second == *category)) {
      sum += t.events.size[i];
    }
  }
  return sum;
}

TEST(JaxDeviceMemoryProfile, AfterInitTheOptimizerStateIsOptaxs) {
  const model::Trace t = Load("mlp_adam_after_init.prof");
  EXPECT_EQ(t.source.format,
            "pprof device memory profile (jax.profiler.save_device_memory_profile)");
  EXPECT_EQ(Bytes(t), 19'155'580u);  // every live array
  // Adam's mu and nu are made by optax's init; its count (4 B, an int32 scalar) too.
  EXPECT_EQ(Bytes(t, Category::kOptimizerState), 12'681'300u);
  EXPECT_EQ(Bytes(t, Category::kUnknown), 19'155'580u - 12'681'300u);
  EXPECT_TRUE(t.facts.has_python_frames);
  EXPECT_EQ(t.devices, std::vector<int32_t>{0});
  EXPECT_EQ(t.source.device_type, "cpu");  // jax[cpu]: every sample's device is "cpu:0"
  // JAX groups buffers by stack, device and size: split back, they are the 21 live arrays.
  EXPECT_EQ(Allocations(t), 21u);
}

TEST(JaxDeviceMemoryProfile, AfterAStepEveryOutputHasTheCallersStack) {
  const model::Trace t = Load("mlp_adam_after_step.prof");
  EXPECT_EQ(Bytes(t), 19'155'584u);
  // The step's outputs (weights, state, loss) were made by the jitted step, not by optax's code.
  EXPECT_EQ(Bytes(t, Category::kOptimizerState), 0u);
  EXPECT_EQ(Allocations(t), 22u);
  bool explained = false;
  for (const std::string& n : t.facts.notes) {
    explained |= n.find(
                     "vramscope.jax_memory.save_profile, saves the profile with each "
                     "buffer's role") != std::string::npos;
  }
  EXPECT_TRUE(explained);
}

TEST(JaxDeviceMemoryProfile, RolesMarkedByVramscopesWriterAreTheCategories) {
  const model::Trace t = Load("mlp_adam_after_step_roles.prof");
  EXPECT_EQ(t.source.format,
            "pprof device memory profile (jax.profiler.save_device_memory_profile)");
  // The 22 live arrays, then the step: XLA's analysis of jit_step gave arguments 19,155,580 B,
  // outputs 19,022,112 B (none aliased) and a temp buffer of 68 B. Its temp buffer and the
  // 19,022,108 B of arguments and outputs beyond the live buffers come after them.
  EXPECT_EQ(Allocations(t), 22u + 2u);
  constexpr uint64_t kLive = 19'155'584, kStepOwn = 19'155'580 + 19'022'112;
  EXPECT_EQ(Bytes(t), kStepOwn + 68);
  EXPECT_EQ(Bytes(t, Category::kWeight), 6'340'648u);
  EXPECT_EQ(Bytes(t, Category::kOptimizerState), 12'681'300u);
  EXPECT_EQ(Bytes(t, Category::kTemporary), 68u);
  EXPECT_EQ(Bytes(t, Category::kUnknown), kLive - 6'340'648u - 12'681'300u + (kStepOwn - kLive));
  // Both step allocations are freed: what is alive at the end is the live arrays.
  uint64_t freed = 0;
  for (size_t i = 0; i < t.events.count(); ++i) {
    if (t.events.action[i] == model::Action::kFreeCompleted) freed += t.events.size[i];
  }
  EXPECT_EQ(freed, kStepOwn - kLive + 68);
  // Each array is named by its pytree path: the first layer's weight matrix, Adam's mu of it.
  std::vector<std::string> names;
  for (const auto& [event, name] : t.events.tensor_name) names.emplace_back(t.strings.Get(name));
  EXPECT_NE(std::find(names.begin(), names.end(), "weights[0]['w']"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "ScaleByAdamState.mu[0]['w']"), names.end());
  bool said = false;
  for (const std::string& n : t.facts.notes) {
    said |= n.starts_with("categories: each buffer's role as vramscope marked it") &&
            n.find(
                "weight 6.05 MiB, the live pytree with the structure, shapes and dtypes of "
                "the optimizer state's moments (the weights it updates)") != std::string::npos;
  }
  EXPECT_TRUE(said);
  bool step = false;
  for (const std::string& n : t.facts.notes) {
    step |= n.starts_with("the step: jit_step (the largest compiled computation still alive") &&
            n.find("temp buffer 68 B") != std::string::npos;
  }
  EXPECT_TRUE(step);
}

TEST(JaxDeviceMemoryProfileDamaged, OneLineEach) {
  auto fail = [](std::string bytes) {
    auto trace =
        TraceFromPprof({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "p.prof");
    EXPECT_FALSE(trace.ok());
    return trace.ok() ? std::string() : trace.status().message();
  };
  // A sample_type whose type names string 5 of an empty table.
  EXPECT_NE(fail(std::string("\x0a\x04\x08\x05\x10\x01", 6)).find("string table does not start"),
            std::string::npos);
  // The string table "", "cpu", "nanoseconds": a CPU profile, not memory.
  const std::string cpu = std::string("\x0a\x04\x08\x01\x10\x02\x32\x00", 8) + "\x32\x03" + "cpu" +
                          "\x32\x0b" + "nanoseconds";
  EXPECT_NE(fail(cpu).find("a pprof profile of cpu (nanoseconds), not of memory in use"),
            std::string::npos);
  EXPECT_NE(fail(std::string("\x0a\xff", 2)).find("not a valid pprof protobuf"), std::string::npos);

  // A step sample whose figure is negative (a writer's bug, or damage).
  Profile p;
  for (const char* s : {"", "space", "bytes", "kind", "vramscope_step", "vramscope_temp_bytes"}) {
    p.add_string_table(s);
  }
  ValueType* type = p.add_sample_type();
  type->set_type(1);
  type->set_unit(2);
  Sample* sample = p.add_sample();
  sample->add_value(0);
  Label* kind = sample->add_label();
  kind->set_key(3);
  kind->set_str(4);
  Label* temp = sample->add_label();
  temp->set_key(5);
  temp->set_num(-1);
  EXPECT_NE(fail(p.SerializeAsString()).find("sample 0's label vramscope_temp_bytes is -1 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace vramscope::pprof
