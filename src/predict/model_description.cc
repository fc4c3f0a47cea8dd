#include "predict/model_description.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/units.h"
#include "predict/hub_cache.h"

namespace vramscope::predict {

namespace {

using nlohmann::json;

ModelSpec Gpt2(uint64_t layers, uint64_t hidden, uint64_t heads, std::string_view label) {
  ModelSpec m;
  m.family = Family::kGpt2;
  m.label = std::string(label);
  m.vocab = 50257;
  m.hidden = hidden;
  m.layers = layers;
  m.heads = m.kv_heads = heads;
  m.intermediate = 4 * hidden;
  m.max_positions = 1024;
  m.default_seq = 1024;
  m.dropout = m.attention_dropout = 0.1;
  m.activation = "gelu_new";
  return m;
}

ModelSpec Llama(uint64_t vocab, uint64_t hidden, uint64_t inter, uint64_t layers, uint64_t heads,
                uint64_t kv, uint64_t seq, bool tie, bool qkv_bias, std::string_view label) {
  ModelSpec m;
  m.family = Family::kLlama;
  m.label = std::string(label);
  m.vocab = vocab;
  m.hidden = hidden;
  m.intermediate = inter;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kv;
  m.max_positions = seq;
  m.default_seq = seq;
  m.tie_embeddings = tie;
  m.qkv_bias = qkv_bias;
  m.activation = "silu";
  return m;
}

// DeepSeek-V3's shape with its published MoE and MLA dimensions; the HF config sets its own.
ModelSpec DeepseekV3(uint64_t vocab, uint64_t hidden, uint64_t inter, uint64_t layers,
                     uint64_t heads, uint64_t seq, std::string_view label) {
  ModelSpec m = Llama(vocab, hidden, inter, layers, heads, heads, seq, false, false, label);
  m.experts = 256;
  m.experts_per_token = 8;
  m.expert_intermediate = 2048;
  m.shared_expert_intermediate = 2048;  // one shared expert of moe_intermediate_size
  m.first_dense_layers = 3;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  return m;
}

ModelSpec Bert(uint64_t layers, uint64_t hidden, uint64_t heads, uint64_t vocab, uint64_t pos,
               uint64_t types, std::string_view label) {
  ModelSpec m;
  m.family = Family::kBert;
  m.label = std::string(label);
  m.vocab = vocab;
  m.hidden = hidden;
  m.layers = layers;
  m.heads = m.kv_heads = heads;
  m.intermediate = 4 * hidden;
  m.max_positions = pos;
  m.type_vocab = types;
  m.default_seq = 512;
  m.dropout = m.attention_dropout = 0.1;
  return m;
}

ModelSpec Vit(uint64_t layers, uint64_t hidden, uint64_t heads, uint64_t patch,
              std::string_view label) {
  ModelSpec m;
  m.family = Family::kVit;
  m.label = std::string(label);
  m.hidden = hidden;
  m.layers = layers;
  m.heads = m.kv_heads = heads;
  m.intermediate = 4 * hidden;
  m.patch = patch;
  m.image_size = 224;
  m.num_labels = 1000;
  return m;
}

ModelSpec Resnet(std::vector<uint64_t> blocks, bool bottleneck, std::string_view label) {
  ModelSpec m;
  m.family = Family::kResnet;
  m.label = std::string(label);
  m.blocks = std::move(blocks);
  m.bottleneck = bottleneck;
  m.image_size = 224;
  m.num_labels = 1000;
  return m;
}

const std::map<std::string, ModelSpec>& Presets() {
  static const std::map<std::string, ModelSpec> presets = [] {
    std::map<std::string, ModelSpec> p;
    p["gpt2"] = Gpt2(12, 768, 12, "gpt2 (GPT-2 small, 124M)");
    p["gpt2-medium"] = Gpt2(24, 1024, 16, "gpt2-medium (355M)");
    p["gpt2-large"] = Gpt2(36, 1280, 20, "gpt2-large (774M)");
    p["gpt2-xl"] = Gpt2(48, 1600, 25, "gpt2-xl (1.5B)");
    p["llama2-7b"] = Llama(32000, 4096, 11008, 32, 32, 32, 4096, false, false, "llama2-7b");
    p["llama2-13b"] = Llama(32000, 5120, 13824, 40, 40, 40, 4096, false, false, "llama2-13b");
    p["llama2-70b"] = Llama(32000, 8192, 28672, 80, 64, 8, 4096, false, false, "llama2-70b");
    p["llama3-8b"] = Llama(128256, 4096, 14336, 32, 32, 8, 8192, false, false, "llama3-8b");
    p["llama3-70b"] = Llama(128256, 8192, 28672, 80, 64, 8, 8192, false, false, "llama3-70b");
    p["mistral-7b"] = Llama(32000, 4096, 14336, 32, 32, 8, 4096, false, false, "mistral-7b");
    // Llama 3.1 405B (meta-llama/Llama-3.1-405B's config.json): 405,853,388,800 parameters.
    p["llama3-405b"] = Llama(128256, 16384, 53248, 126, 128, 8, 8192, false, false, "llama3-405b");
    // Mixtral 8x7B (mistralai/Mixtral-8x7B-v0.1): 8 experts of 14336, 2 per token; 46.7B.
    ModelSpec mixtral = Llama(32000, 4096, 14336, 32, 32, 8, 4096, false, false, "mixtral-8x7b");
    mixtral.experts = 8;
    mixtral.experts_per_token = 2;
    mixtral.expert_intermediate = 14336;
    p["mixtral-8x7b"] = mixtral;
    // Qwen1.5-MoE-A2.7B (Qwen/Qwen1.5-MoE-A2.7B): 60 experts of 1408, 4 per token, a shared
    // expert of 5632 with its gate; 14.3B.
    ModelSpec qwen_moe =
        Llama(151936, 2048, 5632, 24, 16, 16, 8192, false, true, "qwen1.5-moe-a2.7b");
    qwen_moe.experts = 60;
    qwen_moe.experts_per_token = 4;
    qwen_moe.expert_intermediate = 1408;
    qwen_moe.shared_expert_intermediate = 5632;
    qwen_moe.shared_expert_gate = true;
    p["qwen1.5-moe-a2.7b"] = qwen_moe;
    // DeepSeek-V3 (deepseek-ai/DeepSeek-V3's config.json, transformers' DeepseekV3Config): 61
    // layers, the first 3 dense (MLP 18432), then 256 routed experts of 2048 (8 per token) and
    // one shared expert; multi-head latent attention (q rank 1536, kv rank 512, 128 + 64 q/k
    // head dims, 128 v). 671,026,404,352 parameters, as transformers counts them (the
    // multi-token-prediction module of the published 685B checkpoint is not part of the model).
    p["deepseek-v3"] = DeepseekV3(129280, 7168, 18432, 61, 128, 4096, "deepseek-v3");
    p["qwen2-0.5b"] = Llama(151936, 896, 4864, 24, 14, 2, 4096, true, true, "qwen2-0.5b");
    p["qwen2-7b"] = Llama(152064, 3584, 18944, 28, 28, 4, 4096, false, true, "qwen2-7b");
    p["bert-base"] = Bert(12, 768, 12, 30522, 512, 2, "bert-base (110M)");
    p["bert-large"] = Bert(24, 1024, 16, 30522, 512, 2, "bert-large (340M)");
    p["roberta-base"] = Bert(12, 768, 12, 50265, 514, 1, "roberta-base (125M)");
    p["vit-b16"] = Vit(12, 768, 12, 16, "vit-b16 (ViT-B/16, 86M)");
    p["vit-l16"] = Vit(24, 1024, 16, 16, "vit-l16 (ViT-L/16, 304M)");
    p["resnet18"] = Resnet({2, 2, 2, 2}, false, "resnet18");
    p["resnet34"] = Resnet({3, 4, 6, 3}, false, "resnet34");
    p["resnet50"] = Resnet({3, 4, 6, 3}, true, "resnet50");
    p["resnet101"] = Resnet({3, 4, 23, 3}, true, "resnet101");
    p["resnet152"] = Resnet({3, 8, 36, 3}, true, "resnet152");
    return p;
  }();
  return presets;
}

// Field readers: errors say which field, where, and what it should be.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}
  Status status() const { return status_; }

  uint64_t Count(const char* key, uint64_t fallback, bool required = false) {
    if (!status_.ok()) return fallback;
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) {
      if (required) Fail(fmt::format("/{} is missing; it must be a positive integer", key));
      return fallback;
    }
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 ||
        it->get<int64_t>() > (int64_t{1} << 40)) {
      Fail(fmt::format("/{} is {}; it must be a positive integer", key, Short(*it)));
      return fallback;
    }
    return it->get<uint64_t>();
  }
  double Probability(const char* key, double fallback) {
    if (!status_.ok()) return fallback;
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() >= 1) {
      Fail(fmt::format("/{} is {}; it must be a number in [0, 1)", key, Short(*it)));
      return fallback;
    }
    return it->get<double>();
  }
  bool Flag(const char* key, bool fallback) {
    if (!status_.ok()) return fallback;
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      Fail(fmt::format("/{} is {}; it must be true or false", key, Short(*it)));
      return fallback;
    }
    return it->get<bool>();
  }
  // A count that may be 0 (DeepSeek's first_k_dense_replace, n_shared_experts).
  uint64_t CountOrZero(const char* key, uint64_t fallback) {
    if (!status_.ok()) return fallback;
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > (int64_t{1} << 40)) {
      Fail(fmt::format("/{} is {}; it must be 0 or a positive integer", key, Short(*it)));
      return fallback;
    }
    return it->get<uint64_t>();
  }
  std::string Text(const char* key, std::string fallback) {
    if (!status_.ok()) return fallback;
    const auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      Fail(fmt::format("/{} is {}; it must be a string", key, Short(*it)));
      return fallback;
    }
    return it->get<std::string>();
  }
  void Fail(std::string what) {
    if (status_.ok()) status_ = InvalidInput(fmt::format("{}: {}", where_, what));
  }

 private:
  static std::string Short(const json& v) {
    std::string s = v.dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }
  const json& j_;
  std::string where_;
  Status status_;
};

Result<ModelSpec> FromHfConfig(const json& j, std::string_view where) {
  Fields f(j, std::string(where));
  const std::string type = f.Text("model_type", "");
  ModelSpec m;
  m.label = fmt::format("{} ({})", where, type);
  if (type == "gpt2") {
    m = Gpt2(f.Count("n_layer", 12), f.Count("n_embd", 768), f.Count("n_head", 12), m.label);
    m.vocab = f.Count("vocab_size", 50257);
    m.max_positions = f.Count("n_positions", 1024);
    m.default_seq = m.max_positions;
    if (j.contains("n_inner") && !j["n_inner"].is_null()) m.intermediate = f.Count("n_inner", 0);
    m.dropout = f.Probability("resid_pdrop", 0.1);
    m.attention_dropout = f.Probability("attn_pdrop", 0.1);
    m.activation = f.Text("activation_function", "gelu_new");
  } else if (type == "mixtral" || type == "qwen2_moe") {
    // Mixture-of-experts decoders: LLaMA-style attention, experts in place of the MLP.
    const uint64_t heads = f.Count("num_attention_heads", 32, true);
    const bool qwen = type == "qwen2_moe";
    m = Llama(f.Count("vocab_size", 32000, true), f.Count("hidden_size", 4096, true),
              f.Count("intermediate_size", 14336, true), f.Count("num_hidden_layers", 32, true),
              heads, f.Count("num_key_value_heads", heads),
              f.Count("max_position_embeddings", 4096), f.Flag("tie_word_embeddings", false), qwen,
              m.label);
    m.experts = f.Count(qwen ? "num_experts" : "num_local_experts", 8, true);
    m.experts_per_token = f.Count("num_experts_per_tok", 2, true);
    m.expert_intermediate = qwen ? f.Count("moe_intermediate_size", 1408, true) : m.intermediate;
    if (qwen) {
      m.shared_expert_intermediate = f.Count("shared_expert_intermediate_size", 0);
      m.shared_expert_gate = m.shared_expert_intermediate > 0;
    }
    if (m.experts_per_token > m.experts) {
      f.Fail(fmt::format("/num_experts_per_tok is {}, more than the {} experts",
                         m.experts_per_token, m.experts));
    }
    m.default_seq = std::min<uint64_t>(m.max_positions, 4096);
  } else if (type == "deepseek_v3" || type == "deepseek_v2") {
    // Latent attention and DeepSeek's MoE: dense MLPs in the first layers, then routed and
    // shared experts in every layer.
    const uint64_t heads = f.Count("num_attention_heads", 128, true);
    m = DeepseekV3(f.Count("vocab_size", 129280, true), f.Count("hidden_size", 7168, true),
                   f.Count("intermediate_size", 18432, true),
                   f.Count("num_hidden_layers", 61, true), heads,
                   std::min<uint64_t>(f.Count("max_position_embeddings", 4096), 4096), m.label);
    m.max_positions = f.Count("max_position_embeddings", 4096);
    m.tie_embeddings = f.Flag("tie_word_embeddings", false);
    if (f.Flag("attention_bias", false)) {
      f.Fail("/attention_bias true (biases on the latent attention's projections) is not modelled");
    }
    m.experts = f.Count("n_routed_experts", 256, true);
    m.experts_per_token = f.Count("num_experts_per_tok", 8, true);
    m.expert_intermediate = f.Count("moe_intermediate_size", 2048, true);
    m.shared_expert_intermediate = f.CountOrZero("n_shared_experts", 1) * m.expert_intermediate;
    m.first_dense_layers = f.CountOrZero("first_k_dense_replace", 3);
    // null in DeepSeek-V2-Lite's config: q straight from the hidden states
    m.q_lora_rank =
        j.contains("q_lora_rank") && j["q_lora_rank"].is_null() ? 0 : f.Count("q_lora_rank", 1536);
    m.kv_lora_rank = f.Count("kv_lora_rank", 512, true);
    m.qk_nope_head_dim = f.Count("qk_nope_head_dim", 128, true);
    m.qk_rope_head_dim = f.Count("qk_rope_head_dim", 64, true);
    m.v_head_dim = f.Count("v_head_dim", 128, true);
    if (f.Count("moe_layer_freq", 1) != 1) {
      f.Fail("/moe_layer_freq other than 1 (MoE every layer after the dense ones) is not modelled");
    }
    if (m.experts_per_token > m.experts) {
      f.Fail(fmt::format("/num_experts_per_tok is {}, more than the {} experts",
                         m.experts_per_token, m.experts));
    }
    if (m.kv_lora_rank == 0 || m.qk_nope_head_dim + m.qk_rope_head_dim == 0 || m.v_head_dim == 0) {
      f.Fail(
          "/kv_lora_rank, /qk_nope_head_dim + /qk_rope_head_dim and /v_head_dim must be at "
          "least 1 (latent attention)");
    }
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    const uint64_t heads = f.Count("num_attention_heads", 32, true);
    m = Llama(f.Count("vocab_size", 32000, true), f.Count("hidden_size", 4096, true),
              f.Count("intermediate_size", 11008, true), f.Count("num_hidden_layers", 32, true),
              heads, f.Count("num_key_value_heads", heads),
              f.Count("max_position_embeddings", 4096), f.Flag("tie_word_embeddings", false),
              type == "qwen2" ? true : f.Flag("attention_bias", false), m.label);
    m.mlp_bias = f.Flag("mlp_bias", false);
    m.default_seq = std::min<uint64_t>(m.max_positions, 4096);
    m.attention_dropout = f.Probability("attention_dropout", 0);
  } else if (type == "bert" || type == "roberta") {
    m = Bert(f.Count("num_hidden_layers", 12), f.Count("hidden_size", 768),
             f.Count("num_attention_heads", 12), f.Count("vocab_size", 30522),
             f.Count("max_position_embeddings", 512), f.Count("type_vocab_size", 2), m.label);
    m.intermediate = f.Count("intermediate_size", 4 * m.hidden);
    m.dropout = f.Probability("hidden_dropout_prob", 0.1);
    m.attention_dropout = f.Probability("attention_probs_dropout_prob", 0.1);
    m.default_seq = std::min<uint64_t>(512, m.max_positions);
  } else if (type == "vit") {
    m = Vit(f.Count("num_hidden_layers", 12), f.Count("hidden_size", 768),
            f.Count("num_attention_heads", 12), f.Count("patch_size", 16), m.label);
    m.intermediate = f.Count("intermediate_size", 4 * m.hidden);
    m.image_size = f.Count("image_size", 224);
    if (m.image_size < m.patch) {
      // Found by predict_input_fuzzer: no patch fits, and the step held empty tensors.
      f.Fail(
          fmt::format("/image_size is {}, smaller than /patch_size {}: the patch embedding "
                      "needs at least one patch",
                      m.image_size, m.patch));
    }
    m.channels = f.Count("num_channels", 3);
    m.dropout = f.Probability("hidden_dropout_prob", 0);
    m.attention_dropout = f.Probability("attention_probs_dropout_prob", 0);
    uint64_t labels = 2;
    if (j.contains("id2label") && j["id2label"].is_object()) labels = j["id2label"].size();
    m.num_labels = f.Count("num_labels", labels);
  } else if (type == "resnet") {
    // transformers' ResNetConfig fields (depths, layer_type, hidden_sizes), plus num_labels and
    // image_size for the input.
    std::vector<uint64_t> depths = {2, 2, 2, 2};
    if (j.contains("depths")) {
      depths.clear();
      if (!j["depths"].is_array() || j["depths"].empty() || j["depths"].size() > 8) {
        f.Fail("/depths must be an array of 1 to 8 block counts");
      } else {
        for (const json& d : j["depths"]) {
          if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 256) {
            f.Fail("/depths must hold positive block counts");
            break;
          }
          depths.push_back(d.get<uint64_t>());
        }
      }
    }
    const std::string layer = f.Text("layer_type", "basic");
    if (layer != "basic" && layer != "bottleneck") {
      f.Fail(fmt::format("/layer_type is \"{}\"; it must be \"basic\" or \"bottleneck\"",
                         ForMessage(layer)));
    }
    m = Resnet(depths, layer == "bottleneck", m.label);
    if (j.contains("hidden_sizes") && j["hidden_sizes"].is_array() &&
        j["hidden_sizes"].size() == depths.size()) {
      m.widths.clear();
      for (const json& w : j["hidden_sizes"]) {
        if (!w.is_number_integer() || w.get<int64_t>() < 1) {
          f.Fail("/hidden_sizes must hold positive widths");
          break;
        }
        // transformers gives the output width of a stage: 4x the inner width for bottlenecks.
        m.widths.push_back(w.get<uint64_t>() / (m.bottleneck ? 4 : 1));
      }
    } else {
      m.widths.resize(depths.size());
      for (size_t i = 0; i < depths.size(); ++i)
        m.widths[i] = uint64_t{64} << std::min<size_t>(i, 6);
    }
    m.num_labels = f.Count("num_labels", 1000);
    m.image_size = f.Count("image_size", 224);
    m.channels = f.Count("num_channels", 3);
  } else {
    f.Fail(fmt::format(
        "/model_type is \"{}\"; vramscope predicts gpt2, llama, mistral, qwen2, mixtral, "
        "qwen2_moe, deepseek_v2, deepseek_v3, bert, roberta, vit and resnet configs (or use a "
        "preset, a layer list, or the tracer for other models)",
        ForMessage(type)));
  }
  // transformers' attention implementation: "eager" writes attention out (an s x s tensor per
  // head); "sdpa" and the flash variants use fused kernels.
  const std::string attention = f.Text("attn_implementation", f.Text("_attn_implementation", ""));
  if (attention == "eager") {
    m.attention = "eager";
  } else if (!attention.empty() && attention != "sdpa" &&
             attention.find("flash") == std::string::npos) {
    f.Fail(fmt::format("/attn_implementation is \"{}\"; use eager, sdpa or flash_attention_2",
                       ForMessage(attention)));
  }
  if (m.heads > 0 && m.hidden % m.heads != 0) {
    f.Fail(fmt::format("the hidden size {} is not a multiple of the {} attention heads", m.hidden,
                       m.heads));
  }
  if (m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    f.Fail(fmt::format("{} attention heads are not a multiple of {} key/value heads", m.heads,
                       m.kv_heads));
  }
  if (!f.status().ok()) return f.status();
  return m;
}

Result<ModelSpec> FromLayerList(const json& j, std::string_view where) {
  static const std::set<std::string> kTypes = {
      "linear",    "conv2d",   "batchnorm2d", "layernorm", "rmsnorm", "relu",
      "gelu",      "silu",     "tanh",        "sigmoid",   "dropout", "embedding",
      "attention", "residual", "flatten",     "maxpool2d", "avgpool"};
  ModelSpec m;
  m.family = Family::kLayerList;
  m.label = fmt::format("{} (layer list)", where);
  Fields top(j, std::string(where));
  m.loss = top.Text("loss", "mse");
  if (m.loss != "mse" && m.loss != "cross_entropy") {
    top.Fail(fmt::format("/loss is \"{}\"; it must be \"mse\" or \"cross_entropy\"",
                         ForMessage(m.loss)));
  }
  if (!top.status().ok()) return top.status();
  const auto input = j.find("input");
  if (input == j.end() || !input->is_array() || input->empty() || input->size() > 3) {
    return InvalidInput(
        fmt::format("{}: /input must be the shape of one sample: [features], [tokens, features] or "
                    "[channels, height, width]",
                    where));
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const json& d = (*input)[i];
    if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (1 << 24)) {
      return InvalidInput(fmt::format("{}: /input/{} must be a positive integer", where, i));
    }
    m.input_shape.push_back(d.get<uint64_t>());
  }
  const auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array() || layers->empty()) {
    return InvalidInput(fmt::format("{}: /layers must be a non-empty array of layers", where));
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    const json& l = (*layers)[i];
    const std::string at = fmt::format("{}: /layers/{}", where, i);
    if (!l.is_object()) return InvalidInput(at + " must be an object such as {\"type\": \"relu\"}");
    Fields f(l, at);
    LayerSpec s;
    s.type = f.Text("type", "");
    if (kTypes.count(s.type) == 0) {
      return InvalidInput(fmt::format("{}/type is \"{}\"; it must be one of {}", at,
                                      ForMessage(s.type), fmt::join(kTypes, ", ")));
    }
    s.name = f.Text("name", "");
    const bool sized = s.type == "linear" || s.type == "conv2d" || s.type == "embedding";
    const bool normed = s.type == "batchnorm2d" || s.type == "layernorm" || s.type == "rmsnorm" ||
                        s.type == "attention";
    s.in = f.Count("in", 0, sized || normed);
    s.out = f.Count("out", 0, sized);
    s.kernel = f.Count("kernel", s.type == "maxpool2d" ? 2 : 1);
    s.stride = f.Count("stride", s.type == "maxpool2d" ? s.kernel : 1);
    if (l.contains("padding")) {
      if (!l["padding"].is_number_integer() || l["padding"].get<int64_t>() < 0) {
        return InvalidInput(at + "/padding must be a non-negative integer");
      }
      s.padding = l["padding"].get<uint64_t>();
    }
    s.heads = f.Count("heads", 1, s.type == "attention");
    s.bias = f.Flag("bias", true);
    s.p = f.Probability("p", s.type == "dropout" ? 0.5 : 0);
    if (s.type == "residual") {
      const auto from = l.find("from");
      if (from == l.end() || !from->is_number_integer() || from->get<int64_t>() < 0 ||
          from->get<int64_t>() >= static_cast<int64_t>(i)) {
        return InvalidInput(at + "/from must name an earlier layer by its index");
      }
      s.from = from->get<int32_t>();
    }
    if (s.type == "attention" && s.in % s.heads != 0) {
      return InvalidInput(
          fmt::format("{}: {} features are not a multiple of {} heads", at, s.in, s.heads));
    }
    if (!f.status().ok()) return f.status();
    m.layer_list.push_back(s);
  }
  if (m.input_shape.size() == 3 && m.layer_list.front().type != "conv2d") {
    return InvalidInput(fmt::format(
        "{}: an image input ([channels, height, width]) must start with a conv2d layer", where));
  }
  return m;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : Presets()) names.push_back(name);
  return names;
}

Result<ModelSpec> ParseModelJson(std::string_view text, std::string_view where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidInput(fmt::format(
        "{}: not valid JSON (at byte {}); give a Hugging Face config.json or a vramscope layer "
        "list (docs/predict-models.md)",
        where, e.byte));
  } catch (const json::out_of_range&) {
    // A number no JSON parser can hold (1E2625): nlohmann reports it as out of range, not as a
    // parse error (found by predict_input_fuzzer from the many-layers bomb seed).
    return InvalidInput(fmt::format(
        "{}: holds a number too large for any numeric type; give a Hugging Face config.json or "
        "a vramscope layer list (docs/predict-models.md)",
        where));
  }
  if (!j.is_object()) {
    return InvalidInput(fmt::format("{}: the top level must be a JSON object", where));
  }
  if (j.contains("layers")) return FromLayerList(j, where);
  if (j.contains("model_type")) return FromHfConfig(j, where);
  return InvalidInput(fmt::format(
      "{}: neither a Hugging Face config (no \"model_type\") nor a layer list (no \"layers\")",
      where));
}

namespace {

// A model description file, named `where` in errors.
Result<ModelSpec> ReadModelFile(const std::filesystem::path& path, std::string_view where) {
  std::ifstream in{path, std::ios::binary};
  if (!in) {
    return InvalidInput(fmt::format("{}: cannot be read ({})", where, path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (64u << 20)) {
    return InvalidInput(fmt::format("{}: larger than 64 MiB; not a model description", where));
  }
  return ParseModelJson(text.str(), where);
}

}  // namespace

Result<ModelSpec> LoadHubConfig(const HubId& id, const CachedConfig& found) {
  // The label names the commit read, so that a report says which config it predicted.
  return ReadModelFile(found.config, fmt::format("{}@{}", id.repo, found.commit.substr(0, 12)));
}

Result<ModelSpec> LoadModelSpec(std::string_view model) {
  const auto& presets = Presets();
  if (const auto it = presets.find(std::string(model)); it != presets.end()) return it->second;
  if (IsHubModel(model)) {
    const HubId id = *ParseHubId(model);
    const std::filesystem::path cache = HubCacheDir();
    if (const std::optional<CachedConfig> found = FindCachedConfig(cache, id)) {
      return LoadHubConfig(id, *found);
    }
    return InvalidInput(fmt::format(
        "--model {}: no file of that name, and its config.json is not in the Hugging Face cache "
        "({}); download it with '{}' (HF_TOKEN set for a gated model)",
        model, cache.string(), HubDownloadCommand(id)));
  }
  std::error_code ec;
  const std::filesystem::path path{std::string(model)};
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidInput(fmt::format(
        "--model {}: a folder; give its config.json (or a layer list, or a tracer .jsonl)", model));
  }
  if (!std::filesystem::exists(path, ec)) {
    // A path that names a file is a missing input (1); a bare word, an unknown preset (2), as is
    // a dotted word that is a preset's name mistyped ("llama3.1-8b").
    const bool looks_like_file =
        model.find('/') != std::string_view::npos || model.find('.') != std::string_view::npos;
    const std::optional<std::string> meant = NearestPreset(model);
    if (looks_like_file && !(meant && model.find('/') == std::string_view::npos)) {
      return InvalidInput(fmt::format(
          "--model {}: cannot be read (no such file?); give a config.json, a layer list, a "
          "tracer .jsonl or a Hugging Face Hub id (org/name)",
          model));
    }
    if (meant) {
      return UsageError(fmt::format("--model {}: not a preset nor a file; did you mean --model {}?",
                                    model, *meant));
    }
    return UsageError(fmt::format("--model {}: not a preset (presets: {}) nor a file", model,
                                  fmt::join(PresetNames(), ", ")));
  }
  return ReadModelFile(path, model);
}

}  // namespace vramscope::predict
