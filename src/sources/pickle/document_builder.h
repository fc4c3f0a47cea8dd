// The pickle machine behind Parse (pickle_reader.h), private to this library: the class and its
// small helpers, inline so the opcode loop calls none of them.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sources/pickle/memo_references.h"
#include "sources/pickle/pickle_document.h"
#include "sources/pickle/pickle_opcodes.h"
#include "sources/pickle/pickle_reader.h"
#include "sources/pickle/pickle_utf8.h"

namespace vramscope::pickle {

// Integers that fit 61 bits are held in the Value itself; strings of the file are a Value
// pointing at their bytes when the offset and length fit its fields.
inline constexpr uint64_t kMaxInlineInt = (int64_t{1} << 60) - 1;
inline constexpr int64_t kMinInlineInt = -(int64_t{1} << 60);
inline constexpr uint64_t kMaxFileOffset = (uint64_t{1} << 40) - 1;
inline constexpr uint64_t kMaxFileStrLength = (uint64_t{1} << 21) - 1;

// Runs the pickle machine and fills a Document. Single use. Its parts live by job:
// - pickle_reader.cc: construction, the opcode loop (Run, Step) and Parse;
// - batch_reclaim.cc: what a sink's consumed batch leaves behind (Reclaim);
// - truncated_recovery.cc: a file cut before STOP (ParseOptions::recover_truncated);
// - text_protocol.cc: protocol 0's escaped and quoted strings.
class DocumentBuilder {
 public:
  // Reserves the document's arrays and, with a sink, pre-scans the memo reads (pickle_reader.cc).
  DocumentBuilder(std::span<const uint8_t> input, const ParseOptions& options);

  // The only Status in the builder: the per-opcode helpers below return bool (false = failed,
  // error_ says why), which keeps a Status and its string off the hot path.
  Status Run(ParseInfo* info);
  Document Take() {
    std::sort(incomplete_.begin(), incomplete_.end());
    doc_.incomplete_ = std::move(incomplete_);
    return std::move(doc_);
  }

 private:
  // --- errors -------------------------------------------------------------------------------
  // Errors are rare: kept out of line so the opcode loop stays small.
  [[gnu::noinline, gnu::cold]] bool Fail(uint64_t offset, const std::string& what) const {
    error_ = InvalidInput(fmt::format("byte {}: {}", offset, what));
    return false;
  }
  [[gnu::noinline, gnu::cold]] bool Truncated(uint64_t offset, const char* op,
                                              uint64_t need) const {
    eof_ = true;
    return Fail(offset, fmt::format("{} needs {} more byte{} but the file ends at byte {} "
                                    "(truncated or not a complete pickle)",
                                    op, need, need == 1 ? "" : "s", in_.size()));
  }

  // --- input --------------------------------------------------------------------------------
  bool Have(uint64_t n) const { return n <= in_.size() - pos_; }
  // Little-endian unsigned of n <= 8 bytes; the caller has checked Have(n).
  uint64_t ReadLE(size_t n) {
    const uint64_t v = LoadLittleEndian(in_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  // Reads a text-protocol line (without its '\n').
  bool ReadLine(uint64_t op_offset, const char* op, std::string_view* line) {
    const uint8_t* start = in_.data() + pos_;
    const void* nl = std::memchr(start, '\n', in_.size() - pos_);
    if (nl == nullptr) {
      eof_ = true;
      return Fail(op_offset, fmt::format("{} argument has no terminating newline before the end "
                                         "of the file (truncated)",
                                         op));
    }
    const size_t len = static_cast<const uint8_t*>(nl) - start;
    *line = std::string_view(reinterpret_cast<const char*>(start), len);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);  // CPython accepts \r\n
    pos_ += len + 1;
    return true;
  }

  // --- values -------------------------------------------------------------------------------
  Value MakeInt(int64_t v) {
    if (v >= kMinInlineInt && v <= static_cast<int64_t>(kMaxInlineInt)) {
      return Value((static_cast<uint64_t>(v) << 3) | Value::kTagInt);
    }
    BigInt big;
    big.negative = v < 0;
    big.magnitude = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    return MakeBig(big);
  }
  Value MakeBig(const BigInt& big) {
    if (!big.too_wide) {
      if (!big.negative && big.magnitude <= kMaxInlineInt) {
        return MakeInt(static_cast<int64_t>(big.magnitude));
      }
      if (big.negative && big.magnitude <= uint64_t{1} << 60) {
        return MakeInt(static_cast<int64_t>(0 - big.magnitude));
      }
    }
    doc_.big_ints_.push_back(big);
    return Value(((doc_.big_ints_.size() - 1) << 3) | Value::kTagBigInt);
  }
  Value MakeFloat(double d) {
    doc_.floats_.push_back(d);
    return Value(((doc_.floats_.size() - 1) << 3) | Value::kTagFloat);
  }
  static Value MakeSpecial(uint64_t which) { return Value((which << 3) | Value::kTagSpecial); }
  Value MakeOwned(std::string s, Value::Tag tag) {
    doc_.owned_strings_.push_back(std::move(s));
    return Value(((doc_.owned_strings_.size() - 1) << 3) | tag);
  }
  // A UTF-8 string at [offset, offset+len) of the input.
  bool MakeFileString(uint64_t op_offset, uint64_t offset, uint64_t len, Value* out) {
    switch (CheckUtf8(in_.data() + offset, len)) {
      case Utf8::kValid:
        break;
      case Utf8::kSurrogates:
        *out = MakeOwned(ReplaceSurrogates(in_.data() + offset, len), Value::kTagOwnedStr);
        return true;
      case Utf8::kInvalid:
        return Fail(op_offset, "string is not valid UTF-8 (corrupt file?)");
    }
    if (offset <= kMaxFileOffset && len <= kMaxFileStrLength) {
      *out = Value((((len << 40) | offset) << 3) | Value::kTagFileStr);
    } else {
      *out = MakeOwned(std::string(reinterpret_cast<const char*>(in_.data() + offset), len),
                       Value::kTagOwnedStr);
    }
    return true;
  }
  // Little-endian two's complement (LONG1/LONG4).
  Value MakeLong(const uint8_t* bytes, uint64_t n) {
    if (n == 0) return MakeInt(0);
    const bool negative = (bytes[n - 1] & 0x80) != 0;
    // Significant length after dropping sign-extension bytes.
    uint64_t len = n;
    const uint8_t fill = negative ? 0xFF : 0x00;
    while (len > 1 && bytes[len - 1] == fill) --len;
    BigInt big;
    big.negative = negative;
    if (len <= 8 || (len == 9 && !negative && bytes[8] == 0)) {
      uint64_t raw = 0;
      for (uint64_t i = 0; i < std::min<uint64_t>(len, 8); ++i)
        raw |= uint64_t{bytes[i]} << (8 * i);
      if (negative) {
        // Sign-extend, then negate to get the magnitude.
        if (len < 8) raw |= ~uint64_t{0} << (8 * len);
        big.magnitude = 0 - raw;
        if (big.magnitude == 0) big.too_wide = true;  // -2^64 does not fit the magnitude
      } else {
        big.magnitude = raw;
      }
    } else if (negative && len == 9 && bytes[8] == 0xFF) {
      // Values in [-2^64, -2^63): magnitude fits in 64 bits.
      uint64_t raw = 0;
      for (int i = 0; i < 8; ++i) raw |= uint64_t{bytes[i]} << (8 * i);
      big.magnitude = 0 - raw;
      if (big.magnitude == 0) big.too_wide = true;
    } else {
      big.too_wide = true;
    }
    return MakeBig(big);
  }
  // Decimal text integer (INT / LONG); "00"/"01" are protocol-0 booleans for INT.
  bool MakeDecimal(uint64_t op_offset, const char* op, std::string_view text, Value* out) {
    if (!text.empty() && text.back() == 'L') text.remove_suffix(1);
    bool negative = false;
    std::string_view digits = text;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) {
      negative = digits.front() == '-';
      digits.remove_prefix(1);
    }
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return Fail(op_offset, fmt::format("{} argument '{}' is not an integer", op,
                                         std::string(text.substr(0, 40))));
    }
    BigInt big;
    big.negative = negative;
    for (char c : digits) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (big.magnitude > (std::numeric_limits<uint64_t>::max() - d) / 10) {
        big.too_wide = true;
        break;
      }
      big.magnitude = big.magnitude * 10 + d;
    }
    if (big.magnitude == 0) big.negative = false;
    *out = MakeBig(big);
    return true;
  }

  // --- containers ---------------------------------------------------------------------------
  bool NewContainer(uint64_t op_offset, Kind kind, const Value* items, size_t n, Value* out) {
    if (n > std::numeric_limits<uint32_t>::max()) {
      return Fail(op_offset, "container has more than 4 billion items");
    }
    Document::Container c;
    c.kind = kind;
    c.begin = doc_.items_.size();
    c.size = static_cast<uint32_t>(n);
    doc_.items_.insert(doc_.items_.end(), items, items + n);
    doc_.containers_.push_back(c);
    *out = Value(((doc_.containers_.size() - 1) << 3) | Value::kTagContainer);
    return true;
  }
  // Appends items to an existing container. Runs that are not contiguous with the container's
  // last run are recorded and gathered once at the end (Finish), so a list filled in batches
  // of 1000 (how pickle writes long lists) costs one copy, not a copy per batch.
  bool Extend(uint64_t op_offset, Value target, Kind want, const Value* items, size_t n,
              const char* op) {
    if (target.tag() != Value::kTagContainer || doc_.containers_[target.payload()].kind != want) {
      return Fail(op_offset, fmt::format("{} applies to a {} but the target is a {}", op,
                                         KindName(want), KindName(doc_.kind(target))));
    }
    if (n == 0) return true;
    const uint64_t id = target.payload();
    if (batch_.active && id < batch_.containers) ++batch_.old_writes;
    Document::Container& c = doc_.containers_[id];
    auto extra = c.has_runs ? extra_runs_.find(id) : extra_runs_.end();
    const bool contiguous =
        extra == extra_runs_.end()
            ? (c.size == 0 || c.begin + c.size == doc_.items_.size())
            : extra->second.back().first + extra->second.back().second == doc_.items_.size();
    uint64_t total = uint64_t{c.size} + n;
    if (extra != extra_runs_.end()) {
      for (const auto& run : extra->second) total += run.second;
    }
    if (total > std::numeric_limits<uint32_t>::max()) {
      return Fail(op_offset, "container has more than 4 billion items");
    }
    if (c.size == 0 && extra == extra_runs_.end()) {
      c.begin = doc_.items_.size();
      c.size = static_cast<uint32_t>(n);
    } else if (contiguous) {
      if (extra == extra_runs_.end()) {
        c.size += static_cast<uint32_t>(n);
      } else {
        extra->second.back().second += n;
      }
    } else {
      extra_runs_[id].emplace_back(doc_.items_.size(), n);
      c.has_runs = true;
    }
    doc_.items_.insert(doc_.items_.end(), items, items + n);
    return true;
  }
  void GatherRuns() {
    std::vector<uint64_t> ids;
    ids.reserve(extra_runs_.size());
    for (const auto& entry : extra_runs_) ids.push_back(entry.first);
    for (const uint64_t id : ids) Gather(id);
  }

  // --- stack and memo -----------------------------------------------------------------------
  bool PopMark(uint64_t op_offset, const char* op, size_t* mark) {
    if (marks_.empty()) {
      return Fail(op_offset, fmt::format("{} without a preceding MARK (corrupt pickle)", op));
    }
    *mark = marks_.back();
    marks_.pop_back();
    if (batch_.active && marks_.size() < batch_.depth) batch_.closed = true;
    return true;
  }

  // --- streaming to a ListSink --------------------------------------------------------------
  // A batch is the MARK ... APPENDS that adds items to a list the sink wants. Everything created
  // between the two either belongs to the batch's items (dropped once consumed) or is shared
  // (memoized stacks, frames): kept and moved down. At most one batch is open at a time.
  struct Batch {
    bool active = false;
    bool closed = false;                           // its MARK was popped
    size_t depth = 0;                              // marks_.size() with its MARK pushed
    uint64_t items = 0, containers = 0, memo = 0;  // watermarks at the MARK
    uint64_t old_writes = 0;  // items appended since to containers older than the batch
  };
  void OnMark() {
    if (sink_ == nullptr || batch_.active || stack_.empty()) return;
    const Value list = stack_.back();  // a MARK is a position: the list is the top value
    if (list.tag() != Value::kTagContainer ||
        doc_.containers_[list.payload()].kind != Kind::kList) {
      return;
    }
    if (!sink_->Wants(doc_, std::span(stack_.data(), stack_.size() - 1), list)) return;
    batch_ = Batch{true,         false, marks_.size(), doc_.items_.size(), doc_.containers_.size(),
                   memo_.size(), 0};
  }
  // Merges a container's pending runs into one range, so a sink can read it.
  void Gather(uint64_t id) {
    Document::Container& c = doc_.containers_[id];
    if (!c.has_runs) return;
    auto runs = std::move(extra_runs_[id]);
    extra_runs_.erase(id);
    if (batch_.active && id < batch_.containers) ++batch_.old_writes;
    const uint64_t begin = doc_.items_.size();
    for (uint64_t i = 0; i < c.size; ++i) {
      const Value v = doc_.items_[c.begin + i];
      doc_.items_.push_back(v);
    }
    uint64_t size = c.size;
    for (const auto& [from, n] : runs) {
      for (uint64_t i = 0; i < n; ++i) {
        const Value v = doc_.items_[from + i];
        doc_.items_.push_back(v);
      }
      size += n;
    }
    c.begin = begin;
    c.size = static_cast<uint32_t>(size);
    c.has_runs = false;
  }
  // A sink reads the items and their direct values (a trace entry and its frames list) whole.
  // Deeper containers are complete unless they have more than 1000 items (pickle's batch size);
  // Document::HasPendingItems tells a sink that meets one.
  void GatherForSink(std::span<const Value> items) {
    for (const Value item : items) {
      if (item.tag() != Value::kTagContainer) continue;
      Gather(item.payload());
      const Document::Container& c = doc_.containers_[item.payload()];
      for (uint64_t i = 0; i < c.size; ++i) {
        const Value child = doc_.items_[c.begin + i];
        if (child.tag() == Value::kTagContainer) Gather(child.payload());
      }
    }
  }
  // Hands `items` (about to be appended to `list`, context below `context_size`) to the sink.
  bool ConsumeItems(uint64_t at, size_t context_size, Value list, std::span<const Value> items) {
    GatherForSink(items);
    const Status status = sink_->Consume(doc_, std::span(stack_.data(), context_size), list, items);
    if (!status.ok()) {
      error_ = status;
      return false;
    }
    consumed_items_ += items.size();
    return true;
  }
  void Reclaim(std::span<const Value> consumed);
  void RetireConsumed(uint64_t first_memo, std::span<const Value> consumed) {
    std::unordered_set<uint64_t> ids;
    for (const Value v : consumed) {
      if (v.tag() == Value::kTagContainer) ids.insert(v.bits());
    }
    for (uint64_t i = first_memo; i < memo_.size(); ++i) {
      if (ids.count(memo_[i].bits()) != 0) memo_[i] = Value(Value::kConsumedBits);
    }
    for (auto& [index, v] : sparse_memo_) {
      if (ids.count(v.bits()) != 0) v = Value(Value::kConsumedBits);
    }
  }

  bool MemoConsumed(uint64_t op_offset, uint64_t index) const {
    return Fail(op_offset, fmt::format("memo reference {} points to a trace entry that was "
                                       "already converted and released (a snapshot never "
                                       "refers back to one)",
                                       index));
  }
  bool Need(uint64_t op_offset, const char* op, size_t n) const {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) {
      return Fail(op_offset, fmt::format("{} needs {} value{} on the stack but finds {} "
                                         "(corrupt pickle)",
                                         op, n, n == 1 ? "" : "s", stack_.size() - floor));
    }
    return true;
  }
  void MemoPut(uint64_t index, Value v) {
    // A slot no opcode reads back (MemoReferences) keeps nothing: what was put there is then
    // held only by what refers to it, and dropped with it when a sink's batch is reclaimed.
    if (unread_memo_dropped_ && !memo_reads_.Has(index)) v = Value(Value::kConsumedBits);
    // A slot older than the open batch now refers to something Reclaim would not look at.
    if (batch_.active && index < batch_.memo) ++batch_.old_writes;
    if (index < memo_.size()) {
      if (memo_[index] == Value()) ++memo_count_;
      memo_[index] = v;
    } else if (const auto it = sparse_memo_.find(index); it != sparse_memo_.end()) {
      it->second = v;
    } else if (index == memo_.size()) {
      memo_.push_back(v);
      ++memo_count_;
    } else {
      // Sparse indices never grow the dense table: an index costs its entry, not the gap.
      if (sparse_memo_.insert_or_assign(index, v).second) ++memo_count_;
    }
  }
  bool MemoGet(uint64_t op_offset, uint64_t index, Value* out) const {
    if (index < memo_.size() && !(memo_[index] == Value())) {
      if (memo_[index].bits() == Value::kConsumedBits) return MemoConsumed(op_offset, index);
      *out = memo_[index];
      return true;
    }
    const auto it = sparse_memo_.find(index);
    if (it != sparse_memo_.end()) {
      if (it->second.bits() == Value::kConsumedBits) return MemoConsumed(op_offset, index);
      *out = it->second;
      return true;
    }
    return Fail(op_offset,
                fmt::format("memo reference {} was never defined (corrupt pickle)", index));
  }

  // BINGET or LONG_BINGET at `at`, and the memo references right after it: a snapshot's frames
  // lists are runs of them (one a frame, 40 and more a trace entry in a real file), read here in
  // one loop rather than one dispatch each. Each counts as an opcode. The run ends before an
  // opcode that is not a memo reference or whose argument is cut off; that one is left to the
  // general loop, so errors and recovery at a cut are exactly the general reader's. Inlined:
  // Step is inlined twice (Run, Close), and out of line this loop cost 3% of a real file's parse.
  [[gnu::always_inline]] inline bool MemoGetRun(uint8_t op, uint64_t at) {
    // The input, the memo and the counters in locals: the Values stored on the stack could alias
    // the members, which the compiler would otherwise reload after every store.
    const uint8_t* const data = in_.data();
    const uint64_t size = in_.size();
    const Value* const memo = memo_.data();
    const uint64_t memo_size = memo_.size();
    uint64_t pos = pos_;
    uint64_t more = 0;  // opcodes of the run after the first (Run counted that one)
    bool ok = true;
    for (;;) {
      const size_t width = op == kBinGet ? 1 : 4;
      if (size - pos < width) {
        pos_ = pos;
        ok = Truncated(at, op == kBinGet ? "BINGET" : "LONG_BINGET", width);
        break;
      }
      const uint64_t index = LoadLittleEndian(data + pos, width);
      pos += width;
      Value v = index < memo_size ? memo[index] : Value();
      if (v == Value() || v.bits() == Value::kConsumedBits) {
        // A sparse slot, a consumed one or an undefined one: MemoGet says which.
        if (!MemoGet(at, index, &v)) {
          pos_ = pos;
          ok = false;
          break;
        }
      }
      stack_.push_back(v);
      if (pos >= size) break;
      op = data[pos];
      if ((op != kBinGet && op != kLongBinGet) || size - pos < (op == kBinGet ? 2u : 5u)) break;
      at = pos++;
      ++more;
    }
    pos_ = pos;
    opcodes_ += more;
    return ok;
  }

  // Inlined into Run's loop: one dispatch per opcode, no call.
  [[gnu::always_inline]] inline bool Step(uint8_t op, uint64_t at, bool* stop);
  // One closing opcode (APPEND, APPENDS, ADDITEMS, SETITEMS, TUPLE) that a cut file never wrote,
  // run through Step as if it had: what Recover uses to close the open MARKs.
  bool Close(uint8_t op, uint64_t cut_at);
  bool DecodeUnicodeEscape(uint64_t at, std::string_view line, Value* out);
  bool DecodeQuotedString(uint64_t at, std::string_view line, Value* out);

  std::span<const uint8_t> in_;
  mutable Status error_;  // why the last helper returned false
  const ParseOptions& options_;
  uint64_t pos_ = 0;
  Document doc_;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<Value> memo_;
  std::unordered_map<uint64_t, Value> sparse_memo_;
  MemoReferences memo_reads_;
  bool unread_memo_dropped_ = false;
  uint64_t memo_count_ = 0;
  std::unordered_map<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>> extra_runs_;
  int protocol_ = 0;
  ListSink* sink_ = nullptr;
  Batch batch_;
  uint64_t opcodes_ = 0;
  uint64_t consumed_items_ = 0;
  uint64_t reclaimed_batches_ = 0;
  // ParseOptions::recover_truncated.
  mutable bool eof_ = false;          // the last failure was the input ending mid-opcode
  std::vector<uint64_t> incomplete_;  // ids of the containers closed by Recover
  uint64_t dropped_records_ = 0;
  bool Recover(uint64_t cut_at, ParseInfo* info);
  bool SettlePairs(size_t from, uint64_t cut_at);
  bool SettleItems(size_t from, uint64_t cut_at);
  bool PendingAppend(uint64_t cut_at);
  bool IncompleteId(Value v) const {
    return v.tag() == Value::kTagContainer &&
           std::find(incomplete_.begin(), incomplete_.end(), v.payload()) != incomplete_.end();
  }
  void MarkIncomplete(Value v) {
    if (v.tag() == Value::kTagContainer && !IncompleteId(v)) incomplete_.push_back(v.payload());
  }
  Kind ContainerKind(Value v) const {
    return v.tag() == Value::kTagContainer ? doc_.containers_[v.payload()].kind : Kind::kMissing;
  }
};

}  // namespace vramscope::pickle
