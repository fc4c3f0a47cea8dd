// A column of an event table whose values repeat: the device, the CUDA stream.
//
// A trace has a handful of devices and streams but millions of events; a plain column spends 4
// or 8 bytes an event on them. This one keeps each event's value as a 2-byte index into the
// distinct values, in order of first appearance. Reading is a plain vector read and a table
// lookup. Should more than 65,536 distinct values appear (no real trace has them; a hostile file
// may), the column keeps every value in full from then on, so no input is refused for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace vramscope::model {

template <typename T>
class InternedColumn {
 public:
  T operator[](size_t i) const { return wide_.empty() ? values_[index_[i]] : wide_[i]; }
  size_t size() const { return wide_.empty() ? index_.size() : wide_.size(); }
  bool empty() const { return size() == 0; }
  T back() const { return (*this)[size() - 1]; }
  // The distinct values, in order of first appearance (all of them while not wide).
  const std::vector<T>& distinct() const { return values_; }
  bool wide() const { return !wide_.empty(); }

  // The same values in the same order, however stored.
  friend bool operator==(const InternedColumn& a, const InternedColumn& b) {
    return SameValues(a, b);
  }
  friend bool operator==(const InternedColumn& a, const std::vector<T>& b) {
    return SameValues(a, b);
  }

  void reserve(size_t n) {
    if (wide_.empty()) {
      index_.reserve(n);
    } else {
      wide_.reserve(n);
    }
  }

  void push_back(T value) {
    if (!wide_.empty()) {
      wide_.push_back(value);
      return;
    }
    if (!index_.empty() && values_[index_.back()] == value) {  // runs: most events repeat
      index_.push_back(index_.back());
      return;
    }
    auto [it, added] = lookup_.try_emplace(value, values_.size());
    if (added) {
      if (values_.size() == kMaxDistinct) {
        Widen();
        wide_.push_back(value);
        return;
      }
      values_.push_back(value);
    }
    index_.push_back(static_cast<uint16_t>(it->second));
  }

  // Reorders the column: the new i-th value is the old order[i]-th.
  void Permute(const std::vector<uint32_t>& order) {
    if (wide_.empty()) {
      std::vector<uint16_t> out(order.size());
      for (size_t i = 0; i < order.size(); ++i) out[i] = index_[order[i]];
      index_ = std::move(out);
    } else {
      std::vector<T> out(order.size());
      for (size_t i = 0; i < order.size(); ++i) out[i] = wide_[order[i]];
      wide_ = std::move(out);
    }
  }

 private:
  static constexpr size_t kMaxDistinct = size_t{1} << 16;

  // Element-wise equality with any sized, indexable column of T.
  template <typename Other>
  static bool SameValues(const InternedColumn& a, const Other& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }

  void Widen() {
    wide_.reserve(index_.capacity() + 1);
    for (const uint16_t k : index_) wide_.push_back(values_[k]);
    index_ = {};
    lookup_ = {};
  }

  std::vector<uint16_t> index_;
  std::vector<T> values_;
  std::unordered_map<T, size_t> lookup_;
  std::vector<T> wide_;
};

}  // namespace vramscope::model
