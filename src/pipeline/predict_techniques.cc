// The menu of memory-saving techniques from the request onto the set-up (predict_parts.h): each
// flag checked against the others, in the words of the flags.
#include <fmt/format.h>

#include "pipeline/predict_parts.h"

namespace vramscope::pipeline::predict_parts {

namespace {

// --pack: the samples' lengths become one row of their sum.
Status ResolvePacking(const PredictRequest& r, predict::TrainingSetup& s) {
  if (r.pack.empty()) return Status::Ok();
  if (r.batch > 1) {
    return UsageError(fmt::format(
        "--pack puts the samples in one row (DataCollatorWithFlattening makes batch 1): drop "
        "--batch {} (--grad-accum N steps N packed rows)",
        r.batch));
  }
  if (r.seq != 0) {
    return UsageError("--pack makes the row as long as its samples together: drop --seq");
  }
  uint64_t total = 0;
  for (const uint64_t length : r.pack) {
    if (length == 0)
      return UsageError("--pack: a sample of 0 tokens; give each length as 1 or more");
    total += length;
    if (total > (uint64_t{1} << 24)) {
      return UsageError(
          fmt::format("--pack: the samples make more than {} tokens in one row; pack fewer",
                      uint64_t{1} << 24));
    }
  }
  s.pack = r.pack;
  s.batch = 1;
  s.seq = total;
  return Status::Ok();
}

}  // namespace

std::vector<std::string> SimulatorOnlyTechniques(const PredictRequest& r) {
  std::vector<std::string> out;
  if (r.loss_chunks > 1) out.emplace_back("--loss-chunks");
  if (r.fused_linear_ce) out.emplace_back("--fused-linear-ce");
  if (r.checkpointing_every > 1) out.emplace_back("--checkpointing-every");
  if (r.checkpointing_offload) out.emplace_back("--checkpointing-offload");
  if (r.checkpointing_ops) out.emplace_back("--checkpointing-ops");
  if (r.qlora > 0) out.emplace_back("--qlora");
  if (r.optimizer_in_backward) out.emplace_back("--optimizer-in-backward");
  if (r.offload_activations) out.emplace_back("--offload-activations");
  if (r.offload_optimizer) out.emplace_back("--offload-optimizer");
  if (r.offload_gradients) out.emplace_back("--offload-gradients");
  if (r.fp8) out.emplace_back("--fp8");
  if (!r.pack.empty()) out.emplace_back("--pack");
  if (r.optimizer != "sgd" && r.optimizer != "momentum" && r.optimizer != "adam" &&
      r.optimizer != "adamw" && r.optimizer != "none") {
    out.push_back("--optimizer " + r.optimizer);
  }
  return out;
}

std::string SimulatorOnlyTechnique(const PredictRequest& r) {
  const std::vector<std::string> all = SimulatorOnlyTechniques(r);
  return all.empty() ? std::string() : all.front();
}

std::string TechniqueOutsideLayouts(const PredictRequest& r) {
  // What the per-rank estimate models too: the quantised AdamW states (per tensor, on each
  // rank's shards), checkpointing every K-th layer (torchtitan's selective_ac_option K: each
  // layer's saved set by its index) and op-level selective checkpointing of dense layers
  // (selective_ac_option op: what its policy keeps, parallel_terms.h).
  for (const std::string& technique : SimulatorOnlyTechniques(r)) {
    const bool modelled =
        technique == "--checkpointing-every" || technique == "--checkpointing-ops" ||
        technique == "--offload-optimizer" || technique == "--optimizer adamw8bit" ||
        technique == "--optimizer adamw8bit-ao" || technique == "--optimizer adamw4bit" ||
        technique == "--optimizer adamw-fp8";
    if (!modelled) return technique;
  }
  return "";
}

Status ResolveTechniques(const PredictRequest& r, predict::TrainingSetup& s) {
  using predict::StateFormat;
  predict::OptimizerSetup& o = s.optimizer;
  if (r.optimizer == "adamw8bit") {
    o.states = StateFormat::kBnb8bit;
  } else if (r.optimizer == "paged-adamw8bit") {
    o.states = StateFormat::kBnbPaged8bit;
  } else if (r.optimizer == "adamw8bit-ao") {
    o.states = StateFormat::kAo8bit;
  } else if (r.optimizer == "adamw4bit") {
    o.states = StateFormat::kAo4bit;
  } else if (r.optimizer == "adamw-fp8") {
    o.states = StateFormat::kAoFp8;
  }
  if (o.states != StateFormat::kNative) {
    o.kind = predict::OptimizerKind::kAdamW;
    if (r.master_weights) {
      return UsageError(fmt::format(
          "--optimizer {} keeps quantised states of the weights it steps; --master-weights is "
          "torch.optim's fp32 copies: drop one",
          r.optimizer));
    }
  }
  if (r.checkpointing_every < 0) return UsageError("--checkpointing-every must be 1 or more");
  if (r.checkpointing_ops && (r.checkpointing_every > 1 || r.checkpointing_offload)) {
    return UsageError(
        fmt::format("--checkpointing-ops keeps some of every block's outputs; {} is another policy "
                    "(torchtitan's selective_ac_option is op or a number): choose one",
                    r.checkpointing_offload ? "--checkpointing-offload" : "--checkpointing-every"));
  }
  if (r.checkpointing_every > 0 || r.checkpointing_offload || r.checkpointing_ops) {
    s.checkpointing = true;
  }
  s.checkpoint_every = std::max(1, r.checkpointing_every);
  s.offload_checkpoints = r.checkpointing_offload;
  s.checkpoint_ops = r.checkpointing_ops;
  if (r.loss_chunks == 1 || r.loss_chunks < 0) {
    return UsageError("--loss-chunks splits the loss into 2 or more chunks");
  }
  if (r.loss_chunks > 1 && r.fused_linear_ce) {
    return UsageError(
        "--loss-chunks and --fused-linear-ce are two ways to compute the loss without whole fp32 "
        "logits: choose one");
  }
  s.loss_chunks = r.loss_chunks;
  s.fused_linear_ce = r.fused_linear_ce;
  s.optimizer_in_backward = r.optimizer_in_backward;
  if (r.optimizer_in_backward) {
    if (r.grad_accum > 1) {
      return UsageError(
          "--optimizer-in-backward steps each weight as its gradient is made, so gradients "
          "cannot accumulate over micro-batches: drop --grad-accum (torchtune refuses it too)");
    }
    if (r.world_size > 1 || r.zero != 0 || r.fsdp) {
      return UsageError(
          "--optimizer-in-backward is predicted on one GPU (torchtune's single-device recipes); "
          "drop --world-size/--zero/--fsdp");
    }
  }
  s.float8 = r.fp8;
  if (r.fp8 && (r.lora > 0 || r.qlora > 0)) {
    return UsageError(fmt::format(
        "--fp8 trains the blocks' linears in float8; with --{} they are frozen adapters' bases: "
        "drop one (float8 LoRA is not predicted)",
        r.qlora > 0 ? "qlora" : "lora"));
  }
  if (r.fp8 && r.dtype != "bf16" && r.dtype != "bf16-amp") {
    return UsageError(fmt::format(
        "--fp8 is torchao's float8 training in bfloat16 (weights in bf16, or fp32 under "
        "bf16 autocast as torchtitan runs one GPU): give --dtype bf16 or bf16-amp, not {}",
        r.dtype));
  }
  RETURN_IF_ERROR(ResolvePacking(r, s));
  s.offload_activations = r.offload_activations;
  o.offload = r.offload_optimizer;
  o.offload_gradients = r.offload_gradients;
  if (r.offload_gradients && !r.offload_optimizer) {
    return UsageError(
        "--offload-gradients moves gradients to the host optimizer: give "
        "--offload-optimizer with it");
  }
  if (r.offload_optimizer) {
    if (o.states != StateFormat::kNative) {
      return UsageError(fmt::format(
          "--offload-optimizer runs the optimizer on the host in fp32; --optimizer {} is a GPU "
          "one: choose one",
          r.optimizer));
    }
    if (r.optimizer_in_backward) {
      return UsageError(
          "--offload-optimizer and --optimizer-in-backward: the host optimizer steps after "
          "backward (with --offload-gradients it takes each gradient as it is made); choose one");
    }
    if (o.kind == predict::OptimizerKind::kNone || o.kind == predict::OptimizerKind::kSgd) {
      return UsageError("--offload-optimizer moves optimizer states to the host; --optimizer " +
                        r.optimizer + " keeps none");
    }
  }
  return Status::Ok();
}

}  // namespace vramscope::pipeline::predict_parts
