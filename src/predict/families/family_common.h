// What the built-in families share: the Model interface the training loop drives
// (training_loop.cc), the module scope, and the transformer pieces several families are written
// with (layer norms, linears that may carry a LoRA adapter, the causal-LM head and its loss).
// Each family is one file of this folder: gpt2.cc, llama.cc (LLaMA, Mistral, Qwen2), encoder.cc
// (BERT, RoBERTa, ViT), resnet.cc and layer_list.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "predict/model_spec.h"

namespace vramscope::predict::families {

// RAII module scope.
class Scope {
 public:
  Scope(StepSimulator& sim, std::string_view name) : sim_(sim) { sim_.EnterModule(name); }
  ~Scope() { sim_.ExitModule(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  StepSimulator& sim_;
};

struct StepTensors {
  std::vector<TensorId> inputs;  // in the order the loop moved them to the device
  TensorId output = kNoTensor;   // what the loop keeps until the step ends
  TensorId loss = kNoTensor;
  // What checkpointed blocks' recomputations still read after forward (a packed batch's
  // attention mask, an argument of every block): held until backward ends.
  std::vector<TensorId> held_for_backward;
  // What the step holds to its end besides the output and the loss (a compiled graph's other
  // outputs and what Dynamo keeps between graph breaks): dropped with them.
  std::vector<TensorId> held_to_step_end;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void Build(Ops& ops) = 0;
  virtual std::vector<TensorId> Inputs(Ops& ops) = 0;
  // Forward and loss; returns output and loss, each holding the loop's reference.
  virtual StepTensors Forward(Ops& ops, const std::vector<TensorId>& inputs) = 0;
  // Weights made after Build, outside the model's root module scope (BERT's MLM head, ViT's
  // final norm and classifier); none for the other families.
  virtual void BuildHead(Ops& ops) { (void)ops; }
};

struct LoraPair {
  LinearWeights a, b;
  bool on = false;
};

// --- transformer pieces ----------------------------------------------------------------------

struct LayerNormWeights {
  Weight w, b;
};

LayerNormWeights MakeLayerNorm(Ops& ops, std::string_view name, uint64_t hidden, bool bias = true,
                               bool trainable = true);

// A linear that may carry a LoRA adapter (peft names: <name>.base_layer, lora_A.default, ...).
// The targets are peft's defaults for each architecture: q_proj and v_proj (LLaMA, Qwen2),
// c_attn (GPT-2), query and value (BERT, ViT).
struct AdaptedLinear {
  LinearWeights base;
  LoraPair lora;
};

// With setup.float8 (and no adapter), a torchao Float8Linear when in and out are multiples of 16.
AdaptedLinear MakeAdapted(Ops& ops, std::string_view name, uint64_t in, uint64_t out, bool bias,
                          const TrainingSetup& setup, bool lora_target);

TensorId Apply(Ops& ops, const AdaptedLinear& l, TensorId x, uint64_t rows,
               const TrainingSetup& setup);

// Apply inside the module scope `name` (its tensors are named after it).
TensorId ApplyIn(Ops& ops, std::string_view name, const AdaptedLinear& l, TensorId x, uint64_t rows,
                 const TrainingSetup& setup);

// The causal-LM loss of transformers (ForCausalLMLoss): logits upcast to fp32, labels padded
// and shifted, cross-entropy over every position.
TensorId CausalLmLoss(Ops& ops, TensorId logits, uint64_t batch, uint64_t seq, uint64_t vocab);

// The LM head over the final hidden states (consumed, after the loss: the model's forward holds
// them until it returns) and the causal-LM loss, as the set-up computes it:
// - by default transformers' (one head matmul, one loss): the logits, held by the loop until
//   the step ends, and the loss;
// - setup.loss_chunks > 1: torchtune's chunked output and CEWithChunkedOutputLoss (the hidden
//   states through the head chunk by chunk along the sequence, each chunk upcast to fp32 and its
//   cross-entropy summed), the logits list dropped before backward as torchtune's recipes do
//   (`del logits`): no output is kept;
// - setup.fused_linear_ce: Liger's fused linear cross-entropy (Ops::FusedLinearCrossEntropy): no
//   logits at all.
StepTensors CausalLmHead(Ops& ops, TensorId hidden, const LinearWeights& head, uint64_t batch,
                         uint64_t seq, const TrainingSetup& setup);

// The families, one file each.
std::unique_ptr<Model> MakeGpt2(const ModelSpec& m, const TrainingSetup& s);       // gpt2.cc
std::unique_ptr<Model> MakeLlama(const ModelSpec& m, const TrainingSetup& s);      // llama.cc
std::unique_ptr<Model> MakeEncoder(const ModelSpec& m, const TrainingSetup& s);    // encoder.cc
std::unique_ptr<Model> MakeResNet(const ModelSpec& m, const TrainingSetup& s);     // resnet.cc
std::unique_ptr<Model> MakeLayerList(const ModelSpec& m, const TrainingSetup& s);  // layer_list.cc

}  // namespace vramscope::predict::families
