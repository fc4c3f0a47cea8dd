// The one vocabulary: its export for Python (python/vramscope/vocabulary.json, which the tracer
// and the capture bootstrap read) is the C++ table byte for byte, and the table itself is whole.
// VRAMSCOPE_REBASELINE=1 rewrites the export from the table.
#include "model/vocabulary.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace vramscope::model {
namespace {

const std::string kExport = std::string(VRAMSCOPE_SOURCE_DIR) + "/python/vramscope/vocabulary.json";

TEST(Vocabulary, ThePythonExportIsTheTable) {
  const std::string expected = VocabularyJson();
  if (const char* r = std::getenv("VRAMSCOPE_REBASELINE"); r != nullptr && std::string(r) == "1") {
    std::ofstream(kExport, std::ios::binary) << expected;
  }
  std::ifstream in(kExport, std::ios::binary);
  ASSERT_TRUE(in) << kExport << " is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), expected) << kExport
                                  << " differs from src/model/vocabulary.h: run this test with "
                                  << "VRAMSCOPE_REBASELINE=1 to write it again, and commit it";
}

TEST(Vocabulary, EveryPhaseHasOneReportNameAndEveryProducerSpellsTheStep) {
  for (int i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    const std::string_view name = PhaseNameFor(PhaseProducer::kReport, phase);
    ASSERT_FALSE(name.empty()) << i;
    EXPECT_EQ(PhaseSpelledBy(PhaseProducer::kReport, name), phase);
    EXPECT_EQ(ParsePhase(name), phase);
    if (phase == Phase::kUnknown) continue;
    // The capture and the tracer know every phase of a step.
    EXPECT_FALSE(PhaseNameFor(PhaseProducer::kCapture, phase).empty()) << name;
    EXPECT_FALSE(PhaseNameFor(PhaseProducer::kTracer, phase).empty()) << name;
  }
  // No producer spells two phases alike.
  std::set<std::pair<int, std::string_view>> seen;
  for (const PhaseSpelling& s : kPhaseSpellings) {
    EXPECT_TRUE(seen.emplace(static_cast<int>(s.producer), s.name).second) << s.name;
  }
  EXPECT_EQ(ParsePhase("between"), Phase::kBeforeForward);
  EXPECT_EQ(PhaseSpelledBy(PhaseProducer::kTracer, "step_end"), Phase::kOptimizer);
  EXPECT_EQ(PhaseNameFor(PhaseProducer::kTracer, Phase::kBeforeForward), "inputs");
}

TEST(Vocabulary, PoolsAreTheirCodes) {
  EXPECT_STREQ(PoolName(Pool::kSmall), "small");
  EXPECT_STREQ(PoolName(Pool::kLarge), "large");
  for (const PoolSpelling& p : kPoolSpellings) EXPECT_EQ(p.name, PoolName(p.pool));
}

}  // namespace
}  // namespace vramscope::model
