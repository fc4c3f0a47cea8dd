#include "allocator/allocator_settings.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>

namespace vramscope::allocator {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseUint(std::string_view s, uint64_t* out) {
  s = Trim(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool ParseDouble(std::string_view s, double* out) {
  s = Trim(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

Status Bad(std::string_view key, std::string_view value, std::string_view why) {
  return UsageError(fmt::format("allocator setting '{}:{}': {}", key, value, why));
}

bool IsPowerOfTwo(uint64_t v) { return v != 0 && std::has_single_bit(v); }

// "[256:1,512:2,>:8]" or a single number. The bucket of a MiB size is log2(size) (0 = 1 MiB),
// clamped to the 16 buckets. The first listed size also sets every bucket below it, later sizes set
// only their own bucket, and ">" sets every bucket after the previous listed one (torch 2.9+).
// Buckets not set stay 0 (no power-of-two rounding).
Status ParseDivisions(std::string_view value, std::array<uint32_t, kRoundupBuckets>* out) {
  constexpr std::string_view kKey = "roundup_power2_divisions";
  const std::string_view v = Trim(value);
  auto check_division = [&](uint64_t d) -> Status {
    if (d != 0 && !IsPowerOfTwo(d)) {
      return Bad(kKey, value, fmt::format("{} divisions: must be 0 or a power of 2", d));
    }
    if (d > 0x80000000ULL) return Bad(kKey, value, "too many divisions");
    return Status::Ok();
  };
  if (v.empty() || v.front() != '[') {
    uint64_t d = 0;
    if (!ParseUint(v, &d)) {
      return Bad(kKey, value, "expected a power of 2 or a list like [256:1,512:2,>:8]");
    }
    if (!IsPowerOfTwo(d)) {
      return Bad(kKey, value, "a single number of divisions must be a power of 2 (1, 2, 4, ...)");
    }
    RETURN_IF_ERROR(check_division(d));
    out->fill(static_cast<uint32_t>(d));
    return Status::Ok();
  }
  if (v.back() != ']') return Bad(kKey, value, "the list has no closing ']'");
  std::string_view body = v.substr(1, v.size() - 2);
  if (Trim(body).empty()) return Bad(kKey, value, "the list is empty");
  size_t last_index = 0;
  bool first = true;
  while (!body.empty()) {
    const size_t comma = body.find(',');
    const std::string_view item = Trim(body.substr(0, comma));
    body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return Bad(kKey, value, fmt::format("'{}': expected SIZE_MB:DIVISIONS or >:DIVISIONS", item));
    }
    const std::string_view size_text = Trim(item.substr(0, colon));
    uint64_t d = 0;
    if (!ParseUint(item.substr(colon + 1), &d)) {
      return Bad(kKey, value, fmt::format("'{}': the divisions are not a number", item));
    }
    RETURN_IF_ERROR(check_division(d));
    if (size_text == ">") {
      // From torch 2.9 on, ">" starts after the last listed bucket (2.8 and older overwrote it).
      std::fill(out->begin() + static_cast<ptrdiff_t>(last_index + 1), out->end(),
                static_cast<uint32_t>(d));
    } else {
      uint64_t mb = 0;
      if (!ParseUint(size_text, &mb) || !IsPowerOfTwo(mb)) {
        return Bad(kKey, value,
                   fmt::format("'{}': the size must be a power of 2 in MiB (256, 512, ...)", item));
      }
      const size_t index = std::min<size_t>(std::bit_width(mb) - 1, kRoundupBuckets - 1);
      if (first) std::fill(out->begin(), out->begin() + static_cast<ptrdiff_t>(index), d);
      (*out)[index] = static_cast<uint32_t>(d);
      last_index = index;
      first = false;  // only a listed size ends the first-entry fill; ">" does not
    }
  }
  return Status::Ok();
}

Status ParseBool(std::string_view key, std::string_view value, bool* out) {
  const std::string_view v = Trim(value);
  // torch compares with "True" and "False" exactly (case-sensitive, no other spellings).
  if (v == "True") {
    *out = true;
  } else if (v == "False") {
    *out = false;
  } else {
    return Bad(key, value, "expected True or False (exactly, capitalised)");
  }
  return Status::Ok();
}

Status ParseMaxSplit(std::string_view key, std::string_view value, AllocatorSettings* s) {
  uint64_t mb = 0;
  if (!ParseUint(value, &mb)) return Bad(key, value, "expected a whole number of MiB");
  if (mb < kLargeBuffer / kMiB) {
    return Bad(key, value,
               fmt::format("must be at least {} (MiB; torch 2.8 and older wanted more than 20); "
                           "leave it out for no limit",
                           kLargeBuffer / kMiB));
  }
  s->max_split_size = mb >= kUnlimited / kMiB ? kUnlimited : mb * kMiB;
  return Status::Ok();
}

Status ParseNonSplitRounding(std::string_view key, std::string_view value, AllocatorSettings* s) {
  uint64_t mb = 0;
  if (!ParseUint(value, &mb)) return Bad(key, value, "expected a whole number of MiB");
  if (mb < kLargeBuffer / kMiB) {
    return Bad(key, value, fmt::format("must be at least {} (MiB)", kLargeBuffer / kMiB));
  }
  if (mb >= kUnlimited / kMiB) return Bad(key, value, "too large");
  s->max_non_split_rounding = mb * kMiB;
  return Status::Ok();
}

Status ParseGcThreshold(std::string_view key, std::string_view value, AllocatorSettings* s) {
  double t = 0;
  if (!ParseDouble(value, &t)) return Bad(key, value, "expected a number between 0 and 1");
  if (!(t > 0 && t < 1)) return Bad(key, value, "must be more than 0.0 and less than 1.0");
  s->garbage_collection_threshold = t;
  return Status::Ok();
}

std::string DivisionsText(const std::array<uint32_t, kRoundupBuckets>& d) {
  if (std::all_of(d.begin(), d.end(), [&](uint32_t x) { return x == d[0]; })) {
    return std::to_string(d[0]);
  }
  std::string out = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) out += ",";
    out += fmt::format("{}:{}", uint64_t{1} << i, d[i]);
  }
  return out + "]";
}

}  // namespace

uint64_t AllocatorSettings::AllowedMaximum() const {
  uint64_t allowed = capacity;
  const uint64_t total = total_memory > 0 ? total_memory : (capacity != kUnlimited ? capacity : 0);
  if (memory_fraction > 0 && total > 0) {
    // Truncated, as torch computes it.
    const double by_fraction = memory_fraction * static_cast<double>(total);
    allowed = std::min<uint64_t>(allowed, static_cast<uint64_t>(by_fraction));
  }
  return allowed;
}

std::string AllocatorSettings::ToAllocConf() const {
  std::vector<std::string> parts;
  if (max_split_size != kUnlimited) {
    parts.push_back(fmt::format("max_split_size_mb:{}", max_split_size / kMiB));
  }
  if (max_non_split_rounding != kLargeBuffer) {
    parts.push_back(fmt::format("max_non_split_rounding_mb:{}", max_non_split_rounding / kMiB));
  }
  if (std::any_of(roundup_power2_divisions.begin(), roundup_power2_divisions.end(),
                  [](uint32_t d) { return d > 1; })) {
    parts.push_back("roundup_power2_divisions:" + DivisionsText(roundup_power2_divisions));
  }
  if (garbage_collection_threshold > 0) {
    parts.push_back(fmt::format("garbage_collection_threshold:{}", garbage_collection_threshold));
  }
  if (expandable_segments) parts.push_back("expandable_segments:True");
  return fmt::format("{}", fmt::join(parts, ","));
}

Result<AllocatorSettings> ParseAllocConf(std::string_view conf, AllocatorSettings base) {
  AllocatorSettings s = base;
  std::string_view rest = conf;
  while (!Trim(rest).empty()) {
    // Split at the next comma outside brackets: roundup_power2_divisions lists contain commas.
    size_t end = 0;
    int depth = 0;
    for (; end < rest.size(); ++end) {
      if (rest[end] == '[') ++depth;
      if (rest[end] == ']') --depth;
      if (rest[end] == ',' && depth == 0) break;
    }
    const std::string_view item = Trim(rest.substr(0, end));
    rest = end < rest.size() ? rest.substr(end + 1) : std::string_view();
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return UsageError(fmt::format(
          "allocator setting '{}': expected key:value (e.g. expandable_segments:True)", item));
    }
    const std::string_view key = Trim(item.substr(0, colon));
    const std::string_view value = Trim(item.substr(colon + 1));
    if (key == "max_split_size_mb") {
      RETURN_IF_ERROR(ParseMaxSplit(key, value, &s));
    } else if (key == "max_non_split_rounding_mb") {
      RETURN_IF_ERROR(ParseNonSplitRounding(key, value, &s));
    } else if (key == "garbage_collection_threshold") {
      RETURN_IF_ERROR(ParseGcThreshold(key, value, &s));
    } else if (key == "roundup_power2_divisions") {
      RETURN_IF_ERROR(ParseDivisions(value, &s.roundup_power2_divisions));
    } else if (key == "expandable_segments") {
      RETURN_IF_ERROR(ParseBool(key, value, &s.expandable_segments));
    } else if (key == "backend") {
      if (value == "cudaMallocAsync") {
        return Bad(key, value,
                   "cudaMallocAsync is CUDA's own allocator, not the caching allocator this "
                   "models (and it records no snapshots)");
      }
      if (value != "native") return Bad(key, value, "expected native or cudaMallocAsync");
    } else if (key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
               key == "pinned_use_host_register" || key == "pinned_use_background_threads" ||
               key == "graph_capture_record_stream_reuse") {
      bool ignored = false;
      RETURN_IF_ERROR(ParseBool(key, value, &ignored));
    } else if (key == "pinned_num_register_threads" || key == "pinned_reserve_segment_size_mb") {
      uint64_t ignored = 0;
      if (!ParseUint(value, &ignored)) return Bad(key, value, "expected a whole number");
    } else {
      return UsageError(fmt::format(
          "unknown allocator setting '{}' in '{}': known settings are max_split_size_mb, "
          "max_non_split_rounding_mb, roundup_power2_divisions, garbage_collection_threshold, "
          "expandable_segments, backend",
          key, conf));
    }
  }
  return s;
}

Result<AllocatorSettings> SettingsFromSnapshot(
    const std::vector<std::pair<std::string, std::string>>& recorded) {
  AllocatorSettings s;
  auto bad = [](const std::string& key, const std::string& value) {
    return InvalidInput(fmt::format(
        "the snapshot's allocator_settings has {}={}, which is not a valid value", key, value));
  };
  for (const auto& [key, value] : recorded) {
    if (key == "max_split_size") {
      // Bytes; -1 (or SIZE_MAX in some versions) when unlimited.
      if (value == "-1") continue;
      uint64_t bytes = 0;
      if (!ParseUint(value, &bytes)) return bad(key, value);
      s.max_split_size = bytes == 0 ? kUnlimited : bytes;
    } else if (key == "max_non_split_rounding" || key == "max_non_split_rounding_size") {
      uint64_t bytes = 0;
      if (!ParseUint(value, &bytes)) return bad(key, value);
      s.max_non_split_rounding = bytes;
    } else if (key == "garbage_collection_threshold") {
      double t = 0;
      if (!ParseDouble(value, &t) || t < 0 || t >= 1) return bad(key, value);
      s.garbage_collection_threshold = t;
    } else if (key == "expandable_segments") {
      if (value == "True") {
        s.expandable_segments = true;
      } else if (value != "False") {
        return bad(key, value);
      }
    } else if (key.rfind("roundup_power2_divisions.", 0) == 0) {
      uint64_t mb = 0;
      uint64_t d = 0;
      if (!ParseUint(std::string_view(key).substr(25), &mb) || !IsPowerOfTwo(mb) ||
          !ParseUint(value, &d) || d > 0x80000000ULL) {
        return bad(key, value);
      }
      s.roundup_power2_divisions[std::min<size_t>(std::bit_width(mb) - 1, kRoundupBuckets - 1)] =
          static_cast<uint32_t>(d);
    }
  }
  return s;
}

}  // namespace vramscope::allocator
