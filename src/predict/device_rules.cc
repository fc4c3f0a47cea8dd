#include "predict/device_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <unordered_set>

namespace vramscope::predict {

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

// "2.11" -> (2, 11); (0, 0) when it does not parse.
std::pair<int, int> ParseVersion(std::string_view v) {
  int major = 0, minor = 0;
  const char* p = v.data();
  const char* end = v.data() + v.size();
  auto r = std::from_chars(p, end, major);
  if (r.ec != std::errc() || r.ptr == end || *r.ptr != '.') return {0, 0};
  r = std::from_chars(r.ptr + 1, end, minor);
  if (r.ec != std::errc()) return {0, 0};
  return {major, minor};
}

}  // namespace

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

Result<DeviceRules> RulesFor(int sm, std::string_view torch_version) {
  const auto [major, minor] = ParseVersion(torch_version);
  if (major != 2) {
    return UsageError(fmt::format(
        "--torch {}: give a PyTorch 2.x version such as 2.11 (the workspace rules are known for "
        "2.0 to 2.11)",
        torch_version));
  }
  DeviceRules rules;
  rules.torch_version = std::string(torch_version);
  rules.sm = sm;
  // cuBLAS workspace (allocator-policy.md): 4 MiB up to 2.0; ":4096:2:16:8" = 8,519,680 B from
  // 2.1; 32 MiB on sm_90 from 2.3.
  if (minor == 0) {
    rules.cublas_workspace = 4ull << 20;
  } else if (sm >= 90 && minor >= 3) {
    rules.cublas_workspace = 32ull << 20;
  } else {
    rules.cublas_workspace = 8519680;
  }
  // The cached cuBLASLt workspace (1 MiB) appears in the 2.11 goldens; older versions took it
  // per call, which a step's peak does not see.
  rules.cublaslt_workspace = minor >= 5 ? (1ull << 20) : 0;
  return rules;
}

void AddWorkspaces(TensorStream& stream, const DeviceRules& rules) {
  // Ids for the workspaces: the smallest ones the producer did not use (its ids may be any
  // 64-bit values).
  std::unordered_set<uint64_t> used;
  for (const StreamEvent& e : stream.events) {
    if (e.kind == StreamEvent::Kind::kAlloc) used.insert(e.id);
  }
  uint64_t next_id = 0;
  auto fresh_id = [&] {
    while (used.count(next_id) > 0) ++next_id;
    used.insert(next_id);
    return next_id;
  };
  const model::StringId cublas_main = stream.strings.Intern("cuBLAS workspace (main thread)");
  const model::StringId cublas_backward =
      stream.strings.Intern("cuBLAS workspace (autograd thread)");
  const model::StringId cublaslt = stream.strings.Intern("cuBLASLt workspace (main thread)");
  const model::StringId cudnn = stream.strings.Intern("cuDNN workspace");
  const model::StringId addmm = stream.strings.Intern("aten::addmm");
  bool have_cublas[2] = {false, false};
  bool have_lt = false;
  std::vector<StreamEvent> out;
  out.reserve(stream.events.size() + 8);
  auto alloc = [&](uint64_t bytes, model::StringId name, model::StringId op) {
    StreamEvent a;
    a.kind = StreamEvent::Kind::kAlloc;
    a.id = fresh_id();
    a.bytes = bytes;
    a.category = model::Category::kWorkspace;
    a.name = name;
    a.op = op;
    a.derived = true;
    out.push_back(a);
    return a.id;
  };
  for (const StreamEvent& e : stream.events) {
    out.push_back(e);
    if (e.kind == StreamEvent::Kind::kMatmul) {
      const int t = e.thread == Thread::kMain ? 0 : 1;
      if (!have_cublas[t] && rules.cublas_workspace > 0) {
        have_cublas[t] = true;
        alloc(rules.cublas_workspace, t == 0 ? cublas_main : cublas_backward, e.op);
      }
      if (t == 0 && !have_lt && e.op == addmm && rules.cublaslt_workspace > 0) {
        have_lt = true;
        alloc(rules.cublaslt_workspace, cublaslt, e.op);
      }
    } else if (e.kind == StreamEvent::Kind::kConv && e.bytes > 0) {
      const uint64_t id = alloc(e.bytes, cudnn, e.op);
      StreamEvent f;
      f.kind = StreamEvent::Kind::kFree;
      f.id = id;
      f.derived = true;
      out.push_back(f);
    }
  }
  stream.events = std::move(out);
}

}  // namespace vramscope::predict
