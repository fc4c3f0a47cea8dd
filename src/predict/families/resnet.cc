// ResNet in torchvision's layout (basic and bottleneck blocks), written as its forward pass.
#include <fmt/format.h>

#include "predict/families/family_common.h"

namespace vramscope::predict::families {

namespace {

class ResNet : public Model {
 public:
  ResNet(const ModelSpec& m, const TrainingSetup& s) : m_(m), s_(s) {}

  void Build(Ops& ops) override {
    conv1_ = ops.MakeWeight("conv1.weight", 64 * m_.channels * 7 * 7);
    bn1_ = MakeBn(ops, "bn1", 64);
    uint64_t in = 64;
    for (size_t stage = 0; stage < m_.blocks.size(); ++stage) {
      const uint64_t width = m_.widths[stage];
      const uint64_t out = m_.bottleneck ? width * 4 : width;
      for (uint64_t i = 0; i < m_.blocks[stage]; ++i) {
        Scope l(ops.sim(), fmt::format("layer{}.{}", stage + 1, i));
        Block b;
        b.stride = (i == 0 && stage > 0) ? 2 : 1;
        b.in = in;
        b.width = width;
        b.out = out;
        if (m_.bottleneck) {
          b.convs.push_back({ops.MakeWeight("conv1.weight", width * in), 1, 1});
          b.bns.push_back(MakeBn(ops, "bn1", width));
          b.convs.push_back({ops.MakeWeight("conv2.weight", width * width * 9), 3, b.stride});
          b.bns.push_back(MakeBn(ops, "bn2", width));
          b.convs.push_back({ops.MakeWeight("conv3.weight", out * width), 1, 1});
          b.bns.push_back(MakeBn(ops, "bn3", out));
        } else {
          b.convs.push_back({ops.MakeWeight("conv1.weight", width * in * 9), 3, b.stride});
          b.bns.push_back(MakeBn(ops, "bn1", width));
          b.convs.push_back({ops.MakeWeight("conv2.weight", width * width * 9), 3, 1});
          b.bns.push_back(MakeBn(ops, "bn2", width));
        }
        if (b.stride != 1 || in != out) {
          b.down = ops.MakeWeight("downsample.0.weight", out * in);
          b.down_bn = MakeBn(ops, "downsample.1", out);
        }
        blocks_.push_back(b);
        in = out;
      }
    }
    fc_ = ops.MakeLinear("fc", in, m_.num_labels, true);
    features_ = in;
  }

  std::vector<TensorId> Inputs(Ops& ops) override {
    const uint64_t side = Image();
    return {ops.Input("images", s_.batch * m_.channels * side * side, DType::kF32),
            ops.Input("labels", s_.batch, DType::kI64)};
  }

  StepTensors Forward(Ops& ops, const std::vector<TensorId>& in) override {
    StepSimulator& sim = ops.sim();
    const uint64_t n = s_.batch;
    uint64_t side = (Image() + 1) / 2;  // 7x7 stride 2, padding 3
    TensorId x = ops.Conv2d(in[0], conv1_, n * 64 * side * side);
    x = BnRelu(ops, x, bn1_, 64, true);
    side = (side + 1) / 2;  // max-pool 3x3 stride 2, padding 1
    const TensorId p = ops.MaxPool2d(x, n * 64 * side * side);
    sim.Free(x);
    x = p;
    for (const Block& b : blocks_) {
      const uint64_t out_side = b.stride == 2 ? (side + 1) / 2 : side;
      TensorId y = x;
      sim.Ref(y);
      const size_t convs = b.convs.size();
      uint64_t cur = side;
      for (size_t k = 0; k < convs; ++k) {
        const uint64_t channels = k + 1 == convs ? b.out : b.width;
        if (b.convs[k].stride == 2) cur = (cur + 1) / 2;
        const TensorId c = ops.Conv2d(y, b.convs[k].w, n * channels * cur * cur);
        sim.Free(y);
        y = BnRelu(ops, c, b.bns[k], channels, k + 1 < convs);
      }
      TensorId identity = x;
      if (b.down.t != kNoTensor) {
        const TensorId d = ops.Conv2d(x, b.down, n * b.out * out_side * out_side);
        identity = BnRelu(ops, d, b.down_bn, b.out, false);
      } else {
        sim.Ref(identity);
      }
      // out += identity (in place), then ReLU in place.
      sim.Node("AddBackward0", {y, identity}, {y}, {}, [](BackwardContext& c) {
        c.PassGrad(0);
        c.PassGrad(1);
      });
      sim.Free(identity);
      const TensorId r = ops.Relu(y, true);
      sim.Free(y);
      sim.Free(x);
      x = r;
      side = out_side;
    }
    const TensorId pooled = ops.AdaptiveAvgPool(x, n * features_);
    sim.Free(x);
    const TensorId logits = ops.Linear(pooled, fc_, n);
    sim.Free(pooled);
    Scope l(sim, "loss");
    const TensorId loss = ops.CrossEntropy(logits, n, m_.num_labels);
    return {{}, logits, loss};
  }

 private:
  struct Bn {
    Weight w, b;
    TensorId mean = kNoTensor, var = kNoTensor, count = kNoTensor;
  };
  struct Conv {
    Weight w;
    uint64_t kernel = 3, stride = 1;
  };
  struct Block {
    std::vector<Conv> convs;
    std::vector<Bn> bns;
    Weight down;
    Bn down_bn;
    uint64_t stride = 1, in = 0, width = 0, out = 0;
  };
  uint64_t Image() const { return s_.image_size ? s_.image_size : m_.image_size; }

  Bn MakeBn(Ops& ops, std::string_view name, uint64_t c) {
    Scope s(ops.sim(), name);
    Bn bn;
    bn.w = ops.MakeWeight("weight", c);
    bn.b = ops.MakeWeight("bias", c);
    bn.mean = ops.MakeBuffer("running_mean", c);
    bn.var = ops.MakeBuffer("running_var", c);
    bn.count = ops.sim().Buffer("num_batches_tracked", 8);
    return bn;
  }

  TensorId BnRelu(Ops& ops, TensorId x, const Bn& bn, uint64_t c, bool relu) {
    const TensorId y = ops.BatchNorm2d(x, bn.w, bn.b, c);
    ops.sim().Free(x);
    if (!relu) return y;
    const TensorId r = ops.Relu(y, true);
    ops.sim().Free(y);
    return r;
  }

  const ModelSpec& m_;
  const TrainingSetup& s_;
  Weight conv1_;
  Bn bn1_;
  std::vector<Block> blocks_;
  LinearWeights fc_;
  uint64_t features_ = 0;
};

}  // namespace

std::unique_ptr<Model> MakeResNet(const ModelSpec& m, const TrainingSetup& s) {
  return std::make_unique<ResNet>(m, s);
}

}  // namespace vramscope::predict::families
