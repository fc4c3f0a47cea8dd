#include "pipeline/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "common/units.h"
#include "device/gpu_catalog.h"
#include "pipeline/hub_download.h"
#include "sources/oom_message/oom_message_text.h"

namespace vramscope::pipeline {

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
      return LimitExceeded(fmt::format(
          "{}: more than {} of text; pass the part of the log with the error (e.g. tail -n 200)",
          what, FormatBytes(static_cast<int64_t>(kMaxText))));
    }
    text.append(buffer, n);
  }
  if (std::ferror(f)) return InvalidInput(fmt::format("{}: could not be read", what));
  return text;
}

// --model: the largest batch that fits what the first explained message leaves.
Result<ExplainFit> FitModel(const ExplainRequest& r, const ExplainResult& result) {
  const analysis::OomMessageExplanation* e = nullptr;
  for (const ExplainedMessage& em : result.messages) {
    if (em.explanation.available_to_pytorch) {
      e = &em.explanation;
      break;
    }
  }
  if (e == nullptr) {
    return InvalidInput(fmt::format(
        "--model: {} states no total capacity to fit into; use vramscope predict --fit with "
        "your GPU",
        result.source));
  }
  PredictRequest po = r.predict;
  po.outside = r.outside;  // the fit expects what explain was told lies outside
  if (po.gpu.empty() && !e->gpus.empty()) po.gpu = e->gpus.front().key;
  ASSIGN_OR_RETURN(predict::PredictRequest request, ResolvePredictRequest(po));
  request.capacity = static_cast<uint64_t>(std::max<int64_t>(e->available_to_pytorch->lo, 1));
  request.gpu.reset();
  RETURN_IF_ERROR(FetchHubConfig(po.model, po.python, r.control));
  ASSIGN_OR_RETURN(predict::LoadedModel model, predict::LoadModel(po.model));
  ASSIGN_OR_RETURN(
      predict::FitResult fit,
      predict::Fit(model, request, predict::FitDimension::kBatch, po.fit_max, r.control));
  ExplainFit out;
  out.model = po.model;
  out.capacity = request.capacity;
  out.capped = e->message.allowed.has_value();
  out.outside_allocator = request.context_bytes;
  out.batch_that_failed = po.batch;
  out.largest_batch = fit.largest;
  out.peak_reserved = fit.peak_reserved;
  out.needed_reserved = fit.needed_reserved;
  out.simulations = fit.simulations;
  return out;
}

}  // namespace

Result<ExplainText> ReadExplainInput(const std::string& input, bool stdin_is_terminal) {
  if (input.empty() || input == "-") {
    if (input.empty() && stdin_is_terminal) {
      return UsageError(
          "explain: give the message (in quotes), a file holding it, or - to read standard "
          "input (e.g. python train.py 2>&1 | vramscope explain -)");
    }
    ASSIGN_OR_RETURN(std::string text, ReadBounded(stdin, "standard input"));
    return ExplainText{std::move(text), "standard input"};
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
    return ExplainText{std::move(*text), input};
  }
  return ExplainText{input, "the argument"};
}

Result<ExplainResult> Explain(const ExplainRequest& r) {
  analysis::ExplainOptions options;
  options.alloc_conf = r.alloc_conf;
  if (!r.gpu.empty()) {
    auto gpu = device::FindGpu(r.gpu);
    if (!gpu.ok()) return gpu.status();
    options.gpu = *gpu;
  }
  r.outside.ApplyTo(options.outside);
  options.outside.nccl_communicators = r.nccl_communicators;

  ExplainResult out;
  out.source = r.input.source;
  const auto found = sources::FindOomMessages(r.input.text, r.max_messages * 16, &out.left_out);
  if (found.empty()) {
    return InvalidInput(fmt::format(
        "{}: no out-of-memory message found; paste PyTorch's message (it starts \"CUDA out of "
        "memory\", \"HIP out of memory\" or \"CUDA error: out of memory\") or the log around it",
        out.source));
  }
  // The ranks and lines of one text, merged: several ranks print the same message.
  std::map<std::string, size_t> seen;
  for (const model::OomMessage& m : found) {
    const auto it = seen.find(m.text);
    if (it == seen.end()) {
      if (out.messages.size() >= r.max_messages) {
        ++out.left_out;
        continue;
      }
      seen.emplace(m.text, out.messages.size());
      ExplainedMessage em;
      em.explanation = analysis::ExplainOomMessage(m, options);
      em.lines.push_back(m.line);
      if (m.rank) em.ranks.push_back(*m.rank);
      out.messages.push_back(std::move(em));
    } else {
      ExplainedMessage& em = out.messages[it->second];
      em.lines.push_back(m.line);
      if (m.rank && std::find(em.ranks.begin(), em.ranks.end(), *m.rank) == em.ranks.end()) {
        em.ranks.push_back(*m.rank);
      }
    }
  }
  if (!r.predict.model.empty()) {
    ASSIGN_OR_RETURN(out.fit, FitModel(r, out));
  }
  return out;
}

}  // namespace vramscope::pipeline
