// The compiled step's templates (compiled_step.h), instantiated in the simulator.
#include "predict/compiled_step.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/gzip.h"

namespace vramscope::predict {

// src/predict/compiled/llama.json.gz (cmake/EmbedFile.cmake).
std::span<const uint8_t> CompiledTemplatesGz();

namespace {

const nlohmann::json& Templates() {
  // Made by the build from the committed data; a failure to read it is a broken build.
  static const nlohmann::json doc = [] {
    Result<std::string> text = Gunzip(CompiledTemplatesGz(), "the compiled step's templates");
    if (!text.ok()) throw std::runtime_error(text.status().message());
    return nlohmann::json::parse(*text);
  }();
  return doc;
}

std::string StructureKey(const ModelSpec& m) {
  std::string key = m.kv_heads < m.heads ? "gqa" : "mha";
  if (m.qkv_bias) key += "-bias";
  if (m.tie_embeddings) key += "-tied";
  return key;
}

std::string PrecisionKey(const TrainingSetup& s) {
  const Precision& p = s.precision;
  if (p.param == DType::kBF16 && !p.autocast) return "bf16";
  if (p.param == DType::kF32 && p.autocast == DType::kBF16) return "bf16-amp";
  return "";
}

// "plain", or "ckpt": every layer checkpointed as transformers' gradient_checkpointing_enable()
// does (under which Dynamo breaks the graph at each layer: the layers run eagerly, checkpointed).
std::string VariantKey(const TrainingSetup& s) {
  if (!s.checkpointing) return "plain";
  if (s.checkpoint_every == 1 && !s.offload_checkpoints && !s.checkpoint_ops) return "ckpt";
  return "";
}

const nlohmann::json* FindTemplate(const std::string& structure, const std::string& precision,
                                   const std::string& variant) {
  for (const auto& t : Templates()["templates"]) {
    if (t["structure"] == structure && t["precision"] == precision &&
        t.value("variant", std::string("plain")) == variant) {
      return &t;
    }
  }
  return nullptr;
}

std::string Available() {
  std::vector<std::string> names;
  for (const auto& t : Templates()["templates"]) {
    const std::string variant = t.value("variant", std::string("plain"));
    names.push_back(fmt::format("{} in {}{}", t["structure"].get<std::string>(),
                                t["precision"].get<std::string>(),
                                variant == "plain" ? "" : " (" + variant + ")"));
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

// The model's dimensions under the template's variable names.
std::map<std::string, uint64_t, std::less<>> Variables(const ModelSpec& m, const TrainingSetup& s) {
  const uint64_t d = m.hidden / m.heads;
  return {{"b", s.batch},
          {"s", s.seq ? s.seq : m.default_seq},
          {"heads", m.heads},
          {"kvh", m.kv_heads},
          {"g", m.heads / m.kv_heads},
          {"d8", d / 8},
          {"ffn", m.intermediate},
          {"vocab", m.vocab}};
}

uint64_t SequenceForm(std::string_view form, uint64_t s) {
  if (form == "s+1") return s + 1;
  if (form == "s8") return (s + 7) / 8 * 8;
  if (form == "s32") return (s + 31) / 32 * 32;
  return s;
}

// c * prod(sequence forms) * prod(var^e), saturating at the simulator's largest tensor (which
// it then reports as too large).
uint64_t SizeOf(const nlohmann::json& size,
                const std::map<std::string, uint64_t, std::less<>>& vars) {
  constexpr uint64_t kCap = StepSimulator::kMaxTensorBytes * 2;
  uint64_t n = size[0].get<uint64_t>();
  auto times = [&](uint64_t v) { n = (v != 0 && n > kCap / v) ? kCap : n * v; };
  for (const auto& form : size[2]) times(SequenceForm(form.get<std::string>(), vars.at("s")));
  for (const auto& [var, e] : size[1].items()) {
    for (int i = 0; i < e.get<int>(); ++i) times(vars.at(var));
  }
  return n;
}

// Segments in order, each with the layer it runs for (-1: the prefix or suffix of the phase).
using Tensors = std::map<std::tuple<std::string, int64_t, int64_t>, TensorId>;

int64_t LayerOf(std::string_view mode, int64_t value, int64_t layer, int64_t layers) {
  if (mode == "rel") return layer + value;
  if (mode == "first") return value;
  if (mode == "last") return layers - 1 - value;
  return -1;
}

TensorId Resolve(const Tensors& made, const nlohmann::json& ref, int64_t layer, int64_t layers) {
  const int64_t at = LayerOf(ref[2].get<std::string>(), ref[3].get<int64_t>(), layer, layers);
  // A reference to the block before, when there is none, names the prefix's tensor instead.
  if (ref.size() == 5 && at > layers - 2) {
    return made.at({ref[4][0].get<std::string>(), -1, ref[4][1].get<int64_t>()});
  }
  return made.at({ref[0].get<std::string>(), at, ref[1].get<int64_t>()});
}

std::string LayerName(std::string_view pattern, int64_t layer) {
  std::string out(pattern);
  if (const size_t at = out.find("{i}"); at != std::string::npos) {
    out.replace(at, 3, std::to_string(layer));
  }
  return out;
}

bool IsMatmul(std::string_view op) {
  return op == "aten::mm" || op == "aten::addmm" || op == "aten::bmm";
}

struct Segment {
  const char* name;
  int64_t layer;
};

// The segments of a phase in order. The forward's blocks are layers 1 to L-1, or to L-2 where
// the last layer's forward differs (it is then in the suffix); the backward's run from L-2 down to
// 1 (the last layer's in the prefix, the first's in the suffix).
std::vector<Segment> Order(bool forward, int64_t layers, bool last_in_block) {
  std::vector<Segment> out;
  if (forward) {
    out.push_back({"fpre", -1});
    const int64_t last = last_in_block ? layers : layers - 1;
    for (int64_t i = 1; i < last; ++i) out.push_back({"fblk", i});
    out.push_back({"fsuf", -1});
  } else {
    out.push_back({"bpre", -1});
    for (int64_t j = 0; j + 2 < layers; ++j) out.push_back({"bblk", layers - 2 - j});
    out.push_back({"bsuf", -1});
  }
  return out;
}

// What a free names: one tensor, or with mode "all" that tensor of every forward block (the
// casts autocast drops together when the forward's region ends).
std::vector<TensorId> Freed(const Tensors& made, const nlohmann::json& ref, int64_t layer,
                            int64_t layers, bool last_in_block) {
  if (ref[2] != "all") return {Resolve(made, ref, layer, layers)};
  std::vector<TensorId> out;
  for (const Segment& seg : Order(true, layers, last_in_block)) {
    if (ref[0] == seg.name) out.push_back(made.at({seg.name, seg.layer, ref[1].get<int64_t>()}));
  }
  return out;
}

// One instantiation of a template: its data, the model's dimensions and depth, and the tensors
// made so far by (segment, layer, index).
struct Instance {
  const nlohmann::json& t;
  std::map<std::string, uint64_t, std::less<>> vars;
  int64_t layers;
  bool last_in_block;
  Tensors made;
};

// Plays one phase's segments in order: `alloc(a, bytes, layer)` makes each allocation `a` of
// the template and returns its tensor, `free` drops each tensor a free names.
template <typename Alloc, typename Free>
void Replay(Instance& in, bool forward, Alloc alloc, Free free) {
  for (const Segment& seg : Order(forward, in.layers, in.last_in_block)) {
    int64_t n = 0;
    for (const auto& e : in.t[seg.name]) {
      if (e[0] == "a") {
        in.made[{seg.name, seg.layer, n++}] = alloc(e[1], SizeOf(e[1]["s"], in.vars), seg.layer);
      } else {
        for (const TensorId id : Freed(in.made, e[1], seg.layer, in.layers, in.last_in_block)) {
          free(id);
        }
      }
    }
  }
}

}  // namespace

std::string CompiledStepUnsupported(const ModelSpec& m, const TrainingSetup& s) {
  if (m.family != Family::kLlama || m.experts > 0 || m.Mla()) {
    return fmt::format(
        "--compile is predicted for the LLaMA family (LLaMA, Mistral, Qwen2) from templates; "
        "{} is another: trace it with --model hf:config.json --compile",
        m.label);
  }
  if (m.mlp_bias || m.attention != "sdpa" || m.dropout > 0 || m.attention_dropout > 0 ||
      m.heads == 0 || m.kv_heads == 0 || m.hidden % m.heads != 0 || (m.hidden / m.heads) % 8 != 0) {
    return fmt::format(
        "--compile's templates are of sdpa attention, no MLP bias, no dropout and a head "
        "dimension that is a multiple of 8; {} differs: trace it with --model hf:config.json "
        "--compile",
        m.label);
  }
  const std::string precision = PrecisionKey(s);
  if (precision.empty()) {
    return "--compile's templates are of --dtype bf16 and bf16-amp; trace other dtypes with "
           "--model hf:config.json --compile";
  }
  const std::string variant = VariantKey(s);
  if (variant.empty()) {
    return "--compile's templates checkpoint every layer (--checkpointing) or none; with "
           "--checkpointing-every, -ops or -offload trace the model with --model "
           "hf:config.json --compile";
  }
  const nlohmann::json* t = FindTemplate(StructureKey(m), precision, variant);
  if (t == nullptr) {
    return fmt::format(
        "--compile has no template for {} ({} in {}{}); there are: {} "
        "(scripts/gen_compiled_templates.py makes more)",
        m.label, StructureKey(m), precision, variant == "plain" ? "" : " (" + variant + ")",
        Available());
  }
  if (m.layers < (*t)["min_layers"].get<uint64_t>()) {
    return fmt::format("--compile's templates need {} layers or more; {} has {}",
                       (*t)["min_layers"].get<uint64_t>(), m.label, m.layers);
  }
  std::vector<std::string> other;
  if (s.lora_rank > 0) other.emplace_back(s.qlora ? "--qlora" : "--lora");
  if (!s.freeze.empty()) other.emplace_back("--freeze");
  if (s.optimizer_in_backward) other.emplace_back("--optimizer-in-backward");
  if (s.float8) other.emplace_back("--fp8");
  if (!s.pack.empty()) other.emplace_back("--pack");
  if (s.loss_chunks > 1) other.emplace_back("--loss-chunks");
  if (s.fused_linear_ce) other.emplace_back("--fused-linear-ce");
  if (s.offload_activations) other.emplace_back("--offload-activations");
  // Under DDP, Dynamo's DDPOptimizer splits the graph at the buckets, so gradients come out
  // bucket by bucket; ZeRO/FSDP compile per unit. The templates are of one graph.
  if (s.world_size > 1) other.emplace_back("data parallelism (--world-size)");
  if (!other.empty()) {
    return fmt::format(
        "--compile's templates are of the plain step; with {} trace the model with --model "
        "hf:config.json --compile",
        fmt::join(other, ", "));
  }
  return "";
}

CompiledOutputs RunCompiledStep(StepSimulator& sim, const ModelSpec& m, const TrainingSetup& s) {
  const nlohmann::json& t = *FindTemplate(StructureKey(m), PrecisionKey(s), VariantKey(s));
  auto in = std::make_shared<Instance>(Instance{t,
                                                Variables(m, s),
                                                static_cast<int64_t>(m.layers),
                                                t.value("forward_last_in_block", true),
                                                {}});
  Replay(
      *in, true,
      [&](const nlohmann::json& a, uint64_t bytes, int64_t layer) {
        const std::string op = a["o"].get<std::string>();
        const TensorId id = sim.New(bytes, op);
        if (IsMatmul(op)) sim.Matmul(op);
        if (a.contains("n")) {  // saved for backward
          sim.MarkActivation(id, LayerName(a["n"].get<std::string>(), layer));
        }
        return id;
      },
      [&](TensorId id) { sim.Free(id); });
  // What the forward keeps, in the order it made them: the loss last, the logits the head's
  // (the suffix's) first; the rest is held to the step's end.
  CompiledOutputs out;
  const auto& kept = t["kept"];
  for (size_t i = 0; i < kept.size(); ++i) {
    const TensorId id = Resolve(in->made, kept[i], -1, in->layers);
    if (i + 1 == kept.size()) {
      out.loss = id;
    } else if (out.output == kNoTensor && kept[i][0] == "fsuf") {
      out.output = id;
    } else {
      out.held_to_step_end.push_back(id);
    }
  }
  // The node's inputs: every trainable parameter (CompiledStepUnsupported refuses frozen ones),
  // by the name the graph's gradients carry.
  auto input_of = std::make_shared<std::map<std::string, size_t, std::less<>>>();
  std::vector<TensorId> params;
  for (const auto& [name, tensor] : sim.TrainableParameters()) {
    (*input_of)[name] = params.size();
    params.push_back(tensor);
  }
  auto backward = [in, input_of](BackwardContext& ctx) {
    std::vector<std::pair<size_t, TensorId>> grads;
    Replay(
        *in, false,
        [&](const nlohmann::json& a, uint64_t bytes, int64_t layer) {
          const std::string op = a["o"].get<std::string>();
          const TensorId id = ctx.New(bytes, op);
          if (IsMatmul(op)) ctx.Matmul(op);
          if (a.contains("p")) {  // a parameter's gradient
            const int64_t of = a.contains("l")
                                   ? LayerOf(a["l"][0].get<std::string>(), a["l"][1].get<int64_t>(),
                                             layer, in->layers)
                                   : -1;
            grads.emplace_back(input_of->at(LayerName(a["p"].get<std::string>(), of)), id);
          }
          return id;
        },
        [&](TensorId id) { ctx.Free(id); });
    // The backward graph returns every gradient at its end; the engine then accumulates each.
    for (const auto& [input, grad] : grads) ctx.GiveGrad(input, grad);
  };
  sim.Node("CompiledFunction", params, {out.loss, out.output}, {}, std::move(backward));
  return out;
}

}  // namespace vramscope::predict
