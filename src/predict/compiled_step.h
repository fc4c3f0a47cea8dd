// `predict --compile` for the LLaMA family (LLaMA, Mistral, Qwen2): the step as
// torch.compile(model) runs it, from templates the tracer made offline
// (scripts/gen_compiled_templates.py -> src/predict/compiled/llama.json.gz, compiled into the
// binary), so that no torch is needed at run time.
//
// A template is the compiled forward and backward's allocations and frees, each a prefix, one
// block repeated per layer and a suffix, every size a monomial of batch, sequence, heads,
// head dimension, MLP width and vocabulary. The forward runs in the simulator as one autograd
// node (AOTAutograd's CompiledFunction) whose backward frees what the template frees when it
// frees it, and hands every parameter its gradient when the backward graph ends.
#pragma once

#include <string>

#include "predict/model_spec.h"

namespace vramscope::predict {

// Why this model and set-up have no compiled template, in the flags' words; "" when they have.
std::string CompiledStepUnsupported(const ModelSpec& m, const TrainingSetup& s);

struct CompiledOutputs {
  TensorId output = kNoTensor;  // the logits, kept by the loop until the step ends
  TensorId loss = kNoTensor;
  // The forward's other tensors nothing frees in the step (with checkpointing, what the graphs
  // between the breaks keep): the loop drops them with the output. The tracer sees the first
  // step's kept for good and later steps' dropped; they are small (the mask, a hidden state).
  std::vector<TensorId> held_to_step_end;
};
// The compiled forward (and, through its node, backward) in `sim`, after the inputs are on the
// device. Requires CompiledStepUnsupported(m, s) to be empty.
CompiledOutputs RunCompiledStep(StepSimulator& sim, const ModelSpec& m, const TrainingSetup& s);

}  // namespace vramscope::predict
