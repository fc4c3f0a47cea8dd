#include "device/gpu_catalog.h"

#include <fmt/format.h>

#include <cctype>

namespace vramscope::device {

namespace {

constexpr uint64_t GiBHundredths(uint64_t hundredths) {
  // "79.11 GiB" as PyTorch's OOM message prints it: the nearest 0.01 GiB.
  return hundredths * (uint64_t{1} << 30) / 100;
}

std::string NormalizeKey(std::string_view key) {
  std::string out;
  for (const char c : key) {
    out.push_back(c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

}  // namespace

const char* VendorName(Vendor vendor) { return vendor == Vendor::kAmd ? "amd" : "nvidia"; }

const std::vector<GpuSpec>& KnownGpus() {
  static const std::vector<GpuSpec> gpus = {
      {"h200", "NVIDIA H200", 150109880320, 90,
       "measured: torch.cuda.get_device_properties(0).total_memory on the goldens' H200"},
      {"h100-80gb", "NVIDIA H100 80GB HBM3", GiBHundredths(7911), 90,
       "79.11 GiB, the total capacity PyTorch's OOM message reports"},
      {"h100-94gb", "NVIDIA H100 NVL", GiBHundredths(9326), 90,
       "93.26 GiB, the total capacity PyTorch's OOM message reports"},
      {"a100-80gb", "NVIDIA A100-SXM4-80GB", GiBHundredths(7915), 80,
       "79.15 GiB, the total capacity PyTorch's OOM message reports"},
      {"a100-40gb", "NVIDIA A100-SXM4-40GB", GiBHundredths(3939), 80,
       "39.39 GiB, the total capacity PyTorch's OOM message reports"},
      {"l40s", "NVIDIA L40S", GiBHundredths(4438), 89,
       "44.38 GiB, the total capacity PyTorch's OOM message reports"},
      {"a10g", "NVIDIA A10G", GiBHundredths(2209), 86,
       "22.09 GiB, the total capacity PyTorch's OOM message reports"},
      {"l4", "NVIDIA L4", GiBHundredths(2205), 89,
       "22.05 GiB, the total capacity PyTorch's OOM message reports"},
      {"rtx4090", "NVIDIA GeForce RTX 4090", GiBHundredths(2365), 89,
       "23.65 GiB, the total capacity PyTorch's OOM message reports"},
      {"rtx3090", "NVIDIA GeForce RTX 3090", GiBHundredths(2369), 86,
       "23.69 GiB, the total capacity PyTorch's OOM message reports"},
      {"v100-32gb", "Tesla V100-SXM2-32GB", GiBHundredths(3175), 70,
       "31.75 GiB, the total capacity PyTorch's OOM message reports"},
      {"t4", "Tesla T4", GiBHundredths(1475), 75,
       "14.75 GiB, the total capacity PyTorch's OOM message reports"},
      {"mi300x", "AMD Instinct MI300X", GiBHundredths(19198), 942,
       "191.98 GiB, the total capacity ROCm PyTorch's OOM message reports on MI300X (a VF "
       "reports 205,571,227,648 B: ../shared/fixtures/real's MI300X trace)",
       Vendor::kAmd},
      {"mi250x", "AMD Instinct MI250X (one GCD)", GiBHundredths(6398), 910,
       "63.98 GiB, the total capacity HIP out-of-memory messages report for 64 GB AMD parts "
       "(which part printed it is assumed)",
       Vendor::kAmd},
  };
  return gpus;
}

Result<GpuSpec> FindGpu(std::string_view key) {
  const std::string wanted = NormalizeKey(key);
  std::vector<std::string> keys;
  for (const GpuSpec& g : KnownGpus()) {
    if (g.key == wanted) return g;
    keys.push_back(g.key);
  }
  return UsageError(fmt::format(
      "--gpu {}: not a GPU vramscope knows; use one of {} or give a capacity such as 80GiB", key,
      fmt::join(keys, ", ")));
}

const GpuSpec* FindGpuByName(std::string_view name) {
  std::string wanted;
  for (const char c : name) {
    wanted.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  if (wanted.empty()) return nullptr;
  for (const GpuSpec& g : KnownGpus()) {
    std::string known;
    for (const char c : g.name) {
      known.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    if (wanted.find(known) != std::string::npos) return &g;
  }
  return nullptr;
}

std::vector<GpuSpec> GpusWithCapacity(uint64_t lo, uint64_t hi) {
  std::vector<GpuSpec> out;
  for (const GpuSpec& g : KnownGpus()) {
    if (g.total_memory >= lo && g.total_memory <= hi) out.push_back(g);
  }
  return out;
}

}  // namespace vramscope::device
