#include "sources/oom_message/oom_message_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <utility>

namespace vramscope::sources {

namespace {

using model::OomMessage;
using model::OomMessageKind;
using model::PrintedBytes;

// How far after its first words a message's figures can lie. The longest real message (2.x, a
// few processes, private pools, the advice and the link) is under 1 KiB; a message with dozens of
// processes listed fits too.
constexpr size_t kWindow = 8192;
// The message kept in OomMessage::text.
constexpr size_t kKeptText = 4096;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// The text without ANSI escape sequences (colours, cursor moves) and with "\r\n" and lone "\r" as
// "\n", so lines count as the user sees them.
std::string WithoutEscapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\x1b') {
      if (i + 1 < text.size() && text[i + 1] == '[') {  // CSI: parameters, then a final byte
        size_t j = i + 2;
        while (j < text.size() && !(text[j] >= '@' && text[j] <= '~')) ++j;
        i = j;                                                 // the final byte (or the end)
      } else if (i + 1 < text.size() && text[i + 1] == ']') {  // OSC: up to BEL or ESC backslash
        size_t j = i + 2;
        while (j < text.size() && text[j] != '\x07' && text[j] != '\x1b') ++j;
        if (j < text.size() && text[j] == '\x1b') ++j;
        i = j;
      } else {
        ++i;  // a two-byte escape
      }
      continue;
    }
    if (c == '\r') {
      out.push_back('\n');
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// "[rank3]:" (torchrun's prefix) at `pos`: its length and the rank, or 0.
size_t RankPrefix(std::string_view s, size_t pos, int* rank) {
  constexpr std::string_view kOpen = "[rank";
  if (s.substr(pos, kOpen.size()) != kOpen) return 0;
  size_t j = pos + kOpen.size();
  int value = 0;
  const auto r = std::from_chars(s.data() + j, s.data() + std::min(s.size(), j + 6), value);
  if (r.ec != std::errc() || value < 0) return 0;
  j = static_cast<size_t>(r.ptr - s.data());
  if (s.substr(j, 2) != "]:") return 0;
  if (rank != nullptr) *rank = value;
  return j + 2 - pos;
}

// The window of a message as one line: line breaks, the rank prefixes of continued lines and
// runs of blanks each become one space.
// Rich's log handler (RichHandler, used by many training and diffusion tools) wraps a long
// message and right-aligns the source location, "model_manager.py:47", at the end of its first
// line. At `i`, a run of two or more spaces: the length of such a column up to the line's end,
// else 0.
size_t RichSourceColumn(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size() && s[j] == ' ') ++j;
  if (j - i < 2) return 0;
  const size_t name = j;
  while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) != 0 || s[j] == '_' ||
                          s[j] == '-' || s[j] == '.')) {
    ++j;
  }
  if (j - name < 4 || s.substr(name, j - name).find(".py") != j - name - 3) return 0;
  if (j >= s.size() || s[j] != ':') return 0;
  const size_t digits = ++j;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])) != 0) ++j;
  if (j == digits) return 0;
  while (j < s.size() && s[j] == ' ') ++j;
  return j < s.size() && s[j] == '\n' ? j - i : 0;
}

std::string Flatten(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool space = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    // Markdown's bold ("**17179869184.00 GiB**", as users emphasise a figure in an issue) is
    // never part of PyTorch's text.
    if (c == '*' && i + 1 < s.size() && s[i + 1] == '*') {
      ++i;
      continue;
    }
    // A message quoted inside another program's string keeps its line breaks as "\n" (Rust's
    // and Python's repr, JSON logs): whitespace, as the break was.
    if (c == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      ++i;
      space = true;
      continue;
    }
    if (c == ' ') {
      if (const size_t column = RichSourceColumn(s, i)) {
        i += column - 1;
        space = true;
        continue;
      }
    }
    if (c == '\n') {
      space = true;
      while (i + 1 < s.size() && IsSpace(s[i + 1])) ++i;
      const size_t prefix = RankPrefix(s, i + 1, nullptr);
      i += prefix;
      continue;
    }
    if (IsSpace(c)) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// Where a figure "79.11 GiB" starts at `pos` of `s`: its length and value, or 0.
size_t ReadPrintedBytes(std::string_view s, size_t pos, PrintedBytes* out) {
  size_t j = pos;
  unsigned __int128 mantissa = 0;
  int int_digits = 0, frac_digits = 0;
  while (j < s.size() && IsDigit(s[j]) && int_digits < 20) {
    mantissa = mantissa * 10 + static_cast<unsigned>(s[j] - '0');
    ++j;
    ++int_digits;
  }
  if (int_digits == 0 || (j < s.size() && IsDigit(s[j]))) return 0;
  if (j + 1 < s.size() && s[j] == '.' && IsDigit(s[j + 1])) {
    ++j;
    while (j < s.size() && IsDigit(s[j]) && frac_digits < 6) {
      mantissa = mantissa * 10 + static_cast<unsigned>(s[j] - '0');
      ++j;
      ++frac_digits;
    }
    if (j < s.size() && IsDigit(s[j])) return 0;
  }
  if (j < s.size() && s[j] == ' ') ++j;
  struct Unit {
    std::string_view name;
    uint64_t scale;
    uint64_t printed_above;  // format_size uses this unit only for sizes above this
  };
  // MPS's own format_size labels the same binary units KB, MB, GB.
  static constexpr std::array<Unit, 9> kUnits = {{
      {"bytes", 1, 0},
      {"KiB", 1ull << 10, 1ull << 10},
      {"MiB", 1ull << 20, 1ull << 20},
      {"GiB", 1ull << 30, 1ull << 30},
      {"KB", 1ull << 10, 1ull << 10},
      {"MB", 1ull << 20, 1ull << 20},
      {"GB", 1ull << 30, 1ull << 30},
      {"TiB", 1ull << 40, 1ull << 30},
      {"B", 1, 0},
  }};
  for (const Unit& unit : kUnits) {
    if (s.substr(j, unit.name.size()) != unit.name) continue;
    const size_t end = j + unit.name.size();
    if (end < s.size() && IsAlpha(s[end])) continue;
    unsigned __int128 pow10 = 1;
    for (int k = 0; k < frac_digits; ++k) pow10 *= 10;
    // The printed value v = mantissa / 10^d stands for sizes in [v - h, v + h] units, h half the
    // last digit: in bytes, [(2m - 1) * scale / (2 * 10^d), (2m + 1) * scale / (2 * 10^d)].
    const unsigned __int128 scale = unit.scale;
    const unsigned __int128 denominator = 2 * pow10;
    unsigned __int128 lo =
        mantissa == 0 ? 0 : ((2 * mantissa - 1) * scale + denominator - 1) / denominator;
    unsigned __int128 hi = (2 * mantissa + 1) * scale / denominator;
    if (unit.scale == 1 && frac_digits == 0) lo = hi = mantissa;  // "512 bytes" is exact
    if (lo <= unit.printed_above) lo = unit.printed_above + (unit.printed_above > 0 ? 1 : 0);
    // "17179869184.00 GiB" (2^64 B: cudaMallocAsync's "no limit") reaches past 64 bits.
    constexpr unsigned __int128 kMax = ~uint64_t{0};
    if (hi > kMax) hi = kMax;
    if (lo > hi) return 0;
    out->text = std::string(s.substr(pos, end - pos));  // as printed: "79.11 GiB"
    out->lo = static_cast<uint64_t>(lo);
    out->hi = static_cast<uint64_t>(hi);
    return end - pos;
  }
  return 0;
}

// A flattened window with each figure replaced by kFigure, so that a clause is a plain pattern.
constexpr char kFigure = '\x01';
struct Tokenized {
  std::string text;
  std::vector<PrintedBytes> figures;     // in order
  std::vector<size_t> figure_positions;  // where each kFigure sits in text
};

Tokenized Tokenize(std::string_view flat) {
  Tokenized t;
  t.text.reserve(flat.size());
  for (size_t i = 0; i < flat.size();) {
    const bool boundary = i == 0 || !(IsDigit(flat[i - 1]) || flat[i - 1] == '.');
    PrintedBytes figure;
    const size_t n = boundary && IsDigit(flat[i]) ? ReadPrintedBytes(flat, i, &figure) : 0;
    if (n > 0) {
      t.figure_positions.push_back(t.text.size());
      t.figures.push_back(std::move(figure));
      t.text.push_back(kFigure);
      i += n;
      continue;
    }
    t.text.push_back(flat[i] == kFigure ? ' ' : flat[i]);
    ++i;
  }
  return t;
}

// One match of a clause pattern: literal text, kFigure for a figure and '#' for an integer.
struct Match {
  size_t begin = 0, end = 0;
  std::vector<const PrintedBytes*> figures;
  std::vector<int64_t> integers;
};

// The first match of `pattern` in t.text at or after `from`.
std::optional<Match> FindClause(const Tokenized& t, std::string_view pattern, size_t from = 0) {
  // Search for the longest literal run of the pattern, then check the whole pattern around it.
  // Patterns here are short and begin with a literal or a figure; scan candidates for the first
  // literal character run.
  size_t lead = 0;
  while (lead < pattern.size() && (pattern[lead] == kFigure || pattern[lead] == '#')) ++lead;
  const size_t run_end = pattern.find_first_of(std::string_view("\x01#", 2), lead);
  const std::string_view anchor =
      pattern.substr(lead, (run_end == std::string_view::npos ? pattern.size() : run_end) - lead);
  if (anchor.empty()) return std::nullopt;
  for (size_t at = t.text.find(anchor, from); at != std::string::npos;
       at = t.text.find(anchor, at + 1)) {
    if (at < lead) continue;
    // The pattern's leading placeholders sit right before the anchor.
    size_t start = at - lead;
    bool ok = true;
    for (size_t k = 0; k < lead && ok; ++k) {
      ok = pattern[k] == kFigure && t.text[start + k] == kFigure;
    }
    if (!ok || start < from) continue;
    Match m;
    m.begin = start;
    size_t i = start;
    for (size_t p = 0; p < pattern.size() && ok; ++p) {
      if (pattern[p] == '#') {
        int64_t value = 0;
        const auto r = std::from_chars(t.text.data() + i,
                                       t.text.data() + std::min(t.text.size(), i + 18), value);
        ok = r.ec == std::errc() && value >= 0;
        if (ok) {
          m.integers.push_back(value);
          i = static_cast<size_t>(r.ptr - t.text.data());
        }
      } else if (i < t.text.size() && t.text[i] == pattern[p]) {
        if (pattern[p] == kFigure) {
          const auto it = std::lower_bound(t.figure_positions.begin(), t.figure_positions.end(), i);
          m.figures.push_back(&t.figures[static_cast<size_t>(it - t.figure_positions.begin())]);
        }
        ++i;
      } else {
        ok = false;
      }
    }
    if (ok) {
      m.end = i;
      return m;
    }
  }
  return std::nullopt;
}

struct Anchor {
  size_t pos = 0;  // in the cleaned text
  OomMessageKind kind = OomMessageKind::kAllocator;
  std::string_view backend;  // the phrase table's own text
  std::string_view library;
};

// The phrases that start a message, and what each says about it.
struct Phrase {
  std::string_view text;
  OomMessageKind kind;
  std::string_view backend;
  std::string_view library;
};
constexpr std::array<Phrase, 21> kPhrases = {{
    {"CUDA out of memory", OomMessageKind::kAllocatorBare, "CUDA", ""},
    {"HIP out of memory", OomMessageKind::kAllocatorBare, "HIP", ""},
    {"XPU out of memory", OomMessageKind::kAllocatorBare, "XPU", ""},
    {"CUDA error: out of memory", OomMessageKind::kDriverError, "CUDA", ""},
    {"CUDA driver error: out of memory", OomMessageKind::kDriverError, "CUDA", ""},
    {"HIP error: out of memory", OomMessageKind::kDriverError, "HIP", ""},
    {"cudaErrorMemoryAllocation", OomMessageKind::kDriverError, "CUDA", ""},
    {"hipErrorOutOfMemory", OomMessageKind::kDriverError, "HIP", ""},
    {"CUBLAS_STATUS_ALLOC_FAILED", OomMessageKind::kLibraryError, "CUDA", "cuBLAS"},
    {"HIPBLAS_STATUS_ALLOC_FAILED", OomMessageKind::kLibraryError, "HIP", "hipBLAS"},
    {"CUDNN_STATUS_ALLOC_FAILED", OomMessageKind::kLibraryError, "CUDA", "cuDNN"},
    {"MIOPEN_STATUS_ALLOC_FAILED", OomMessageKind::kLibraryError, "HIP", "MIOpen"},
    {"Cuda failure 'out of memory'", OomMessageKind::kLibraryError, "CUDA", "NCCL"},
    {"Cuda failure 2 'out of memory'", OomMessageKind::kLibraryError, "CUDA", "NCCL"},
    // PyTorch 0.x's THC: "cuda runtime error (2) : out of memory at .../THCStorage.cu:66".
    {"cuda runtime error (2) : out of memory", OomMessageKind::kDriverError, "CUDA", ""},
    {"cuda runtime err(2): out of memory", OomMessageKind::kDriverError, "CUDA", ""},
    {"Allocation on device", OomMessageKind::kAsyncAllocator, "CUDA", ""},
    {"MPS backend out of memory", OomMessageKind::kMps, "MPS", ""},
    // The device-generic allocator's wording (c10 CachingDeviceAllocator, seen in source copies
    // of 2025 main): CUDA's text without "CUDA".
    {"Out of memory. Tried to allocate", OomMessageKind::kAllocatorBare, "", ""},
    // XLA (JAX) and TensorFlow, whose status code leads their messages.
    {"RESOURCE_EXHAUSTED: Out of memory", OomMessageKind::kXla, "XLA", ""},
    {"OOM when allocating tensor", OomMessageKind::kTensorflow, "TensorFlow", ""},
}};

// "Tried to allocate" starts a message of its own only this far (in bytes) after the last one
// began: within a message (2.x's "CUDA out of memory. Tried to allocate", MPS's after its
// figures) it is a clause.
constexpr std::string_view kFragment = "Tried to allocate ";
constexpr size_t kFragmentGap = 400;
// How far before an XLA or TensorFlow error the BFC allocator's log is looked for (its chunk
// dump can run to thousands of lines), and how close a repeat of the same failure follows it.
constexpr size_t kBfcLogWindow = size_t{4} << 20;
constexpr size_t kRepeatGap = 16384;

// Whether the words at `pos` go on with a sentence: a space and a lower-case word.
bool InSentence(std::string_view s, size_t pos) {
  return pos + 1 < s.size() && s[pos] == ' ' &&
         std::islower(static_cast<unsigned char>(s[pos + 1])) != 0;
}

// The first `keep` anchors of `s` (each message's window ends at the next one), and how many
// there are in all: a text of millions of messages costs a count, not a list.
std::vector<Anchor> FindAnchors(std::string_view s, size_t keep, size_t* total) {
  std::vector<Anchor> anchors;
  *total = 0;
  // Every phrase contains "out of memory", "ALLOC_FAILED" or an error enum: scan once for the
  // phrases' distinctive letters and check each phrase there.
  size_t last = std::string_view::npos;  // where the last message started
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == 'T' && s.substr(i, kFragment.size()) == kFragment &&
        (last == std::string_view::npos || i - last > kFragmentGap)) {
      // A message pasted from "Tried to allocate" on, its first words left behind.
      if (anchors.size() < keep) anchors.push_back({i, OomMessageKind::kAllocatorBare, "", ""});
      ++*total;
      last = i;
      i += kFragment.size() - 1;
      continue;
    }
    if (c != 'C' && c != 'H' && c != 'X' && c != 'c' && c != 'h' && c != 'M' && c != 'A' &&
        c != 'O' && c != 'R') {
      continue;
    }
    for (const Phrase& p : kPhrases) {
      if (s.substr(i, p.text.size()) != p.text) continue;
      // "CUDA out of memory occurred when warming up ..." (vLLM's own error about PyTorch's):
      // the phrase inside a sentence, not a message.
      if (p.kind == OomMessageKind::kAllocatorBare && InSentence(s, i + p.text.size())) continue;
      // "CUDA error: out of memory" also contains no "CUDA out of memory"; a driver error inside
      // an allocator message's own text does not occur, so each phrase starts its own message.
      if (anchors.size() < keep) anchors.push_back({i, p.kind, p.backend, p.library});
      ++*total;
      last = i;
      i += p.text.size() - 1;
      break;
    }
  }
  return anchors;
}

// Where a message's text ends in the cleaned text: PyTorch's closing link (2.x) or words (1.x),
// else the end of its window.
size_t MessageEnd(std::string_view s, size_t begin, size_t limit) {
  const std::string_view window = s.substr(begin, limit - begin);
  size_t end = window.size();
  for (const std::string_view closing :
       {std::string_view("#environment-variables)"),
        std::string_view("Memory Management and PYTORCH_CUDA_ALLOC_CONF"),
        std::string_view("Memory Management and PYTORCH_HIP_ALLOC_CONF")}) {
    const size_t at = window.find(closing);
    if (at != std::string_view::npos) end = std::min(end, at + closing.size());
  }
  return begin + end;
}

void ReadAllocatorClauses(const Tokenized& t, OomMessage& m) {
  if (auto c = FindClause(t, "Tried to allocate \x01")) m.tried_to_allocate = *c->figures[0];
  // 2.1+ ("capacty" in 2.1; "GPU  has", the index lost, in 2.2 - 2.3).
  for (const std::string_view pattern :
       {std::string_view("GPU # has a total capacity of \x01 of which \x01 is free"),
        std::string_view("GPU # has a total capacty of \x01 of which \x01 is free"),
        std::string_view("GPU has a total capacity of \x01 of which \x01 is free")}) {
    if (auto c = FindClause(t, pattern)) {
      m.kind = OomMessageKind::kAllocator;
      if (!c->integers.empty()) {
        m.gpu = static_cast<int>(std::min<int64_t>(c->integers[0], 1 << 20));
      }
      m.total_capacity = *c->figures[0];
      m.free = *c->figures[1];
      break;
    }
  }
  for (auto c = FindClause(t, "Process # has \x01 memory in use"); c;
       c = FindClause(t, "Process # has \x01 memory in use", c->end)) {
    m.processes.push_back({c->integers[0], *c->figures[0]});
  }
  if (auto c = FindClause(t, "this process has \x01 memory in use")) {
    m.this_process_in_use = *c->figures[0];
  }
  if (auto c = FindClause(t,
                          "Of the allocated memory \x01 is allocated by PyTorch, with \x01 "
                          "allocated in private pools")) {
    m.allocated_by_pytorch = *c->figures[0];
    m.private_pools = *c->figures[1];
  } else if (auto c = FindClause(t, "Of the allocated memory \x01 is allocated by PyTorch")) {
    m.allocated_by_pytorch = *c->figures[0];
  } else if (auto c = FindClause(t,
                                 "\x01 is allocated by PyTorch, with \x01 allocated in "
                                 "private pools")) {
    // Users who shorten the message drop "Of the allocated memory"; the clause is PyTorch's.
    m.allocated_by_pytorch = *c->figures[0];
    m.private_pools = *c->figures[1];
  } else if (auto c = FindClause(t, "\x01 is allocated by PyTorch")) {
    m.allocated_by_pytorch = *c->figures[0];
  }
  if (auto c = FindClause(t, "\x01 is reserved by PyTorch but unallocated")) {
    m.reserved_unallocated = *c->figures[0];
  }
  if (auto c = FindClause(t, "\x01 allowed;")) m.allowed = *c->figures[0];
  // 1.x - 2.0: "(GPU 0; 7.80 GiB total capacity; 6.34 GiB already allocated; 14.50 MiB free;
  // [7.00 GiB allowed; ]6.45 GiB reserved in total by PyTorch)", or "... 176.09 MiB cached)".
  if (auto c = FindClause(t, "(GPU #; \x01 total capacity;")) {
    m.kind = OomMessageKind::kAllocatorLegacy;
    m.gpu = static_cast<int>(std::min<int64_t>(c->integers[0], 1 << 20));
    m.total_capacity = *c->figures[0];
    if (auto a = FindClause(t, "\x01 already allocated;", c->end)) {
      m.already_allocated = *a->figures[0];
    }
    if (auto f = FindClause(t, "\x01 free;", c->end)) m.free = *f->figures[0];
    if (auto r = FindClause(t, "\x01 reserved in total by PyTorch", c->end)) {
      m.reserved_total = *r->figures[0];
    } else if (auto r = FindClause(t, "\x01 cached", c->end)) {
      m.cached = *r->figures[0];
      if (auto i = FindClause(t, "; \x01 inactive)", r->end)) m.inactive = *i->figures[0];
    }
  }
  m.suggests_expandable_segments = t.text.find("expandable_segments") != std::string::npos;
  m.suggests_max_split_size = t.text.find("max_split_size_mb") != std::string::npos;
}

// cudaMallocAsync's message; false when "Allocation on device" starts some other text.
bool ReadAsyncAllocatorClauses(const Tokenized& t, OomMessage& m) {
  const auto head = FindClause(t, "Allocation on device # would exceed allowed memory");
  if (!head || head->begin != 0) return false;
  m.gpu = static_cast<int>(std::min<int64_t>(head->integers[0], 1 << 20));
  if (auto c = FindClause(t, "Currently allocated : \x01")) m.allocated_by_pytorch = *c->figures[0];
  if (auto c = FindClause(t, "Requested : \x01")) m.tried_to_allocate = *c->figures[0];
  if (auto c = FindClause(t, "Device limit : \x01")) m.total_capacity = *c->figures[0];
  if (auto c = FindClause(t, "Free (according to CUDA): \x01")) m.free = *c->figures[0];
  if (auto c = FindClause(t, "memory fraction) : \x01")) m.allowed = *c->figures[0];
  return true;
}

// "MPS backend out of memory (MPS allocated: X, other allocations: Y, max allowed: Z). Tried to
// allocate W on private pool."
void ReadMpsClauses(const Tokenized& t, OomMessage& m) {
  if (auto c = FindClause(t, "MPS allocated: \x01")) m.allocated_by_pytorch = *c->figures[0];
  if (auto c = FindClause(t, "other allocations: \x01")) m.other_allocations = *c->figures[0];
  if (auto c = FindClause(t, "max allowed: \x01")) m.allowed = *c->figures[0];
  if (auto c = FindClause(t, "Tried to allocate \x01")) m.tried_to_allocate = *c->figures[0];
}

// TensorFlow's dtype names (DataTypeString) and their sizes; 0 for a name not listed.
uint64_t TensorflowDtypeBytes(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 20> kSizes = {{
      {"float", 4}, {"double", 8}, {"half", 2},   {"bfloat16", 2},      {"int8", 1},
      {"uint8", 1}, {"int16", 2},  {"uint16", 2}, {"int32", 4},         {"uint32", 4},
      {"int64", 8}, {"uint64", 8}, {"bool", 1},   {"complex64", 8},     {"complex128", 16},
      {"qint8", 1}, {"quint8", 1}, {"qint32", 4}, {"float8_e4m3fn", 1}, {"float8_e5m2", 1},
  }};
  for (const auto& [n, bytes] : kSizes) {
    if (n == name) return bytes;
  }
  return 0;
}

// A word of identifier characters (and '/', ':', '.', '-' for device names) at `pos`.
std::string_view WordAt(std::string_view s, size_t pos) {
  size_t j = pos;
  while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) != 0 || s[j] == '_' ||
                          s[j] == '/' || s[j] == ':' || s[j] == '.' || s[j] == '-')) {
    ++j;
  }
  return s.substr(pos, j - pos);
}

// "/job:localhost/replica:0/task:0/device:GPU:0" as "GPU:0"; a BFC allocator's name
// ("GPU_0_bfc") as "GPU:0"; "" when neither names a device.
std::string DeviceOf(std::string_view name) {
  if (const size_t at = name.rfind("device:"); at != std::string_view::npos) {
    return std::string(name.substr(at + 7));
  }
  if (name.size() > 8 && name.substr(0, 4) == "GPU_" && name.substr(name.size() - 4) == "_bfc") {
    return "GPU:" + std::string(name.substr(4, name.size() - 8));
  }
  return "";
}

void SetGpuFromDevice(OomMessage& m) {
  if (m.device.size() > 4 && m.device.substr(0, 4) == "GPU:") {
    int gpu = 0;
    const char* begin = m.device.data() + 4;
    const auto r = std::from_chars(begin, m.device.data() + m.device.size(), gpu);
    if (r.ec == std::errc() && gpu >= 0) m.gpu = std::min(gpu, 1 << 20);
  }
}

// An exact byte count ("Limit: 10581458944") as a figure.
PrintedBytes ExactBytes(int64_t value) {
  PrintedBytes b;
  b.text = fmt::format("{} bytes", value);
  b.lo = b.hi = static_cast<uint64_t>(value);
  return b;
}

// TensorFlow's "OOM when allocating tensor with shape[64,1024] and type float on
// /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc": the tensor, its bytes
// (the shape's product times the dtype's size, exact), the device and the allocator.
void ReadTensorflowClauses(std::string_view flat, OomMessage& m) {
  const size_t shape = flat.find("with shape");
  if (shape != std::string_view::npos) {
    size_t i = shape + 10;
    if (i < flat.size() && flat[i] == ' ') ++i;
    if (i < flat.size() && flat[i] == '[') {
      const size_t close = flat.find(']', i);
      if (close != std::string_view::npos && close - i < 256) {
        m.tensor_shape = std::string(flat.substr(i, close + 1 - i));
        unsigned __int128 elements = 1;
        bool ok = true;
        for (size_t j = i + 1; j < close && ok;) {
          uint64_t dim = 0;
          const auto r = std::from_chars(flat.data() + j, flat.data() + close, dim);
          ok = r.ec == std::errc();
          if (!ok) break;
          // No tensor has 2^64 bytes: a product past that is a misread, not a size.
          constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 64;
          if (dim != 0 && elements > kLimit / dim) {
            ok = false;
            break;
          }
          elements *= dim;
          j = static_cast<size_t>(r.ptr - flat.data());
          if (j < close && flat[j] == ',') ++j;
        }
        const size_t type = flat.find(" and type ", close);
        if (type != std::string_view::npos && type - close < 8) {
          m.tensor_dtype = std::string(WordAt(flat, type + 10));
          const uint64_t size = TensorflowDtypeBytes(m.tensor_dtype);
          const unsigned __int128 bytes = elements * size;
          if (ok && size > 0 && bytes <= static_cast<unsigned __int128>(INT64_MAX)) {
            m.tried_to_allocate = ExactBytes(static_cast<int64_t>(bytes));
            m.tried_to_allocate->text = fmt::format("{} B ({} {})", static_cast<uint64_t>(bytes),
                                                    m.tensor_dtype, m.tensor_shape);
          }
        }
      }
    }
  }
  if (const size_t on = flat.find(" on /"); on != std::string_view::npos && on < 600) {
    m.device = DeviceOf(WordAt(flat, on + 4));
  }
  if (const size_t by = flat.find("by allocator "); by != std::string_view::npos && by < 800) {
    m.allocator = std::string(WordAt(flat, by + 13));
  }
  SetGpuFromDevice(m);
}

// XLA's "Out of memory while trying to allocate N bytes." (a GPU) or "Out of memory allocating N
// bytes." (the host), and BufferAssignment's stats of the program when they follow.
void ReadXlaClauses(const Tokenized& t, OomMessage& m) {
  if (auto c = FindClause(t, "Out of memory while trying to allocate \x01")) {
    m.tried_to_allocate = *c->figures[0];
  } else if (auto c = FindClause(t, "Out of memory allocating \x01")) {
    m.tried_to_allocate = *c->figures[0];
    m.device = "CPU";  // the host's allocator words it so
  }
  const std::pair<std::string_view, std::optional<PrintedBytes> OomMessage::*> kStats[] = {
      {"parameter allocation: \x01", &OomMessage::program_parameters},
      {"constant allocation: \x01", &OomMessage::program_constants},
      {"maybe_live_out allocation: \x01", &OomMessage::program_outputs},
      {"preallocated temp allocation: \x01", &OomMessage::program_temp},
      {"total allocation: \x01", &OomMessage::program_total},
  };
  for (const auto& [pattern, field] : kStats) {
    if (auto c = FindClause(t, pattern)) m.*field = *c->figures[0];
  }
}

// The BFC allocator's log before an XLA or TensorFlow error: "Allocator (GPU_0_bfc) ran out of
// memory trying to allocate 2.10GiB (rounded to 2254857472)" and its "Stats:" (Limit, InUse,
// MaxInUse, LargestFreeBlock), the last of each in `before`. TensorFlow's warning of the same
// words that ends "The caller indicates that this is not a failure" is not one.
void ReadBfcLog(std::string_view before, OomMessage& m) {
  constexpr std::string_view kRanOut = "ran out of memory trying to allocate ";
  for (size_t at = before.rfind(kRanOut); at != std::string_view::npos;
       at = at == 0 ? std::string_view::npos : before.rfind(kRanOut, at - 1)) {
    const std::string_view line = before.substr(at, std::min<size_t>(400, before.size() - at));
    if (line.substr(0, line.find('\n')).find("not a failure") != std::string_view::npos) continue;
    const size_t open = before.rfind("Allocator (", at);
    if (open != std::string_view::npos && at - open < 200) {
      const std::string_view name = WordAt(before, open + 11);
      m.allocator = std::string(name);
      if (m.device.empty()) m.device = DeviceOf(name);
    }
    if (const size_t rounded = line.find("(rounded to "); rounded != std::string_view::npos) {
      uint64_t bytes = 0;
      const char* begin = line.data() + rounded + 12;
      const auto r = std::from_chars(begin, line.data() + line.size(), bytes);
      if (r.ec == std::errc() && !m.tried_to_allocate) {
        m.tried_to_allocate =
            ExactBytes(static_cast<int64_t>(std::min<uint64_t>(bytes, INT64_MAX)));
      }
    }
    break;
  }
  // The stats are printed last, right before the error: the last 64 KiB hold them.
  const std::string_view tail = before.substr(before.size() > 65536 ? before.size() - 65536 : 0);
  const size_t stats = tail.rfind("Limit:");
  if (stats == std::string_view::npos) return;
  const Tokenized t =
      Tokenize(Flatten(tail.substr(stats, std::min<size_t>(2048, tail.size() - stats))));
  const std::pair<std::string_view, std::optional<PrintedBytes> OomMessage::*> kFields[] = {
      {"Limit: #", &OomMessage::pool_limit},
      {"InUse: #", &OomMessage::pool_in_use},
      {"MaxInUse: #", &OomMessage::pool_peak_in_use},
      {"LargestFreeBlock: #", &OomMessage::largest_free_block},
  };
  for (const auto& [pattern, field] : kFields) {
    if (auto c = FindClause(t, pattern); c && c->begin < 600) m.*field = ExactBytes(c->integers[0]);
  }
  SetGpuFromDevice(m);
}

// Whether two XLA or TensorFlow messages are one failure printed twice (TensorFlow logs the
// status, then raises it; XLA's runtime logs it, then JAX raises it).
bool SameFailure(const OomMessage& a, const OomMessage& b) {
  const bool a_has = a.tried_to_allocate.has_value(), b_has = b.tried_to_allocate.has_value();
  return a.kind == b.kind && a_has == b_has &&
         (!a_has || a.tried_to_allocate->lo == b.tried_to_allocate->lo) &&
         a.tensor_shape == b.tensor_shape;
}

// What a repeat of a failure adds to its first message: the figures and names the first lacks.
void MergeRepeat(OomMessage& first, const OomMessage& repeat) {
  for (const model::OomMessageFigure& f : model::OomMessageFigures()) {
    if (!(first.*f.field) && (repeat.*f.field)) first.*f.field = repeat.*f.field;
  }
  for (std::string OomMessage::*name : {&OomMessage::device, &OomMessage::allocator}) {
    if ((first.*name).empty()) first.*name = repeat.*name;
  }
  if (!first.gpu) first.gpu = repeat.gpu;
}

// Unsets every figure printed as "not available" (model::PrintedBytes::IsNotAvailable) and says
// so in `not_available` and in the kept text.
void DropNotAvailable(OomMessage& m) {
  std::vector<std::string> printed;
  for (const model::OomMessageFigure& f : model::OomMessageFigures()) {
    std::optional<PrintedBytes>& field = m.*f.field;
    if (field && field->IsNotAvailable()) {
      m.not_available.push_back(f.key);
      printed.push_back(field->text);
      field.reset();
    }
  }
  for (auto it = m.processes.begin(); it != m.processes.end();) {
    if (it->in_use.IsNotAvailable()) {
      m.not_available.push_back(fmt::format("process {}", it->pid));
      printed.push_back(it->in_use.text);
      it = m.processes.erase(it);
    } else {
      ++it;
    }
  }
  for (const std::string& p : printed) {
    for (size_t at = m.text.find(p); at != std::string::npos; at = m.text.find(p, at)) {
      m.text.replace(at, p.size(), "[not available]");
    }
  }
}

}  // namespace

std::optional<PrintedBytes> ParsePrintedBytes(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  PrintedBytes out;
  const size_t n = text.empty() ? 0 : ReadPrintedBytes(text, 0, &out);
  if (n == 0 || n != text.size()) return std::nullopt;
  return out;
}

std::vector<OomMessage> FindOomMessages(std::string_view text, size_t max_messages,
                                        size_t* left_out) {
  const std::string clean = WithoutEscapes(text);
  // One anchor more than the messages kept, to end the last one's window.
  size_t total = 0;
  const std::vector<Anchor> anchors =
      FindAnchors(clean, max_messages < SIZE_MAX ? max_messages + 1 : max_messages, &total);
  std::vector<OomMessage> out;
  size_t line = 1, counted_to = 0;
  size_t last_kept = 0;  // where the last message kept starts
  if (left_out != nullptr) *left_out = 0;
  for (size_t k = 0; k < anchors.size(); ++k) {
    if (out.size() >= max_messages) {
      if (left_out != nullptr) *left_out = total - k;
      break;
    }
    const Anchor& a = anchors[k];
    line +=
        static_cast<size_t>(std::count(clean.begin() + static_cast<std::ptrdiff_t>(counted_to),
                                       clean.begin() + static_cast<std::ptrdiff_t>(a.pos), '\n'));
    counted_to = a.pos;
    const size_t next = k + 1 < anchors.size() ? anchors[k + 1].pos : clean.size();
    const size_t limit = std::min(next, a.pos + kWindow);
    const size_t end = MessageEnd(clean, a.pos, limit);
    OomMessage m;
    m.kind = a.kind;
    m.backend = std::string(a.backend);
    m.library = std::string(a.library);
    m.line = line;
    // A "[rank3]:" prefix at the start of the message's line.
    const size_t line_start = clean.rfind('\n', a.pos == 0 ? 0 : a.pos - 1);
    size_t p = line_start == std::string::npos || a.pos == 0 ? 0 : line_start + 1;
    while (p < a.pos && IsSpace(clean[p])) ++p;
    int rank = 0;
    if (RankPrefix(clean, p, &rank) > 0) m.rank = rank;
    const std::string flat = Flatten(std::string_view(clean).substr(a.pos, end - a.pos));
    m.text = flat.substr(0, kKeptText);
    if (a.kind == OomMessageKind::kAllocatorBare) {
      ReadAllocatorClauses(Tokenize(flat), m);
    } else if (a.kind == OomMessageKind::kAsyncAllocator) {
      if (!ReadAsyncAllocatorClauses(Tokenize(flat), m)) continue;  // not an OOM after all
    } else if (a.kind == OomMessageKind::kMps) {
      ReadMpsClauses(Tokenize(flat), m);
    } else if (a.kind == OomMessageKind::kXla || a.kind == OomMessageKind::kTensorflow) {
      if (a.kind == OomMessageKind::kXla) {
        ReadXlaClauses(Tokenize(flat), m);
      } else {
        ReadTensorflowClauses(flat, m);
      }
      // The BFC allocator logs its figures before the error: read back to the previous message
      // (at most kBfcLogWindow), each stretch of text once.
      const size_t from = std::max(k > 0 ? anchors[k - 1].pos : 0,
                                   a.pos > kBfcLogWindow ? a.pos - kBfcLogWindow : 0);
      ReadBfcLog(std::string_view(clean).substr(from, a.pos - from), m);
      if (!out.empty() && SameFailure(out.back(), m) && a.pos - last_kept < kRepeatGap) {
        MergeRepeat(out.back(), m);
        continue;
      }
    }
    DropNotAvailable(m);
    last_kept = a.pos;
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace vramscope::sources
