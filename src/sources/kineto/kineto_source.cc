#include "sources/kineto/kineto_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/json_sax.h"
#include "sources/kineto/kineto_fields.h"

namespace vramscope::kineto {

namespace {

using namespace fields;  // NOLINT(google-build-using-namespace): this file's own vocabulary
using model::Action;
using model::FrameId;
using model::StackId;

// No device holds a pebibyte: larger byte counts are corrupt.
constexpr auto kMaxBytes = static_cast<int64_t>(model::kMaxPlausibleBytes);
constexpr int64_t kMaxDeviceId = model::kMaxDeviceOrdinal;
// Each [memory] event becomes at most three trace events (a free's two, a reserved change).
constexpr uint64_t kMaxMemoryEvents = model::kMaxEvents / 3;
// Legacy traces have no addresses: allocations get synthetic ones from here, far above any
// user-space address, 512 B apart.
constexpr uint64_t kSyntheticAddressBase = uint64_t{1} << 56;
constexpr uint64_t kSyntheticAddressStep = 512;

constexpr int kDeviceTypeCpu = 0;
constexpr int kDeviceTypeCuda = 1;
constexpr int kDeviceTypeHip = 6;

const char* const kWhatToDo =
    "vramscope reads traces written by torch.profiler.profile(profile_memory=True) and "
    "export_chrome_trace()";

// ---- what the parse keeps --------------------------------------------------------------------

struct MemoryEvent {
  int64_t ts_ns = 0;
  uint32_t order = 0;  // index in traceEvents
  uint32_t thread = 0;
  int32_t device = 0;
  int64_t bytes = 0;
  uint64_t addr = 0;
  int64_t total_allocated = -1;  // -1: not recorded
  int64_t total_reserved = -1;
  StackId stack = model::kEmptyStack;
};

enum class SpanKind : uint8_t { kPython, kModule, kOperator };

// A complete ("X") event that can enclose an allocation: an operator, a Python function, an
// nn.Module or a record_function annotation.
struct Span {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t thread = 0;
  uint32_t label = 0;  // into Parser::labels_
  uint32_t order = 0;
  uint32_t call_stack = UINT32_MAX;  // into Parser::call_stacks_ (legacy "Call stack" arg)
};

struct Label {
  SpanKind kind;
  std::string name;
};

struct Step {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string name;
};

// The SAX consumer: walks the document once and keeps only the fields the trace needs.
class Parser {
 public:
  using number_integer_t = int64_t;
  using number_unsigned_t = uint64_t;
  using number_float_t = double;
  using string_t = std::string;

  explicit Parser(const std::string& path) : path_(path) {}

  // --- the JSON reader's events (common/json_sax.h) ---
  bool null() {
    return OnScalar([](Scalar& s) { s.kind = Scalar::Kind::kNull; });
  }
  bool boolean(bool value) {
    return OnScalar([&](Scalar& s) {
      s.kind = Scalar::Kind::kBool;
      s.i = value ? 1 : 0;
    });
  }
  bool number_integer(number_integer_t value) {
    return OnScalar([&](Scalar& s) {
      s.kind = Scalar::Kind::kInt;
      s.i = value;
    });
  }
  bool number_unsigned(number_unsigned_t value) {
    return OnScalar([&](Scalar& s) {
      if (value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        s.kind = Scalar::Kind::kInt;
        s.i = static_cast<int64_t>(value);
      } else {
        s.kind = Scalar::Kind::kBigUint;
        s.u = value;
      }
    });
  }
  bool number_float(number_float_t value, const string_t& literal) {
    return OnScalar([&](Scalar& s) {
      s.kind = Scalar::Kind::kFloat;
      s.d = value;
      s.text.assign(literal);
    });
  }
  bool string(string_t& value) {
    return OnScalar([&](Scalar& s) {
      s.kind = Scalar::Kind::kString;
      s.text.swap(value);
    });
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) {
      root_object_ = true;
      depth_ = 1;
      return true;
    }
    if (!BeforeContainer("an object")) return false;
    if (depth_ == events_depth_) {
      for (Scalar& s : fields_) s.kind = Scalar::Kind::kAbsent;
      ++depth_;
      event_depth_ = depth_;
      return true;
    }
    if (depth_ == event_depth_ && pending_ == Key::kArgs) {
      pending_ = Key::kNone;
      ++depth_;
      args_depth_ = depth_;
      return true;
    }
    MarkContainer();
    ++depth_;
    return true;
  }
  bool end_object() {
    if (depth_ == args_depth_) {
      args_depth_ = -1;
    } else if (depth_ == event_depth_) {
      event_depth_ = -1;
      if (!OnEvent()) return false;
      ++event_index_;
    }
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) {
      root_array_ = true;
      depth_ = 1;
      events_depth_ = 1;
      has_events_ = true;
      return true;
    }
    if (root_object_ && depth_ == 1 && pending_root_ == RootKey::kTraceEvents) {
      pending_root_ = RootKey::kNone;
      has_events_ = true;
      ++depth_;
      events_depth_ = depth_;
      return true;
    }
    if (!BeforeContainer("a list")) return false;
    MarkContainer();
    ++depth_;
    return true;
  }
  bool end_array() {
    if (depth_ == events_depth_) events_depth_ = -1;
    --depth_;
    return true;
  }
  bool key(string_t& k) {
    if (root_object_ && depth_ == 1) {
      pending_root_ = RootKey::kNone;
      if (k == "traceEvents") {
        pending_root_ = RootKey::kTraceEvents;
      } else if (k == "schemaVersion") {
        pending_root_ = RootKey::kSchemaVersion;
      }
      if (k != "traceEvents" && root_keys_.size() < 6) root_keys_.push_back(k.substr(0, 64));
      ++root_key_count_;
    } else if (depth_ == event_depth_) {
      pending_ = EventKey(k);
    } else if (depth_ == args_depth_) {
      pending_ = ArgsKey(k);
    }
    return true;
  }
  // --- after the parse ---
  const std::string& error() const { return error_; }
  Result<model::Trace> Finish();

 private:
  enum class RootKey : uint8_t { kNone, kTraceEvents, kSchemaVersion };

  template <typename Fill>
  bool OnScalar(Fill&& fill) {
    if (depth_ == 0) {
      return Fail(fmt::format("{}: the JSON text is a single value, not a profiler trace; {}",
                              path_, kWhatToDo));
    }
    if (root_object_ && depth_ == 1) {
      Scalar s;
      if (pending_root_ == RootKey::kTraceEvents) {
        fill(s);
        return Fail(fmt::format("{}: 'traceEvents' is {}, expected a list of events; {}", path_,
                                Describe(s), kWhatToDo));
      }
      if (pending_root_ == RootKey::kSchemaVersion) {
        fill(s);
        if (s.kind == Scalar::Kind::kInt) schema_version_ = std::to_string(s.i);
        if (s.kind == Scalar::Kind::kString) schema_version_ = Quote(s.text);
      }
      pending_root_ = RootKey::kNone;
      return true;
    }
    if (depth_ == events_depth_) {
      Scalar s;
      fill(s);
      return Fail(fmt::format("{}: event {} is {}, expected an event object; {}", path_,
                              event_index_, Describe(s), kWhatToDo));
    }
    if (depth_ == event_depth_ || depth_ == args_depth_) {
      const Key k = pending_;
      pending_ = Key::kNone;
      if (k != Key::kNone) fill(fields_[static_cast<size_t>(k)]);
    }
    return true;
  }
  // Checks a container about to open at the current depth where the layout requires otherwise.
  bool BeforeContainer(const char* what) {
    if (root_object_ && depth_ == 1) {
      if (pending_root_ == RootKey::kTraceEvents) {
        return Fail(fmt::format("{}: 'traceEvents' is {}, expected a list of events; {}", path_,
                                what, kWhatToDo));
      }
      pending_root_ = RootKey::kNone;
      return true;
    }
    if (depth_ == events_depth_ && std::string_view(what) != "an object") {
      return Fail(fmt::format("{}: event {} is {}, expected an event object; {}", path_,
                              event_index_, what, kWhatToDo));
    }
    return true;
  }
  // A container given as the value of a field the parser keeps: remembered as the wrong type.
  void MarkContainer() {
    if (depth_ == event_depth_ || depth_ == args_depth_) {
      const Key k = pending_;
      pending_ = Key::kNone;
      if (k != Key::kNone) fields_[static_cast<size_t>(k)].kind = Scalar::Kind::kContainer;
    }
  }
  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }
  const Scalar& Field(Key k) const { return fields_[static_cast<size_t>(k)]; }

  bool OnEvent();
  bool OnMemory();
  bool OnSpan();
  // A [memory] field that must be an integer in [lo, hi].
  bool RequireInt(Key k, int64_t lo, int64_t hi, int64_t* out);
  bool OptionalInt(Key k, int64_t lo, int64_t hi, bool* present, int64_t* out);
  bool SchemaConsistent(Key k, bool present, std::optional<bool>& schema);
  uint32_t ThreadOf();
  uint32_t LabelOf(SpanKind kind, const std::string& name);

  // Stacks and the trace.
  void AssignStacks(model::Trace& trace);
  FrameId FrameOfLabel(model::Trace& trace, uint32_t label);
  StackId CallStackOf(model::Trace& trace, uint32_t call_stack);
  FrameId PythonFrame(model::Trace& trace, std::string_view text);
  std::string NoMemoryEventsMessage() const;

  const std::string& path_;
  std::string error_;

  // Where the parser is.
  // 64-bit: a (gunzipped) input of billions of '[' must not overflow them.
  int64_t depth_ = 0;
  int64_t events_depth_ = -1;
  int64_t event_depth_ = -1;
  int64_t args_depth_ = -1;
  bool root_object_ = false;
  bool root_array_ = false;
  bool has_events_ = false;
  RootKey pending_root_ = RootKey::kNone;
  Key pending_ = Key::kNone;
  std::array<Scalar, static_cast<size_t>(Key::kCount)> fields_;
  uint64_t event_index_ = 0;
  std::vector<std::string> root_keys_;
  size_t root_key_count_ = 0;
  std::string schema_version_;

  // What it keeps.
  std::vector<MemoryEvent> memory_;
  std::vector<Span> spans_;
  std::vector<Step> steps_;
  std::vector<Label> labels_;
  std::unordered_map<std::string, uint32_t> label_index_;
  std::vector<std::string> call_stacks_;
  std::unordered_map<std::string, uint32_t> call_stack_index_;
  std::unordered_map<std::string, uint32_t> threads_;
  std::string scratch_;

  // Schema: decided by the first GPU [memory] event, then required of all.
  std::optional<bool> has_addr_, has_total_allocated_, has_total_reserved_;
  bool saw_cuda_ = false, saw_hip_ = false;
  uint64_t memory_seen_ = 0;  // every [memory] event, any device
  uint64_t cpu_skipped_ = 0;
  std::map<int64_t, uint64_t> other_types_skipped_;
  uint64_t zero_bytes_skipped_ = 0;
  uint64_t unusable_spans_ = 0;
  bool saw_python_function_ = false;
  bool saw_call_stack_ = false;

  // Stack building caches.
  std::vector<FrameId> label_frames_;
  std::vector<StackId> call_stack_ids_;
};

constexpr FrameId kNoFrame = std::numeric_limits<FrameId>::max();
constexpr StackId kNoStack = std::numeric_limits<StackId>::max();

bool Parser::RequireInt(Key k, int64_t lo, int64_t hi, int64_t* out) {
  const Scalar& v = Field(k);
  if (!v.present()) {
    return Fail(fmt::format(
        "{}: [memory] event {} has no '{}'; a profiler [memory] event carries 'Device Type', "
        "'Device Id' and 'Bytes' ({})",
        path_, event_index_, KeyName(k), kWhatToDo));
  }
  const auto i = AsInt64(v);
  if (!i) {
    return Fail(fmt::format("{}: [memory] event {}: '{}' is {}, expected an integer; {}", path_,
                            event_index_, KeyName(k), Describe(v), kWhatToDo));
  }
  if (*i < lo || *i > hi) {
    return Fail(fmt::format(
        "{}: [memory] event {}: '{}' is {}, outside [{}, {}]: the trace is corrupt; re-export it "
        "with export_chrome_trace()",
        path_, event_index_, KeyName(k), *i, lo, hi));
  }
  *out = *i;
  return true;
}

bool Parser::OptionalInt(Key k, int64_t lo, int64_t hi, bool* present, int64_t* out) {
  *present = Field(k).present();
  if (!*present) return true;
  return RequireInt(k, lo, hi, out);
}

bool Parser::SchemaConsistent(Key k, bool present, std::optional<bool>& schema) {
  if (!schema) {
    schema = present;
    return true;
  }
  if (*schema == present) return true;
  return Fail(fmt::format(
      "{}: [memory] event {} {} '{}' while earlier GPU [memory] events {}: a mix of two "
      "profiler schemas (a merged or edited trace); export one trace per run",
      path_, event_index_, present ? "has" : "lacks", KeyName(k), present ? "lack it" : "have it"));
}

uint32_t Parser::ThreadOf() {
  // pid and tid as text: legacy traces write the tid of operators as a string ("25738") and
  // that of [memory] events as a number; both name the same thread.
  scratch_.clear();
  for (Key k : {Key::kPid, Key::kTid}) {
    const Scalar& v = Field(k);
    switch (v.kind) {
      case Scalar::Kind::kInt:
        scratch_ += std::to_string(v.i);
        break;
      case Scalar::Kind::kBigUint:
        scratch_ += std::to_string(v.u);
        break;
      case Scalar::Kind::kFloat:
      case Scalar::Kind::kString:
        scratch_ += v.text;
        break;
      default:
        break;
    }
    scratch_ += '\x1f';
  }
  const auto it = threads_.find(scratch_);
  if (it != threads_.end()) return it->second;
  const auto id = static_cast<uint32_t>(threads_.size());
  threads_.emplace(scratch_, id);
  return id;
}

uint32_t Parser::LabelOf(SpanKind kind, const std::string& name) {
  scratch_.clear();
  scratch_ += static_cast<char>('0' + static_cast<int>(kind));
  scratch_ += name;
  const auto it = label_index_.find(scratch_);
  if (it != label_index_.end()) return it->second;
  const auto id = static_cast<uint32_t>(labels_.size());
  labels_.push_back({kind, name});
  label_index_.emplace(scratch_, id);
  return id;
}

bool Parser::OnEvent() {
  const Scalar& name = Field(Key::kName);
  if (!name.IsString()) return true;
  if (name.text == "[memory]") return OnMemory();
  const Scalar& ph = Field(Key::kPh);
  if (ph.IsString() && ph.text == "X") return OnSpan();
  return true;
}

bool Parser::OnMemory() {
  const Scalar& ph = Field(Key::kPh);
  if (ph.present() && !(ph.IsString() && (ph.text == "i" || ph.text == "I"))) return true;
  ++memory_seen_;
  int64_t device_type = 0;
  if (!RequireInt(Key::kDeviceType, std::numeric_limits<int32_t>::min(),
                  std::numeric_limits<int32_t>::max(), &device_type)) {
    return false;
  }
  if (device_type == kDeviceTypeCpu) {
    ++cpu_skipped_;
    return true;
  }
  if (device_type != kDeviceTypeCuda && device_type != kDeviceTypeHip) {
    ++other_types_skipped_[device_type];
    return true;
  }
  MemoryEvent m;
  int64_t device = 0;
  if (!RequireInt(Key::kDeviceId, 0, kMaxDeviceId, &device)) return false;
  m.device = static_cast<int32_t>(device);
  if (!RequireInt(Key::kBytes, -kMaxBytes, kMaxBytes, &m.bytes)) return false;
  const Scalar& addr = Field(Key::kAddr);
  if (addr.present()) {
    const auto a = AsUint64(addr);
    if (!a) {
      return Fail(
          fmt::format("{}: [memory] event {}: 'Addr' is {}, expected a non-negative integer; {}",
                      path_, event_index_, Describe(addr), kWhatToDo));
    }
    m.addr = *a;
  }
  bool has_allocated = false, has_reserved = false;
  if (!OptionalInt(Key::kTotalAllocated, 0, kMaxBytes, &has_allocated, &m.total_allocated) ||
      !OptionalInt(Key::kTotalReserved, 0, kMaxBytes, &has_reserved, &m.total_reserved)) {
    return false;
  }
  if (!SchemaConsistent(Key::kAddr, addr.present(), has_addr_) ||
      !SchemaConsistent(Key::kTotalAllocated, has_allocated, has_total_allocated_) ||
      !SchemaConsistent(Key::kTotalReserved, has_reserved, has_total_reserved_)) {
    return false;
  }
  const Scalar& ts = Field(Key::kTs);
  const auto t = TimeNs(ts);
  if (!t) {
    return Fail(fmt::format(
        "{}: [memory] event {}: 'ts' is {}, expected a time in microseconds (a number below "
        "9e15); {}",
        path_, event_index_, Describe(ts), kWhatToDo));
  }
  m.ts_ns = *t;
  if (m.bytes == 0) {
    ++zero_bytes_skipped_;
    return true;
  }
  if (memory_.size() >= kMaxMemoryEvents) {
    return Fail(
        fmt::format("{}: more than {} GPU [memory] events; vramscope reads at most that many",
                    path_, kMaxMemoryEvents));
  }
  (device_type == kDeviceTypeHip ? saw_hip_ : saw_cuda_) = true;
  m.order = static_cast<uint32_t>(event_index_);
  m.thread = ThreadOf();
  memory_.push_back(m);
  return true;
}

bool Parser::OnSpan() {
  const std::string& name = Field(Key::kName).text;
  const Scalar& cat = Field(Key::kCat);
  SpanKind kind = SpanKind::kOperator;
  if (cat.IsString() && cat.text == "python_function") {
    saw_python_function_ = true;
    kind = name.rfind("nn.Module: ", 0) == 0 ? SpanKind::kModule : SpanKind::kPython;
  } else if (!cat.IsString() ||
             !(cat.text == "cpu_op" || cat.text == "Operator" || cat.text == "user_annotation")) {
    return true;  // GPU kernels, runtime calls, the GPU side of annotations, ...
  }
  // A profiler step (a user_annotation, an "Operator" in torch 1.9): an annotation, not a frame.
  const bool step = kind == SpanKind::kOperator && name.rfind("ProfilerStep#", 0) == 0;
  const auto start = TimeNs(Field(Key::kTs));
  const auto dur = TimeNs(Field(Key::kDur));
  int64_t end = 0;
  if (!start || !dur || *dur < 0 || __builtin_add_overflow(*start, *dur, &end)) {
    ++unusable_spans_;
    return true;
  }
  if (step) {
    steps_.push_back({*start, end, name.substr(0, 200)});
    return true;
  }
  Span s;
  s.start_ns = *start;
  s.end_ns = end;
  s.thread = ThreadOf();
  s.label = LabelOf(kind, name);
  s.order = static_cast<uint32_t>(event_index_);
  const Scalar& cs = Field(Key::kCallStack);
  if (kind == SpanKind::kOperator && cs.IsString() && !cs.text.empty()) {
    saw_call_stack_ = true;
    const auto it = call_stack_index_.find(cs.text);
    if (it != call_stack_index_.end()) {
      s.call_stack = it->second;
    } else {
      s.call_stack = static_cast<uint32_t>(call_stacks_.size());
      call_stacks_.push_back(cs.text);
      call_stack_index_.emplace(cs.text, s.call_stack);
    }
  }
  spans_.push_back(s);
  return true;
}

// "torch/nn/modules/linear.py(125): forward" -> (file, line, function); "<built-in method to of
// Tensor object at 0x7f...>" -> function without the object's address (which would make every
// call a different frame).
FrameId Parser::PythonFrame(model::Trace& trace, std::string_view text) {
  model::Frame f;
  f.kind = model::FrameKind::kPython;
  const size_t close = text.find("): ");
  const size_t open = close == std::string_view::npos ? close : text.rfind('(', close);
  bool parsed = false;
  if (open != std::string_view::npos && open + 1 < close && close - open - 1 <= 9) {
    int32_t line = 0;
    bool digits = true;
    for (size_t i = open + 1; i < close; ++i) {
      if (text[i] < '0' || text[i] > '9') {
        digits = false;
        break;
      }
      line = line * 10 + (text[i] - '0');
    }
    if (digits) {
      f.filename = trace.strings.Intern(text.substr(0, open));
      f.line = line;
      f.function = trace.strings.Intern(text.substr(close + 3));
      parsed = true;
    }
  }
  if (!parsed) {
    std::string function(text);
    if (function.rfind("<built-in ", 0) == 0) {
      if (const size_t at = function.rfind(" at 0x");
          at != std::string::npos && function.back() == '>') {
        function.erase(at, function.size() - 1 - at);
      }
    }
    f.function = trace.strings.Intern(function);
  }
  return trace.frames.Intern(f);
}

FrameId Parser::FrameOfLabel(model::Trace& trace, uint32_t label) {
  if (label_frames_[label] != kNoFrame) return label_frames_[label];
  const Label& l = labels_[label];
  FrameId id = 0;
  switch (l.kind) {
    case SpanKind::kOperator: {
      model::Frame f;
      f.kind = model::FrameKind::kNative;
      f.function = trace.strings.Intern(l.name);
      id = trace.frames.Intern(f);
      break;
    }
    case SpanKind::kModule: {
      model::Frame f;
      f.kind = model::FrameKind::kPython;
      f.filename = trace.strings.Intern("nn.Module");
      f.function = trace.strings.Intern(std::string_view(l.name).substr(11));
      id = trace.frames.Intern(f);
      break;
    }
    case SpanKind::kPython:
      id = PythonFrame(trace, l.name);
      break;
  }
  label_frames_[label] = id;
  return id;
}

// The Python frames of a legacy "Call stack" arg ("file.py(12): f;main.py(3): <module>",
// innermost first) as a stack.
StackId Parser::CallStackOf(model::Trace& trace, uint32_t call_stack) {
  if (call_stack_ids_[call_stack] != kNoStack) return call_stack_ids_[call_stack];
  std::vector<FrameId> frames;
  std::string_view rest = call_stacks_[call_stack];
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string_view part = rest.substr(0, semi);
    if (!part.empty()) frames.push_back(PythonFrame(trace, part));
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  return call_stack_ids_[call_stack] = trace.stacks.Intern(frames);
}

// The operators and Python functions open at each [memory] event of a thread: the thread's spans
// sorted once (outer before inner) and swept together with its memory events.
void Parser::AssignStacks(model::Trace& trace) {
  label_frames_.assign(labels_.size(), kNoFrame);
  call_stack_ids_.assign(call_stacks_.size(), kNoStack);
  // With Python function events, the nesting already gives the Python stack.
  const bool use_call_stacks = !saw_python_function_;
  auto rank = [&](const Span& s) { return labels_[s.label].kind == SpanKind::kOperator ? 1 : 0; };
  std::sort(spans_.begin(), spans_.end(), [&](const Span& a, const Span& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;  // the enclosing one first
    if (rank(a) != rank(b)) return rank(a) < rank(b);      // Python calls operators
    return a.order < b.order;
  });
  std::vector<uint32_t> by_thread(memory_.size());
  for (uint32_t i = 0; i < by_thread.size(); ++i) by_thread[i] = i;
  std::sort(by_thread.begin(), by_thread.end(), [&](uint32_t a, uint32_t b) {
    const MemoryEvent& x = memory_[a];
    const MemoryEvent& y = memory_[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.order < y.order;
  });

  std::vector<uint32_t> open;       // spans enclosing the current time, outermost first
  std::vector<StackId> open_stack;  // the stack up to and including each (kNoStack: not yet)
  auto stack_of_top = [&]() -> StackId {
    if (open.empty()) return model::kEmptyStack;
    size_t k = open.size();
    while (k > 0 && open_stack[k - 1] == kNoStack) --k;
    for (; k < open.size(); ++k) {
      const Span& s = spans_[open[k]];
      StackId base = k == 0 ? model::kEmptyStack : open_stack[k - 1];
      if (use_call_stacks && s.call_stack != UINT32_MAX) base = CallStackOf(trace, s.call_stack);
      open_stack[k] = trace.stacks.Push(base, FrameOfLabel(trace, s.label));
    }
    return open_stack.back();
  };
  size_t next_span = 0;
  uint32_t thread = UINT32_MAX;
  for (const uint32_t index : by_thread) {
    MemoryEvent& m = memory_[index];
    if (m.thread != thread) {
      thread = m.thread;
      open.clear();
      open_stack.clear();
      while (next_span < spans_.size() && spans_[next_span].thread < thread) ++next_span;
    }
    for (; next_span < spans_.size() && spans_[next_span].thread == thread &&
           spans_[next_span].start_ns <= m.ts_ns;
         ++next_span) {
      const Span& s = spans_[next_span];
      // Close what does not contain the new span.
      while (!open.empty() && spans_[open.back()].end_ns < s.end_ns) {
        open.pop_back();
        open_stack.pop_back();
      }
      open.push_back(static_cast<uint32_t>(next_span));
      open_stack.push_back(kNoStack);
    }
    while (!open.empty() && spans_[open.back()].end_ns < m.ts_ns) {
      open.pop_back();
      open_stack.pop_back();
    }
    m.stack = stack_of_top();
  }
}

std::string Parser::NoMemoryEventsMessage() const {
  std::string detail;
  if (memory_seen_ == 0) {
    detail = event_index_ == 0
                 ? std::string("its event list is empty")
                 : fmt::format("{} events, none of them a [memory] event", event_index_);
  } else {
    std::vector<std::string> parts;
    if (cpu_skipped_ > 0) parts.push_back(fmt::format("{} of CPU memory", cpu_skipped_));
    for (const auto& [type, n] : other_types_skipped_) {
      parts.push_back(fmt::format("{} of device type {}", n, type));
    }
    if (zero_bytes_skipped_ > 0) parts.push_back(fmt::format("{} of 0 bytes", zero_bytes_skipped_));
    detail = fmt::format(
        "its {} [memory] events are {}; CUDA (Device Type 1) and ROCm (6) are "
        "read",
        memory_seen_, fmt::join(parts, ", "));
  }
  return fmt::format(
      "{}: this JSON profiler trace holds no GPU [memory] events ({}); record with "
      "torch.profiler.profile(profile_memory=True) and a CUDA or ROCm device",
      path_, detail);
}

Result<model::Trace> Parser::Finish() {
  if (!has_events_) {
    if (root_object_) {
      std::vector<std::string> quoted;
      for (const std::string& k : root_keys_) {
        std::string q = Quote(k);  // one line, whatever the key holds
        q.front() = q.back() = '\'';
        quoted.push_back(std::move(q));
      }
      if (root_key_count_ > root_keys_.size()) quoted.push_back("...");
      return InvalidInput(fmt::format(
          "{}: a JSON object without 'traceEvents' (its keys: {}): not a PyTorch profiler trace "
          "or memory timeline; vramscope reads profiler traces (export_chrome_trace with "
          "profile_memory=True), memory timelines (export_memory_timeline, .raw.json) and "
          "memory snapshots (torch.cuda.memory._dump_snapshot)",
          path_,
          quoted.empty() ? std::string("none") : fmt::format("{}", fmt::join(quoted, ", "))));
    }
    return InvalidInput(
        fmt::format("{}: the JSON text holds no trace events; {}", path_, kWhatToDo));
  }
  if (memory_.empty()) return InvalidInput(NoMemoryEventsMessage());

  model::Trace trace;
  AssignStacks(trace);

  // Device runs in time order: a stable sort by time keeps the file's order for equal times,
  // which is the order the profiler recorded them in.
  std::vector<uint32_t> order(memory_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const MemoryEvent& x = memory_[a];
    const MemoryEvent& y = memory_[b];
    if (x.device != y.device) return x.device < y.device;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.order < y.order;
  });

  const bool by_addr = has_addr_.value_or(false);
  const bool totals = has_total_allocated_.value_or(false);
  const bool reserved_totals = has_total_reserved_.value_or(false);
  model::Events& ev = trace.events;
  ev.Reserve(memory_.size() * 2);
  uint64_t synthetic_next = kSyntheticAddressBase;
  uint64_t segment_events = 0, totals_disagree = 0, size_mismatch = 0, legacy_unpaired = 0;
  size_t with_stack = 0;
  for (size_t k = 0; k < order.size();) {
    const int32_t device = memory_[order[k]].device;
    const size_t begin = ev.count();
    const MemoryEvent& first = memory_[order[k]];
    int64_t reserved = first.total_reserved;
    int64_t level = first.total_allocated - first.bytes;  // allocated before the first event
    int64_t alive_before = 0;  // bytes of frees without an alloc in the trace
    std::unordered_map<uint64_t, uint64_t> open_by_addr;               // addr -> bytes
    std::unordered_map<uint64_t, std::vector<uint64_t>> open_by_size;  // legacy: bytes -> addrs
    for (; k < order.size() && memory_[order[k]].device == device; ++k) {
      const MemoryEvent& m = memory_[order[k]];
      const int64_t t = RoundToUs(m.ts_ns);
      if (reserved_totals && m.total_reserved != reserved) {
        const int64_t delta = m.total_reserved - reserved;
        ev.Push(delta > 0 ? Action::kSegmentAlloc : Action::kSegmentFree, device, 0,
                static_cast<uint64_t>(delta > 0 ? delta : -delta), 0, t, model::kEmptyStack);
        reserved = m.total_reserved;
        ++segment_events;
      }
      if (totals) {
        level += m.bytes;
        if (level != m.total_allocated) {
          ++totals_disagree;
          level = m.total_allocated;
        }
      }
      if (m.stack != model::kEmptyStack) ++with_stack;
      const auto size = static_cast<uint64_t>(m.bytes > 0 ? m.bytes : -m.bytes);
      if (m.bytes > 0) {
        uint64_t addr = m.addr;
        if (by_addr) {
          open_by_addr[addr] = size;
        } else {
          addr = synthetic_next;
          synthetic_next += kSyntheticAddressStep;
          open_by_size[size].push_back(addr);
        }
        ev.Push(Action::kAlloc, device, addr, size, 0, t, m.stack);
        continue;
      }
      uint64_t addr = m.addr;
      if (by_addr) {
        const auto it = open_by_addr.find(addr);
        if (it == open_by_addr.end()) {
          alive_before += static_cast<int64_t>(size);
        } else {
          if (it->second != size) ++size_mismatch;
          open_by_addr.erase(it);
        }
      } else {
        auto it = open_by_size.find(size);
        if (it != open_by_size.end() && !it->second.empty()) {
          addr = it->second.back();
          it->second.pop_back();
        } else {
          addr = synthetic_next;
          synthetic_next += kSyntheticAddressStep;
          alive_before += static_cast<int64_t>(size);
          ++legacy_unpaired;
        }
      }
      ev.Push(Action::kFreeRequested, device, addr, size, 0, t, m.stack);
      ev.Push(Action::kFreeCompleted, device, addr, size, 0, t, m.stack);
    }
    trace.devices.push_back(device);
    trace.device_event_ranges.emplace_back(begin, ev.count());
    model::StartLevels start;
    start.device = device;
    // The profiler's counter before the first event, less what the trace itself will count as
    // alive at the start (allocations it sees freed but never allocated).
    start.untracked_allocated = totals ? first.total_allocated - first.bytes - alive_before : 0;
    start.reserved = reserved_totals ? first.total_reserved : 0;
    trace.start_levels.push_back(start);
  }

  // Profiler steps, on every device (they are host-side annotations).
  std::stable_sort(steps_.begin(), steps_.end(),
                   [](const Step& a, const Step& b) { return a.start_ns < b.start_ns; });
  for (const Step& s : steps_) {
    for (const int32_t device : trace.devices) {
      for (const char* stage : {"START", "END"}) {
        model::Annotation a;
        a.device = device;
        a.time_us = RoundToUs(std::string_view(stage) == "START" ? s.start_ns : s.end_ns);
        a.fields = {{"stage", stage}, {"name", s.name}};
        trace.annotations.push_back(std::move(a));
      }
    }
  }

  // Source and facts.
  model::SourceInfo& src = trace.source;
  src.path = path_;
  src.format = "PyTorch profiler trace (Kineto JSON)";
  std::vector<std::string> evidence;
  if (by_addr && totals) {
    src.generation = "Kineto, memory schema with Addr/Total Allocated (torch >=1.10)";
    evidence.push_back(reserved_totals
                           ? "[memory] args carry 'Addr', 'Total Allocated' and 'Total Reserved'"
                           : "[memory] args carry 'Addr' and 'Total Allocated'");
  } else if (!by_addr && !totals) {
    src.generation = "legacy memory schema (torch 1.9: Bytes only)";
    evidence.push_back(
        "[memory] args are only 'Device Type', 'Device Id' and 'Bytes' (no 'Addr', no 'Total "
        "Allocated')");
  } else {
    src.generation = "Kineto, partial memory schema";
    evidence.push_back(by_addr ? "[memory] args carry 'Addr' but no 'Total Allocated'"
                               : "[memory] args carry 'Total Allocated' but no 'Addr'");
  }
  if (saw_hip_) evidence.push_back("Device Type 6 (HIP: a ROCm build)");
  if (saw_python_function_) evidence.push_back("python_function events (with_stack=True)");
  if (saw_call_stack_) evidence.push_back("operators carry 'Call stack' (with_stack, torch 1.9)");
  if (!schema_version_.empty()) evidence.push_back("schemaVersion " + schema_version_);
  src.generation_evidence = fmt::format("{}", fmt::join(evidence, "; "));

  model::TraceFacts& f = trace.facts;
  f.has_allocator_state = false;
  f.sizes_are_block_sizes = true;
  f.reserved_known = reserved_totals;
  f.synthetic_segment_addresses = reserved_totals;
  f.has_trace = true;
  f.has_times = true;
  f.has_segment_events = segment_events > 0;
  for (size_t i = 0; i < trace.frames.size(); ++i) {
    if (trace.frames.Get(static_cast<FrameId>(i)).kind == model::FrameKind::kPython) {
      f.has_python_frames = true;
    } else {
      f.has_native_frames = true;
    }
  }
  f.has_stacks = trace.frames.size() > 0;
  if (!by_addr) {
    f.notes.push_back(fmt::format(
        "[memory] events without 'Addr' (legacy schema): each free is paired with the most "
        "recent open allocation of the same size on its device, a guess; addresses are "
        "synthetic{}",
        legacy_unpaired > 0 ? fmt::format(" ({} frees matched no allocation)", legacy_unpaired)
                            : std::string()));
  }
  if (!totals) {
    f.notes.push_back(
        "no 'Total Allocated' in the [memory] events: memory allocated before recording began is "
        "unknown, the allocated curve counts only what the trace shows");
  }
  if (!reserved_totals) {
    f.notes.push_back(
        "no 'Total Reserved' in the [memory] events: reserved memory is unknown and shown as 0");
  } else if (segment_events > 0) {
    f.notes.push_back(fmt::format(
        "reserved memory follows the profiler's 'Total Reserved': its {} changes appear as "
        "segment events (sizes exact, addresses unknown)",
        segment_events));
  }
  if (totals_disagree > 0) {
    f.notes.push_back(fmt::format(
        "at {} [memory] events 'Total Allocated' does not follow from the previous one and "
        "'Bytes' (lost or reordered events): the allocated curve follows 'Bytes' there",
        totals_disagree));
  }
  if (size_mismatch > 0) {
    f.notes.push_back(fmt::format(
        "{} frees release a different number of bytes than their allocation at the same 'Addr'",
        size_mismatch));
  }
  if (cpu_skipped_ > 0) {
    f.notes.push_back(
        fmt::format("{} CPU [memory] events skipped (host memory is not reported)", cpu_skipped_));
  }
  for (const auto& [type, n] : other_types_skipped_) {
    f.notes.push_back(
        fmt::format("{} [memory] events of device type {} skipped (only CUDA and "
                    "ROCm device memory is read)",
                    n, type));
  }
  if (zero_bytes_skipped_ > 0) {
    f.notes.push_back(fmt::format("{} [memory] events of 0 bytes skipped", zero_bytes_skipped_));
  }
  if (unusable_spans_ > 0) {
    f.notes.push_back(fmt::format(
        "{} operator or Python events without a usable 'ts'/'dur' were left out of the stacks",
        unusable_spans_));
  }
  if (with_stack * 2 < memory_.size()) {
    f.notes.push_back(fmt::format(
        "only {} of {} GPU [memory] events happen inside a recorded operator or Python function "
        "(profile with activities=[ProfilerActivity.CPU, ...] and with_stack=True for stacks)",
        with_stack, memory_.size()));
  }
  model::BuildAllocations(trace);
  return trace;
}

// Runs `parse` (the JSON reader over the text or a stream) into a Parser and finishes the trace.
template <typename Parse>
Result<model::Trace> ReadTrace(const std::string& path, Parse&& parse) {
  try {
    Parser parser(path);
    const json_sax::JsonSaxResult parsed = parse(parser);
    if (!parser.error().empty()) return InvalidInput(parser.error());
    if (parsed.stopped) return InternalError(path + ": the profiler trace was left unread");
    if (!parsed.ok) {
      return InvalidInput(fmt::format("{}: invalid JSON at byte {}: {}{}", path, parsed.position,
                                      parsed.message,
                                      parsed.ended_early ? "; the file ends early (truncated?)"
                                                         : "; the file is corrupt or not JSON"));
    }
    return parser.Finish();
  } catch (const std::bad_alloc&) {
    return InvalidInput(fmt::format("{}: out of memory while reading the profiler trace", path));
  } catch (const std::exception& e) {
    std::string what = e.what();
    for (char& c : what) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return InvalidInput(fmt::format("{}: cannot read the JSON profiler trace: {}", path, what));
  }
}

}  // namespace

Result<model::Trace> TraceFromKinetoJson(std::string_view json, const std::string& path,
                                         const json_sax::ParseOptions& options) {
  return ReadTrace(path, [&](Parser& parser) { return json_sax::Parse(json, parser, options); });
}

Result<model::Trace> TraceFromKinetoStream(json_sax::Source& source, const std::string& path) {
  return ReadTrace(path, [&](Parser& parser) { return json_sax::ParseStream(source, parser); });
}

}  // namespace vramscope::kineto
