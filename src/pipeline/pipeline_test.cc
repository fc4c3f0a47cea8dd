// The pipeline as a library, with no command line and no CLI11: every verb's request is a value,
// its result is read-only, its progress goes to a Progress the caller owns, and its cancellation
// token stops it midway with Interrupted and nothing left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/atomic_output.h"
#include "pipeline/analyze.h"
#include "pipeline/explain.h"
#include "pipeline/load.h"
#include "pipeline/predict.h"
#include "pipeline/simulate.h"
#include "pipeline/window.h"

namespace vramscope::pipeline {
namespace {

using ::testing::HasSubstr;

// Results are read-only: Analyze and the verbs hand out pointers to const.
static_assert(std::is_same_v<decltype(Analyze(std::declval<Loaded>(), {})),
                             Result<std::unique_ptr<const Analyzed>>>);
static_assert(std::is_same_v<decltype(PredictResult::report), std::unique_ptr<const Analyzed>>);

// Records the stages a request names, and cancels its token when a stage starting with
// `cancel_at` begins (or at the `cancel_after_updates`-th Update).
class RecordingProgress final : public Progress {
 public:
  explicit RecordingProgress(CancelToken* token = nullptr) : token_(token) {}
  void Stage(std::string label) override {
    if (token_ != nullptr && !cancel_at.empty() && label.rfind(cancel_at, 0) == 0) {
      token_->Cancel();
    }
    stages.push_back(std::move(label));
  }
  void Update(uint64_t, uint64_t, Unit) override {
    if (token_ != nullptr && ++updates == cancel_after_updates) token_->Cancel();
  }
  void Finish() override {}
  void Note(const std::string& line) override { notes.push_back(line); }

  std::string cancel_at;
  int cancel_after_updates = -1;
  int updates = 0;
  std::vector<std::string> stages, notes;

 private:
  CancelToken* token_;
};

bool AnyStartsWith(const std::vector<std::string>& list, const std::string& prefix) {
  for (const std::string& s : list) {
    if (s.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(PipelinePredict, ATensorAndPipelineParallelLayoutThroughTheLibrary) {
  PredictRequest r;
  r.model = "gpt2";
  r.batch = 2;
  r.seq = 256;
  r.tp = 2;
  r.pp = 2;
  r.pp_impl = "torch";
  r.tp_impl = "torch";
  r.micro_batches = 4;
  r.role = "last stage";
  r.role_report = true;
  RecordingProgress progress;
  r.control.progress = &progress;
  const Result<PredictResult> result = Predict(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->kind, PredictResult::Kind::kLayout);
  const LayoutResult& layout = *result->layout;
  EXPECT_EQ(layout.prediction.layout.tp, 2u);
  EXPECT_EQ(layout.prediction.layout.pp, 2u);
  ASSERT_EQ(layout.prediction.roles.size(), 2u);  // the first and the last stage
  EXPECT_EQ(layout.prediction.roles[layout.chosen].name, "last stage");
  for (const auto& role : layout.prediction.roles) {
    EXPECT_TRUE(role.placed);
    EXPECT_GT(role.peak_reserved, 0u);
    EXPECT_GE(role.peak_reserved, role.peak_allocated);
  }
  // The bounding role has the highest reserved peak (model/bounding.h's rule).
  const auto& bounding = layout.prediction.roles[layout.prediction.bounding];
  for (const auto& role : layout.prediction.roles)
    EXPECT_LE(role.peak_reserved, bounding.peak_reserved);
  // The chosen role's step, reported like any input.
  ASSERT_NE(result->report, nullptr);
  EXPECT_TRUE(result->report->trace().facts.predicted);
  EXPECT_EQ(result->report->analysis->summary.devices.size(), 1u);
}

TEST(PipelinePredict, AFitFindsTheLargestBatchAndReportsIt) {
  PredictRequest r;
  r.model = "gpt2";
  r.seq = 1024;
  r.fit = "24GiB";
  RecordingProgress progress;
  r.control.progress = &progress;
  const Result<PredictResult> result = Predict(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->kind, PredictResult::Kind::kStep);
  ASSERT_TRUE(result->fit.has_value());
  EXPECT_GT(result->fit->largest, 1u);
  EXPECT_LE(result->fit->peak_reserved, result->fit->capacity);
  EXPECT_TRUE(AnyStartsWith(progress.stages, "finding the largest batch"));
  // The report is of the batch found: its facts say so, and it fits.
  ASSERT_NE(result->report, nullptr);
  const auto& facts = result->report->trace().prediction->facts;
  const std::string expected = "largest batch that fits: " + std::to_string(result->fit->largest);
  EXPECT_NE(
      std::find_if(facts.begin(), facts.end(), [&](const auto& f) { return f.second == expected; }),
      facts.end());
  const auto& device = result->report->analysis->summary.devices.front();
  EXPECT_EQ(static_cast<uint64_t>(device.peak_reserved), result->fit->peak_reserved);
}

TEST(PipelinePredict, AFitThatFindsNothingSaysWhy) {
  PredictRequest r;
  r.model = "gpt2";
  r.seq = 1024;
  r.fit = "1GiB";
  const Result<PredictResult> result = Predict(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->kind, PredictResult::Kind::kNoFit);
  EXPECT_EQ(result->report, nullptr);
  EXPECT_GT(result->no_fit->advice.needed_reserved, result->no_fit->capacity);
  EXPECT_FALSE(result->no_fit->advice.message.empty());
}

TEST(PipelinePredict, BadSettingsAreUsageErrorsNamingTheSetting) {
  PredictRequest r;
  r.model = "gpt2";
  r.dtype = "fp8";
  const Result<PredictResult> result = Predict(r);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kUsage);
  EXPECT_THAT(result.status().message(), HasSubstr("--dtype fp8"));
}

TEST(PipelinePredict, CancelledMidwayStopsWithInterrupted) {
  CancelToken token;
  RecordingProgress progress(&token);
  progress.cancel_at = "placing the step's tensors";
  PredictRequest r;
  r.model = "gpt2";
  r.batch = 4;
  r.seq = 512;
  r.control = {&progress, &token};
  const Result<PredictResult> result = Predict(r);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInterrupted);
  // It got as far as the stage that cancelled it, and no further.
  EXPECT_TRUE(AnyStartsWith(progress.stages, "predicting the step's tensors"));
  EXPECT_FALSE(AnyStartsWith(progress.stages, "attributing"));
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PipelineExplain, AMessageWithTheModelThatRanOut) {
  ExplainRequest r;
  const std::string file = std::string(VRAMSCOPE_SOURCE_DIR) +
                           "/tests/data/oom_messages/01-torch1-cached-pytorch-16417.txt";
  r.input = {ReadText(file), file};
  r.predict.model = "gpt2";
  r.predict.batch = 16;
  r.predict.seq = 1024;
  const Result<ExplainResult> result = Explain(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  ASSERT_EQ(result->messages.size(), 1u);
  const auto& e = result->messages.front().explanation;
  ASSERT_TRUE(e.available_to_pytorch.has_value());
  // The fit's capacity is what the message leaves this process, less nothing: the model's batch
  // that fits it is found by the predictor.
  ASSERT_TRUE(result->fit.has_value());
  EXPECT_EQ(result->fit->model, "gpt2");
  EXPECT_EQ(result->fit->capacity, static_cast<uint64_t>(e.available_to_pytorch->lo));
  EXPECT_EQ(result->fit->batch_that_failed, 16u);
  EXPECT_GT(result->fit->simulations, 0);
  if (result->fit->largest_batch > 0) {
    EXPECT_LE(result->fit->peak_reserved, result->fit->capacity);
  }
}

TEST(PipelineExplain, TextWithoutAMessageIsInvalidInput) {
  ExplainRequest r;
  r.input = {"nothing to see here", "the argument"};
  const Result<ExplainResult> result = Explain(r);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidInput);
  EXPECT_THAT(result.status().message(), HasSubstr("no out-of-memory message found"));
}

TEST(PipelineSimulate, TheBuiltInExampleWithWhatIfRuns) {
  SimulateRequest r;
  r.input = ClassifyInput("");
  r.compare = {"", "expandable_segments:True"};
  r.capacity = "200MiB";
  RecordingProgress progress;
  r.control.progress = &progress;
  const Result<SimulateResult> result = Simulate(r);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const analysis::Simulations* sims = result->analyzed->sims();
  ASSERT_NE(sims, nullptr);
  ASSERT_EQ(sims->devices.size(), 1u);
  const auto& runs = sims->devices.front().runs;
  ASSERT_EQ(runs.size(), 3u);  // the replay, then one what-if run per setting
  EXPECT_EQ(runs[0].label, "replay");
  EXPECT_EQ(runs[2].alloc_conf, "expandable_segments:True");
  // The replay is exact on this real H200 snapshot.
  EXPECT_EQ(runs[0].result.comparison.allocs_at_recorded_address, runs[0].result.comparison.allocs);
  EXPECT_TRUE(AnyStartsWith(progress.stages, "running the allocator model under 2 what-if"));
  // Every allocation is named once, inside the analysis: the namers are read-only from here.
  const analysis::Analysis& a = *result->analyzed->analysis;
  for (size_t i = 0; i < result->analyzed->trace().allocations.size(); ++i) {
    EXPECT_LT(a.owners->Id(i), a.owners->size());
  }
}

TEST(PipelineSimulate, SettingsAreCheckedBeforeTheInputIsRead) {
  SimulateRequest r;
  r.input = ClassifyInput("/no/such/file.pickle");
  r.memory_fraction = 0.5;  // without a capacity: refused first
  const Status status = CheckSimulateRequest(r);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kUsage);
  EXPECT_THAT(status.message(), HasSubstr("--memory-fraction needs --capacity or --gpu"));
}

TEST(PipelineLoad, CancelledWhileReadingStopsWithInterrupted) {
  CancelToken token;
  RecordingProgress progress(&token);
  progress.cancel_at = "replaying";
  LoadRequest r;
  r.input = ClassifyInput("");
  r.control = {&progress, &token};
  const Result<Loaded> loaded = Load(r);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kInterrupted);
}

TEST(PipelineLoad, UnreadableAndUnsupportedInputsAreTold) {
  const std::string dir = std::filesystem::temp_directory_path() / "vramscope_pipeline_test";
  std::filesystem::create_directories(dir);
  const std::string empty = dir + "/empty.pickle", sqlite = dir + "/report.sqlite";
  std::ofstream(empty).close();
  std::ofstream(sqlite, std::ios::binary) << std::string("SQLite format 3\0", 16) << "rest";
  LoadRequest r;
  r.input = ClassifyInput(empty);
  EXPECT_EQ(Load(r).status().code(), StatusCode::kInvalidInput);
  r.input = ClassifyInput(sqlite);
  EXPECT_EQ(Load(r).status().code(), StatusCode::kUnsupported);
  std::filesystem::remove_all(dir);
}

TEST(PipelineWindow, FlagsAreCheckedBeforeAnyFileIsRead) {
  EXPECT_TRUE(CheckWindow({"5", "2.5s", ""}).ok());
  EXPECT_TRUE(CheckWindow({"", "", "5:"}).ok());
  EXPECT_TRUE(CheckWindow({"250ms", "1.5min", ":7"}).ok());
  for (const WindowRequest& bad : std::vector<WindowRequest>{{"0", "", ""},
                                                             {"1.5", "", ""},
                                                             {"5q", "", ""},
                                                             {"-1", "", ""},
                                                             {"9", "3", ""},
                                                             {"2s", "1s", ""},
                                                             {"", "", "0"},
                                                             {"", "", "4:2"},
                                                             {"", "", "a:b"}}) {
    const Status s = CheckWindow(bad);
    EXPECT_EQ(s.code(), StatusCode::kUsage) << bad.from << " " << bad.to << " " << bad.steps;
  }
}

TEST(PipelineWindow, AWindowIsASnapshotOfItsEventsThatReplaysAsTheWholeDoes) {
  LoadRequest whole;
  whole.input = ClassifyInput("");
  Result<Loaded> all = Load(whole);
  ASSERT_TRUE(all.ok()) << all.status().message();
  LoadRequest part = whole;
  part.window = {"50", "120", ""};
  Result<Loaded> window = Load(part);
  ASSERT_TRUE(window.ok()) << window.status().message();
  EXPECT_EQ(window->trace.events.count(), 71u);
  EXPECT_TRUE(model::CheckStateInvariants(window->trace).empty());
  const auto& a = all->simulations->devices.front().runs.front().result;
  const auto& w = window->simulations->devices.front().runs.front().result;
  // Both curves are short enough to keep every event (allocator::kDefaultCurvePoints).
  ASSERT_EQ(a.curve.size(), all->trace.events.count());
  ASSERT_EQ(w.curve.size(), 71u);
  for (size_t i = 0; i < 71; ++i) {
    EXPECT_EQ(w.curve[i].allocated, a.curve[49 + i].allocated) << i;
    EXPECT_EQ(w.curve[i].reserved, a.curve[49 + i].reserved) << i;
  }
  // The replay of the window against its own dump: every allocation where it was recorded.
  EXPECT_EQ(w.comparison.allocs, w.comparison.allocs_at_recorded_address);
  EXPECT_EQ(w.comparison.final_blocks_recorded, w.comparison.final_blocks_matched);
}

TEST(PipelineAnalyze, WhatIfRunsAndTheRankComparisonLiveInTheResultNotTheInput) {
  LoadRequest r;
  r.input = ClassifyInput("");
  Result<Loaded> loaded = Load(r);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_TRUE(loaded->simulations.has_value());
  const size_t replay_runs = loaded->simulations->devices.front().runs.size();
  AnalyzeRequest a;
  a.what_if.emplace();
  a.what_if->what_if.emplace_back("expandable_segments:True");
  auto analyzed = Analyze(std::move(*loaded), a);
  ASSERT_TRUE(analyzed.ok()) << analyzed.status().message();
  EXPECT_EQ((*analyzed)->sims()->devices.front().runs.size(), replay_runs + 1);
  EXPECT_FALSE((*analyzed)->ranks_compared.has_value());  // one process: nothing to compare
}

}  // namespace
}  // namespace vramscope::pipeline
