// One rank role's training step as a tensor stream, so the allocator model places it: what the
// per-rank table (parallel_layout.h) counts, tensor by tensor and in the order the rank makes
// and frees them, under its pipeline schedule.
//
// The contract (docs/design/parallel.md, "The allocator model per role"):
// - Construction (step 0, setup): the rank's weights, one tensor per layer (its dense and expert
//   parts apart), the embedding and the head; its gradients in one contiguous buffer per model
//   chunk, live for the whole run (Megatron-Core's gradient buffer, zeroed between steps).
// - Each step runs the role's schedule: 1F1B (warm-up forwards, one forward and one backward in
//   turn, cool-down backwards) or Megatron's interleaved 1F1B over the stage's model chunks. A
//   forward saves each layer's activations tensor by tensor (parallel_terms.h's
//   LayerActivationTerms: the table's figures), the layer's communication buffer around it, the
//   head's fp32 logits; its backward frees them in reverse, with the logits' gradient and ZeRO's
//   gathered units and reduce-scatter inputs (DataParallelBuffersOf) around each unit.
// - The optimizer's state is made at the first step's optimizer phase, one tensor per layer and
//   kind of state; the second step is the steady state.
// - Long schedules are cut: after the warm-up and two rounds of the pipeline the schedule only
//   repeats, so a step runs at most in flight + 2 x PP x V micro-batch forwards (the facts say
//   how many of how many).
// - ZeRO-3's gathered units are made on an all-gather stream and ZeRO-2/3's reduce-scatter
//   inputs on a reduce-scatter stream, as FSDP2 makes them (the tracer sees it so on the
//   two-rank capture); the allocator model keeps each stream's blocks apart.
// - Under torch.distributed.pipelining (ParallelLayout::pipeline_impl kTorch; Schedule1F1B, or
//   ScheduleInterleaved1F1B with one stage per model chunk, chunk c being global stage
//   c x PP + stage): each stage's receive buffers, one per micro-batch and direction, made at the
//   first step's first forward and kept; each micro-batch's stage output kept to the end of its
//   backward; on the last stage each micro-batch's output kept to the next step's start
//   (clear_runtime_states), their concatenation made and dropped at the step's end, and the
//   loss's fp32 log-softmax with its two gradients in backward (measured:
//   goldens/h100/run/ranks2_pp_gpt_adamw_fp32, ranks2_pp_interleaved_gpt_adamw_fp32).
// - The optimizer step's temporaries as torch.optim makes them (OptimizerTemporaries).
// - Not modelled: backward's own temporaries (the activations' gradients), and the streams'
//   waits (a block is free again when its tensor dies).
#pragma once

#include <cstddef>

#include "common/status.h"
#include "model/parallel_prediction.h"
#include "predict/model_spec.h"
#include "predict/tensor_stream.h"

namespace vramscope::predict {

// The stream of role `role` of `prediction` (PredictParallel's, for this model and set-up), two
// steps, without workspaces (PredictRoleStream in predict.h adds them and the report's facts).
Result<TensorStream> RoleStream(const ModelSpec& m, const TrainingSetup& s,
                                const model::ParallelPrediction& prediction, size_t role);

}  // namespace vramscope::predict
