#include "cli/explain_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "analysis/oom_message_explain.h"
#include "cli/exit_codes.h"
#include "common/units.h"
#include "device/gpu_catalog.h"
#include "predict/predict.h"
#include "report/explain_output.h"
#include "sources/oom_message/oom_message_text.h"

namespace vramscope::cli {

namespace {

// A pasted log is small; a whole training log may be large. Past this, explain asks for the part
// with the error rather than reading without bound.
constexpr size_t kMaxText = 64u << 20;

Result<std::string> ReadBounded(std::FILE* f, const std::string& what) {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) {
    if (text.size() + n > kMaxText) {
      return InvalidInput(fmt::format(
          "{}: more than {} of text; pass the part of the log with the error (e.g. tail -n 200)",
          what, FormatBytes(static_cast<int64_t>(kMaxText))));
    }
    text.append(buffer, n);
  }
  if (std::ferror(f)) return InvalidInput(fmt::format("{}: could not be read", what));
  return text;
}

// The text to explain and what to call it in messages.
Result<std::pair<std::string, std::string>> ReadInput(const std::string& input) {
  if (input.empty() || input == "-") {
    if (input.empty() && isatty(STDIN_FILENO) == 1) {
      return UsageError(
          "explain: give the message (in quotes), a file holding it, or - to read standard "
          "input (e.g. python train.py 2>&1 | vramscope explain -)");
    }
    ASSIGN_OR_RETURN(std::string text, ReadBounded(stdin, "standard input"));
    return std::make_pair(std::move(text), std::string("standard input"));
  }
  std::error_code ec;
  const bool has_space = input.find_first_of(" \n\t") != std::string::npos;
  if (!has_space || std::filesystem::is_regular_file(input, ec)) {
    if (!std::filesystem::exists(input, ec)) {
      return InvalidInput(fmt::format(
          "{}: no such file; give the message itself in quotes, a file, or - for standard "
          "input",
          input));
    }
    if (std::filesystem::is_directory(input, ec)) {
      return InvalidInput(fmt::format("{}: a folder; give a file holding the message", input));
    }
    std::FILE* f = std::fopen(input.c_str(), "rb");
    if (f == nullptr) return InvalidInput(fmt::format("{}: cannot be opened", input));
    auto text = ReadBounded(f, input);
    std::fclose(f);
    if (!text.ok()) return text.status();
    return std::make_pair(std::move(*text), input);
  }
  return std::make_pair(input, std::string("the argument"));
}

// The ranks and lines of one text, merged: several ranks print the same message.
std::string Key(const model::OomMessage& m) { return m.text; }

Status Explain(const ExplainOptions& o) {
  ASSIGN_OR_RETURN(auto input, ReadInput(o.input));
  const auto& [text, source] = input;
  analysis::ExplainOptions options;
  options.alloc_conf = o.alloc_conf;
  if (!options.alloc_conf) {
    for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
      if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
        options.alloc_conf = v;
        break;
      }
    }
  }
  if (!o.gpu.empty()) {
    auto gpu = device::FindGpu(o.gpu);
    if (!gpu.ok()) return gpu.status();
    options.gpu = *gpu;
  }
  ApplyOutsideAllocatorFlags(o.outside, options.outside);
  options.outside.nccl_communicators = o.nccl_communicators;

  report::ExplainReport out;
  out.source = source;
  const auto found = sources::FindOomMessages(text, o.max_messages * 16, &out.left_out);
  if (found.empty()) {
    return InvalidInput(fmt::format(
        "{}: no out-of-memory message found; paste PyTorch's message (it starts \"CUDA out of "
        "memory\", \"HIP out of memory\" or \"CUDA error: out of memory\") or the log around it",
        source));
  }
  std::map<std::string, size_t> seen;
  for (const model::OomMessage& m : found) {
    const auto it = seen.find(Key(m));
    if (it == seen.end()) {
      if (out.messages.size() >= o.max_messages) {
        ++out.left_out;
        continue;
      }
      seen.emplace(Key(m), out.messages.size());
      report::ExplainedMessage em;
      em.explanation = analysis::ExplainOomMessage(m, options);
      em.lines.push_back(m.line);
      if (m.rank) em.ranks.push_back(*m.rank);
      out.messages.push_back(std::move(em));
    } else {
      report::ExplainedMessage& em = out.messages[it->second];
      em.lines.push_back(m.line);
      if (m.rank && std::find(em.ranks.begin(), em.ranks.end(), *m.rank) == em.ranks.end()) {
        em.ranks.push_back(*m.rank);
      }
    }
  }

  // --model: the largest batch that fits what the first explained message leaves.
  if (!o.predict.model.empty()) {
    const analysis::OomMessageExplanation* e = nullptr;
    for (const report::ExplainedMessage& em : out.messages) {
      if (em.explanation.available_to_pytorch) {
        e = &em.explanation;
        break;
      }
    }
    if (e == nullptr) {
      return InvalidInput(fmt::format(
          "--model: {} states no total capacity to fit into; use vramscope predict --fit with "
          "your GPU",
          source));
    }
    PredictOptions po = o.predict;
    po.outside = o.outside;  // the fit expects what explain was told lies outside
    if (po.gpu.empty() && !e->gpus.empty()) po.gpu = e->gpus.front().key;
    ASSIGN_OR_RETURN(predict::PredictRequest request, BuildPredictRequest(po));
    request.capacity = static_cast<uint64_t>(std::max<int64_t>(e->available_to_pytorch->lo, 1));
    request.gpu.reset();
    ASSIGN_OR_RETURN(predict::LoadedModel model, predict::LoadModel(po.model));
    ASSIGN_OR_RETURN(predict::FitResult fit,
                     predict::Fit(model, request, predict::FitDimension::kBatch, po.fit_max));
    out.fit = {{"model", po.model},
               {"capacity", request.capacity},
               {"outside_allocator", request.context_bytes},
               {"batch_that_failed", po.batch},
               {"largest_batch", fit.largest},
               {"peak_reserved", fit.peak_reserved},
               {"simulations", fit.simulations}};
    out.fit_lines.push_back(fmt::format(
        "\nWith --model {}: the GPU leaves this process {} (the total less other processes{}); "
        "less {} outside the allocator, predict --fit finds",
        po.model, FormatBytes(static_cast<int64_t>(request.capacity)),
        e->message.allowed ? " and the cap" : "",
        FormatBytes(static_cast<int64_t>(request.context_bytes))));
    out.fit_lines.push_back(
        fit.largest == 0
            ? fmt::format("  no batch fits: batch 1 needs {} reserved",
                          FormatBytes(static_cast<int64_t>(fit.needed_reserved)))
            : fmt::format("  largest batch that fits: {} (peak reserved {}, {} simulations){}",
                          fit.largest, FormatBytes(static_cast<int64_t>(fit.peak_reserved)),
                          fit.simulations,
                          po.batch > fit.largest
                              ? fmt::format("; batch {} must shrink by {:.0f}%", po.batch,
                                            100.0 * static_cast<double>(po.batch - fit.largest) /
                                                static_cast<double>(po.batch))
                              : std::string()));
  }

  if (o.json) {
    // Pasted text may hold invalid UTF-8: replaced, never an exception.
    fmt::print("{}\n", report::RenderExplainJson(out).dump(
                           2, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    std::fputs(report::RenderExplainText(out).c_str(), stdout);
  }
  return Status::Ok();
}

}  // namespace

void RegisterExplainCommand(CLI::App& app, ExplainOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "explain",
      "Explain an out-of-memory message: give PyTorch's message (any version, CUDA or HIP, "
      "cudaMallocAsync's or MPS's, or a 'CUDA error: out of memory'), or a file or standard "
      "input holding a traceback or a whole log. Prints the figures it read, what the GPU held "
      "(this process, other processes, memory outside PyTorch, reserved but unallocated, "
      "private pools), the cause with the arithmetic that shows it, and what to change. Exit "
      "status 1 when the text holds no such message.");
  cmd->add_option("input", o.input,
                  "the message (quoted), a file holding it, or - for standard input (the "
                  "default when input is piped)");
  cmd->add_flag("--json", o.json, "print JSON (exact byte ranges) instead of the text");
  cmd->add_option("--alloc-conf", o.alloc_conf,
                  "PYTORCH_CUDA_ALLOC_CONF of the run that failed, to know whether "
                  "expandable_segments was on (default: this shell's PYTORCH_ALLOC_CONF or "
                  "PYTORCH_CUDA_ALLOC_CONF)");
  cmd->add_option("--gpu", o.gpu,
                  "the GPU it ran on (default: the known GPUs of the message's capacity)");
  AddOutsideAllocatorFlags(*cmd, o.outside, "none, or --nccl-communicators' buffers");
  cmd->add_option("--nccl-communicators", o.nccl_communicators,
                  "NCCL communicators the process held (default: 0; each is modelled as 16 "
                  "channels x (ring + tree) x 12 MiB)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-messages", o.max_messages,
                  "distinct messages to explain at most (default: 100)")
      ->check(CLI::Range(size_t{1}, size_t{100000}));
  cmd->add_option("--model", o.predict.model,
                  "the model that ran out (as predict --model): fit the largest batch into what "
                  "the message leaves this process");
  cmd->add_option("--batch", o.predict.batch, "the batch that failed (with --model)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--seq", o.predict.seq, "sequence length (with --model)");
  cmd->add_option("--dtype", o.predict.dtype, "as predict --dtype (with --model)");
  cmd->add_option("--optimizer", o.predict.optimizer, "as predict --optimizer (with --model)");
}

int RunExplainCommand(const ExplainOptions& options) {
  return RunAndReport(options.input == "-" ? "" : options.input, [&] { return Explain(options); });
}

}  // namespace vramscope::cli
