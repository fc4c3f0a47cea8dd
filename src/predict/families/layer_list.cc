// Layer lists (docs/predict-models.md): a network described layer by layer in JSON.
#include <string>

#include "predict/families/family_common.h"

namespace vramscope::predict::families {

namespace {

class LayerList : public Model {
 public:
  LayerList(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    for (size_t i = 0; i < m_.layer_list.size(); ++i) {
      const LayerSpec& l = m_.layer_list[i];
      Built b;
      const std::string name = l.name.empty() ? std::to_string(i) : l.name;
      if (l.type == "linear") {
        b.linear = ops.MakeLinear(name, l.in, l.out, l.bias);
      } else if (l.type == "conv2d") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.out * l.in * l.kernel * l.kernel);
      } else if (l.type == "batchnorm2d" || l.type == "layernorm" || l.type == "rmsnorm") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.in);
        if (l.type != "rmsnorm") b.b = ops.MakeWeight("bias", l.in);
        if (l.type == "batchnorm2d") {
          ops.MakeBuffer("running_mean", l.in);
          ops.MakeBuffer("running_var", l.in);
          ops.sim().Buffer("num_batches_tracked", 8);
        }
      } else if (l.type == "embedding") {
        Scope s(ops.sim(), name);
        b.w = ops.MakeWeight("weight", l.in * l.out);
      } else if (l.type == "attention") {
        Scope s(ops.sim(), name);
        b.linear = ops.MakeLinear("in_proj", l.in, 3 * l.in, l.bias);
        b.linear2 = ops.MakeLinear("out_proj", l.in, l.in, l.bias);
      }
      built_.push_back(b);
    }
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    uint64_t n = s_.batch;
    for (const uint64_t d : m_.input_shape) n *= d;
    const bool ids = !m_.layer_list.empty() && m_.layer_list.front().type == "embedding";
    const uint64_t out = OutputElements();
    return {ops.Input("input", n, ids ? DType::kI64 : DType::kF32),
            ops.Input("target", m_.loss == "cross_entropy" ? s_.batch : out,
                      m_.loss == "cross_entropy" ? DType::kI64 : DType::kF32)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    // Shape tracking: rows (batch x tokens) and features, or [C, H, W] for images.
    uint64_t rows = s_.batch, features = 1, c = 0, hgt = 0, wdt = 0;
    if (m_.input_shape.size() == 3) {
      c = m_.input_shape[0];
      hgt = m_.input_shape[1];
      wdt = m_.input_shape[2];
    } else if (m_.input_shape.size() == 2) {
      rows *= m_.input_shape[0];
      features = m_.input_shape[1];
    } else if (!m_.input_shape.empty()) {
      features = m_.input_shape[0];
    }
    TensorId x = in[0];
    sim.Ref(x);
    std::vector<TensorId> outputs;  // each layer's output, for residual references
    for (size_t i = 0; i < m_.layer_list.size(); ++i) {
      const LayerSpec& l = m_.layer_list[i];
      const Built& b = built_[i];
      Scope s(sim, l.name.empty() ? std::to_string(i) : l.name);
      TensorId y = kNoTensor;
      if (l.type == "linear") {
        y = ops.Linear(x, b.linear, rows);
        features = l.out;
      } else if (l.type == "conv2d") {
        hgt = (hgt + 2 * l.padding - l.kernel) / l.stride + 1;
        wdt = (wdt + 2 * l.padding - l.kernel) / l.stride + 1;
        c = l.out;
        y = ops.Conv2d(x, b.w, s_.batch * c * hgt * wdt);
      } else if (l.type == "batchnorm2d") {
        y = ops.BatchNorm2d(x, b.w, b.b, l.in);
      } else if (l.type == "layernorm") {
        y = ops.LayerNorm(x, b.w, b.b, rows, features);
      } else if (l.type == "rmsnorm") {
        y = ops.RmsNorm(x, b.w, rows, features);
      } else if (l.type == "relu") {
        y = ops.Relu(x, false);
      } else if (l.type == "gelu") {
        y = ops.Gelu(x);
      } else if (l.type == "silu") {
        y = ops.Silu(x);
      } else if (l.type == "tanh") {
        y = ops.Tanh(x);
      } else if (l.type == "sigmoid") {
        y = ops.Sigmoid(x);
      } else if (l.type == "dropout") {
        y = ops.Dropout(x, l.p);
      } else if (l.type == "embedding") {
        y = ops.Embedding(x, b.w, rows, l.out);
        features = l.out;
      } else if (l.type == "attention") {
        const uint64_t seq = m_.input_shape.size() == 2 ? m_.input_shape[0] : 1;
        const uint64_t d = features / l.heads;
        const TensorId qkv = ops.Linear(x, b.linear, rows);
        const TensorId ctx = ops.FusedAttention(qkv, qkv, qkv, s_.batch, l.heads, l.heads, seq, d);
        sim.Free(qkv);
        const TensorId merged = ctx;  // [b, s, heads, d] already: no copy
        sim.Ref(merged);
        sim.Free(ctx);
        y = ops.Linear(merged, b.linear2, rows);
        sim.Free(merged);
      } else if (l.type == "residual") {
        y = ops.Add(x, outputs[static_cast<size_t>(l.from)]);
      } else if (l.type == "maxpool2d") {
        hgt = (hgt + 2 * l.padding - l.kernel) / l.stride + 1;
        wdt = (wdt + 2 * l.padding - l.kernel) / l.stride + 1;
        y = ops.MaxPool2d(x, s_.batch * c * hgt * wdt);
      } else if (l.type == "avgpool") {
        hgt = wdt = 1;
        y = ops.AdaptiveAvgPool(x, s_.batch * c);
      } else if (l.type == "flatten") {
        features = c * hgt * wdt;
        sim.Ref(x);
        y = x;
      }
      sim.Ref(y);
      outputs.push_back(y);
      sim.Free(x);
      x = y;
    }
    for (const TensorId o : outputs) sim.Free(o);
    Scope l(sim, "loss");
    const TensorId loss =
        m_.loss == "cross_entropy" ? ops.CrossEntropy(x, rows, features) : ops.MseLoss(x, in[1]);
    return {{}, x, loss};
  }

 private:
  struct Built {
    LinearWeights linear, linear2;
    Weight w, b;
  };
  uint64_t OutputElements() const {
    // The target of an MSE loss has the output's shape: rows x the last linear's features.
    uint64_t rows = s_.batch, features = 1;
    if (m_.input_shape.size() == 2) {
      rows *= m_.input_shape[0];
      features = m_.input_shape[1];
    } else if (!m_.input_shape.empty()) {
      for (const uint64_t d : m_.input_shape) features *= d;
    }
    for (const LayerSpec& l : m_.layer_list) {
      if (l.type == "linear" || l.type == "embedding") features = l.out;
    }
    return rows * features;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  std::vector<Built> built_;
};

}  // namespace

std::unique_ptr<Model> MakeLayerList(const ModelSpec& m, const TrainingSetup& s) {
  return std::make_unique<LayerList>(m, s);
}

}  // namespace vramscope::predict::families
