#include "sources/run_output/capture_sidecar.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "common/units.h"
#include "sources/oom_message/oom_message_text.h"

namespace vramscope::sources {

namespace {

using nlohmann::json;

// Tolerance when matching sidecar times against the snapshot's: PyTorch converts its approximate
// clock to Unix time, the bootstrap reads time.time_ns().
constexpr int64_t kClockSlackUs = 50;

// t + d without overflowing: a damaged sidecar or trace can hold times at the ends of int64.
int64_t SaturatingAdd(int64_t t, int64_t d) {
  int64_t out = 0;
  if (__builtin_add_overflow(t, d, &out)) {
    return d > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return out;
}

struct Reader {
  const std::string& path;
  Status error;

  bool Fail(const std::string& where, const std::string& what) {
    if (error.ok()) {
      error = InvalidInput(
          fmt::format("{}: {} {}; the sidecar is damaged: capture again with 'vramscope run'", path,
                      where, what));
    }
    return false;
  }
  const json* Field(const json& obj, const char* key) {
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<int64_t> Int(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
    }
    Fail(where + "." + key, "is not an integer");
    return std::nullopt;
  }
  uint64_t Unsigned(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v == nullptr) return 0;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<uint64_t>();
    Fail(where + "." + key, "is not a byte count or address");
    return 0;
  }
  std::optional<uint64_t> OptionalUnsigned(const json& obj, const char* key,
                                           const std::string& where) {
    if (Field(obj, key) == nullptr) return std::nullopt;
    return Unsigned(obj, key, where);
  }
  bool Bool(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v == nullptr) return false;
    if (v->is_boolean()) return v->get<bool>();
    Fail(where + "." + key, "is not true or false");
    return false;
  }
  std::string Text(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v == nullptr) return "";
    if (v->is_string()) return v->get<std::string>();
    Fail(where + "." + key, "is not text");
    return "";
  }
  const json* Object(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v != nullptr && !v->is_object()) {
      Fail(where + "." + key, "is not an object");
      return nullptr;
    }
    return v;
  }
  const json* Array(const json& obj, const char* key, const std::string& where) {
    const json* v = Field(obj, key);
    if (v != nullptr && !v->is_array()) {
      Fail(where + "." + key, "is not a list");
      return nullptr;
    }
    return v;
  }
};

int32_t Step(Reader& r, const json& obj, const std::string& where) {
  return static_cast<int32_t>(
      std::clamp<int64_t>(r.Int(obj, "step", where).value_or(0), 0, INT32_MAX));
}

// process.allocator of a JAX or TensorFlow capture. At most kMaxSettings settings are kept (the
// bootstrap writes a handful).
SidecarFrameworkAllocator ParseFrameworkAllocator(Reader& r, const json& a) {
  constexpr size_t kMaxSettings = 16;
  const std::string at = "process.allocator";
  SidecarFrameworkAllocator out;
  if (const json* settings = r.Object(a, "settings", at)) {
    for (const auto& [name, value] : settings->items()) {
      if (out.settings.size() == kMaxSettings) break;
      if (!value.is_string()) {
        r.Fail(at + ".settings." + name.substr(0, 64), "is not text");
        break;
      }
      out.settings.emplace_back(name.substr(0, 64), value.get<std::string>().substr(0, 64));
    }
  }
  if (const json* stats = r.Object(a, "memory_stats", at)) {
    const std::string where = at + ".memory_stats";
    // JAX's names; TensorFlow's get_memory_info says "current" and "peak".
    out.bytes_in_use = r.OptionalUnsigned(*stats, "bytes_in_use", where);
    if (!out.bytes_in_use) out.bytes_in_use = r.OptionalUnsigned(*stats, "current", where);
    out.peak_bytes_in_use = r.OptionalUnsigned(*stats, "peak_bytes_in_use", where);
    if (!out.peak_bytes_in_use) out.peak_bytes_in_use = r.OptionalUnsigned(*stats, "peak", where);
    out.bytes_limit = r.OptionalUnsigned(*stats, "bytes_limit", where);
    out.pool_bytes = r.OptionalUnsigned(*stats, "pool_bytes", where);
  }
  return out;
}

// The sidecar's "memory" of one phase: torch's counters at its end.
std::optional<model::CapturedPhaseMemory> ParsePhaseMemory(Reader& r, const json& phase,
                                                           const std::string& where) {
  const json* m = r.Object(phase, "memory", where);
  if (m == nullptr) return std::nullopt;
  const std::string at = where + ".memory";
  model::CapturedPhaseMemory out;
  out.allocated = r.Unsigned(*m, "allocated", at);
  out.reserved = r.Unsigned(*m, "reserved", at);
  out.max_allocated = r.OptionalUnsigned(*m, "max_allocated", at);
  out.max_reserved = r.OptionalUnsigned(*m, "max_reserved", at);
  return out;
}

// The sidecar's "nvml" (docs/design/capture.md): bounded, errors name the field.
std::optional<model::DeviceUsage> ParseNvml(Reader& r, const json& doc) {
  const json* n = r.Object(doc, "nvml", "");
  if (n == nullptr) return std::nullopt;
  model::DeviceUsage u;
  u.available = r.Bool(*n, "available", "nvml");
  if (!u.available) {
    u.why_not = r.Text(*n, "why", "nvml");
    return u;
  }
  u.driver = r.Text(*n, "driver", "nvml");
  u.nvml_index = r.Int(*n, "nvml_index", "nvml");
  u.pci_bus_id = r.Text(*n, "pci_bus_id", "nvml");
  u.device_name = r.Text(*n, "name", "nvml");
  u.matched_by = r.Text(*n, "matched_by", "nvml");
  u.pid_note = r.Text(*n, "pid_note", "nvml");
  u.stopped = r.Text(*n, "stopped", "nvml");
  u.samples_dropped = r.Unsigned(*n, "samples_dropped", "nvml");
  u.samples_other_device = r.Unsigned(*n, "samples_other_device", "nvml");
  const json* samples = r.Array(*n, "samples", "nvml");
  if (samples == nullptr) return u;
  u.samples.reserve(std::min(samples->size(), kMaxNvmlSamples));
  for (size_t i = 0; i < samples->size() && r.error.ok(); ++i) {
    if (u.samples.size() == kMaxNvmlSamples) {
      const uint64_t more = samples->size() - i;
      u.samples_dropped =
          u.samples_dropped > UINT64_MAX - more ? UINT64_MAX : u.samples_dropped + more;
      break;
    }
    const json& x = (*samples)[i];
    const std::string where = fmt::format("nvml.samples[{}]", i);
    if (!x.is_object()) {
      r.Fail(where, "is not an object");
      break;
    }
    model::DeviceUsageSample s;
    s.time_us = r.Int(x, "time_us", where).value_or(model::kNoTime);
    s.step = Step(r, x, where);
    s.phase = r.Text(x, "phase", where);
    s.at = r.Text(x, "at", where);
    s.device_total = r.Unsigned(x, "device_total", where);
    s.device_used = r.Unsigned(x, "device_used", where);
    s.device_free = r.OptionalUnsigned(x, "device_free", where);
    s.device_reserved = r.OptionalUnsigned(x, "device_reserved", where);
    s.process_listed = r.Bool(x, "process_listed", where);
    s.process_used = r.OptionalUnsigned(x, "process_used", where);
    s.other_processes_more = r.Unsigned(x, "other_processes_more", where);
    s.torch_reserved = r.OptionalUnsigned(x, "torch_reserved", where);
    s.torch_allocated = r.OptionalUnsigned(x, "torch_allocated", where);
    if (const json* others = r.Array(x, "other_processes", where)) {
      s.other_processes.emplace();
      s.other_processes->reserve(std::min(others->size(), kMaxNvmlProcesses));
      for (size_t k = 0; k < others->size() && r.error.ok(); ++k) {
        if (s.other_processes->size() == kMaxNvmlProcesses) {
          const uint64_t more = others->size() - k;
          s.other_processes_more = s.other_processes_more > UINT64_MAX - more
                                       ? UINT64_MAX
                                       : s.other_processes_more + more;
          break;
        }
        const json& p = (*others)[k];
        const std::string pwhere = fmt::format("{}.other_processes[{}]", where, k);
        if (!p.is_object()) {
          r.Fail(pwhere, "is not an object");
          break;
        }
        model::DeviceUsageProcess process;
        process.pid = r.Int(p, "pid", pwhere).value_or(0);
        process.used = r.OptionalUnsigned(p, "used", pwhere);
        s.other_processes->push_back(process);
      }
    }
    u.samples.push_back(std::move(s));
  }
  return u;
}

std::optional<model::Category> CategoryOfKind(const std::string& kind) {
  if (kind == "parameter" || kind == "buffer") return model::Category::kWeight;
  if (kind == "gradient") return model::Category::kGradient;
  if (kind == "optimizer_state") return model::Category::kOptimizerState;
  return std::nullopt;
}

// The bootstrap's phase names ("between": after an optimizer step, before the next forward;
// model/vocabulary.h), and the report's.
std::optional<model::Phase> PhaseOfName(const std::string& name) {
  const auto phase = model::ParsePhase(name);
  if (phase == model::Phase::kUnknown) return std::nullopt;
  return phase;
}

// "vramscope step=3 phase=forward" -> (3, "forward").
std::optional<std::pair<int32_t, std::string>> ParseMark(std::string_view text) {
  constexpr std::string_view kPrefix = "vramscope step=";
  if (text.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  text.remove_prefix(kPrefix.size());
  int32_t step = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), step);
  if (ec != std::errc() || step < 0) return std::nullopt;
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  constexpr std::string_view kPhase = " phase=";
  if (text.substr(0, kPhase.size()) != kPhase) return std::nullopt;
  text.remove_prefix(kPhase.size());
  const size_t space = text.find(' ');
  return std::make_pair(step, std::string(text.substr(0, space)));
}

// The steps of the sidecar's phases, as the event model counts them: the events after an
// optimizer step (zero_grad, the next batch) lead up to the next iteration.
struct StepCounter {
  int32_t last_optimizer_step = 0;
  int32_t Of(int32_t step, model::Phase phase) {
    if (phase == model::Phase::kOptimizer) {
      last_optimizer_step = std::max(last_optimizer_step, step);
    }
    if (phase == model::Phase::kBeforeForward && step <= last_optimizer_step) {
      // (A damaged sidecar or mark can say step 2^31-1: it stays the last step there is.)
      return last_optimizer_step < INT32_MAX ? last_optimizer_step + 1 : INT32_MAX;
    }
    return step;
  }
};

size_t MarksFromMetadata(const model::Trace& trace, std::vector<model::PhaseMark>& marks_out) {
  size_t marks = 0;
  std::vector<model::PhaseMark> out;
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const auto [begin, end] = trace.device_event_ranges[d];
    const int32_t device = trace.devices[d];
    bool any = false;
    StepCounter steps;
    std::optional<std::pair<int32_t, model::Phase>> current;
    for (size_t i = begin; i < end; ++i) {
      const auto it = trace.events.user_metadata.find(static_cast<uint32_t>(i));
      if (it == trace.events.user_metadata.end()) continue;
      const auto mark = ParseMark(trace.strings.Get(it->second));
      if (!mark) continue;
      const auto phase = PhaseOfName(mark->second);
      if (!phase) continue;
      const std::pair<int32_t, model::Phase> now{steps.Of(mark->first, *phase), *phase};
      if (current == now) continue;
      if (!any && i > begin) {
        out.push_back({device, static_cast<uint32_t>(begin), 0, model::Phase::kSetup});
      }
      any = true;
      current = now;
      out.push_back({device, static_cast<uint32_t>(i), now.first, now.second});
      ++marks;
    }
  }
  if (marks > 0) marks_out = std::move(out);
  return marks;
}

size_t MarksFromTimes(const CaptureSidecar& sidecar, const model::Trace& trace,
                      std::vector<model::PhaseMark>& marks_out) {
  std::vector<SidecarPhase> phases = sidecar.phases;
  std::stable_sort(phases.begin(), phases.end(), [](const SidecarPhase& a, const SidecarPhase& b) {
    return a.begin_us < b.begin_us;
  });
  std::vector<model::PhaseMark> out;
  size_t marks = 0;
  for (size_t d = 0; d < trace.devices.size(); ++d) {
    const auto [begin, end] = trace.device_event_ranges[d];
    const int32_t device = trace.devices[d];
    if (begin == end) continue;
    out.push_back({device, static_cast<uint32_t>(begin), 0, model::Phase::kSetup});
    StepCounter steps;
    size_t i = begin;
    for (const SidecarPhase& p : phases) {
      const auto phase = PhaseOfName(p.phase);
      if (!phase || p.begin_us == model::kNoTime) continue;
      while (i < end &&
             (trace.events.time_us[i] == model::kNoTime || trace.events.time_us[i] < p.begin_us)) {
        ++i;
      }
      // A phase that begins after the device's last event marks none of its events (and a mark
      // there would point past them); the phases are in time order, so neither do the rest.
      if (i >= end) break;
      const int32_t step = steps.Of(p.step, *phase);
      if (!out.empty() && out.back().device == device && out.back().event == i) out.pop_back();
      out.push_back({device, static_cast<uint32_t>(i), step, *phase});
      ++marks;
    }
  }
  if (marks > 0) marks_out = std::move(out);
  return marks;
}

// The value of an allocator setting, or "" when it was not set.
std::string SettingOf(const SidecarFrameworkAllocator& a, std::string_view name) {
  for (const auto& [key, value] : a.settings) {
    if (key == name) return value;
  }
  return "";
}

// What the framework's allocator takes up front, from its settings (JAX's "GPU memory
// allocation" page; TensorFlow's "Limiting GPU memory growth"): the reservation nvidia-smi shows
// whatever is in use, as PyTorch's reserved memory is.
std::string ReservationRule(const std::string& framework, const SidecarFrameworkAllocator& a) {
  if (framework == "jax") {
    if (SettingOf(a, "XLA_PYTHON_CLIENT_ALLOCATOR") == "platform") {
      return "XLA_PYTHON_CLIENT_ALLOCATOR=platform: allocated and freed on demand, no pool";
    }
    const std::string prealloc = SettingOf(a, "XLA_PYTHON_CLIENT_PREALLOCATE");
    if (prealloc == "false" || prealloc == "0") {
      return "XLA_PYTHON_CLIENT_PREALLOCATE=false: the pool grows as buffers need it and is "
             "kept";
    }
    std::string fraction = SettingOf(a, "XLA_CLIENT_MEM_FRACTION");
    if (fraction.empty()) fraction = SettingOf(a, "XLA_PYTHON_CLIENT_MEM_FRACTION");
    return fraction.empty()
               ? "preallocated: 75% of the GPU is taken at the first operation (JAX's default), "
                 "which nvidia-smi shows whatever is in use"
               : fmt::format(
                     "preallocated: {} of the GPU is taken at the first operation (the "
                     "memory fraction set), which nvidia-smi shows whatever is in use",
                     fraction);
  }
  if (SettingOf(a, "TF_FORCE_GPU_ALLOW_GROWTH") == "true") {
    return "TF_FORCE_GPU_ALLOW_GROWTH=true: the BFC pool grows as tensors need it and is kept";
  }
  if (SettingOf(a, "TF_GPU_ALLOCATOR") == "cuda_malloc_async") {
    return "TF_GPU_ALLOCATOR=cuda_malloc_async: CUDA's stream-ordered pool, not BFC";
  }
  return "on a GPU TensorFlow's BFC pool takes nearly all of its free memory at start unless "
         "memory growth is on (TF_FORCE_GPU_ALLOW_GROWTH=true), and nvidia-smi shows it whatever "
         "is in use";
}

// One note on the JAX or TensorFlow allocator: its own figures at the end, when it gave them,
// its settings, and what it takes up front.
std::string FrameworkAllocatorNote(const std::string& framework,
                                   const SidecarFrameworkAllocator& a) {
  std::vector<std::string> figures;
  auto bytes = [](uint64_t b) { return FormatBytes(static_cast<int64_t>(b)); };
  if (a.bytes_in_use) figures.push_back(bytes(*a.bytes_in_use) + " in use");
  if (a.peak_bytes_in_use) figures.push_back("peak " + bytes(*a.peak_bytes_in_use));
  if (a.pool_bytes) figures.push_back("pool " + bytes(*a.pool_bytes));
  if (a.bytes_limit) figures.push_back("limit " + bytes(*a.bytes_limit));
  std::string line = framework == "jax" ? "XLA's allocator" : "TensorFlow's allocator";
  line += figures.empty() ? " gave no figures (none on the CPU)"
                          : fmt::format(" at the end: {}", fmt::join(figures, ", "));
  std::vector<std::string> set;
  for (const auto& [key, value] : a.settings) set.push_back(key + "=" + value);
  if (!set.empty()) line += fmt::format(" (set: {})", fmt::join(set, ", "));
  return line + "; " + ReservationRule(framework, a);
}

}  // namespace

Result<std::optional<CaptureSidecar>> ReadCaptureSidecar(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidInput(fmt::format("{}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseCaptureSidecar(text.str(), path);
}

Result<std::optional<CaptureSidecar>> ParseCaptureSidecar(std::string_view text,
                                                          const std::string& path) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return InvalidInput(fmt::format(
        "{}: is not valid JSON (cut short?); the sidecar is damaged: capture again with "
        "'vramscope run'",
        path));
  }
  if (!doc.is_object()) return std::optional<CaptureSidecar>();
  const auto format = doc.find("format");
  if (format == doc.end() || *format != "vramscope-capture") return std::optional<CaptureSidecar>();
  Reader r{path, Status::Ok()};
  const std::optional<int64_t> version = r.Int(doc, "version", "");
  if (!version || *version < 1) {
    return InvalidInput(fmt::format("{}: has no format version; capture again", path));
  }
  if (*version > 1) {
    return InvalidInput(fmt::format(
        "{}: is a version {} sidecar; this vramscope reads version 1: upgrade vramscope", path,
        *version));
  }
  CaptureSidecar s;
  s.path = path;
  s.snapshot = r.Text(doc, "snapshot", "");
  if (const json* p = r.Object(doc, "process", "")) {
    s.pid = r.Int(*p, "pid", "process");
    s.rank = r.Int(*p, "rank", "process");
    s.local_rank = r.Int(*p, "local_rank", "process");
    s.world_size = r.Int(*p, "world_size", "process");
    s.device = r.Int(*p, "device", "process");
    s.total_memory = r.Int(*p, "total_memory", "process");
    s.hostname = r.Text(*p, "hostname", "process");
    s.framework = r.Text(*p, "framework", "process");
    s.torch_version = r.Text(*p, "torch", "process");
    s.device_name = r.Text(*p, "device_name", "process");
    if (const json* a = r.Object(*p, "allocator", "process")) {
      s.framework_allocator = ParseFrameworkAllocator(r, *a);
    }
  }
  if (const json* rec = r.Object(doc, "recording", "")) {
    s.stacks = r.Text(*rec, "stacks", "recording");
    s.context = r.Text(*rec, "context", "recording");
    s.fallback = r.Text(*rec, "fallback", "recording");
  }
  if (const json* e = r.Object(doc, "end", "")) {
    s.end_reason = r.Text(*e, "reason", "end");
    s.steps_completed = r.Int(*e, "steps_completed", "end").value_or(0);
    s.exception = r.Text(*e, "exception", "end");
  }
  if (const json* phases = r.Array(doc, "phases", "")) {
    for (size_t i = 0; i < phases->size() && r.error.ok(); ++i) {
      const json& p = (*phases)[i];
      const std::string where = fmt::format("phases[{}]", i);
      if (!p.is_object()) {
        r.Fail(where, "is not an object");
        break;
      }
      SidecarPhase phase;
      phase.step = Step(r, p, where);
      phase.phase = r.Text(p, "phase", where);
      phase.begin_us = r.Int(p, "begin_us", where).value_or(model::kNoTime);
      phase.end_us = r.Int(p, "end_us", where).value_or(model::kNoTime);
      phase.memory = ParsePhaseMemory(r, p, where);
      if (phase.memory) {
        phase.memory->step = phase.step;
        phase.memory->phase = phase.phase;
        phase.memory->end_us = phase.end_us;
      }
      s.phases.push_back(std::move(phase));
    }
  }
  if (const json* tensors = r.Array(doc, "tensors", "")) {
    for (size_t i = 0; i < tensors->size() && r.error.ok(); ++i) {
      const json& t = (*tensors)[i];
      const std::string where = fmt::format("tensors[{}]", i);
      if (!t.is_object()) {
        r.Fail(where, "is not an object");
        break;
      }
      const auto category = CategoryOfKind(r.Text(t, "kind", where));
      if (!category) continue;  // a kind a newer bootstrap records
      SidecarTensor tensor;
      tensor.category = *category;
      tensor.name = r.Text(t, "name", where);
      tensor.data_ptr = r.Unsigned(t, "data_ptr", where);
      tensor.storage_ptr = r.Unsigned(t, "storage_data_ptr", where);
      tensor.nbytes = r.Unsigned(t, "nbytes", where);
      tensor.seen_us = r.Int(t, "seen_us", where).value_or(model::kNoTime);
      tensor.step = static_cast<int32_t>(
          std::clamp<int64_t>(r.Int(t, "step", where).value_or(0), 0, INT32_MAX));
      if (!tensor.name.empty()) s.tensors.push_back(std::move(tensor));
    }
  }
  if (const json* oom = r.Object(doc, "oom", "")) {
    SidecarOom o;
    o.requested_bytes = r.Unsigned(*oom, "requested_bytes", "oom");
    if (r.Field(*oom, "device_free")) o.device_free = r.Unsigned(*oom, "device_free", "oom");
    o.step = static_cast<int32_t>(
        std::clamp<int64_t>(r.Int(*oom, "step", "oom").value_or(0), 0, INT32_MAX));
    o.phase = r.Text(*oom, "phase", "oom");
    o.message = r.Text(*oom, "message", "oom");
    s.oom = std::move(o);
  }
  s.nvml = ParseNvml(r, doc);
  if (!r.error.ok()) return r.error;
  return std::optional<CaptureSidecar>(std::move(s));
}

SidecarApplied InterpretCaptureSidecar(const CaptureSidecar& sidecar, const model::Trace& trace,
                                       model::Interpretation& out) {
  SidecarApplied applied;
  // Phases: the marks PyTorch stored with each trace entry are exact; the times are the fallback
  // for PyTorch versions without _set_memory_metadata.
  if (trace.facts.has_trace) {
    applied.phase_marks = MarksFromMetadata(trace, out.phase_marks);
    applied.phases_from_metadata = applied.phase_marks > 0;
    if (applied.phase_marks == 0 && trace.facts.has_times) {
      applied.phase_marks = MarksFromTimes(sidecar, trace, out.phase_marks);
    }
  }

  // Names: a tensor's storage starts at its allocation's address; of the allocations at that
  // address, the one alive when the bootstrap saw the tensor holds it.
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_addr;
  for (uint32_t i = 0; i < trace.allocations.size(); ++i) {
    if (trace.allocations[i].alloc_event != model::kNoEvent) {
      by_addr[trace.allocations[i].addr].push_back(i);
    }
  }
  auto time_of = [&](int64_t event) {
    return event == model::kNoEvent ? model::kNoTime
                                    : trace.events.time_us[static_cast<size_t>(event)];
  };
  std::unordered_map<uint32_t, std::pair<std::string, size_t>> names;  // event -> (name, more)
  for (const SidecarTensor& t : sidecar.tensors) {
    const uint64_t ptr = t.storage_ptr != 0 ? t.storage_ptr : t.data_ptr;
    const auto it = by_addr.find(ptr);
    std::optional<uint32_t> best;
    if (it != by_addr.end()) {
      int64_t best_time = model::kNoTime;
      for (const uint32_t a : it->second) {
        const model::Allocation& alloc = trace.allocations[a];
        const int64_t born = time_of(alloc.alloc_event);
        const int64_t released = time_of(alloc.ReleaseEvent());
        if (t.seen_us != model::kNoTime && born != model::kNoTime) {
          if (born > SaturatingAdd(t.seen_us, kClockSlackUs)) continue;
          if (alloc.ReleaseEvent() != model::kNoEvent && released != model::kNoTime &&
              SaturatingAdd(released, kClockSlackUs) < t.seen_us) {
            continue;
          }
        }
        if (!best || born >= best_time) {
          best = a;
          best_time = born;
        }
      }
    }
    if (!best) {
      ++applied.tensors_unmatched;
      continue;
    }
    const auto event = static_cast<uint32_t>(trace.allocations[*best].alloc_event);
    auto [slot, inserted] = names.try_emplace(event, t.name, 0);
    if (inserted) {
      out.category[event] = t.category;
    } else if (slot->second.first != t.name) {
      ++slot->second.second;  // views of one storage (a flat parameter): count the others
    }
  }
  for (const auto& [event, name] : names) {
    const std::string text =
        name.second == 0 ? name.first : fmt::format("{} (+{} more)", name.first, name.second);
    out.tensor_name[event] = text;
    ++applied.tensors_named;
  }

  // Facts.
  std::string who = "captured by 'vramscope run'";
  if (sidecar.rank) {
    who += fmt::format(": rank {}", *sidecar.rank);
    if (sidecar.world_size) who += fmt::format(" of {}", *sidecar.world_size);
    if (sidecar.local_rank) who += fmt::format(" (local rank {})", *sidecar.local_rank);
  } else if (sidecar.pid) {
    who += fmt::format(": process {}", *sidecar.pid);
  }
  if (!sidecar.hostname.empty()) who += " on " + sidecar.hostname;
  if (!sidecar.device_name.empty()) who += ", " + sidecar.device_name;
  if (!sidecar.torch_version.empty()) who += ", torch " + sidecar.torch_version;
  if (!sidecar.framework.empty() && sidecar.framework != "plain") {
    who += ", " + sidecar.framework;
  }
  out.notes.push_back(who);
  if (sidecar.end_reason == "steps") {
    out.notes.push_back(fmt::format("the capture ended after {} training steps (--steps)",
                                    sidecar.steps_completed));
  } else if (sidecar.end_reason == "oom") {
    std::string line = "the program ran out of GPU memory";
    if (sidecar.oom && sidecar.oom->step > 0) {
      line += fmt::format(" in step {}", sidecar.oom->step);
      if (!sidecar.oom->phase.empty()) line += fmt::format(" ({})", sidecar.oom->phase);
    }
    if (sidecar.oom && !sidecar.oom->message.empty()) {
      const std::string& f = sidecar.framework;
      const std::string who_said = f == "jax"          ? "XLA"
                                   : f == "tensorflow" ? "TensorFlow"
                                                       : "PyTorch";
      line += fmt::format("; {} said: {}", who_said, sidecar.oom->message.substr(0, 400));
      const auto messages = FindOomMessages(sidecar.oom->message, 1);
      if (!messages.empty()) out.oom_message = messages.front();
    }
    out.notes.push_back(line);
  } else if (sidecar.end_reason == "exception") {
    out.notes.push_back(
        fmt::format("the program ended with an exception{}",
                    sidecar.exception.empty() ? "" : ": " + sidecar.exception.substr(0, 300)));
  } else if (sidecar.end_reason == "signal") {
    out.notes.push_back("the capture was written when the program was terminated");
  }
  if (!sidecar.fallback.empty()) {
    out.notes.push_back("stacks: " + sidecar.fallback);
  }
  if (sidecar.framework_allocator) {
    out.notes.push_back(FrameworkAllocatorNote(sidecar.framework, *sidecar.framework_allocator));
  }
  if (applied.phase_marks > 0) {
    out.notes.push_back(fmt::format("phases recorded by the capture ({})",
                                    applied.phases_from_metadata
                                        ? "marks stored with each allocator event"
                                        : "phase times matched to the events' times"));
  }
  if (applied.tensors_unmatched > 0) {
    out.notes.push_back(fmt::format(
        "{} of the {} tensors the capture named are held by no allocation the trace saw (made "
        "before the history began, or dropped from its ring buffer)",
        applied.tensors_unmatched, sidecar.tensors.size()));
  }
  // Torch's counters per phase and NVML's samples, as the sidecar had them.
  for (const SidecarPhase& p : sidecar.phases) {
    if (p.memory) out.phase_memory.push_back(*p.memory);
  }
  if (sidecar.nvml) out.device_usage = sidecar.nvml;
  out.format_suffix += " + vramscope run sidecar";
  return applied;
}

}  // namespace vramscope::sources
