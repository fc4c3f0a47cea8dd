// Test support: builds snapshot-shaped pickles in C++ without Python, so unit tests can cover what
// no real file shows (expandable segments, OOM entries, 1.13 bare lists). Objects are shared
// pointers; an object written twice is written once and referenced through the memo afterwards,
// exactly as Python's pickler does for the shared stacks of real snapshots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace vramscope::testing {

struct Obj;
using P = std::shared_ptr<const Obj>;

struct Obj {
  enum class Type { kNone, kBool, kInt, kFloat, kStr, kList, kTuple, kDict } type = Type::kNone;
  int64_t i = 0;
  uint64_t u = 0;
  bool unsigned_big = false;
  double f = 0;
  std::string s;
  std::vector<P> items;                          // list / tuple
  std::vector<std::pair<std::string, P>> pairs;  // dict (string keys)
};

inline std::shared_ptr<Obj> Make(Obj::Type type) {
  auto o = std::make_shared<Obj>();
  o->type = type;
  return o;
}
inline P None() { return Make(Obj::Type::kNone); }
inline P Bool(bool b) {
  auto o = Make(Obj::Type::kBool);
  o->i = b;
  return o;
}
inline P Int(int64_t v) {
  auto o = Make(Obj::Type::kInt);
  o->i = v;
  return o;
}
inline P UInt(uint64_t v) {
  auto o = Make(Obj::Type::kInt);
  o->u = v;
  o->unsigned_big = true;
  return o;
}
inline P Float(double v) {
  auto o = Make(Obj::Type::kFloat);
  o->f = v;
  return o;
}
inline P Str(std::string v) {
  auto o = Make(Obj::Type::kStr);
  o->s = std::move(v);
  return o;
}
inline P List(std::vector<P> items) {
  auto o = Make(Obj::Type::kList);
  o->items = std::move(items);
  return o;
}
inline P Tuple(std::vector<P> items) {
  auto o = Make(Obj::Type::kTuple);
  o->items = std::move(items);
  return o;
}
inline P Dict(std::vector<std::pair<std::string, P>> pairs) {
  auto o = Make(Obj::Type::kDict);
  o->pairs = std::move(pairs);
  return o;
}
// A frame dict as snapshots write it.
inline P Frame(std::string filename, int64_t line, std::string name) {
  return Dict({{"filename", Str(std::move(filename))},
               {"line", Int(line)},
               {"name", Str(std::move(name))}});
}

// Serialises `root` as a protocol-4 pickle (protocol 2 when `protocol` is 2: BINPUT instead of
// MEMOIZE), memoizing containers and strings.
class PickleWriter {
 public:
  explicit PickleWriter(int protocol = 4) : protocol_(protocol) {}

  std::string Dump(const P& root) {
    out_.clear();
    memo_.clear();
    out_.push_back('\x80');
    out_.push_back(static_cast<char>(protocol_));
    Write(root);
    out_.push_back('.');
    return out_;
  }

 private:
  void Le(uint64_t v, int n) {
    for (int k = 0; k < n; ++k) out_.push_back(static_cast<char>((v >> (8 * k)) & 0xFF));
  }
  bool Recall(const Obj* o) {
    const auto it = memo_.find(o);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      out_.push_back('h');
      Le(it->second, 1);
    } else {
      out_.push_back('j');
      Le(it->second, 4);
    }
    return true;
  }
  void Memoize(const Obj* o) {
    const uint64_t index = memo_.size();
    memo_[o] = index;
    if (protocol_ >= 4) {
      out_.push_back('\x94');
    } else if (index < 256) {
      out_.push_back('q');
      Le(index, 1);
    } else {
      out_.push_back('r');
      Le(index, 4);
    }
  }
  void WriteString(const std::string& s) {
    if (s.size() < 256 && protocol_ >= 4) {
      out_.push_back('\x8c');
      Le(s.size(), 1);
    } else {
      out_.push_back('X');
      Le(s.size(), 4);
    }
    out_ += s;
  }
  void WriteInt(const Obj& o) {
    if (!o.unsigned_big && o.i >= 0 && o.i < 256) {
      out_.push_back('K');
      Le(static_cast<uint64_t>(o.i), 1);
    } else if (!o.unsigned_big && o.i >= INT32_MIN && o.i <= INT32_MAX) {
      out_.push_back('J');
      Le(static_cast<uint32_t>(static_cast<int32_t>(o.i)), 4);
    } else {
      // LONG1, two's complement little-endian, minimal length with a sign byte.
      std::string bytes;
      if (o.unsigned_big) {
        uint64_t v = o.u;
        while (v != 0) {
          bytes.push_back(static_cast<char>(v & 0xFF));
          v >>= 8;
        }
        if (bytes.empty() || (static_cast<uint8_t>(bytes.back()) & 0x80)) bytes.push_back('\0');
      } else {
        int64_t v = o.i;
        for (;;) {
          bytes.push_back(static_cast<char>(v & 0xFF));
          const bool sign = (v & 0x80) != 0;
          v >>= 8;
          if ((v == 0 && !sign) || (v == -1 && sign)) break;
        }
      }
      out_.push_back('\x8a');
      Le(bytes.size(), 1);
      out_ += bytes;
    }
  }
  void Write(const P& p) {
    const Obj& o = *p;
    switch (o.type) {
      case Obj::Type::kNone:
        out_.push_back('N');
        return;
      case Obj::Type::kBool:
        out_.push_back(o.i ? '\x88' : '\x89');
        return;
      case Obj::Type::kInt:
        WriteInt(o);
        return;
      case Obj::Type::kFloat: {
        out_.push_back('G');
        uint64_t bits;
        std::memcpy(&bits, &o.f, 8);
        for (int k = 7; k >= 0; --k) out_.push_back(static_cast<char>((bits >> (8 * k)) & 0xFF));
        return;
      }
      case Obj::Type::kStr:
        if (Recall(&o)) return;
        WriteString(o.s);
        Memoize(&o);
        return;
      case Obj::Type::kTuple:
        if (Recall(&o)) return;
        out_.push_back('(');
        for (const P& item : o.items) Write(item);
        out_.push_back('t');
        Memoize(&o);
        return;
      case Obj::Type::kList:
        if (Recall(&o)) return;
        out_.push_back(']');
        Memoize(&o);
        // Batches of at most 1000, like CPython.
        for (size_t i = 0; i < o.items.size(); i += 1000) {
          out_.push_back('(');
          for (size_t k = i; k < std::min(o.items.size(), i + 1000); ++k) Write(o.items[k]);
          out_.push_back('e');
        }
        return;
      case Obj::Type::kDict:
        if (Recall(&o)) return;
        out_.push_back('}');
        Memoize(&o);
        if (!o.pairs.empty()) {
          out_.push_back('(');
          for (const auto& [k, v] : o.pairs) {
            const auto key = KeyFor(k);
            Write(key);
            Write(v);
          }
          out_.push_back('u');
        }
        return;
    }
  }
  // Dict keys are interned in CPython, so the pickle memoizes them; reuse one object per key.
  P KeyFor(const std::string& k) {
    auto it = keys_.find(k);
    if (it == keys_.end()) it = keys_.emplace(k, Str(k)).first;
    return it->second;
  }

  int protocol_;
  std::string out_;
  std::map<const Obj*, uint64_t> memo_;
  std::map<std::string, P> keys_;
};

}  // namespace vramscope::testing
