// The command line's own jobs, without running a verb: flags become the pipeline's requests (the
// values Python and tests build directly), outcomes become exit statuses, and SIGINT while an
// output is written cancels the request and leaves nothing behind, deterministically: the
// progress the writer reports raises the signal after N bytes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/explain_command.h"
#include "cli/interrupt.h"
#include "cli/predict_command.h"
#include "cli/report_command.h"
#include "cli/run_command.h"
#include "cli/simulate_command.h"
#include "common/atomic_output.h"

namespace vramscope::cli {
namespace {

namespace fs = std::filesystem;

// Parses `args` (the words after "vramscope") with the verbs registered as main does.
template <typename Register, typename Flags>
void Parse(Register reg, Flags& flags, const std::vector<std::string>& args) {
  CLI::App app{"vramscope"};
  reg(app, flags);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
}

TEST(RequestBuilding, PredictFlagsFillTheRequestAndTheOutputs) {
  PredictFlags f;
  Parse(RegisterPredictCommand, f,
        {"predict",
         "--model",
         "llama3-70b",
         "--batch",
         "4",
         "--seq",
         "4096",
         "--dtype",
         "bf16",
         "--master-weights",
         "--zero",
         "1",
         "--tp",
         "8",
         "--pp",
         "4",
         "--dp",
         "2",
         "--micro-batches",
         "8",
         "--pp-impl",
         "torch",
         "--role",
         "last stage",
         "--gpu",
         "h100-80gb",
         "--cuda-context",
         "500",
         "--fit-max",
         "64",
         "-o",
         "out.sqlite",
         "--json",
         "--top",
         "3"});
  const pipeline::PredictRequest& r = f.request;
  EXPECT_EQ(r.model, "llama3-70b");
  EXPECT_EQ(r.batch, 4u);
  EXPECT_EQ(r.seq, 4096u);
  EXPECT_EQ(r.dtype, "bf16");
  EXPECT_TRUE(r.master_weights);
  EXPECT_EQ(r.zero, 1);
  EXPECT_EQ(r.tp, 8u);
  EXPECT_EQ(r.pp, 4u);
  EXPECT_EQ(r.dp, 2u);
  EXPECT_EQ(r.micro_batches, 8u);
  EXPECT_EQ(r.pp_impl, "torch");
  EXPECT_EQ(r.role, "last stage");
  EXPECT_EQ(r.gpu, "h100-80gb");
  EXPECT_EQ(r.outside.cuda_context_mib, 500u);
  EXPECT_EQ(r.fit_max, 64u);
  EXPECT_EQ(f.output, "out.sqlite");
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.top, 3);
  // What the flags leave out keeps the request's defaults (the library's, not the CLI's).
  const pipeline::PredictRequest defaults;
  EXPECT_EQ(r.optimizer, defaults.optimizer);
  EXPECT_EQ(r.steps, defaults.steps);
  EXPECT_EQ(r.schedule, defaults.schedule);
}

TEST(RequestBuilding, FlagValuesOutOfRangeAreRefusedByTheParser) {
  PredictFlags f;
  EXPECT_THROW(Parse(RegisterPredictCommand, f, {"predict", "--model", "gpt2", "--batch", "0"}),
               CLI::ValidationError);
  EXPECT_THROW(Parse(RegisterPredictCommand, f, {"predict", "--batch", "2"}), CLI::RequiredError);
}

TEST(RequestBuilding, ExplainTakesThePredictorsSetUpForItsModel) {
  ExplainFlags f;
  Parse(RegisterExplainCommand, f,
        {"explain", "log.txt", "--model", "gpt2", "--batch", "16", "--seq", "1024", "--gpu", "a10g",
         "--nccl-communicators", "2", "--json"});
  EXPECT_EQ(f.input, "log.txt");
  EXPECT_TRUE(f.json);
  EXPECT_EQ(f.request.gpu, "a10g");
  EXPECT_EQ(f.request.nccl_communicators, 2);
  EXPECT_EQ(f.request.predict.model, "gpt2");
  EXPECT_EQ(f.request.predict.batch, 16u);
  EXPECT_EQ(f.request.predict.seq, 1024u);
}

TEST(RequestBuilding, SimulateComparesSeveralSettings) {
  SimulateFlags f;
  Parse(
      RegisterSimulateCommand, f,
      {"simulate", "snap.pickle", "--capacity", "24GiB", "--compare", "",
       "expandable_segments:True", "--graph-pools", "shared", "--device", "1", "-o", "sim.sqlite"});
  EXPECT_EQ(f.input, "snap.pickle");
  EXPECT_EQ(f.request.capacity, "24GiB");
  EXPECT_EQ(f.request.compare, (std::vector<std::string>{"", "expandable_segments:True"}));
  EXPECT_EQ(f.request.graph_pools, "shared");
  EXPECT_EQ(f.request.device, 1);
  EXPECT_EQ(f.output, "sim.sqlite");
}

TEST(RequestBuilding, RunKeepsTheProgramsOwnArguments) {
  CLI::App app{"vramscope"};
  RunFlags f;
  RegisterRunCommand(app, f);
  std::vector<std::string> words = {"vramscope", "run",      "--steps", "3",        "-o",
                                    "caps",      "--native", "python",  "train.py", "--steps",
                                    "10",        "-o",       "x"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  const size_t own = SplitRunCommand(static_cast<int>(argv.size()), argv.data(), app, f);
  app.parse(static_cast<int>(own), argv.data());
  EXPECT_EQ(f.capture.command,
            (std::vector<std::string>{"python", "train.py", "--steps", "10", "-o", "x"}));
  EXPECT_EQ(f.capture.steps, 3);
  EXPECT_EQ(f.capture.output, "caps");
  EXPECT_TRUE(f.capture.native);
}

TEST(ExitStatuses, OneMappingOfOutcomes) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), 0);
  EXPECT_EQ(ExitCodeFor(InvalidInput("x")), 1);
  EXPECT_EQ(ExitCodeFor(Unsupported("x")), 1);
  EXPECT_EQ(ExitCodeFor(LimitExceeded("x")), 1);
  EXPECT_EQ(ExitCodeFor(UsageError("x")), 2);
  EXPECT_EQ(ExitCodeFor(InternalError("x")), 3);
  EXPECT_EQ(ExitCodeFor(Interrupted("x")), 130);
}

// Raises SIGINT once the writer has reported `at` bytes written.
class RaiseAt final : public Progress {
 public:
  explicit RaiseAt(uint64_t at) : at_(at) {}
  void Stage(std::string) override {}
  void Update(uint64_t done, uint64_t, Unit) override {
    most = done;
    if (!raised && done >= at_) {
      raised = true;
      raise(SIGINT);
    }
  }
  void Finish() override {}
  void Note(const std::string&) override {}
  uint64_t most = 0;
  bool raised = false;

 private:
  uint64_t at_;
};

// The one test in this binary that raises a signal: a second SIGINT would end the process.
TEST(Interrupt, SigintWhileAnOutputIsWrittenLeavesNothingBehind) {
  InstallInterruptHandler();
  const fs::path dir =
      fs::temp_directory_path() / ("vramscope_cli_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string target = (dir / "page.html").string();
  const std::string bytes(8 * AtomicOutput::kWriteChunk, 'x');
  RaiseAt progress(3 * AtomicOutput::kWriteChunk);
  Status status;
  {
    Result<AtomicOutput> out = AtomicOutput::Prepare(target, /*overwrite=*/false);
    ASSERT_TRUE(out.ok()) << out.status().message();
    status = out->WriteAll(bytes, {&progress, &InterruptToken()});
    EXPECT_TRUE(progress.raised);
    EXPECT_TRUE(InterruptToken().cancelled());
    // The writer stopped at the next chunk boundary, with the temporary file still there.
    EXPECT_EQ(progress.most, 3 * AtomicOutput::kWriteChunk);
    EXPECT_TRUE(fs::exists(out->temp_path()));
    EXPECT_FALSE(fs::exists(target));
  }
  EXPECT_EQ(status.code(), StatusCode::kInterrupted);
  EXPECT_EQ(ExitCodeFor(status), 130);
  EXPECT_TRUE(fs::is_empty(dir));  // the destructor removed the temporary file
  fs::remove_all(dir);
}

}  // namespace
}  // namespace vramscope::cli
