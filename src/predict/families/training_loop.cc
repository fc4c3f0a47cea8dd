// The built-in families' entry points (model_spec.h): their names and the training loop that
// runs a family's steps through the step simulator. The families themselves, one file each, are
// written as the forward passes of their reference implementations (transformers' modeling
// files, torchvision's ResNet) so that the step simulator sees the same ops, in the same order,
// as PyTorch would run on a GPU. Parameter names follow the reference implementations, so a
// prediction names the same tensors a capture does.
#include <fmt/format.h>

#include <memory>

#include "common/units.h"
#include "predict/families/family_common.h"
#include "predict/model_spec.h"

namespace vramscope::predict {

const char* FamilyName(Family family) {
  switch (family) {
    case Family::kGpt2:
      return "GPT-2";
    case Family::kLlama:
      return "LLaMA-style decoder";
    case Family::kBert:
      return "BERT-style encoder";
    case Family::kVit:
      return "Vision Transformer";
    case Family::kResnet:
      return "ResNet";
    case Family::kLayerList:
      return "layer list";
  }
  return "?";
}

namespace {

using families::Model;
using families::StepTensors;

std::unique_ptr<Model> MakeModel(const ModelSpec& m, const TrainingSetup& s) {
  switch (m.family) {
    case Family::kGpt2:
      return families::MakeGpt2(m, s);
    case Family::kLlama:
      return families::MakeLlama(m, s);
    case Family::kBert:
    case Family::kVit:
      return families::MakeEncoder(m, s);
    case Family::kResnet:
      return families::MakeResNet(m, s);
    case Family::kLayerList:
      return families::MakeLayerList(m, s);
  }
  return nullptr;
}

}  // namespace

Result<TensorStream> SimulateTraining(const ModelSpec& m, const TrainingSetup& setup,
                                      const Control& control) {
  if (setup.batch == 0) return UsageError("--batch must be at least 1");
  if (setup.steps < 1) return UsageError("--steps must be at least 1");
  if (setup.grad_accum < 1) return UsageError("--grad-accum must be at least 1");
  if (m.layers > kMaxModelLayers) {
    return LimitExceeded(fmt::format(
        "{}: {} layers; vramscope models at most {} (the deepest networks trained have about "
        "1,200): check the config",
        m.label, FormatCount(static_cast<int64_t>(m.layers)),
        FormatCount(static_cast<int64_t>(kMaxModelLayers))));
  }
  if (m.experts > 0 || m.Mla()) {
    return UsageError(fmt::format(
        "{} is a mixture of experts or has latent attention (MLA): the step simulator does not "
        "run those yet; 'vramscope predict --model {}' gives its memory per rank "
        "(--tp/--pp/--ep)",
        m.label, m.label));
  }
  if ((setup.loss_chunks > 1 || setup.fused_linear_ce) && m.family != Family::kGpt2 &&
      m.family != Family::kLlama) {
    return UsageError(fmt::format(
        "{} changes a causal language model's loss (the GPT-2 and LLaMA families); {} is a {}",
        setup.fused_linear_ce ? "--fused-linear-ce" : "--loss-chunks", m.label,
        FamilyName(m.family)));
  }
  if (setup.float8 && m.family != Family::kLlama && m.family != Family::kBert &&
      m.family != Family::kVit) {
    // convert_to_float8_training swaps nn.Linear modules: GPT-2's blocks are transformers'
    // Conv1D and a ResNet's or a layer list's work is not in its linears.
    return UsageError(fmt::format(
        "--fp8 converts the blocks' nn.Linear layers (torchao's convert_to_float8_training): "
        "predicted for the LLaMA, BERT and ViT families; {} is a {}{}",
        m.label, FamilyName(m.family),
        m.family == Family::kGpt2 ? ", whose blocks are Conv1D (torchao leaves them alone)" : ""));
  }
  if (!setup.pack.empty() && m.family != Family::kLlama) {
    return UsageError(fmt::format(
        "--pack is predicted for the LLaMA family (LLaMA, Mistral, Qwen2 under transformers' "
        "DataCollatorWithFlattening); {} is a {}",
        m.label, FamilyName(m.family)));
  }
  if (!setup.pack.empty() && m.attention == "eager") {
    return UsageError(
        "--pack is predicted under sdpa (the block-diagonal mask through the memory-efficient "
        "kernel); this model's attention is eager: drop --pack or the config's "
        "attn_implementation");
  }
  if (setup.checkpointing && (m.family == Family::kResnet || m.family == Family::kLayerList)) {
    // Checkpointing wraps each transformer block; these have none, and a silent "saves 0 B"
    // would mislead.
    return UsageError(fmt::format(
        "activation checkpointing wraps each transformer block; {} is a {}, which has none: "
        "drop the --checkpointing flag",
        m.label, FamilyName(m.family)));
  }
  if (m.family == Family::kVit && setup.image_size != 0 && setup.image_size < m.patch) {
    return UsageError(fmt::format("--image-size {} is smaller than the model's patch size {}",
                                  setup.image_size, m.patch));
  }
  TensorStream stream;
  StepSimulator sim(stream);
  Ops ops(sim, setup.precision);
  ops.linear_inputs_nd = m.family == Family::kGpt2 || m.family == Family::kLlama ||
                         m.family == Family::kBert || m.family == Family::kVit ||
                         (m.family == Family::kLayerList && m.input_shape.size() == 2);
  const int shards = setup.zero == ZeroMode::kNone ? 1 : setup.world_size;
  if (setup.zero == ZeroMode::kZero2 || setup.zero == ZeroMode::kZero3 ||
      setup.zero == ZeroMode::kFsdp) {
    sim.grad_shards = shards;
  }
  if (setup.zero == ZeroMode::kZero3 || setup.zero == ZeroMode::kFsdp) sim.param_shards = shards;
  sim.frozen_patterns = setup.freeze;
  OptimizerSetup optimizer = setup.optimizer;
  optimizer.shards = shards;
  if (setup.optimizer_in_backward || optimizer.offload_gradients) sim.step_in_backward = &optimizer;
  if (setup.offload_activations) sim.offload_saved_min_bytes = 1024;  // min_offload_size
  sim.offload_checkpoints = setup.offload_checkpoints;
  sim.checkpoint_saves_ops = setup.checkpoint_ops;
  auto model = MakeModel(m, setup);
  stream.Phase(0, model::Phase::kSetup, "setup");
  // peft wraps the model: every name gains "base_model.model." under LoRA.
  const std::string_view root = setup.lora_rank > 0 ? "base_model.model" : "";
  sim.EnterModule(root);
  model->Build(ops);
  model->BuildHead(ops);
  sim.ExitModule();
  const bool ddp = setup.zero == ZeroMode::kNone && setup.world_size >= 2;
  if (ddp) sim.DdpConstruct();
  if (sim.too_large()) {
    return UsageError(
        "the model's weights are larger than any GPU (a tensor over 1 PiB): check the config");
  }
  stream.info.parameters = sim.parameter_elements();
  stream.info.trainable_parameters = sim.trainable_elements();
  stream.info.parameter_bytes = sim.parameter_bytes();
  stream.info.buffer_bytes = sim.buffer_bytes();
  const bool autocast = setup.precision.autocast.has_value();
  using model::Phase;
  // The loop of examples/training/train.py (and of most training scripts).
  for (int step = 1; step <= setup.steps; ++step) {
    stream.Phase(step, Phase::kBeforeForward, "zero_grad");
    if (setup.zero_grad) sim.ZeroGrad(setup.set_to_none);
    StepTensors kept;
    for (int micro = 1; micro <= setup.grad_accum; ++micro) {
      RETURN_IF_ERROR(control.CheckCancelled("the prediction"));
      stream.Phase(step, Phase::kBeforeForward, "inputs");
      std::vector<TensorId> inputs = model->Inputs(ops);
      stream.Phase(step, Phase::kForward, "forward");
      // DDP's forward rebuilds its buckets once, in the second iteration, from the order the
      // first backward made the gradients ready (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES
      // is 1 MiB).
      if (ddp && step == 2 && micro == 1)
        sim.DdpRebuildBuckets(1 << 20, setup.ddp_bucket_cap_bytes);
      sim.EnterModule(root);
      StepTensors t = model->Forward(ops, inputs);
      sim.ExitModule();
      t.inputs = std::move(inputs);
      if (autocast) sim.EndAutocast();
      stream.Phase(step, Phase::kBackward, "backward");
      sim.Backward(t.loss);
      for (const TensorId held : t.held_for_backward) sim.Free(held);
      if (stream.events.size() > setup.max_events) {
        return UsageError(fmt::format(
            "the prediction would hold more than {} tensor events (step {}, micro-batch {}, of "
            "{} steps x {} micro-batches): lower --steps or --grad-accum, or raise --max-events",
            FormatCount(static_cast<int64_t>(setup.max_events)), step, micro, setup.steps,
            setup.grad_accum));
      }
      if (micro < setup.grad_accum) {
        for (const TensorId i : t.inputs) sim.Free(i);
        sim.Free(t.output);
        sim.Free(t.loss);
        for (const TensorId h : t.held_to_step_end) sim.Free(h);
      } else {
        kept = std::move(t);
      }
    }
    stream.Phase(step, Phase::kOptimizer, "optimizer");
    sim.OptimizerStep(optimizer);
    // The loop drops the batch, the output and the loss at the end of the step.
    stream.Phase(step, Phase::kOptimizer, "step_end");
    for (const TensorId i : kept.inputs) sim.Free(i);
    sim.Free(kept.output);
    sim.Free(kept.loss);
    for (const TensorId h : kept.held_to_step_end) sim.Free(h);
    if (sim.too_large()) {
      return UsageError(fmt::format(
          "batch {} x sequence {} makes a tensor of more than 1 PiB, beyond any GPU: use a "
          "smaller --batch or --seq",
          setup.batch, setup.seq ? setup.seq : m.default_seq));
    }
  }
  stream.info.host_bytes = sim.host_peak_bytes();
  stream.info.paged_bytes = sim.paged_bytes();
  if (stream.info.host_bytes > 0) {
    std::string text = fmt::format("{} at most, pinned",
                                   FormatBytes(static_cast<int64_t>(stream.info.host_bytes)));
    if (stream.info.paged_bytes > 0) {
      text += fmt::format(
          " (of it {} of paged optimizer state in unified memory: on the GPU "
          "while it has room, outside the allocator)",
          FormatBytes(static_cast<int64_t>(stream.info.paged_bytes)));
    }
    stream.info.facts.emplace_back("host memory", text);
  }
  return stream;
}

}  // namespace vramscope::predict
