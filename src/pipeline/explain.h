// Explain: what an out-of-memory message means, from the message alone. The request is the text
// (a message, a traceback or a whole log, any PyTorch generation, CUDA or HIP) with what the
// message cannot say (the allocator's settings, the GPU, the memory outside PyTorch), and
// optionally the model that ran out, whose largest batch that fits what the message leaves is
// found with the predictor. The result holds every distinct message explained.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/oom_message_explain.h"
#include "common/progress.h"
#include "common/status.h"
#include "pipeline/outside_overrides.h"
#include "pipeline/predict.h"

namespace vramscope::pipeline {

struct ExplainText {
  std::string text;
  std::string source;  // how messages name it: "train.log", "standard input", "the argument"
};

// What the user gave `explain`: the message itself, a file holding it, or "-" (and, when
// `stdin_is_terminal` is false, nothing) for standard input. Reads at most 64 MiB.
Result<ExplainText> ReadExplainInput(const std::string& argument, bool stdin_is_terminal);

struct ExplainRequest {
  ExplainText input;
  std::optional<std::string> alloc_conf;  // the failed run's PYTORCH_CUDA_ALLOC_CONF
  std::string gpu;                        // the GPU it ran on; "": those of the message's capacity
  OutsideOverrides outside;
  int nccl_communicators = 0;
  size_t max_messages = 100;  // distinct messages explained at most
  // The model that ran out (predict.model non-empty), with the set-up it ran (batch, seq,
  // dtype, optimizer, ...): the largest batch that fits what the first message leaves.
  PredictRequest predict;
  Control control;
};

// A message and the places the same text appeared again (several ranks, a logger repeating it).
struct ExplainedMessage {
  analysis::OomMessageExplanation explanation;
  std::vector<size_t> lines;  // where it appears, first included
  std::vector<int> ranks;     // the "[rankN]:" prefixes seen on it
};

// ExplainRequest::predict: the largest batch predict --fit finds for the memory the message
// leaves this process.
struct ExplainFit {
  std::string model;
  uint64_t capacity = 0;           // what the GPU leaves this process
  bool capped = false;             // the message's cap (set_per_process_memory_fraction) counted
  uint64_t outside_allocator = 0;  // expected outside the allocator
  uint64_t batch_that_failed = 0;
  uint64_t largest_batch = 0;  // 0: not even batch 1 fits
  uint64_t peak_reserved = 0;
  uint64_t needed_reserved = 0;  // batch 1's, when nothing fits
  int simulations = 0;
};

struct ExplainResult {
  std::string source;
  std::vector<ExplainedMessage> messages;
  size_t left_out = 0;  // messages beyond the limit
  std::optional<ExplainFit> fit;
};

Result<ExplainResult> Explain(const ExplainRequest& request);

}  // namespace vramscope::pipeline
