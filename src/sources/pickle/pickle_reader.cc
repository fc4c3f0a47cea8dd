#include "sources/pickle/pickle_reader.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "common/utf8.h"
#include "sources/pickle/memo_references.h"
#include "sources/pickle/pickle_opcodes.h"

namespace vramscope::pickle {

namespace {

// Opcodes that import a callable or call one: the ways a pickle executes code.
const char* CodeExecutingOpcodeName(uint8_t op) {
  switch (op) {
    case kGlobal:
      return "GLOBAL";
    case kStackGlobal:
      return "STACK_GLOBAL";
    case kReduce:
      return "REDUCE";
    case kBuild:
      return "BUILD";
    case kInst:
      return "INST";
    case kObj:
      return "OBJ";
    case kNewObj:
      return "NEWOBJ";
    case kNewObjEx:
      return "NEWOBJ_EX";
    case kPersId:
      return "PERSID";
    case kBinPersId:
      return "BINPERSID";
    case kExt1:
      return "EXT1";
    case kExt2:
      return "EXT2";
    case kExt4:
      return "EXT4";
    default:
      return nullptr;
  }
}

constexpr uint64_t kMaxInlineInt = (int64_t{1} << 60) - 1;
constexpr int64_t kMinInlineInt = -(int64_t{1} << 60);
constexpr uint64_t kMaxFileOffset = (uint64_t{1} << 40) - 1;
constexpr uint64_t kMaxFileStrLength = (uint64_t{1} << 21) - 1;
constexpr uint64_t kProgressStep = uint64_t{8} << 20;

enum class Utf8 { kValid, kSurrogates, kInvalid };

// Strict UTF-8 (no overlongs, nothing above U+10FFFF). Encoded surrogates, which CPython writes for
// lone surrogates (file names that were not valid UTF-8), are reported apart so the caller can
// replace them: downstream writers (SQLite, JSON) need valid UTF-8.
Utf8 CheckUtf8(const uint8_t* s, size_t n) {
  bool surrogates = false;
  size_t i = 0;
  while (i < n) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t extra;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return Utf8::kInvalid;
    }
    if (i + extra >= n) return Utf8::kInvalid;
    for (size_t k = 1; k <= extra; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return Utf8::kInvalid;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000) ||
        cp > 0x10FFFF) {
      return Utf8::kInvalid;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) surrogates = true;
    i += extra + 1;
  }
  return surrogates ? Utf8::kSurrogates : Utf8::kValid;
}

bool IsValidUtf8(const uint8_t* s, size_t n) { return CheckUtf8(s, n) == Utf8::kValid; }

// Replaces each encoded surrogate (ED A0..BF xx) with U+FFFD; the rest is already valid.
std::string ReplaceSurrogates(const uint8_t* s, size_t n) {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == 0xED && i + 2 < n && (s[i + 1] & 0xE0) == 0xA0) {
      out += "\xEF\xBF\xBD";
      i += 2;
    } else {
      out.push_back(static_cast<char>(s[i]));
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AdviseHugePages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

}  // namespace

// Runs the pickle machine and fills a Document. Single use.
class DocumentBuilder {
 public:
  explicit DocumentBuilder(std::span<const uint8_t> input, const ParseOptions& options)
      : in_(input), options_(options), sink_(options.sink) {
    doc_.input_ = input;
    // Reserve address space generously: untouched pages cost no memory, and avoiding
    // reallocation keeps the peak near the final size. Capped so huge inputs stay within what
    // the kernel's overcommit heuristics allow.
    const size_t cap = size_t{1} << 27;
    doc_.items_.reserve(std::min(input.size() / 4 + 64, cap));
    doc_.containers_.reserve(std::min(input.size() / 16 + 16, cap / 2));
    memo_.reserve(std::min(input.size() / 8 + 16, cap));
    // Huge pages for the big arrays: a fifth of parse time went to 4 KiB page faults.
    AdviseHugePages(doc_.items_.data(), doc_.items_.capacity() * sizeof(Value));
    AdviseHugePages(doc_.containers_.data(),
                    doc_.containers_.capacity() * sizeof(Document::Container));
    AdviseHugePages(memo_.data(), memo_.capacity() * sizeof(Value));
    // Only a sink's batches are reclaimed, so only then is the memo worth trimming.
    if (sink_ != nullptr && options.drop_unread_memo) {
      memo_reads_ = MemoReferences::Scan(input, options.scanned);
      unread_memo_dropped_ = true;
    }
  }

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
  // general loop, so errors and recovery at a cut are exactly the general reader's.
  bool MemoGetRun(uint8_t op, uint64_t at) {
    for (;;) {
      const size_t width = op == kBinGet ? 1 : 4;
      if (!Have(width)) return Truncated(at, op == kBinGet ? "BINGET" : "LONG_BINGET", width);
      Value v;
      if (!(MemoGet(at, ReadLE(width), &v))) return false;
      stack_.push_back(v);
      if (pos_ >= in_.size()) return true;
      op = in_[pos_];
      if ((op != kBinGet && op != kLongBinGet) || !Have(op == kBinGet ? 2 : 5)) return true;
      at = pos_++;
      ++opcodes_;
    }
  }

  // Inlined into Run's loop: one dispatch per opcode, no call.
  [[gnu::always_inline]] inline bool Step(uint8_t op, uint64_t at, bool* stop);
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

void DocumentBuilder::Reclaim(std::span<const Value> consumed) {
  const uint64_t first = batch_.containers;
  const uint64_t end = doc_.containers_.size();
  if (end == first) return;
  // 0: drop, 1: keep (shared), 2: a consumed item (drop; its memo slots say so).
  std::vector<uint8_t> state(end - first, 0);
  auto is_new = [&](Value v) {
    return v.tag() == Value::kTagContainer && v.payload() >= first && v.payload() < end;
  };
  for (uint64_t id = first; id < end; ++id) {
    if (doc_.containers_[id].has_runs) return;  // pending runs: keep it simple, keep everything
  }
  for (const Value v : consumed) {
    if (is_new(v)) state[v.payload() - first] = 2;
  }
  std::vector<uint64_t> work;
  auto keep = [&](Value v) {
    if (is_new(v) && state[v.payload() - first] != 1) {
      state[v.payload() - first] = 1;
      work.push_back(v.payload());
    }
  };
  for (uint64_t i = batch_.memo; i < memo_.size(); ++i) {
    if (is_new(memo_[i]) && state[memo_[i].payload() - first] == 0) keep(memo_[i]);
  }
  // What the VM stack holds below the batch's items stays reachable: a batch whose MARK another
  // opcode closed ends at a later APPENDS, with containers made since on the stack (found by the
  // fuzzer once unread memo slots stopped keeping them).
  for (const Value* v = stack_.data(); v < consumed.data(); ++v) keep(*v);
  for (const auto& [index, v] : sparse_memo_) {
    if (is_new(v) && state[v.payload() - first] == 0) keep(v);
  }
  while (!work.empty()) {  // what kept containers refer to is kept too
    const Document::Container c = doc_.containers_[work.back()];
    work.pop_back();
    for (uint64_t i = 0; i < c.size; ++i) keep(doc_.items_[c.begin + i]);
  }
  // Move the kept containers down, in order, re-pointing what refers to them.
  std::vector<std::pair<uint64_t, uint64_t>> moved;
  std::vector<uint64_t> new_id(end - first, UINT64_MAX);
  for (uint64_t id = first; id < end; ++id) {
    if (state[id - first] == 1) {
      new_id[id - first] = first + moved.size();
      moved.emplace_back(id, first + moved.size());
    }
  }
  auto remap = [&](Value v) {
    if (!is_new(v)) return v;
    const uint64_t n = new_id[v.payload() - first];
    return n == UINT64_MAX ? Value(Value::kConsumedBits) : Value((n << 3) | Value::kTagContainer);
  };
  std::vector<Document::Container> kept;
  std::vector<Value> kept_items;
  for (const auto& [old_id, unused] : moved) {
    Document::Container c = doc_.containers_[old_id];
    const uint64_t begin = kept_items.size();
    for (uint64_t i = 0; i < c.size; ++i) kept_items.push_back(remap(doc_.items_[c.begin + i]));
    c.begin = batch_.items + begin;
    kept.push_back(c);
  }
  doc_.containers_.resize(first);
  doc_.containers_.insert(doc_.containers_.end(), kept.begin(), kept.end());
  doc_.items_.resize(batch_.items);
  doc_.items_.insert(doc_.items_.end(), kept_items.begin(), kept_items.end());
  for (uint64_t i = batch_.memo; i < memo_.size(); ++i) memo_[i] = remap(memo_[i]);
  for (auto& [index, v] : sparse_memo_) v = remap(v);
  std::erase_if(incomplete_, [&](uint64_t& id) {
    if (id < first || id >= end) return false;
    if (new_id[id - first] == UINT64_MAX) return true;
    id = new_id[id - first];
    return false;
  });
  ++reclaimed_batches_;
  sink_->Reclaimed(first, moved);
}

// The input ended at `cut_at` before STOP (ParseOptions::recover_truncated). Closes every open
// MARK from the innermost out with the opcode that would have closed it, as the writer would
// have: the items of a list (or set) are appended to it, the pairs of a dict set into it (a key
// without its value dropped), anything else becomes a tuple. Each container closed so is marked
// incomplete, and an incomplete dict or tuple that is an item of a list is left out of it.
// The values from `from` up are a dict's pairs, but for what the cut left pending: a list that
// is a value followed by a container is the list's single APPEND the cut came before (Python
// writes a one-item list as `list item APPEND`, no MARK); a key without its value is dropped.
bool DocumentBuilder::SettlePairs(size_t from, uint64_t cut_at) {
  while ((stack_.size() - from) % 2 != 0) {
    const size_t n = stack_.size();
    const Value last = stack_[n - 1];
    const Kind kind = ContainerKind(last);
    if (n - from >= 2 && kind != Kind::kMissing && ContainerKind(stack_[n - 2]) == Kind::kList) {
      if (!PendingAppend(cut_at)) return false;
      continue;
    }
    stack_.pop_back();
  }
  return true;
}

// The top two values are a list and the one item Python was appending to it when the cut came
// (`list item APPEND`): appended as APPEND would (a list the sink streams gets it through the
// sink), unless the item is a record cut short.
bool DocumentBuilder::PendingAppend(uint64_t cut_at) {
  const Value item = stack_.back();
  const Kind kind = ContainerKind(item);
  if ((kind == Kind::kDict || kind == Kind::kTuple) && IncompleteId(item)) {
    ++dropped_records_;
    stack_.pop_back();
  } else {
    bool stop = false;
    if (!Step(kAppend, cut_at, &stop)) return false;
  }
  MarkIncomplete(stack_.back());
  return true;
}

// The items from `from` up are a list's, but for what the cut left pending: Python's list items
// are of one kind in a snapshot (all records, or all lists), so a last item of another kind than
// the first, after a list, is that list's single APPEND the cut came before.
bool DocumentBuilder::SettleItems(size_t from, uint64_t cut_at) {
  while (stack_.size() - from >= 2) {
    const size_t n = stack_.size();
    const Kind last = ContainerKind(stack_[n - 1]);
    if (last == Kind::kMissing || ContainerKind(stack_[n - 2]) != Kind::kList ||
        last == ContainerKind(stack_[from])) {
      break;
    }
    if (!PendingAppend(cut_at)) return false;
  }
  return true;
}

bool DocumentBuilder::Recover(uint64_t cut_at, ParseInfo* info) {
  error_ = Status::Ok();
  eof_ = false;
  if (sink_ != nullptr) sink_->Recovering();
  uint64_t closed = 0;
  // The value pushed last, if an empty container, may be one whose contents never came.
  if (!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()) &&
      stack_.back().tag() == Value::kTagContainer &&
      doc_.containers_[stack_.back().payload()].size == 0 &&
      !doc_.containers_[stack_.back().payload()].has_runs) {
    MarkIncomplete(stack_.back());
  }
  auto drop_unfinished_records = [&](size_t from) {
    size_t out = from;
    for (size_t i = from; i < stack_.size(); ++i) {
      const Value v = stack_[i];
      const Kind k = ContainerKind(v);
      if ((k == Kind::kDict || k == Kind::kTuple) && IncompleteId(v)) {
        ++dropped_records_;
        continue;
      }
      stack_[out++] = v;
    }
    stack_.resize(out);
  };
  bool stop = false;
  while (!marks_.empty()) {
    const size_t mark = marks_.back();
    const size_t below = marks_.size() >= 2 ? marks_[marks_.size() - 2] : 0;
    // The target of an APPENDS/SETITEMS is the value right below the MARK, in the region of the
    // MARK below (two MARKs in a row open a tuple or list of their own).
    const bool has_target = mark > below || (marks_.size() == 1 && mark > 0);
    const Kind target = has_target ? ContainerKind(stack_[mark - 1]) : Kind::kMissing;
    uint8_t op = kTuple;
    if (target == Kind::kList || target == Kind::kSet) {
      if (!SettleItems(mark, cut_at)) return false;
      drop_unfinished_records(mark);
      op = target == Kind::kList ? kAppends : kAddItems;
    } else if (target == Kind::kDict) {
      if (!SettlePairs(mark, cut_at)) return false;
      op = kSetItems;
    }
    if (!Step(op, cut_at, &stop)) return false;
    MarkIncomplete(stack_.back());
    ++closed;
  }
  // What a single SETITEM or APPEND of the root would have taken.
  if (stack_.size() > 1) {
    const Kind root = ContainerKind(stack_[0]);
    if (root == Kind::kDict) {
      if (!SettlePairs(1, cut_at)) return false;
      if (stack_.size() > 1) {
        if (!Extend(cut_at, stack_[0], Kind::kDict, stack_.data() + 1, stack_.size() - 1,
                    "SETITEM")) {
          return false;
        }
      }
    } else if (root == Kind::kList) {
      if (!SettleItems(1, cut_at)) return false;
      drop_unfinished_records(1);
      if (stack_.size() > 1 &&
          !Extend(cut_at, stack_[0], Kind::kList, stack_.data() + 1, stack_.size() - 1, "APPEND")) {
        return false;
      }
    }
    stack_.resize(1);
  }
  if (stack_.empty()) {
    return Fail(cut_at, fmt::format("the file is truncated at byte {}, before the pickle holds any "
                                    "value: it was cut off while being written (a job killed, a "
                                    "disk full); write it again",
                                    in_.size()));
  }
  MarkIncomplete(stack_[0]);
  doc_.root_ = stack_[0];
  if (info != nullptr) {
    info->truncated = true;
    info->cut_at = in_.size();  // where the file ends (`cut_at` is where reading stopped)
    info->closed_containers = closed;
    info->dropped_records = dropped_records_;
  }
  return true;
}

Status DocumentBuilder::Run(ParseInfo* info) {
  uint64_t next_progress = kProgressStep;
  bool stop = false;
  while (!stop) {
    if (pos_ >= in_.size()) {
      if (in_.empty()) {
        Fail(0, "the file is empty; a pickle holds at least one opcode");
      } else if (options_.recover_truncated) {
        if (!Recover(pos_, info)) return error_;
        break;
      } else {
        Fail(pos_, "the file ends before the pickle's STOP opcode (truncated)");
      }
      return error_;
    }
    const uint64_t at = pos_;
    const uint8_t op = in_[pos_++];
    ++opcodes_;
    if (!Step(op, at, &stop)) {
      // An opcode whose argument the cut fell in changed nothing yet: recover from before it.
      if (!(eof_ && options_.recover_truncated)) return error_;
      pos_ = at;
      if (!Recover(at, info)) return error_;
      break;
    }
    if (pos_ >= next_progress) {
      if (options_.progress && !options_.progress(pos_, in_.size())) {
        return Interrupted("interrupted: reading the input was cancelled");
      }
      next_progress = pos_ + kProgressStep;
    }
  }
  GatherRuns();
  if (info != nullptr) {
    info->protocol = protocol_;
    info->opcodes = opcodes_;
    info->consumed_items = consumed_items_;
    info->reclaimed_batches = reclaimed_batches_;
  }
  if (options_.progress) options_.progress(in_.size(), in_.size());
  return Status::Ok();
}

inline bool DocumentBuilder::Step(uint8_t op, uint64_t at, bool* stop) {
  switch (op) {
    case kProto: {
      if (!Have(1)) return Truncated(at, "PROTO", 1);
      protocol_ = in_[pos_++];
      if (protocol_ > 5) {
        return Fail(at, fmt::format("pickle protocol {} is not supported (0-5 are)", protocol_));
      }
      return true;
    }
    case kFrame: {
      if (!Have(8)) return Truncated(at, "FRAME", 8);
      const uint64_t len = ReadLE(8);
      if (!Have(len) && !options_.recover_truncated) {
        return Truncated(at, "FRAME", len - (in_.size() - pos_));
      }
      return true;  // framing only groups reads; the content is parsed as it comes
    }
    case kStop: {
      if (stack_.empty()) return Fail(at, "STOP with an empty stack (corrupt pickle)");
      if (!marks_.empty() && stack_.size() <= marks_.back()) {
        return Fail(at, "STOP finds an unclosed MARK on top of the stack (corrupt pickle)");
      }
      doc_.root_ = stack_.back();
      *stop = true;
      return true;
    }
    case kMark:
      marks_.push_back(stack_.size());
      OnMark();
      return true;
    case kPop:
      if (!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back())) {
        stack_.pop_back();
        return true;
      }
      if (!marks_.empty()) {
        marks_.pop_back();
        if (batch_.active && marks_.size() < batch_.depth) batch_ = Batch{};
        return true;
      }
      return Fail(at, "POP with an empty stack (corrupt pickle)");
    case kPopMark: {
      size_t mark = 0;
      if (!(PopMark(at, "POP_MARK", &mark))) return false;
      if (batch_.closed) batch_ = Batch{};
      stack_.resize(mark);
      return true;
    }
    case kDup:
      if (!(Need(at, "DUP", 1))) return false;
      stack_.push_back(stack_.back());
      return true;

    // --- scalars --------------------------------------------------------------------------
    case kNone:
      stack_.push_back(MakeSpecial(0));
      return true;
    case kNewFalse:
      stack_.push_back(MakeSpecial(1));
      return true;
    case kNewTrue:
      stack_.push_back(MakeSpecial(2));
      return true;
    case kBinInt:
      if (!Have(4)) return Truncated(at, "BININT", 4);
      stack_.push_back(MakeInt(static_cast<int32_t>(static_cast<uint32_t>(ReadLE(4)))));
      return true;
    case kBinInt1:
      if (!Have(1)) return Truncated(at, "BININT1", 1);
      stack_.push_back(MakeInt(static_cast<int64_t>(ReadLE(1))));
      return true;
    case kBinInt2:
      if (!Have(2)) return Truncated(at, "BININT2", 2);
      stack_.push_back(MakeInt(static_cast<int64_t>(ReadLE(2))));
      return true;
    case kLong1:
    case kLong4: {
      const size_t width = op == kLong1 ? 1 : 4;
      const char* name = op == kLong1 ? "LONG1" : "LONG4";
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t raw = ReadLE(width);
      if (op == kLong4 && static_cast<int32_t>(static_cast<uint32_t>(raw)) < 0) {
        return Fail(at, "LONG4 has a negative byte count (corrupt pickle)");
      }
      if (!Have(raw)) return Truncated(at, name, raw - (in_.size() - pos_));
      stack_.push_back(MakeLong(in_.data() + pos_, raw));
      pos_ += raw;
      return true;
    }
    case kInt: {
      std::string_view line;
      if (!(ReadLine(at, "INT", &line))) return false;
      if (line == "00" || line == "01") {
        stack_.push_back(MakeSpecial(line == "01" ? 2 : 1));
        return true;
      }
      Value v;
      if (!(MakeDecimal(at, "INT", line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kLong: {
      std::string_view line;
      if (!(ReadLine(at, "LONG", &line))) return false;
      Value v;
      if (!(MakeDecimal(at, "LONG", line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kBinFloat: {
      if (!Have(8)) return Truncated(at, "BINFLOAT", 8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | in_[pos_ + i];  // big-endian
      pos_ += 8;
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      stack_.push_back(MakeFloat(d));
      return true;
    }
    case kFloat: {
      std::string_view line;
      if (!(ReadLine(at, "FLOAT", &line))) return false;
      double d = 0;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), d);
      if (ec != std::errc() || end != line.data() + line.size()) {
        if (line == "nan" || line == "inf" || line == "-inf") {
          d = line == "nan"   ? std::numeric_limits<double>::quiet_NaN()
              : line == "inf" ? std::numeric_limits<double>::infinity()
                              : -std::numeric_limits<double>::infinity();
        } else {
          return Fail(at, fmt::format("FLOAT argument '{}' is not a number",
                                      std::string(line.substr(0, 40))));
        }
      }
      stack_.push_back(MakeFloat(d));
      return true;
    }

    // --- strings and bytes ----------------------------------------------------------------
    case kShortBinUnicode:
    case kBinUnicode:
    case kBinUnicode8:
    case kShortBinString:
    case kBinString: {
      const char* name = op == kShortBinUnicode ? "SHORT_BINUNICODE"
                         : op == kBinUnicode    ? "BINUNICODE"
                         : op == kBinUnicode8   ? "BINUNICODE8"
                         : op == kBinString     ? "BINSTRING"
                                                : "SHORT_BINSTRING";
      const size_t width = (op == kShortBinUnicode || op == kShortBinString) ? 1
                           : op == kBinUnicode8                              ? 8
                                                                             : 4;
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t len = ReadLE(width);
      if (op == kBinString && static_cast<int32_t>(static_cast<uint32_t>(len)) < 0) {
        return Fail(at, "BINSTRING has a negative length (corrupt pickle)");
      }
      if (!Have(len)) return Truncated(at, name, len - (in_.size() - pos_));
      Value v;
      if (!(MakeFileString(at, pos_, len, &v))) return false;
      pos_ += len;
      stack_.push_back(v);
      return true;
    }
    case kShortBinBytes:
    case kBinBytes:
    case kBinBytes8:
    case kByteArray8: {
      const char* name = op == kShortBinBytes ? "SHORT_BINBYTES"
                         : op == kBinBytes    ? "BINBYTES"
                         : op == kBinBytes8   ? "BINBYTES8"
                                              : "BYTEARRAY8";
      const size_t width = op == kShortBinBytes ? 1 : op == kBinBytes ? 4 : 8;
      if (!Have(width)) return Truncated(at, name, width);
      const uint64_t len = ReadLE(width);
      if (!Have(len)) return Truncated(at, name, len - (in_.size() - pos_));
      stack_.push_back(MakeOwned(std::string(reinterpret_cast<const char*>(in_.data() + pos_), len),
                                 Value::kTagBytes));
      pos_ += len;
      return true;
    }
    case kUnicode: {
      std::string_view line;
      if (!(ReadLine(at, "UNICODE", &line))) return false;
      Value v;
      if (!(DecodeUnicodeEscape(at, line, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kString: {
      std::string_view line;
      if (!(ReadLine(at, "STRING", &line))) return false;
      Value v;
      if (!(DecodeQuotedString(at, line, &v))) return false;
      stack_.push_back(v);
      return true;
    }

    // --- containers -----------------------------------------------------------------------
    case kEmptyList:
    case kEmptyDict:
    case kEmptyTuple:
    case kEmptySet: {
      const Kind kind = op == kEmptyList    ? Kind::kList
                        : op == kEmptyDict  ? Kind::kDict
                        : op == kEmptyTuple ? Kind::kTuple
                                            : Kind::kSet;
      Value v;
      if (!(NewContainer(at, kind, nullptr, 0, &v))) return false;
      stack_.push_back(v);
      return true;
    }
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      const size_t n = op - kTuple1 + 1;
      if (!(Need(at, n == 1 ? "TUPLE1" : n == 2 ? "TUPLE2" : "TUPLE3", n))) return false;
      Value v;
      if (!(NewContainer(at, Kind::kTuple, stack_.data() + stack_.size() - n, n, &v))) return false;
      stack_.resize(stack_.size() - n);
      stack_.push_back(v);
      return true;
    }
    case kTuple:
    case kList:
    case kFrozenSet:
    case kDict: {
      const char* name = op == kTuple  ? "TUPLE"
                         : op == kList ? "LIST"
                         : op == kDict ? "DICT"
                                       : "FROZENSET";
      size_t mark = 0;
      if (!(PopMark(at, name, &mark))) return false;
      const size_t n = stack_.size() - mark;
      if (op == kDict && n % 2 != 0) {
        return Fail(at, "DICT has an odd number of items (a key without a value)");
      }
      const Kind kind = op == kTuple  ? Kind::kTuple
                        : op == kList ? Kind::kList
                        : op == kDict ? Kind::kDict
                                      : Kind::kSet;
      Value v;
      if (!(NewContainer(at, kind, stack_.data() + mark, n, &v))) return false;
      stack_.resize(mark);
      stack_.push_back(v);
      return true;
    }
    case kAppend: {
      if (!(Need(at, "APPEND", 2))) return false;
      const Value item = stack_.back();
      stack_.pop_back();
      if (sink_ != nullptr && stack_.back().tag() == Value::kTagContainer &&
          doc_.containers_[stack_.back().payload()].kind == Kind::kList && !batch_.active &&
          sink_->Wants(doc_, std::span(stack_.data(), stack_.size() - 1), stack_.back())) {
        return ConsumeItems(at, stack_.size() - 1, stack_.back(), std::span(&item, 1));
      }
      return Extend(at, stack_.back(), Kind::kList, &item, 1, "APPEND");
    }
    case kSetItem: {
      if (!(Need(at, "SETITEM", 3))) return false;
      const Value pair[2] = {stack_[stack_.size() - 2], stack_[stack_.size() - 1]};
      stack_.resize(stack_.size() - 2);
      return Extend(at, stack_.back(), Kind::kDict, pair, 2, "SETITEM");
    }
    case kAppends:
    case kSetItems:
    case kAddItems: {
      const char* name = op == kAppends ? "APPENDS" : op == kSetItems ? "SETITEMS" : "ADDITEMS";
      size_t mark = 0;
      if (!(PopMark(at, name, &mark))) return false;
      if (mark == 0 || (!marks_.empty() && mark <= marks_.back())) {
        return Fail(
            at, fmt::format("{} has no target container below its MARK (corrupt pickle)", name));
      }
      const size_t n = stack_.size() - mark;
      if (op == kSetItems && n % 2 != 0) {
        return Fail(at, "SETITEMS has an odd number of items (a key without a value)");
      }
      const Kind want = op == kAppends ? Kind::kList : op == kSetItems ? Kind::kDict : Kind::kSet;
      if (op == kAppends && batch_.closed) {
        // The end of a batch of a list the sink wants: convert, then release the batch.
        // Containers older than the batch that the sink reads are gathered first, while the
        // batch is open: gathering moves their items past the batch's watermark, which counts
        // as a write to an old container, so the batch is then retired instead of reclaimed
        // (reclaiming would cut the gathered items off).
        GatherForSink(std::span(stack_.data() + mark, n));
        const Batch batch = batch_;
        batch_ = Batch{};
        if (!ConsumeItems(at, mark - 1, stack_[mark - 1], std::span(stack_.data() + mark, n))) {
          return false;
        }
        if (batch.old_writes == 0) {
          batch_ = batch;  // Reclaim reads the watermarks
          Reclaim(std::span(stack_.data() + mark, n));
          batch_ = Batch{};
        } else {
          // Not reclaimed, but the consumed items must still never be reached again (a later
          // change to one would not be seen): retire their memo slots.
          RetireConsumed(batch.memo, std::span(stack_.data() + mark, n));
        }
        stack_.resize(mark);
        return true;
      }
      if (batch_.closed) batch_ = Batch{};
      if (!(Extend(at, stack_[mark - 1], want, stack_.data() + mark, n, name))) return false;
      stack_.resize(mark);
      return true;
    }

    // --- memo -----------------------------------------------------------------------------
    case kMemoize:
      if (!(Need(at, "MEMOIZE", 1))) return false;
      MemoPut(memo_count_, stack_.back());
      return true;
    case kBinPut:
    case kLongBinPut:
    case kPut: {
      const char* name = op == kBinPut ? "BINPUT" : op == kLongBinPut ? "LONG_BINPUT" : "PUT";
      uint64_t index;
      if (op == kPut) {
        std::string_view line;
        if (!(ReadLine(at, name, &line))) return false;
        const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
        if (ec != std::errc() || end != line.data() + line.size()) {
          return Fail(at, "PUT argument is not a memo index");
        }
      } else {
        const size_t width = op == kBinPut ? 1 : 4;
        if (!Have(width)) return Truncated(at, name, width);
        index = ReadLE(width);
      }
      if (!(Need(at, name, 1))) return false;
      MemoPut(index, stack_.back());
      return true;
    }
    case kBinGet:
    case kLongBinGet:
      return MemoGetRun(op, at);
    case kGet: {
      uint64_t index;
      std::string_view line;
      if (!(ReadLine(at, "GET", &line))) return false;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
      if (ec != std::errc() || end != line.data() + line.size()) {
        return Fail(at, "GET argument is not a memo index");
      }
      Value v;
      if (!(MemoGet(at, index, &v))) return false;
      stack_.push_back(v);
      return true;
    }

    case kNextBuffer:
    case kReadOnlyBuffer:
      return Fail(at, fmt::format("opcode {} (out-of-band buffer) is not supported: memory "
                                  "snapshots never use it",
                                  op == kNextBuffer ? "NEXT_BUFFER" : "READONLY_BUFFER"));
    default:
      break;
  }
  if (const char* name = CodeExecutingOpcodeName(op)) {
    return Fail(at, fmt::format("refusing opcode {} (0x{:02x}): it imports or calls code, and a "
                                "memory snapshot holds only plain data; this file is not a "
                                "snapshot, or it was tampered with",
                                name, op));
  }
  return Fail(at, fmt::format("unknown opcode 0x{:02x}: not a pickle, or corrupt", op));
}

bool DocumentBuilder::DecodeUnicodeEscape(uint64_t at, std::string_view line, Value* out) {
  // raw-unicode-escape: bytes are Latin-1 code points except \uXXXX and \UXXXXXXXX.
  std::string s;
  s.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c == '\\' && i + 1 < line.size() && (line[i + 1] == 'u' || line[i + 1] == 'U')) {
      const size_t digits = line[i + 1] == 'u' ? 4 : 8;
      if (i + 2 + digits > line.size()) return Fail(at, "UNICODE has a truncated \\u escape");
      uint32_t cp = 0;
      for (size_t k = 0; k < digits; ++k) {
        const int h = HexValue(line[i + 2 + k]);
        if (h < 0) return Fail(at, "UNICODE has a malformed \\u escape");
        cp = (cp << 4) | static_cast<uint32_t>(h);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Fail(at, "UNICODE escape is not a valid code point");
      }
      AppendUtf8(s, cp);
      i += 1 + digits;
    } else {
      AppendUtf8(s, c);
    }
  }
  *out = MakeOwned(std::move(s), Value::kTagOwnedStr);
  return true;
}

bool DocumentBuilder::DecodeQuotedString(uint64_t at, std::string_view line, Value* out) {
  // Python 2 str repr: 'text' or "text" with backslash escapes.
  if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') ||
      line.back() != line.front()) {
    return Fail(at, "STRING argument is not a quoted string");
  }
  line = line.substr(1, line.size() - 2);
  std::string s;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\' || i + 1 == line.size()) {
      s.push_back(line[i]);
      continue;
    }
    const char e = line[++i];
    switch (e) {
      case 'n':
        s.push_back('\n');
        break;
      case 't':
        s.push_back('\t');
        break;
      case 'r':
        s.push_back('\r');
        break;
      case 'a':
        s.push_back('\a');
        break;
      case 'b':
        s.push_back('\b');
        break;
      case 'f':
        s.push_back('\f');
        break;
      case 'v':
        s.push_back('\v');
        break;
      case 'x': {
        if (i + 2 >= line.size()) return Fail(at, "STRING has a truncated \\x escape");
        const int hi = HexValue(line[i + 1]);
        const int lo = HexValue(line[i + 2]);
        if (hi < 0 || lo < 0) return Fail(at, "STRING has a malformed \\x escape");
        s.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          int v = e - '0';
          for (int k = 0; k < 2 && i + 1 < line.size() && line[i + 1] >= '0' && line[i + 1] <= '7';
               ++k) {
            v = v * 8 + (line[++i] - '0');
          }
          s.push_back(static_cast<char>(v & 0xFF));
        } else {
          s.push_back(e);  // \\, \', \" and unknown escapes keep the character
        }
    }
  }
  if (!IsValidUtf8(reinterpret_cast<const uint8_t*>(s.data()), s.size())) {
    return Fail(at, "STRING is not valid text");
  }
  *out = MakeOwned(std::move(s), Value::kTagOwnedStr);
  return true;
}

Result<Document> Parse(std::span<const uint8_t> input, const ParseOptions& options,
                       ParseInfo* info) {
  DocumentBuilder builder(input, options);
  RETURN_IF_ERROR(builder.Run(info));
  return builder.Take();
}

}  // namespace vramscope::pickle
