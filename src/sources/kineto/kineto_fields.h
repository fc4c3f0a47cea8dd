// The fields of one Kineto trace event as the JSON reader delivers them (keys, scalars) and their
// checked conversions (integers, times in nanoseconds), for kineto_source.cc. Internal to the
// Kineto source.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vramscope::kineto::fields {

// Times are kept in nanoseconds; beyond this (about 285 years of microseconds since the epoch)
// a timestamp is corrupt.
constexpr int64_t kMaxTimeNs = 9'000'000'000'000'000'000;

// The event and args keys the source reads; EventKey and ArgsKey map a key's text to them.
enum class Key : uint8_t {
  kNone,
  kName,
  kPh,
  kCat,
  kTs,
  kDur,
  kPid,
  kTid,
  kArgs,
  kDeviceType,
  kDeviceId,
  kAddr,
  kBytes,
  kTotalAllocated,
  kTotalReserved,
  kCallStack,
  kCount,
};

// One field's value as the JSON reader delivered it (containers are only marked).
struct Scalar {
  enum class Kind : uint8_t { kAbsent, kInt, kBigUint, kFloat, kString, kBool, kNull, kContainer };
  Kind kind = Kind::kAbsent;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string text;  // a string's value, or a float's literal

  bool present() const { return kind != Kind::kAbsent; }
  bool IsString() const { return kind == Kind::kString; }
};

Key EventKey(std::string_view k);
Key ArgsKey(std::string_view k);
const char* KeyName(Key k);  // the key as the trace spells it, for messages

// A short, one-line rendering of a string for messages.
std::string Quote(std::string_view s);

// What a field held, for messages: "the integer 5", "a string (\"x\")", "null", "missing".
std::string Describe(const Scalar& v);

// An integer value; floats count when they hold an exact integer (a re-serialized trace).
std::optional<int64_t> AsInt64(const Scalar& v);

std::optional<uint64_t> AsUint64(const Scalar& v);

// A JSON number literal times 1000 (microseconds to nanoseconds), rounded half away from zero,
// exactly: a double would lose the nanoseconds of an epoch timestamp.
std::optional<int64_t> LiteralTimesThousand(std::string_view lit);

// A Kineto time (microseconds, integer or fractional) in nanoseconds.
std::optional<int64_t> TimeNs(const Scalar& v);

// Nanoseconds to whole microseconds, rounded half away from zero (monotone: keeps order).
inline int64_t RoundToUs(int64_t ns) { return ns >= 0 ? (ns + 500) / 1000 : -((-ns + 500) / 1000); }

}  // namespace vramscope::kineto::fields
