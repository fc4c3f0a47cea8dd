#include "sources/kineto/kineto_fields.h"

#include <fmt/format.h>

namespace vramscope::kineto::fields {

Key EventKey(std::string_view k) {
  if (k == "name") return Key::kName;
  if (k == "ph") return Key::kPh;
  if (k == "cat") return Key::kCat;
  if (k == "ts") return Key::kTs;
  if (k == "dur") return Key::kDur;
  if (k == "pid") return Key::kPid;
  if (k == "tid") return Key::kTid;
  if (k == "args") return Key::kArgs;
  return Key::kNone;
}

Key ArgsKey(std::string_view k) {
  if (k == "Device Type") return Key::kDeviceType;
  if (k == "Device Id") return Key::kDeviceId;
  if (k == "Addr") return Key::kAddr;
  if (k == "Bytes") return Key::kBytes;
  if (k == "Total Allocated") return Key::kTotalAllocated;
  if (k == "Total Reserved") return Key::kTotalReserved;
  if (k == "Call stack") return Key::kCallStack;
  return Key::kNone;
}

const char* KeyName(Key k) {
  switch (k) {
    case Key::kName:
      return "name";
    case Key::kPh:
      return "ph";
    case Key::kCat:
      return "cat";
    case Key::kTs:
      return "ts";
    case Key::kDur:
      return "dur";
    case Key::kPid:
      return "pid";
    case Key::kTid:
      return "tid";
    case Key::kArgs:
      return "args";
    case Key::kDeviceType:
      return "Device Type";
    case Key::kDeviceId:
      return "Device Id";
    case Key::kAddr:
      return "Addr";
    case Key::kBytes:
      return "Bytes";
    case Key::kTotalAllocated:
      return "Total Allocated";
    case Key::kTotalReserved:
      return "Total Reserved";
    case Key::kCallStack:
      return "Call stack";
    default:
      return "?";
  }
}

// A short, one-line rendering of a string for messages.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  size_t n = 0;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    // Cut after 40 bytes, but not inside a UTF-8 sequence.
    if (++n > 40 && (u & 0xC0) != 0x80) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Describe(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kAbsent:
      return "missing";
    case Scalar::Kind::kInt:
      return fmt::format("the integer {}", v.i);
    case Scalar::Kind::kBigUint:
      return fmt::format("the integer {}", v.u);
    case Scalar::Kind::kFloat:
      return fmt::format("the number {}", v.text.substr(0, 40));
    case Scalar::Kind::kString:
      return fmt::format("a string ({})", Quote(v.text));
    case Scalar::Kind::kBool:
      return fmt::format("a boolean ({})", v.i != 0 ? "true" : "false");
    case Scalar::Kind::kNull:
      return "null";
    case Scalar::Kind::kContainer:
      return "an object or list";
  }
  return "?";
}

// An integer value; floats count when they hold an exact integer (a re-serialized trace).
std::optional<int64_t> AsInt64(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kInt:
      return v.i;
    case Scalar::Kind::kFloat:
      if (std::isfinite(v.d) && v.d >= -9e15 && v.d <= 9e15 && v.d == std::floor(v.d)) {
        return static_cast<int64_t>(v.d);
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::optional<uint64_t> AsUint64(const Scalar& v) {
  if (v.kind == Scalar::Kind::kBigUint) return v.u;
  const auto i = AsInt64(v);
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

// A JSON number literal times 1000 (microseconds to nanoseconds), rounded half away from zero,
// exactly: a double would lose the nanoseconds of an epoch timestamp.
std::optional<int64_t> LiteralTimesThousand(std::string_view lit) {
  size_t i = 0;
  bool negative = false;
  if (i < lit.size() && lit[i] == '-') {
    negative = true;
    ++i;
  }
  std::string digits;
  int64_t exp10 = 3;  // value = digits * 10^exp10 (nanoseconds)
  auto is_digit = [&](size_t k) { return k < lit.size() && lit[k] >= '0' && lit[k] <= '9'; };
  for (; is_digit(i); ++i) digits += lit[i];
  if (i < lit.size() && lit[i] == '.') {
    for (++i; is_digit(i); ++i) {
      digits += lit[i];
      --exp10;
    }
  }
  if (i < lit.size() && (lit[i] == 'e' || lit[i] == 'E')) {
    ++i;
    bool exp_negative = false;
    if (i < lit.size() && (lit[i] == '+' || lit[i] == '-')) exp_negative = lit[i++] == '-';
    if (!is_digit(i)) return std::nullopt;
    int64_t e = 0;
    for (; is_digit(i); ++i) e = std::min<int64_t>(e * 10 + (lit[i] - '0'), 1'000'000);
    exp10 += exp_negative ? -e : e;
  }
  if (i != lit.size() || digits.empty()) return std::nullopt;
  const size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return 0;
  digits.erase(0, first);
  char round_digit = '0';
  if (exp10 >= 0) {
    if (static_cast<int64_t>(digits.size()) + exp10 > 19) return std::nullopt;
    digits.append(static_cast<size_t>(exp10), '0');
  } else {
    const auto drop = static_cast<uint64_t>(-exp10);
    if (drop > digits.size()) return 0;
    round_digit = digits[digits.size() - drop];
    digits.resize(digits.size() - drop);
  }
  if (digits.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  if (round_digit >= '5') ++v;
  if (v > static_cast<uint64_t>(kMaxTimeNs)) return std::nullopt;
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// A Kineto time (microseconds, integer or fractional) in nanoseconds.
std::optional<int64_t> TimeNs(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kInt: {
      int64_t ns = 0;
      if (__builtin_mul_overflow(v.i, int64_t{1000}, &ns) || ns > kMaxTimeNs || ns < -kMaxTimeNs) {
        return std::nullopt;
      }
      return ns;
    }
    case Scalar::Kind::kFloat:
      return LiteralTimesThousand(v.text);
    default:
      return std::nullopt;
  }
}

}  // namespace vramscope::kineto::fields
