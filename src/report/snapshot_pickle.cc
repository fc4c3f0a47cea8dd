#include "report/snapshot_pickle.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>

namespace vramscope::report {

namespace {

// The opcodes of pickle protocol 2 this writer needs (Python's pickletools names).
enum : char {
  kProto = '\x80',
  kStop = '.',
  kMark = '(',
  kEmptyDict = '}',
  kEmptyList = ']',
  kSetItems = 'u',
  kAppends = 'e',
  kBinInt = 'J',
  kLong1 = '\x8a',
  kBinFloat = 'G',
  kBinUnicode = 'X',
  kNone = 'N',
  kNewTrue = '\x88',
  kNewFalse = '\x89',
  kTuple2 = '\x86',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kBinGet = 'h',
  kLongBinGet = 'j',
};

// Appends values; containers are opened with Mark and closed by Items/Append (one SETITEMS or
// APPENDS per container: Python's unpickler takes any number of items under one mark).
class PickleWriter {
 public:
  PickleWriter() { out_ += {kProto, '\x02'}; }
  std::string Finish() {
    out_ += kStop;
    return std::move(out_);
  }
  void Int(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += kBinInt;
      Raw(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
      return;
    }
    Long(static_cast<uint64_t>(v), v < 0);
  }
  void UInt(uint64_t v) {
    if (v <= INT32_MAX) {
      Int(static_cast<int64_t>(v));
    } else {
      Long(v, false);
    }
  }
  void Float(double v) {
    out_ += kBinFloat;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, 8);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void Str(std::string_view s) {
    out_ += kBinUnicode;
    Raw(static_cast<uint32_t>(s.size()), 4);
    out_ += s;
  }
  // A string written once and referred to after (keys, file and function names), as Python's
  // pickler shares an object it meets again.
  void SharedStr(std::string_view s) {
    if (auto it = strings_.find(s); it != strings_.end()) {
      Get(it->second);
      return;
    }
    Str(s);
    strings_.emplace(std::string(s), Put());
  }
  // Memo: Put() stores the value just written under a new index; Get(index) pushes it again.
  uint32_t Put() {
    const uint32_t index = next_memo_++;
    if (index < 256) {
      out_ += kBinPut;
      out_ += static_cast<char>(index);
    } else {
      out_ += kLongBinPut;
      Raw(index, 4);
    }
    return index;
  }
  void Get(uint32_t index) {
    if (index < 256) {
      out_ += kBinGet;
      out_ += static_cast<char>(index);
    } else {
      out_ += kLongBinGet;
      Raw(index, 4);
    }
  }
  void Bool(bool b) { out_ += b ? kNewTrue : kNewFalse; }
  void None() { out_ += kNone; }
  void Tuple2() { out_ += kTuple2; }
  // A dict or list: Open, the items (key, value pairs for a dict), Close.
  void OpenDict() {
    out_ += kEmptyDict;
    out_ += kMark;
  }
  void CloseDict() { out_ += kSetItems; }
  void OpenList() {
    out_ += kEmptyList;
    out_ += kMark;
  }
  void CloseList() { out_ += kAppends; }

 private:
  void Raw(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  // LONG1: little-endian two's complement in as few bytes as keep the sign.
  void Long(uint64_t v, bool negative) {
    std::string bytes;
    uint64_t x = v;
    for (int i = 0; i < 8; ++i) {
      bytes += static_cast<char>(x & 0xff);
      x >>= 8;
    }
    while (bytes.size() > 1) {
      const auto last = static_cast<uint8_t>(bytes.back());
      const auto prev = static_cast<uint8_t>(bytes[bytes.size() - 2]);
      if (!negative && last == 0 && (prev & 0x80) == 0) {
        bytes.pop_back();
      } else if (negative && last == 0xff && (prev & 0x80) != 0) {
        bytes.pop_back();
      } else {
        break;
      }
    }
    if (!negative && (static_cast<uint8_t>(bytes.back()) & 0x80) != 0) bytes += '\0';
    out_ += kLong1;
    out_ += static_cast<char>(bytes.size());
    out_ += bytes;
  }

  std::string out_;
  uint32_t next_memo_ = 0;
  std::map<std::string, uint32_t, std::less<>> strings_;
};

// Each distinct frame is one dict, written once and shared after (PyTorch's snapshots share
// them too): a piece is about the size of the file it came from.
class FrameWriter {
 public:
  FrameWriter(PickleWriter& w, const model::Trace& t) : w_(w), t_(t) {}
  void List(model::StackId stack) {
    w_.OpenList();
    if (stack != model::kEmptyStack) {
      for (const model::FrameId id : t_.stacks.Frames(stack)) One(id);
    }
    w_.CloseList();
  }

 private:
  void One(model::FrameId id) {
    if (auto it = memo_.find(id); it != memo_.end()) {
      w_.Get(it->second);
      return;
    }
    const model::Frame& f = t_.frames.Get(id);
    w_.OpenDict();
    w_.SharedStr("filename");
    w_.SharedStr(t_.strings.Get(f.filename));
    w_.SharedStr("line");
    w_.Int(f.line);
    w_.SharedStr("name");
    w_.SharedStr(t_.strings.Get(f.function));
    w_.CloseDict();
    memo_.emplace(id, w_.Put());
  }

  PickleWriter& w_;
  const model::Trace& t_;
  std::map<model::FrameId, uint32_t> memo_;
};

void Segment(PickleWriter& w, FrameWriter& frames, const SnapshotPart& p, const model::Segment& s) {
  w.OpenDict();
  w.SharedStr("device");
  w.Int(s.device);
  w.SharedStr("address");
  w.UInt(s.address);
  w.SharedStr("total_size");
  w.UInt(s.total_size);
  w.SharedStr("allocated_size");
  w.UInt(s.allocated_size);
  w.SharedStr("active_size");
  w.UInt(s.active_size);
  w.SharedStr("requested_size");
  w.UInt(s.requested_size);
  w.SharedStr("stream");
  w.UInt(s.stream);
  w.SharedStr("segment_type");
  w.Str(model::PoolName(s.pool));
  w.SharedStr("segment_pool_id");
  w.Int(s.pool_id[0]);
  w.Int(s.pool_id[1]);
  w.Tuple2();
  w.SharedStr("is_expandable");
  w.Bool(s.is_expandable);
  w.SharedStr("frames");
  frames.List(s.stack);
  w.SharedStr("blocks");
  w.OpenList();
  for (uint32_t k = 0; k < s.block_count; ++k) {
    const model::Block& b = p.blocks[s.first_block + k];
    w.OpenDict();
    w.SharedStr("address");
    w.UInt(b.address);
    w.SharedStr("size");
    w.UInt(b.size);
    w.SharedStr("requested_size");
    w.UInt(b.requested_size);
    w.SharedStr("state");
    w.Str(model::BlockStateName(b.state));
    w.SharedStr("frames");
    frames.List(b.stack);
    w.CloseDict();
  }
  w.CloseList();
  w.CloseDict();
}

void Entry(PickleWriter& w, FrameWriter& frames, const model::Trace& t, size_t i) {
  const model::Events& ev = t.events;
  const auto key = static_cast<uint32_t>(i);
  w.OpenDict();
  w.SharedStr("action");
  if (ev.action[i] == model::Action::kOther && ev.other_action.count(key) != 0) {
    w.Str(t.strings.Get(ev.other_action.at(key)));
  } else {
    w.Str(model::ActionName(ev.action[i]));
  }
  w.SharedStr("addr");
  w.UInt(ev.addr[i]);
  w.SharedStr("size");
  w.UInt(ev.size[i]);
  w.SharedStr("stream");
  w.UInt(ev.stream[i]);
  if (ev.time_us[i] != model::kNoTime) {
    w.SharedStr("time_us");
    w.Int(ev.time_us[i]);
  }
  if (auto it = ev.oom_device_free.find(key); it != ev.oom_device_free.end()) {
    w.SharedStr("device_free");
    w.UInt(it->second);
  }
  if (auto it = ev.compile_context.find(key); it != ev.compile_context.end()) {
    w.SharedStr("compile_context");
    w.Str(t.strings.Get(it->second));
  }
  if (auto it = ev.user_metadata.find(key); it != ev.user_metadata.end()) {
    w.SharedStr("user_metadata");
    w.Str(t.strings.Get(it->second));
  }
  w.SharedStr("frames");
  frames.List(ev.stack[i]);
  w.CloseDict();
}

// A recorded setting's text as the value PyTorch wrote: True/False, an integer, a float, else
// the text.
void Setting(PickleWriter& w, const std::string& text) {
  if (text == "True" || text == "False") {
    w.Bool(text == "True");
    return;
  }
  int64_t i = 0;
  const char* end = text.data() + text.size();
  if (auto [p, ec] = std::from_chars(text.data(), end, i); ec == std::errc() && p == end) {
    w.Int(i);
    return;
  }
  double d = 0;
  if (auto [p, ec] = std::from_chars(text.data(), end, d); ec == std::errc() && p == end) {
    w.Float(d);
    return;
  }
  w.Str(text);
}

// The settings as PyTorch nests them: "roundup_power2_divisions.1" is key 1 of a dict.
void Settings(PickleWriter& w, const model::Trace& t) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> nested;
  std::vector<std::pair<std::string, std::string>> flat;
  for (const auto& [key, value] : t.allocator_settings) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) {
      flat.emplace_back(key, value);
    } else {
      nested[key.substr(0, dot)].emplace_back(key.substr(dot + 1), value);
    }
  }
  w.OpenDict();
  for (const auto& [key, value] : flat) {
    w.Str(key);
    if (value == "{}") {
      w.OpenDict();
      w.CloseDict();
    } else {
      Setting(w, value);
    }
  }
  for (const auto& [key, items] : nested) {
    w.Str(key);
    w.OpenDict();
    for (const auto& [inner, value] : items) {
      Setting(w, inner);
      Setting(w, value);
    }
    w.CloseDict();
  }
  w.CloseDict();
}

}  // namespace

// PROTO 2, EMPTY_DICT, MARK, BINUNICODE "segments", BINPUT 0: the writer's first bytes. Python
// memoizes the dict itself before its first key, so its pickles never begin this way.
constexpr std::string_view kOpening("\x80\x02}(X\x08\x00\x00\x00segmentsq\x00", 17);

bool IsSnapshotPickleWeWrote(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char head[kOpening.size()] = {};
  const size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  return n == sizeof(head) && std::string_view(head, n) == kOpening;
}

std::string SnapshotPickle(const SnapshotPart& part) {
  const model::Trace& t = *part.trace;
  PickleWriter w;
  w.OpenDict();
  w.SharedStr("segments");
  w.OpenList();
  FrameWriter frames(w, t);
  for (const model::Segment& s : part.segments) Segment(w, frames, part, s);
  w.CloseList();
  // device_traces: one list per device ordinal up to the highest written.
  int32_t highest = -1;
  for (const auto& [device, range] : part.ranges) highest = std::max(highest, device);
  for (const model::Segment& s : part.segments) highest = std::max(highest, s.device);
  w.SharedStr("device_traces");
  w.OpenList();
  for (int32_t d = 0; d <= highest; ++d) {
    w.OpenList();
    for (const auto& [device, range] : part.ranges) {
      if (device != d) continue;
      for (size_t i = range.first; i < range.second; ++i) Entry(w, frames, t, i);
    }
    w.CloseList();
  }
  w.CloseList();
  w.SharedStr("allocator_settings");
  Settings(w, t);
  w.CloseDict();
  return w.Finish();
}

}  // namespace vramscope::report
