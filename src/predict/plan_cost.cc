#include "predict/plan_cost.h"

#include <algorithm>
#include <array>

namespace vramscope::predict {

namespace {

constexpr double kTera = 1e12, kGiga = 1e9;

struct Row {
  std::string_view key;
  double tflops, memory_tbs, host_gbs, peer_gbs;
};
// Dense 16-bit tensor TFLOP/s, memory TB/s, PCIe GB/s one way (Gen3 x16 16, Gen4 32, Gen5 64),
// NVLink/Infinity Fabric GB/s one way (PCIe's where there is none), from the vendors' datasheets.
constexpr std::array<Row, 14> kRows = {{
    {"h200", 989, 4.8, 64, 450},
    {"h100-80gb", 989, 3.35, 64, 450},
    {"h100-94gb", 835, 3.9, 64, 300},
    {"a100-80gb", 312, 2.039, 32, 300},
    {"a100-40gb", 312, 1.555, 32, 300},
    {"l40s", 362, 0.864, 32, 32},
    {"a10g", 125, 0.6, 32, 32},
    {"l4", 121, 0.3, 32, 32},
    {"rtx4090", 165, 1.008, 32, 32},
    {"rtx3090", 71, 0.936, 32, 32},
    {"v100-32gb", 125, 0.9, 16, 150},
    {"t4", 65, 0.32, 16, 16},
    {"mi300x", 1307, 5.3, 64, 448},
    {"mi250x", 191.5, 1.6, 32, 200},
}};

}  // namespace

GpuSpeed SpeedOf(std::string_view key) {
  for (const Row& r : kRows) {
    if (r.key == key) {
      return {r.tflops * kTera, r.memory_tbs * kTera, r.host_gbs * kGiga, r.peer_gbs * kGiga,
              std::string(key) + ": the vendor's datasheet (dense 16-bit tensor FLOP/s)"};
    }
  }
  const Row& h100 = kRows[1];
  return {h100.tflops * kTera, h100.memory_tbs * kTera, h100.host_gbs * kGiga,
          h100.peer_gbs * kGiga, "an H100 SXM's figures (no GPU named)"};
}

double ComputeSeconds(const StepWork& w, const GpuSpeed& g) {
  return 6 * w.parameters * w.tokens / (g.matmul_flops * kModelFlopsUtilisation);
}

double RecomputeSeconds(const StepWork& w, const GpuSpeed& g, double fraction) {
  return 2 * w.block_parameters * w.tokens * fraction / (g.matmul_flops * kModelFlopsUtilisation);
}

double OverlappedTransferSeconds(double bytes, const StepWork& w, const GpuSpeed& g) {
  const double transfer = 2 * bytes / g.host_bytes;
  return std::max(0.0, transfer - ComputeSeconds(w, g));
}

double HostOptimizerSeconds(const StepWork& w, const GpuSpeed& g) {
  const double bytes_per_param = w.parameters > 0 ? w.parameter_bytes / w.parameters : 2;
  const double trainable = w.trainable / std::max(1, w.gpus);
  return 2 * trainable * bytes_per_param / g.host_bytes + trainable / kHostAdamParamsPerSecond;
}

double MicroBatchSeconds(const StepWork& w, const GpuSpeed& g, int micro_batches) {
  const int extra = std::max(0, micro_batches - w.micro_batches);
  return extra * 3 * w.parameter_bytes / g.memory_bytes;
}

double DequantizeSeconds(const StepWork& w, const GpuSpeed& g, int uses) {
  return w.micro_batches * uses * 2.5 * w.block_parameters / g.memory_bytes;
}

double ShardedWeightsSeconds(const StepWork& w, const GpuSpeed& g) {
  if (w.gpus < 2) return 0;
  return w.parameter_bytes * (w.gpus - 1) / w.gpus / g.peer_bytes;
}

}  // namespace vramscope::predict
