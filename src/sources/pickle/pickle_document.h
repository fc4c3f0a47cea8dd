// The object graph of a parsed pickle, kept compact and shared.
//
// Snapshot pickles reference identical stacks and frame dicts thousands of times through the memo
// (BINGET). The graph keeps that sharing: a `Value` is 8 bytes and a container is referenced by
// index, so a memo reference costs 8 bytes instead of a copy of the stack. Strings are not copied:
// a string value records where its UTF-8 bytes are in the input buffer, which must outlive the
// document.
//
// Value layout (64 bits, tag in the low 3 bits):
//
//   63                                     3 2   0
//   +----------------------------------------+-----+
//   | payload                                 | tag |
//   +----------------------------------------+-----+
//   kInt        payload = signed 61-bit integer
//   kFileStr    payload = length (21 bits, high) | offset into the input (40 bits, low)
//   kContainer  payload = index into containers_
//   kFloat      payload = index into floats_
//   kBigInt     payload = index into big_ints_ (integers outside the 61-bit range)
//   kSpecial    payload = 0 None, 1 False, 2 True, 3 "missing" (a lookup that found nothing)
//   kOwnedStr   payload = index into owned_strings_ (decoded text-protocol strings, long strings)
//   kBytes      payload = index into owned_strings_ (bytes objects; kept but rarely useful)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vramscope::pickle {

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kBytes,
  kList,
  kTuple,
  kDict,
  kSet,
  kMissing,
};

const char* KindName(Kind kind);
// "a dict", "an int", "None".
std::string KindWithArticle(Kind kind);

class Value {
 public:
  constexpr Value() : bits_(kMissingBits) {}
  bool operator==(const Value& other) const { return bits_ == other.bits_; }
  uint64_t bits() const { return bits_; }

 private:
  friend class Document;
  friend class DocumentBuilder;
  static constexpr uint64_t kTagMask = 7;
  enum Tag : uint64_t {
    kTagInt = 0,
    kTagFileStr = 1,
    kTagContainer = 2,
    kTagFloat = 3,
    kTagBigInt = 4,
    kTagSpecial = 5,
    kTagOwnedStr = 6,
    kTagBytes = 7,
  };
  static constexpr uint64_t kMissingBits = (3u << 3) | kTagSpecial;
  // A memo slot whose object was handed to a ListSink and reclaimed.
  static constexpr uint64_t kConsumedBits = (4u << 3) | kTagSpecial;

  explicit constexpr Value(uint64_t bits) : bits_(bits) {}
  Tag tag() const { return static_cast<Tag>(bits_ & kTagMask); }
  uint64_t payload() const { return bits_ >> 3; }

  uint64_t bits_;
};
static_assert(sizeof(Value) == 8, "values must stay one word: millions of them are stored");

// An integer that did not fit in 61 bits. `magnitude` holds |value| when it fits in 64 bits
// (SIZE_MAX does); wider integers set `too_wide`.
struct BigInt {
  bool negative = false;
  bool too_wide = false;
  uint64_t magnitude = 0;
};

class Document {
 public:
  Value root() const { return root_; }
  Kind kind(Value v) const {
    return v.tag() == Value::kTagContainer ? containers_[v.payload()].kind : ScalarKind(v);
  }

  bool IsNone(Value v) const { return v.bits_ == kNoneBits; }
  bool IsMissing(Value v) const { return v.bits_ == Value::kMissingBits; }

  // Integer accessors: nullopt when `v` is not an integer or does not fit. The common case (an
  // inline integer) is inline: a snapshot's converter asks millions of times.
  std::optional<int64_t> AsInt64(Value v) const {
    if (v.tag() == Value::kTagInt) return static_cast<int64_t>(v.bits_) >> 3;
    return WideAsInt64(v);
  }
  std::optional<uint64_t> AsUint64(Value v) const {
    if (v.tag() == Value::kTagInt) {
      const auto i = static_cast<int64_t>(v.bits_) >> 3;
      if (i < 0) return std::nullopt;
      return static_cast<uint64_t>(i);
    }
    return WideAsUint64(v);
  }
  std::optional<double> AsDouble(Value v) const;  // floats and integers
  std::optional<bool> AsBool(Value v) const;
  // String view into the input buffer (or owned storage); nullopt when not a string.
  std::optional<std::string_view> AsString(Value v) const {
    if (v.tag() == Value::kTagFileStr) {
      const uint64_t payload = v.payload();
      const uint64_t offset = payload & ((uint64_t{1} << 40) - 1);
      const uint64_t length = payload >> 40;
      return std::string_view(reinterpret_cast<const char*>(input_.data() + offset), length);
    }
    if (v.tag() == Value::kTagOwnedStr) return owned_strings_[v.payload()];
    return std::nullopt;
  }

  // Items of a list, tuple or set; empty for anything else.
  std::span<const Value> Items(Value v) const {
    if (v.tag() != Value::kTagContainer) return {};
    const Container& c = containers_[v.payload()];
    if (c.kind == Kind::kDict) return {};
    return {items_.data() + c.begin, c.size};
  }
  // Number of key/value pairs of a dict (0 for anything else).
  size_t DictSize(Value v) const;
  // The value stored under string key `key` in dict `v`; a "missing" value when absent or when `v`
  // is not a dict. When a key occurs twice the last one wins, as in Python.
  Value Get(Value dict, std::string_view key) const;
  // Key/value pairs of a dict, in insertion order: items[2*i] keys, items[2*i+1] values.
  std::span<const Value> DictItems(Value dict) const {
    if (dict.tag() != Value::kTagContainer) return {};
    const Container& c = containers_[dict.payload()];
    if (c.kind != Kind::kDict) return {};
    return {items_.data() + c.begin, c.size};
  }

  // While a ListSink streams: whether this container still has items the reader has not gathered
  // into one range (only containers of more than 1000 items, deeper than a sink's items).
  bool HasPendingItems(Value v) const {
    return v.tag() == Value::kTagContainer && containers_[v.payload()].has_runs;
  }

  // Number of values a container holds (2 per dict pair); 0 for an unknown id.
  uint64_t ContainerItemCount(uint64_t id) const {
    return id < containers_.size() ? containers_[id].size : 0;
  }

  // A container the input was cut off inside (ParseOptions::recover_truncated): it holds what
  // was written before the cut.
  bool IsIncomplete(Value v) const;

  // Identity of a container (for caches keyed on shared objects); nullopt for scalars.
  std::optional<uint64_t> ContainerId(Value v) const {
    if (v.tag() != Value::kTagContainer) return std::nullopt;
    return v.payload();
  }

  size_t container_count() const { return containers_.size(); }
  // Bytes held by the graph itself (not the input buffer it points into).
  size_t MemoryUsage() const;

 private:
  friend class DocumentBuilder;
  // The out-of-line rest of kind(), AsInt64() and AsUint64().
  Kind ScalarKind(Value v) const;
  std::optional<int64_t> WideAsInt64(Value v) const;
  std::optional<uint64_t> WideAsUint64(Value v) const;
  static constexpr uint64_t kNoneBits = (0u << 3) | Value::kTagSpecial;

  struct Container {
    uint64_t begin = 0;  // index into items_
    uint32_t size = 0;   // number of Values (2 per dict pair)
    Kind kind = Kind::kList;
    bool has_runs = false;  // while building: more items wait in DocumentBuilder::extra_runs_
  };
  static_assert(sizeof(Container) == 16, "one container record per pickled dict/list/tuple");

  std::span<const uint8_t> input_;
  Value root_;
  std::vector<Container> containers_;
  std::vector<Value> items_;
  std::vector<double> floats_;
  std::vector<BigInt> big_ints_;
  std::vector<std::string> owned_strings_;
  std::vector<uint64_t> incomplete_;  // container ids, sorted (few: the containers open at a cut)
};

}  // namespace vramscope::pickle
