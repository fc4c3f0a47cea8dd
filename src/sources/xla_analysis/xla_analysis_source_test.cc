// The XLA memory-analysis source on steps recorded with jax[cpu] 0.10.2 and optax 0.2.8
// (tests/data/xla/README.md): an MLP 512-1024-1024-10 trained with Adam, jitted without and with
// donation. Its weights are 6,340,648 B and Adam's state 12,681,300 B (jax.tree sizes, printed by
// the recording script); the batch is 133,632 B.
#include "sources/xla_analysis/xla_analysis_source.h"

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/mapped_file.h"
#include "sources/load_source.h"

namespace vramscope::xla_analysis {
namespace {

using model::Category;

const std::filesystem::path kData = std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/xla";

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Totals {
  std::array<uint64_t, model::kCategoryCount> at_end{};  // bytes alive at the end, by category
  uint64_t peak = 0;
};

// The categories the source recorded (attribution takes them first): bytes by category alive at
// the end, and the peak of the bytes live at once.
Totals Sum(const model::Trace& trace) {
  Totals out;
  for (const model::Allocation& a : trace.allocations) {
    if (!a.alive_at_end) continue;
    const auto category = trace.events.category.find(static_cast<uint32_t>(a.alloc_event));
    EXPECT_NE(category, trace.events.category.end());
    if (category != trace.events.category.end()) {
      out.at_end[static_cast<size_t>(category->second)] += a.size;
    }
  }
  uint64_t live = 0;
  for (size_t e = 0; e < trace.events.count(); ++e) {
    if (trace.events.action[e] == model::Action::kAlloc) live += trace.events.size[e];
    if (trace.events.action[e] == model::Action::kFreeCompleted) live -= trace.events.size[e];
    out.peak = std::max(out.peak, live);
  }
  return out;
}

uint64_t At(const Totals& t, Category c) { return t.at_end[static_cast<size_t>(c)]; }

TEST(XlaMemoryAnalysis, RecordedStepWithoutDonation) {
  const auto path = kData / "mlp_step.xla.json";
  auto trace = TraceFromXlaMemoryAnalysis(Read(path), path.string());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->source.generation, "jax 0.10.2");
  EXPECT_EQ(trace->source.device_type, "cpu");  // compiled for jax[cpu]
  const Totals t = Sum(*trace);
  // The arguments, then each output leaf anew (nothing is donated): the weights and Adam's
  // state twice, the step's new values beside the old.
  EXPECT_EQ(At(t, Category::kWeight), 2 * 6'340'648u);
  EXPECT_EQ(At(t, Category::kOptimizerState), 2 * 12'681'300u);
  EXPECT_EQ(At(t, Category::kInput), 133'632u);
  // The loss (4 B) and the output tuple's tables (160 B: output_size_in_bytes 19,022,112 less the
  // leaves' 19,021,952); the temp buffer (68 B) is released by the end.
  EXPECT_EQ(At(t, Category::kTemporary), 4u + 160u);
  // Arguments + temp + outputs: XLA's argument and output sizes and its temp size.
  EXPECT_EQ(t.peak, 19'155'580u + 68u + 19'022'112u);
  bool temp_named = false;
  for (const auto& [event, name] : trace->events.tensor_name) {
    temp_named |= trace->strings.Get(name).starts_with("XLA temp buffer");
  }
  EXPECT_TRUE(temp_named);
}

TEST(XlaMemoryAnalysis, DonatedStepWritesOutputsIntoItsArguments) {
  const auto path = kData / "mlp_step_donated.xla.json";
  auto trace = TraceFromXlaMemoryAnalysis(Read(path), path.string());
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const Totals t = Sum(*trace);
  EXPECT_EQ(At(t, Category::kWeight), 6'340'648u);
  EXPECT_EQ(At(t, Category::kOptimizerState), 12'681'300u);
  EXPECT_EQ(At(t, Category::kInput), 133'632u);
  // alias_size_in_bytes 19,021,948: every weight and state leaf is written in place, so only the
  // loss and the tables are new; the temp buffer is 6,557,764 B.
  EXPECT_EQ(t.peak, 19'155'580u + 6'557'764u + 4u + 160u);
  bool alias_noted = false;
  for (const std::string& n : trace->facts.notes) {
    alias_noted |= n.find("written into donated arguments") != std::string::npos;
  }
  EXPECT_TRUE(alias_noted);
}

TEST(XlaMemoryAnalysis, PickedByContentThroughTheDispatcher) {
  const auto path = kData / "mlp_step.xla.json";
  auto file = MappedFile::Open(path.string());
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto trace = sources::LoadTrace(**file);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->source.format, "XLA memory analysis of a jitted step (vramscope.xla)");
}

TEST(XlaMemoryAnalysis, RecognisesOnlyItsFirstKey) {
  EXPECT_TRUE(IsXlaMemoryAnalysis(" \n{ \"vramscope_format\": \"xla-memory-analysis\"}"));
  EXPECT_FALSE(IsXlaMemoryAnalysis("{\"traceEvents\": []}"));
  EXPECT_FALSE(IsXlaMemoryAnalysis("[[1, 2, 3, 4]]"));
}

// Damaged documents: one line naming where and what, never a crash.
class Damaged : public ::testing::Test {
 protected:
  void SetUp() override { doc_ = nlohmann::json::parse(Read(kData / "mlp_step.xla.json")); }
  std::string Error() const {
    auto trace = TraceFromXlaMemoryAnalysis(doc_.dump(), "step.json");
    EXPECT_FALSE(trace.ok());
    if (trace.ok()) return "";
    const std::string& m = trace.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  nlohmann::json doc_;
};

TEST_F(Damaged, NewerVersion) {
  doc_["version"] = 2;
  EXPECT_NE(Error().find("version 2; this vramscope reads version 1"), std::string::npos);
}

TEST_F(Damaged, UnknownCategory) {
  doc_["arguments"][3]["category"] = "params";
  EXPECT_NE(Error().find("arguments[3]: category \"params\" is not one of vramscope's"),
            std::string::npos);
}

TEST_F(Damaged, NegativeBytes) {
  doc_["outputs"][0]["bytes"] = -8;
  EXPECT_NE(Error().find("outputs[0]: \"bytes\" is -8, not a byte count"), std::string::npos);
}

TEST_F(Damaged, AliasBeyondTheOutputs) {
  doc_["arguments"][0]["aliased_output"] = 999;
  EXPECT_NE(Error().find("\"aliased_output\" is 999, not the index of one of the 20 outputs"),
            std::string::npos);
}

TEST_F(Damaged, MissingStats) {
  doc_["memory_analysis"].erase("temp_size_in_bytes");
  EXPECT_NE(Error().find("memory_analysis: \"temp_size_in_bytes\" is missing"), std::string::npos);
}

TEST_F(Damaged, ImplausibleSize) {
  doc_["memory_analysis"]["temp_size_in_bytes"] = uint64_t{1} << 60;
  EXPECT_NE(Error().find("more than 1 PiB"), std::string::npos);
}

TEST(XlaMemoryAnalysisText, TruncatedAndTooDeep) {
  const std::string text = Read(kData / "mlp_step.xla.json");
  auto cut = TraceFromXlaMemoryAnalysis(text.substr(0, text.size() / 2), "step.json");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("step.json: invalid JSON"), std::string::npos);
  const std::string deep =
      "{\"vramscope_format\": \"xla-memory-analysis\", \"x\": " + std::string(100000, '[') +
      std::string(100000, ']') + "}";
  auto refused = TraceFromXlaMemoryAnalysis(deep, "deep.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("nested deeper than 16 levels"), std::string::npos);
}

}  // namespace
}  // namespace vramscope::xla_analysis
