// The profiler trace's SAX consumer, internal to the kineto source: kineto_source.cc reads the
// JSON events into it (what each [memory] and span event keeps), kineto_trace.cc makes the trace
// of what it kept (stacks, events, levels, notes). Nothing outside those two files includes it.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/trace.h"
#include "sources/kineto/kineto_fields.h"

namespace vramscope::kineto::internal {

using namespace fields;  // NOLINT(google-build-using-namespace): this file's own vocabulary
using model::Action;
using model::FrameId;
using model::StackId;

// No device holds a pebibyte: larger byte counts are corrupt.
inline constexpr auto kMaxBytes = static_cast<int64_t>(model::kMaxPlausibleBytes);
inline constexpr int64_t kMaxDeviceId = model::kMaxDeviceOrdinal;
// Each [memory] event becomes at most three trace events (a free's two, a reserved change).
inline constexpr uint64_t kMaxMemoryEvents = model::kMaxEvents / 3;
// Legacy traces have no addresses: allocations get synthetic ones from here, far above any
// user-space address, 512 B apart.
inline constexpr uint64_t kSyntheticAddressBase = uint64_t{1} << 56;
inline constexpr uint64_t kSyntheticAddressStep = 512;

inline constexpr int kDeviceTypeCpu = 0;
inline constexpr int kDeviceTypeCuda = 1;
inline constexpr int kDeviceTypeHip = 6;

inline constexpr const char* kWhatToDo =
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

inline constexpr FrameId kNoFrame = std::numeric_limits<FrameId>::max();
inline constexpr StackId kNoStack = std::numeric_limits<StackId>::max();

}  // namespace vramscope::kineto::internal
