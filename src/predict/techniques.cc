#include "predict/techniques.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "predict/build_trace.h"

namespace vramscope::predict {

namespace {

const char* StateFormatName(StateFormat f) {
  switch (f) {
    case StateFormat::kNative:
      return "torch.optim states";
    case StateFormat::kBnb8bit:
      return "8-bit AdamW states (bitsandbytes)";
    case StateFormat::kBnbPaged8bit:
      return "paged 8-bit AdamW states (bitsandbytes)";
    case StateFormat::kAo8bit:
      return "8-bit AdamW states (torchao)";
    case StateFormat::kAo4bit:
      return "4-bit AdamW states (torchao)";
    case StateFormat::kAoFp8:
      return "FP8 AdamW states (torchao)";
  }
  return "?";
}

}  // namespace

Result<UnlimitedPeaks> PeaksWithoutLimit(const LoadedModel& model, const PredictRequest& request) {
  ASSIGN_OR_RETURN(TensorStream stream, PredictStream(model, request));
  ASSIGN_OR_RETURN(allocator::AllocatorSettings settings, SettingsFor(request));
  settings.capacity = allocator::kUnlimited;
  ASSIGN_OR_RETURN(const PeakOnly p, SimulatePeaks(stream, settings));
  return UnlimitedPeaks{p.peak_reserved, stream.info.host_bytes, stream.info.paged_bytes, p.oom};
}

std::vector<ActiveTechnique> ActiveTechniques(const TrainingSetup& s) {
  std::vector<ActiveTechnique> out;
  if (s.checkpointing) {
    std::string name = "activation checkpointing";
    if (s.checkpoint_every > 1) name += fmt::format(" (every {} blocks)", s.checkpoint_every);
    if (s.checkpoint_ops) name = "op-level selective checkpointing";
    out.push_back({name, [](TrainingSetup& t) {
                     t.checkpointing = false;
                     t.offload_checkpoints = false;
                     t.checkpoint_ops = false;
                   }});
  }
  if (s.checkpointing && s.offload_checkpoints) {
    out.push_back({"checkpoints offloaded to the host",
                   [](TrainingSetup& t) { t.offload_checkpoints = false; }});
  }
  if (!s.pack.empty()) {
    // Against the same samples as a padded batch: each a row, padded to the longest (what a
    // collator without packing makes; sdpa then runs causal with no mask).
    const uint64_t longest = *std::max_element(s.pack.begin(), s.pack.end());
    out.push_back({fmt::format("packing {} samples in one row (against padding them to {})",
                               s.pack.size(), longest),
                   [longest](TrainingSetup& t) {
                     t.batch = t.pack.size();
                     t.seq = longest;
                     t.pack.clear();
                   }});
  }
  if (s.float8) {
    out.push_back({"float8 linears (torchao)", [](TrainingSetup& t) { t.float8 = false; }});
  }
  if (s.qlora) {
    out.push_back(
        {"QLoRA's NF4 base weights (against LoRA)", [](TrainingSetup& t) { t.qlora = false; }});
  }
  if (s.loss_chunks > 1) {
    out.push_back({fmt::format("chunked cross-entropy ({} chunks)", s.loss_chunks),
                   [](TrainingSetup& t) { t.loss_chunks = 0; }});
  }
  if (s.fused_linear_ce) {
    out.push_back(
        {"fused linear cross-entropy", [](TrainingSetup& t) { t.fused_linear_ce = false; }});
  }
  if (s.compile) {
    out.push_back({"torch.compile (against eager)", [](TrainingSetup& t) { t.compile = false; }});
  }
  if (s.optimizer_in_backward) {
    out.push_back(
        {"optimizer step in backward", [](TrainingSetup& t) { t.optimizer_in_backward = false; }});
  }
  if (s.optimizer.states != StateFormat::kNative) {
    out.push_back({StateFormatName(s.optimizer.states),
                   [](TrainingSetup& t) { t.optimizer.states = StateFormat::kNative; }});
  }
  if (s.offload_activations) {
    out.push_back({"activations offloaded to the host",
                   [](TrainingSetup& t) { t.offload_activations = false; }});
  }
  if (s.optimizer.offload) {
    out.push_back({"optimizer offloaded to the host", [](TrainingSetup& t) {
                     t.optimizer.offload = false;
                     t.optimizer.offload_gradients = false;
                   }});
  }
  if (s.optimizer.offload_gradients) {
    out.push_back({"gradients offloaded to the host",
                   [](TrainingSetup& t) { t.optimizer.offload_gradients = false; }});
  }
  return out;
}

Result<std::vector<TechniqueEffect>> TechniqueEffects(const LoadedModel& model,
                                                      const PredictRequest& request,
                                                      const Control& control) {
  std::vector<TechniqueEffect> out;
  const std::vector<ActiveTechnique> active = ActiveTechniques(request.setup);
  if (active.empty() || !model.spec) return out;
  RETURN_IF_ERROR(control.CheckCancelled("the techniques' effects"));
  ASSIGN_OR_RETURN(const UnlimitedPeaks with, PeaksWithoutLimit(model, request));
  for (const ActiveTechnique& t : active) {
    RETURN_IF_ERROR(control.CheckCancelled("the techniques' effects"));
    PredictRequest without = request;
    t.undo(without.setup);
    ASSIGN_OR_RETURN(const UnlimitedPeaks p, PeaksWithoutLimit(model, without));
    out.push_back({t.name, static_cast<int64_t>(p.reserved) - static_cast<int64_t>(with.reserved),
                   static_cast<int64_t>(with.host) - static_cast<int64_t>(p.host)});
  }
  return out;
}

std::string EffectText(const TechniqueEffect& e) {
  std::string text = e.gpu_saved >= 0
                         ? fmt::format("saves {} of peak reserved", FormatBytes(e.gpu_saved))
                         : fmt::format("costs {} of peak reserved", FormatBytes(-e.gpu_saved));
  if (e.host_added > 0) text += fmt::format(", adds {} of host memory", FormatBytes(e.host_added));
  return text;
}

}  // namespace vramscope::predict
