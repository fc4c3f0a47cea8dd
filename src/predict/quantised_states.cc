#include "predict/quantised_states.h"

namespace vramscope::predict {

namespace {

bool Bitsandbytes(StateFormat f) {
  return f == StateFormat::kBnb8bit || f == StateFormat::kBnbPaged8bit;
}

}  // namespace

std::vector<QuantisedState> SharedQuantisationMaps(StateFormat format) {
  if (!Bitsandbytes(format)) return {};
  return {{".qmap1 (shared)", 256 * 4, "aten::_to_copy"},
          {".qmap2 (shared)", 256 * 4, "aten::_to_copy"}};
}

std::vector<QuantisedState> QuantisedAdamStates(StateFormat format, uint64_t n,
                                                uint64_t param_bytes) {
  const bool bnb = Bitsandbytes(format);
  const uint64_t block = format == StateFormat::kAo4bit ? 128 : 256;
  const bool quantised = n >= 4096 && (bnb || n % block == 0);
  if (!quantised) {
    // bitsandbytes keeps fp32 states for small tensors; torchao zeros_like(param).
    const uint64_t bytes = bnb ? n * 4 : param_bytes;
    return {{".exp_avg", bytes, "aten::zeros_like"}, {".exp_avg_sq", bytes, "aten::zeros_like"}};
  }
  std::vector<QuantisedState> out;
  const uint64_t blocks = (n + block - 1) / block;
  for (const char* which : {".exp_avg", ".exp_avg_sq"}) {
    const uint64_t codes = format == StateFormat::kAo4bit ? (n + 1) / 2 : n;
    const bool paged = format == StateFormat::kBnbPaged8bit && n >= 100000;  // F.get_paged
    out.push_back({std::string(which) + " (codes)", codes, "aten::zeros", paged});
    out.push_back({std::string(which) + " (scales)", blocks * 4, "aten::zeros"});
    if (format == StateFormat::kAo8bit || format == StateFormat::kAo4bit) {
      out.push_back({std::string(which) + " (qmap)",
                     format == StateFormat::kAo4bit ? uint64_t{16 * 4} : uint64_t{256 * 4},
                     "aten::tensor"});
    }
  }
  return out;
}

}  // namespace vramscope::predict
