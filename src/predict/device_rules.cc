#include "predict/device_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <unordered_set>

namespace vramscope::predict {

namespace {

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

Result<DeviceRules> RulesFor(int sm, std::string_view torch_version, device::Vendor vendor) {
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
  if (vendor == device::Vendor::kAmd) {
    // PyTorch's CublasHandlePool.cpp under USE_ROCM: the hipBLAS workspace is 32 MiB, 128 MiB on
    // gfx94x/gfx95x (MI300 class); the hipBLASLt workspace is 76 MiB (HIPBLASLT_WORKSPACE_SIZE,
    // in KiB). Both come from the caching allocator, per (handle, stream).
    rules.cublas_workspace = sm >= 940 ? (128ull << 20) : (32ull << 20);
    rules.cublaslt_workspace = 76ull << 20;
    return rules;
  }
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
