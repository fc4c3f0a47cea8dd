// The profiler trace read: the JSON reader's events into the Parser (kineto_parser.h), each
// [memory] and span event checked and kept; kineto_trace.cc makes the trace of them.
#include "sources/kineto/kineto_source.h"

#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <optional>
#include <string>

#include "common/json_sax.h"
#include "sources/kineto/kineto_parser.h"

namespace vramscope::kineto {

namespace internal {

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

}  // namespace internal

namespace {

using internal::Parser;

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
