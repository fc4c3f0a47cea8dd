// What vramscope predicts for: a model (a built-in family configured like a Hugging Face
// config.json, or a list of layers) and a training set-up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "predict/device_rules.h"
#include "predict/layers.h"
#include "predict/step_simulator.h"

namespace vramscope::predict {

enum class Family : uint8_t { kGpt2, kLlama, kBert, kVit, kResnet, kLayerList };
const char* FamilyName(Family family);

// One entry of a layer list (docs/predict-models.md): a JSON object {"type": "linear", ...}.
struct LayerSpec {
  std::string type;  // linear, conv2d, batchnorm2d, layernorm, rmsnorm, relu, gelu, silu, tanh,
                     // sigmoid, dropout, embedding, attention, residual, flatten, maxpool2d,
                     // avgpool
  std::string name;
  uint64_t in = 0, out = 0;  // features / channels
  uint64_t kernel = 1, stride = 1, padding = 0;
  uint64_t heads = 0;  // attention
  bool bias = true;
  double p = 0;       // dropout
  int32_t from = -1;  // residual: index of the layer whose output is added
};

struct ModelSpec {
  Family family = Family::kGpt2;
  std::string label;  // "gpt2 (preset)", "config.json (LlamaForCausalLM)"
  // Transformers.
  uint64_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0;
  uint64_t max_positions = 0, type_vocab = 0;
  bool tie_embeddings = true;
  bool qkv_bias = false;  // Qwen2
  bool mlp_bias = false;  // LLaMA: false
  double dropout = 0;     // hidden / residual dropout
  double attention_dropout = 0;
  std::string activation = "gelu";  // gelu, gelu_new, silu, relu
  // Mixture of experts (LLaMA family: Mixtral, Qwen-MoE). experts == 0: a dense MLP. Each MoE
  // layer has a router (hidden x experts), `experts` SwiGLU experts of expert_intermediate, and
  // optionally a shared SwiGLU expert of shared_expert_intermediate with a sigmoid gate
  // (hidden x 1, Qwen2-MoE). Predicted per rank by predict/parallel_layout.h only.
  uint64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;
  uint64_t shared_expert_intermediate = 0;
  bool shared_expert_gate = false;
  // DeepSeek-V3: the first `first_dense_layers` layers keep a dense MLP of `intermediate`, the
  // others are MoE layers (with experts > 0).
  uint64_t first_dense_layers = 0;
  // Multi-head latent attention (DeepSeek-V2/V3) when kv_lora_rank > 0: q through a low-rank
  // down projection (hidden x q_lora_rank, RMSNorm, then up to heads x (nope + rope); straight
  // from hidden when q_lora_rank is 0), k and v from one down projection (hidden x (kv_lora_rank
  // + rope), RMSNorm on its first kv_lora_rank) up to heads x (nope + v), the output projection
  // from heads x v. Predicted per rank by predict/parallel_layout.h only.
  uint64_t q_lora_rank = 0, kv_lora_rank = 0;
  uint64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool Mla() const { return kv_lora_rank > 0; }
  // Whether layer i (from 0) is a mixture-of-experts layer.
  bool MoeLayer(uint64_t i) const { return experts > 0 && i >= first_dense_layers; }
  std::string attention = "sdpa";  // sdpa (fused kernels) or eager (written out)
  // Vision.
  uint64_t image_size = 224, patch = 16, channels = 3, num_labels = 1000;
  // ResNet.
  std::vector<uint64_t> blocks = {2, 2, 2, 2};
  std::vector<uint64_t> widths = {64, 128, 256, 512};
  bool bottleneck = false;
  // Layer list: input features (or [C, H, W]) and layers.
  std::vector<uint64_t> input_shape;
  std::string loss = "mse";  // mse or cross_entropy (layer lists)
  std::vector<LayerSpec> layer_list;
  uint64_t default_seq = 0;
};

enum class ZeroMode : uint8_t { kNone, kZero1, kZero2, kZero3, kFsdp };

// The most tensor events a prediction holds unless --max-events raises it (an allocation and
// its free are two): refused past it within about 5 s and 500 MB (docs/design/
// resource-contract.md). LLaMA-3-70B's 3 default steps make 32,068 allocations.
inline constexpr uint64_t kDefaultMaxPredictedEvents = uint64_t{4} << 20;
// The most repeated blocks a built-in family models: the deepest networks trained have about
// 1,200 layers; more is a mistyped config, and would make the steps' stream without bound.
inline constexpr uint64_t kMaxModelLayers = 10000;

struct TrainingSetup {
  uint64_t batch = 1;
  uint64_t seq = 0;  // 0: the model's default
  uint64_t image_size = 0;
  Precision precision;
  OptimizerSetup optimizer;
  bool zero_grad = true;
  bool set_to_none = true;
  int grad_accum = 1;
  int steps = 3;
  bool checkpointing = false;
  // With checkpointing: only every k-th block (torchtitan's selective_ac_option "k": blocks k,
  // 2k, ... counting from 1); 1: every block.
  int checkpoint_every = 1;
  // With checkpointing: the checkpointed blocks' inputs kept on the host (Unsloth's offloaded
  // checkpointing).
  bool offload_checkpoints = false;
  // With checkpointing: op-level selective checkpointing (torchtitan's selective_ac_option
  // "op"): each block keeps its attention's and every other matmul's outputs and recomputes the
  // rest (StepSimulator::checkpoint_saves_ops).
  bool checkpoint_ops = false;
  // Whether block i (from 0) is checkpointed.
  bool Checkpointed(uint64_t i) const {
    return checkpointing && (i + 1) % static_cast<uint64_t>(checkpoint_every) == 0;
  }
  // The causal-LM loss (family_common.h's CausalLmHead): torchtune's chunked output and loss
  // over this many chunks (0 or 1: one), or Liger's fused linear cross-entropy.
  int loss_chunks = 0;
  bool fused_linear_ce = false;
  // The optimizer stepped per parameter inside backward (torchtune's optimizer_in_bwd).
  bool optimizer_in_backward = false;
  // torchtune's OffloadActivations: saved tensors of 1 KiB or more in pinned host memory.
  bool offload_activations = false;
  // torchao's float8 training (convert_to_float8_training, tensorwise dynamic scaling): the
  // blocks' nn.Linear layers whose dimensions are multiples of 16 become Float8Linear, the
  // head stays as it is (torchtitan's filter_fqns ["output"]).
  bool float8 = false;
  // Packing (transformers' DataCollatorWithFlattening): samples of these lengths concatenated
  // into one row (batch 1, seq their sum) whose position ids restart at each sample. Under
  // sdpa the model builds a block-diagonal causal mask [1, 1, seq, seq] and every layer runs
  // the memory-efficient kernel with it as an additive bias. Empty: not packed.
  std::vector<uint64_t> pack;
  int lora_rank = 0;
  // QLoRA (with lora_rank): every linear of the blocks frozen in bitsandbytes' NF4 (Linear4bit,
  // blocks of 64, double quantisation), dequantised into the compute dtype around each use.
  bool qlora = false;
  double lora_alpha = 16;
  double lora_dropout = 0;  // peft's default
  ZeroMode zero = ZeroMode::kNone;
  // GPUs of the data-parallel group. Without ZeRO/FSDP and with 2 or more, the model is wrapped
  // in DistributedDataParallel, whose gradient buckets close at ddp_bucket_cap_bytes.
  int world_size = 1;
  uint64_t ddp_bucket_cap_bytes = uint64_t{25} << 20;  // DDP(bucket_cap_mb=25)
  std::vector<std::string> freeze;                     // shell patterns of frozen parameter names
  // torch.compile(model) (predict/compiled_step.h): the LLaMA family from its templates.
  bool compile = false;
  // The most tensor events the simulated steps may hold (--max-events): the prediction's size,
  // which the user chooses through steps x micro-batches x layers (the resource contract).
  uint64_t max_events = kDefaultMaxPredictedEvents;
};

// Runs the training steps of `model` under `setup` through the step simulator. The stream has
// no workspaces yet (AddWorkspaces adds them for a GPU).
// `control`'s token is checked before every micro-batch: a long simulation (many steps of a big
// model) stops within one micro-batch of Ctrl-C.
Result<TensorStream> SimulateTraining(const ModelSpec& model, const TrainingSetup& setup,
                                      const Control& control = {});

}  // namespace vramscope::predict
