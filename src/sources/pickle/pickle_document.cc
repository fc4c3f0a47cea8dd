#include "sources/pickle/pickle_document.h"

#include <algorithm>
#include <limits>

namespace vramscope::pickle {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kSet:
      return "set";
    case Kind::kMissing:
      return "missing";
  }
  return "?";
}

std::string KindWithArticle(Kind kind) {
  const std::string name = KindName(kind);
  if (kind == Kind::kNone || kind == Kind::kMissing) return name;
  return (kind == Kind::kInt ? "an " : "a ") + name;
}

Kind Document::ScalarKind(Value v) const {
  switch (v.tag()) {
    case Value::kTagInt:
    case Value::kTagBigInt:
      return Kind::kInt;
    case Value::kTagFileStr:
    case Value::kTagOwnedStr:
      return Kind::kString;
    case Value::kTagBytes:
      return Kind::kBytes;
    case Value::kTagContainer:
      return containers_[v.payload()].kind;
    case Value::kTagFloat:
      return Kind::kFloat;
    case Value::kTagSpecial:
      switch (v.payload()) {
        case 0:
          return Kind::kNone;
        case 1:
        case 2:
          return Kind::kBool;
        default:
          return Kind::kMissing;
      }
  }
  return Kind::kMissing;
}

std::optional<int64_t> Document::WideAsInt64(Value v) const {
  if (v.tag() == Value::kTagInt) return static_cast<int64_t>(v.bits_) >> 3;
  if (v.tag() == Value::kTagBigInt) {
    const BigInt& big = big_ints_[v.payload()];
    if (big.too_wide) return std::nullopt;
    if (big.negative) {
      if (big.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
        return std::nullopt;
      }
      return static_cast<int64_t>(0 - big.magnitude);
    }
    if (big.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return std::nullopt;
    }
    return static_cast<int64_t>(big.magnitude);
  }
  if (v.tag() == Value::kTagSpecial && (v.payload() == 1 || v.payload() == 2)) {
    return v.payload() == 2 ? 1 : 0;  // bool is an int in Python
  }
  return std::nullopt;
}

std::optional<uint64_t> Document::WideAsUint64(Value v) const {
  if (v.tag() == Value::kTagBigInt) {
    const BigInt& big = big_ints_[v.payload()];
    if (big.too_wide || big.negative) return std::nullopt;
    return big.magnitude;
  }
  const std::optional<int64_t> i = WideAsInt64(v);
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> Document::AsDouble(Value v) const {
  if (v.tag() == Value::kTagFloat) return floats_[v.payload()];
  if (const auto i = AsInt64(v)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Document::AsBool(Value v) const {
  if (v.tag() == Value::kTagSpecial && (v.payload() == 1 || v.payload() == 2)) {
    return v.payload() == 2;
  }
  if (v.tag() == Value::kTagInt) return (static_cast<int64_t>(v.bits_) >> 3) != 0;
  return std::nullopt;
}

size_t Document::DictSize(Value v) const { return DictItems(v).size() / 2; }

Value Document::Get(Value dict, std::string_view key) const {
  const std::span<const Value> items = DictItems(dict);
  // Scan from the end: a repeated key keeps its last value, as in Python.
  for (size_t i = items.size(); i >= 2; i -= 2) {
    const std::optional<std::string_view> k = AsString(items[i - 2]);
    if (k && *k == key) return items[i - 1];
  }
  return Value();
}

bool Document::IsIncomplete(Value v) const {
  return v.tag() == Value::kTagContainer &&
         std::binary_search(incomplete_.begin(), incomplete_.end(), v.payload());
}

size_t Document::MemoryUsage() const {
  size_t bytes = containers_.capacity() * sizeof(Container) + items_.capacity() * sizeof(Value) +
                 floats_.capacity() * sizeof(double) + big_ints_.capacity() * sizeof(BigInt);
  for (const std::string& s : owned_strings_) bytes += s.capacity() + sizeof(std::string);
  return bytes;
}

}  // namespace vramscope::pickle
