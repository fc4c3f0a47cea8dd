#include "sources/xspace/xspace_source.h"

#include <fmt/format.h>
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/units.h"
#include "model/limits.h"
#include "xplane.pb.h"

namespace vramscope::xspace {

namespace {

using model::Action;
using model::Category;

constexpr const char* kWhat =
    "the file is damaged or not a profiler XSpace (TensorFlow's profiler writes one as "
    "<logdir>/plugins/profile/<run>/<host>.xplane.pb)";
constexpr const char* kNoMemoryEvents =
    "TensorFlow records them from its BFC allocators: the default on a GPU; on the CPU set "
    "TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow starts (vramscope.tf.profile says so). JAX "
    "records none on the CPU";
constexpr int64_t kResourceDataType = 20;  // DT_RESOURCE in TensorFlow's types.proto
constexpr int64_t kMaxTimestampNs = int64_t{1} << 62;
constexpr int64_t kMaxOffsetPs = int64_t{1} << 62;
// No allocator hands out addresses this high: the rest of the memory in use before the profile.
constexpr uint64_t kUntrackedAddress = uint64_t{0xff} << 56;
constexpr size_t kBeforeProfile = static_cast<size_t>(-1);  // `open`: not a lifetime
constexpr std::string_view kAllocation = "MemoryAllocation";
constexpr std::string_view kDeallocation = "MemoryDeallocation";
constexpr std::string_view kVariableMark = "vramscope.variable";
constexpr std::string_view kFunctionCall = "EagerLocalExecute: __inference_";

// Scope names of the optimizers of Keras (2 and 3) and tf.keras, lower-cased; the scopes of the
// marked optimizer variables are added to these.
constexpr std::string_view kOptimizerScopes[] = {
    "adam",  "adamw", "sgd",  "rmsprop", "adagrad",   "adadelta", "adamax",
    "nadam", "ftrl",  "lion", "lamb",    "adafactor", "optimizer"};

int64_t RoundToUs(int64_t ns) { return (ns + 500) / 1000; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string_view> Components(std::string_view op) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= op.size()) {
    const size_t slash = op.find('/', start);
    const size_t end = slash == std::string_view::npos ? op.size() : slash;
    if (end > start) parts.push_back(op.substr(start, end - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return parts;
}

std::string WithoutSpaces(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c != ' ') out.push_back(c);
  }
  return out;
}

// "GPU_<n>_bfc" (TensorFlow's and XLA's device allocators): n; else nullopt.
std::optional<int32_t> GpuOrdinal(std::string_view allocator) {
  constexpr std::string_view kPrefix = "GPU_", kSuffix = "_bfc";
  if (allocator.size() <= kPrefix.size() + kSuffix.size() ||
      allocator.substr(0, kPrefix.size()) != kPrefix ||
      allocator.substr(allocator.size() - kSuffix.size()) != kSuffix) {
    return std::nullopt;
  }
  const std::string_view digits =
      allocator.substr(kPrefix.size(), allocator.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > 5) return std::nullopt;
  int64_t ordinal = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    ordinal = ordinal * 10 + (c - '0');
  }
  if (ordinal > model::kMaxDeviceOrdinal) return std::nullopt;
  return static_cast<int32_t>(ordinal);
}

struct MemoryEvent {
  int64_t time_ns = 0;
  uint64_t order = 0;  // reading order: ties in time keep it
  bool alloc = false;
  uint64_t addr = 0;
  int64_t bytes = 0;
  int64_t requested = 0;
  std::optional<int64_t> in_use, available, peak;
  std::string_view allocator, op, region, shape;
  int64_t data_type = -1;
  bool data_thread = false;  // on a tf.data thread
};

struct VariableMark {
  int64_t time_ns = 0;
  uint64_t addr = 0;
  int64_t bytes = 0;
  std::string_view path, role, shape;
};

struct Call {
  int64_t start_ns = 0, end_ns = 0;
  std::string function;
};

// One allocation as the rules see it.
struct Lifetime {
  uint32_t event = 0;  // its alloc event in the trace
  const MemoryEvent* memory = nullptr;
  int64_t free_ns = std::numeric_limits<int64_t>::max();
};

struct RuleTally {
  uint64_t count = 0, bytes = 0;
};

class Converter {
 public:
  Converter(const XSpace& space, const std::string& path) : s_(space), path_(path) {}

  Status Error(const std::string& what) const {
    return InvalidInput(fmt::format("{}: {}; {}", path_, what, kWhat));
  }

  Result<model::Trace> Convert() {
    for (int p = 0; p < s_.planes_size(); ++p) RETURN_IF_ERROR(ReadPlane(s_.planes(p)));
    if (memory_.empty()) {
      return Unsupported(fmt::format(
          "{}: a profiler XSpace ({} planes) with no memory events (MemoryAllocation); {}", path_,
          s_.planes_size(), kNoMemoryEvents));
    }
    RETURN_IF_ERROR(AssignDevices());
    RETURN_IF_ERROR(BuildEvents());
    ApplyMarks();
    Categorise();
    AddSteps();
    return Finish();
  }

 private:
  // A stat's value as a number or as text (ref_value names a stat metadata entry).
  struct Value {
    std::optional<int64_t> number;
    std::optional<std::string_view> text;
  };

  Result<Value> ValueOf(const XStat& stat, const XPlane& plane) const {
    Value v;
    switch (stat.value_case()) {
      case XStat::kInt64Value:
        v.number = stat.int64_value();
        break;
      case XStat::kUint64Value:
        v.number = static_cast<int64_t>(
            std::min<uint64_t>(stat.uint64_value(), std::numeric_limits<int64_t>::max()));
        break;
      case XStat::kStrValue:
        v.text = stat.str_value();
        break;
      case XStat::kBytesValue:
        v.text = stat.bytes_value();
        break;
      case XStat::kRefValue: {
        const auto it = plane.stat_metadata().find(static_cast<int64_t>(
            std::min<uint64_t>(stat.ref_value(), std::numeric_limits<int64_t>::max())));
        if (it == plane.stat_metadata().end()) {
          return Error(fmt::format("a stat refers to name {}, which its plane does not hold",
                                   stat.ref_value()));
        }
        v.text = it->second.name();
        break;
      }
      default:
        break;
    }
    return v;
  }

  Status ReadPlane(const XPlane& plane) {
    // What each event and stat metadata id names, for the names read here.
    std::unordered_map<int64_t, std::string_view> stat_names;
    for (const auto& [id, m] : plane.stat_metadata()) stat_names.emplace(id, m.name());
    enum class Kind { kOther, kAlloc, kFree, kMark, kCall };
    std::unordered_map<int64_t, std::pair<Kind, std::string>> kinds;
    for (const auto& [id, m] : plane.event_metadata()) {
      const std::string_view name = m.name();
      if (name == kAllocation) {
        kinds[id] = {Kind::kAlloc, {}};
      } else if (name == kDeallocation) {
        kinds[id] = {Kind::kFree, {}};
      } else if (name == kVariableMark) {
        kinds[id] = {Kind::kMark, {}};
      } else if (name.substr(0, kFunctionCall.size()) == kFunctionCall) {
        // "__inference_<name>_<n>": the function's name without its instance number.
        std::string_view function = name.substr(kFunctionCall.size());
        const size_t underscore = function.rfind('_');
        if (underscore != std::string_view::npos && underscore > 0 &&
            function.find_first_not_of("0123456789", underscore + 1) == std::string_view::npos) {
          function = function.substr(0, underscore);
        }
        kinds[id] = {Kind::kCall, std::string(ForMessage(function, 80))};
      }
    }
    if (kinds.empty()) return Status::Ok();
    for (const XLine& line : plane.lines()) {
      if (line.timestamp_ns() < 0 || line.timestamp_ns() > kMaxTimestampNs) {
        return Error(fmt::format("line \"{}\" starts at {} ns", ForMessage(line.name(), 40),
                                 line.timestamp_ns()));
      }
      const bool data_thread = std::string_view(line.name()).substr(0, 7) == "tf_data";
      for (const XEvent& e : line.events()) {
        const auto kind = kinds.find(e.metadata_id());
        if (kind == kinds.end()) continue;
        if (e.data_case() == XEvent::kNumOccurrences) {
          ++aggregated_;  // an aggregate of several events: no time, no single allocation
          continue;
        }
        if (e.offset_ps() < 0 || e.offset_ps() > kMaxOffsetPs || e.duration_ps() < 0 ||
            e.duration_ps() > kMaxOffsetPs) {
          return Error(fmt::format("an event on line \"{}\" has offset {} ps and duration {} ps",
                                   ForMessage(line.name(), 40), e.offset_ps(), e.duration_ps()));
        }
        const int64_t time_ns = line.timestamp_ns() + e.offset_ps() / 1000;
        switch (kind->second.first) {
          case Kind::kCall:
            calls_.push_back({time_ns, time_ns + e.duration_ps() / 1000, kind->second.second});
            break;
          case Kind::kMark:
            RETURN_IF_ERROR(ReadMark(e, plane, stat_names, time_ns));
            break;
          case Kind::kAlloc:
          case Kind::kFree:
            RETURN_IF_ERROR(ReadMemoryEvent(e, plane, stat_names, time_ns,
                                            kind->second.first == Kind::kAlloc, data_thread,
                                            line.name()));
            break;
          case Kind::kOther:
            break;
        }
      }
    }
    return Status::Ok();
  }

  Status ReadMemoryEvent(const XEvent& e, const XPlane& plane,
                         const std::unordered_map<int64_t, std::string_view>& stat_names,
                         int64_t time_ns, bool alloc, bool data_thread, std::string_view line) {
    if (memory_.size() + 1 > model::kMaxEvents / 3) {
      return Error("more memory events than a trace holds");
    }
    MemoryEvent m;
    m.time_ns = time_ns;
    m.order = memory_.size();
    m.alloc = alloc;
    m.data_thread = data_thread;
    std::optional<int64_t> addr, bytes;
    for (const XStat& stat : e.stats()) {
      const auto name = stat_names.find(stat.metadata_id());
      if (name == stat_names.end()) continue;
      ASSIGN_OR_RETURN(const Value v, ValueOf(stat, plane));
      const std::string_view key = name->second;
      if (key == "addr") addr = v.number;
      if (key == "allocation_bytes") bytes = v.number;
      if (key == "requested_bytes" && v.number) m.requested = *v.number;
      if (key == "bytes_allocated") m.in_use = v.number;
      if (key == "bytes_available") m.available = v.number;
      if (key == "peak_bytes_in_use") m.peak = v.number;
      if (key == "data_type" && v.number) m.data_type = *v.number;
      if (key == "allocator_name" && v.text) m.allocator = *v.text;
      if (key == "tf_op" && v.text) m.op = *v.text;
      if (key == "region_type" && v.text) m.region = *v.text;
      if ((key == "shape" || key == "tensor_shape") && v.text) m.shape = *v.text;
    }
    const char* what = alloc ? "a MemoryAllocation" : "a MemoryDeallocation";
    if (!addr || !bytes) {
      return Error(fmt::format("{} event on line \"{}\" has no {} stat", what, ForMessage(line, 40),
                               !addr ? "addr" : "allocation_bytes"));
    }
    if (*bytes <= 0 || static_cast<uint64_t>(*bytes) > model::kMaxPlausibleBytes ||
        (m.in_use &&
         (*m.in_use < 0 || static_cast<uint64_t>(*m.in_use) > model::kMaxPlausibleLiveBytes))) {
      return Error(fmt::format("{} event on line \"{}\" of {} bytes with {} in use", what,
                               ForMessage(line, 40), *bytes, m.in_use.value_or(0)));
    }
    m.addr = static_cast<uint64_t>(*addr);
    m.bytes = *bytes;
    if (m.requested <= 0 || m.requested > m.bytes) m.requested = m.bytes;
    memory_.push_back(m);
    return Status::Ok();
  }

  Status ReadMark(const XEvent& e, const XPlane& plane,
                  const std::unordered_map<int64_t, std::string_view>& stat_names,
                  int64_t time_ns) {
    VariableMark mark;
    mark.time_ns = time_ns;
    std::optional<int64_t> addr;
    for (const XStat& stat : e.stats()) {
      const auto name = stat_names.find(stat.metadata_id());
      if (name == stat_names.end()) continue;
      ASSIGN_OR_RETURN(const Value v, ValueOf(stat, plane));
      const std::string_view key = name->second;
      if (key == "addr") addr = v.number;
      if (key == "bytes" && v.number) mark.bytes = *v.number;
      if (key == "path" && v.text) mark.path = *v.text;
      if (key == "role" && v.text) mark.role = *v.text;
      if (key == "shape" && v.text) mark.shape = *v.text;
    }
    if (!addr || mark.path.empty() || (mark.role != "weight" && mark.role != "optimizer_state")) {
      ++bad_marks_;  // written by something else, or a newer vramscope.tf: not trusted
      return Status::Ok();
    }
    mark.addr = static_cast<uint64_t>(*addr);
    marks_.push_back(mark);
    return Status::Ok();
  }

  Status AssignDevices() {
    std::map<std::string_view, uint64_t> counts;
    for (const MemoryEvent& m : memory_) ++counts[m.allocator];
    std::string_view host;
    uint64_t host_count = 0;
    bool gpu = false;
    for (const auto& [name, n] : counts) {
      if (const auto ordinal = GpuOrdinal(name)) {
        gpu = true;
        devices_[name] = *ordinal;
      } else if (n > host_count) {
        host = name;
        host_count = n;
      }
    }
    if (!gpu) {
      devices_[host] = 0;
      host_allocator_ = host;
    }
    for (const auto& [name, n] : counts) {
      if (!devices_.contains(name)) left_out_.emplace_back(name, n);
    }
    return Status::Ok();
  }

  Status BuildEvents() {
    std::vector<const MemoryEvent*> order;
    for (const MemoryEvent& m : memory_) {
      if (devices_.contains(m.allocator)) order.push_back(&m);
    }
    std::sort(order.begin(), order.end(), [&](const MemoryEvent* a, const MemoryEvent* b) {
      const int32_t da = devices_.at(a->allocator), db = devices_.at(b->allocator);
      if (da != db) return da < db;
      if (a->time_ns != b->time_ns) return a->time_ns < b->time_ns;
      return a->order < b->order;
    });
    model::Events& ev = t_.events;
    ev.Reserve(order.size() * 2);
    for (size_t k = 0; k < order.size();) {
      const int32_t device = devices_.at(order[k]->allocator);
      const size_t begin = ev.count();
      const MemoryEvent& first = *order[k];
      std::optional<int64_t> level;
      if (first.in_use) level = *first.in_use - (first.alloc ? first.bytes : -first.bytes);
      const std::optional<int64_t> start_level = level;
      size_t end = k;
      while (end < order.size() && devices_.at(order[end]->allocator) == device) ++end;
      std::unordered_map<uint64_t, size_t> open;  // addr -> index into lifetimes_
      AddMemoryBeforeProfile(device, order, k, end, start_level, open);
      for (; k < end; ++k) {
        const MemoryEvent& m = *order[k];
        const int64_t t = RoundToUs(m.time_ns);
        if (level && m.in_use) {
          *level += m.alloc ? m.bytes : -m.bytes;
          if (*level != *m.in_use) {
            ++levels_disagree_;
            level = *m.in_use;
          }
        }
        if (m.peak) peak_by_device_[device] = std::max(peak_by_device_[device], *m.peak);
        if (m.available && m.in_use) limit_by_device_[device] = *m.available + *m.in_use;
        if (m.alloc) {
          if (const auto it = open.find(m.addr); it != open.end()) {
            if (it->second != kBeforeProfile) lifetimes_[it->second].free_ns = m.time_ns;
            ++reused_addresses_;  // its release is missing
          }
          const auto event = static_cast<uint32_t>(ev.count());
          requested_[event] = static_cast<uint64_t>(m.requested);
          open[m.addr] = lifetimes_.size();
          lifetimes_.push_back({event, &m});
          by_address_[m.addr].push_back(lifetimes_.size() - 1);
          ev.Push(Action::kAlloc, device, m.addr, static_cast<uint64_t>(m.bytes), 0, t,
                  model::kEmptyStack);
          continue;
        }
        if (const auto it = open.find(m.addr); it != open.end()) {
          if (it->second != kBeforeProfile) {
            if (static_cast<int64_t>(ev.size[lifetimes_[it->second].event]) != m.bytes) {
              ++size_mismatch_;
            }
            lifetimes_[it->second].free_ns = m.time_ns;
          }
          open.erase(it);
        }
        ev.Push(Action::kFreeRequested, device, m.addr, static_cast<uint64_t>(m.bytes), 0, t,
                model::kEmptyStack);
        ev.Push(Action::kFreeCompleted, device, m.addr, static_cast<uint64_t>(m.bytes), 0, t,
                model::kEmptyStack);
      }
      t_.devices.push_back(device);
      t_.device_event_ranges.emplace_back(begin, ev.count());
      model::StartLevels start;  // nothing untracked: AddMemoryBeforeProfile made it events
      start.device = device;
      t_.start_levels.push_back(start);
    }
    return Status::Ok();
  }

  // The memory in use when the profile began, as alloc events at its first event's time, unknown
  // and named so (the rules are for what the profile saw made): one per buffer the profile sees
  // freed without its allocation (address and size known), and one of the rest of the allocator's
  // count before the first event. Marks `open` with them.
  void AddMemoryBeforeProfile(int32_t device, const std::vector<const MemoryEvent*>& order,
                              size_t begin, size_t end, std::optional<int64_t> start_level,
                              std::unordered_map<uint64_t, size_t>& open) {
    std::unordered_set<uint64_t> seen;
    std::vector<const MemoryEvent*> before;
    for (size_t i = begin; i < end; ++i) {
      const MemoryEvent& m = *order[i];
      if (m.alloc) {
        seen.insert(m.addr);
      } else if (!seen.contains(m.addr)) {
        before.push_back(&m);
        seen.insert(m.addr);  // a second free there is a lost allocation, not this one
      } else {
        seen.erase(m.addr);
      }
    }
    const int64_t t = RoundToUs(order[begin]->time_ns);
    const model::StringId name = t_.strings.Intern("in use before the profile began");
    auto push = [&](uint64_t addr, int64_t bytes) {
      const auto event = static_cast<uint32_t>(t_.events.count());
      t_.events.category.emplace(event, Category::kUnknown);
      t_.events.tensor_name.emplace(event, name);
      t_.events.Push(Action::kAlloc, device, addr, static_cast<uint64_t>(bytes), 0, t,
                     model::kEmptyStack);
      open[addr] = kBeforeProfile;
      RuleTally& r = tallies_["before_profile"];
      ++r.count;
      r.bytes += static_cast<uint64_t>(bytes);
    };
    int64_t freed = 0;
    for (const MemoryEvent* m : before) {
      push(m->addr, m->bytes);
      freed += m->bytes;
    }
    if (!start_level) return;
    if (*start_level < freed) ++negative_start_;
    if (*start_level > freed)
      push(kUntrackedAddress + static_cast<uint64_t>(device), *start_level - freed);
    before_profile_ += static_cast<uint64_t>(std::max<int64_t>(0, *start_level));
  }

  // Each mark names the buffer alive at its address when it was made.
  void ApplyMarks() {
    for (const VariableMark& mark : marks_) {
      const auto it = by_address_.find(mark.addr);
      const Lifetime* found = nullptr;
      if (it != by_address_.end()) {
        for (const size_t i : it->second) {
          const Lifetime& l = lifetimes_[i];
          if (l.memory->time_ns <= mark.time_ns && mark.time_ns < l.free_ns) found = &l;
        }
      }
      marked_paths_.insert(std::string(mark.path));
      if (found == nullptr) {
        if (unmatched_paths_.emplace(mark.path, mark.bytes).second) {
          unmatched_mark_bytes_ += static_cast<uint64_t>(std::max<int64_t>(0, mark.bytes));
        }
        continue;
      }
      const bool weight = mark.role == "weight";
      const Category c = weight ? Category::kWeight : Category::kOptimizerState;
      if (!decided_.emplace(found->event, c).second) continue;  // two marks, one buffer
      t_.events.tensor_name.emplace(found->event, t_.strings.Intern(ForMessage(mark.path, 200)));
      Tally(weight ? "variable_weight" : "variable_optimizer_state", *found);
      if (weight) weight_shapes_.emplace(WithoutSpaces(mark.shape), mark.bytes);
      if (!weight) {
        const std::vector<std::string_view> parts = Components(mark.path);
        if (parts.size() > 1) optimizer_scopes_.insert(Lower(parts.front()));
      }
    }
  }

  void Tally(const char* rule, const Lifetime& l) {
    RuleTally& r = tallies_[rule];
    ++r.count;
    r.bytes += static_cast<uint64_t>(l.memory->bytes);
  }

  bool UnderOptimizer(const std::vector<std::string_view>& parts) const {
    for (const std::string_view part : parts) {
      const std::string lower = Lower(part);
      if (optimizer_scopes_.contains(lower)) return true;
      for (const std::string_view scope : kOptimizerScopes) {
        if (lower == scope) return true;
      }
    }
    return false;
  }

  // The rules of docs/design/xspace-memory-events.md, in order, for what no mark decided.
  void Categorise() {
    model::Events& ev = t_.events;
    for (const Lifetime& l : lifetimes_) {
      if (decided_.contains(l.event)) continue;
      const MemoryEvent& m = *l.memory;
      const std::vector<std::string_view> parts = Components(m.op);
      auto has = [&](std::string_view part) {
        return std::find(parts.begin(), parts.end(), part) != parts.end();
      };
      const bool freed = l.free_ns != std::numeric_limits<int64_t>::max();
      Category c = Category::kUnknown;
      const char* rule = "no_rule";
      if (m.data_type == kResourceDataType) {
        rule = "resource_handle";
      } else if (m.data_thread || m.op.find("Dataset") != std::string_view::npos ||
                 m.op.find("Iterator") != std::string_view::npos) {
        c = Category::kInput;
        rule = "data_pipeline";
      } else if (UnderOptimizer(parts) && has("Initializer")) {
        c = Category::kOptimizerState;
        rule = "optimizer_initializer";
      } else if (m.region.empty() && parts.size() > 1) {
        rule = "function_constant";  // no op's output or scratch: made when a function is set up
      } else if (has("gradient_tape")) {
        const bool weight_shape =
            weight_shapes_.contains({std::string(WithoutSpaces(m.shape)), m.requested});
        c = weight_shape ? Category::kGradient : Category::kTemporary;
        rule = weight_shape ? "gradient_of_weight" : "backward_value";
      } else if (UnderOptimizer(parts)) {
        c = Category::kTemporary;
        rule = "optimizer_step";
      } else if (m.region == "temp") {
        c = Category::kWorkspace;
        rule = "temp_region";
      } else if (parts.size() > 1) {
        c = Category::kActivation;
        rule = "function_output";
      } else if (!m.op.empty()) {
        c = freed ? Category::kTemporary : Category::kUnknown;
        rule = freed ? "eager_freed" : "eager_alive";
      }
      ev.category.emplace(l.event, c);
      Tally(rule, l);
      if (!m.op.empty()) {
        ev.operation.emplace(l.event, t_.strings.Intern(ForMessage(m.op, 200)));
      }
      // The owner's name: "output [64,128]" (reports show the op before it), or "value" for a
      // value with no region or shape (a tf.function's constants and initializers). Reports
      // name state (weights, gradients, optimizer state, inputs, workspace) by the tensor's
      // name alone, so there the op leads it.
      std::string name;
      if (m.data_type == kResourceDataType) {
        name = "resource handle";
      } else if (!m.shape.empty() || !m.region.empty()) {
        name =
            fmt::format("{} {}", m.region.empty() ? std::string("value") : ForMessage(m.region, 20),
                        ForMessage(m.shape, 60));
      } else if (!m.op.empty()) {
        name = "value";
      }
      const bool state = c == Category::kWeight || c == Category::kGradient ||
                         c == Category::kOptimizerState || c == Category::kInput ||
                         c == Category::kWorkspace;
      if (state && !m.op.empty() && m.data_type != kResourceDataType) {
        name = fmt::format("{} ({})", ForMessage(m.op, 160), name);
      }
      if (!name.empty()) ev.tensor_name.emplace(l.event, t_.strings.Intern(name));
    }
    for (const auto& [event, c] : decided_) ev.category.emplace(event, c);
  }

  // Steps: the calls of the most-called tf.function.
  void AddSteps() {
    std::map<std::string, uint64_t> counts;
    for (const Call& c : calls_) ++counts[c.function];
    uint64_t most = 0;
    for (const auto& [name, n] : counts) {
      if (n > most) {
        most = n;
        step_function_ = name;
      }
    }
    if (most == 0) return;
    std::vector<const Call*> steps;
    for (const Call& c : calls_) {
      if (c.function == step_function_) steps.push_back(&c);
    }
    std::sort(steps.begin(), steps.end(),
              [](const Call* a, const Call* b) { return a->start_ns < b->start_ns; });
    step_count_ = steps.size();
    for (size_t i = 0; i < steps.size(); ++i) {
      for (const int32_t device : t_.devices) {
        for (const bool start : {true, false}) {
          model::Annotation a;
          a.device = device;
          a.time_us = RoundToUs(start ? steps[i]->start_ns : steps[i]->end_ns);
          // Named as PyTorch's profiler names its steps: the phases read them the same way.
          a.fields = {{"stage", start ? "START" : "END"},
                      {"name", fmt::format("ProfilerStep#{}", i)},
                      {"function", step_function_}};
          t_.annotations.push_back(std::move(a));
        }
      }
    }
  }

  std::string RuleNote() const {
    static const std::map<std::string_view, std::string_view> kSentences = {
        {"variable_weight", "weights: buffers a vramscope.variable mark names as a model's"},
        {"variable_optimizer_state",
         "optimizer state: buffers a vramscope.variable mark names as the optimizer's"},
        {"resource_handle", "unknown: resource handles (VarHandleOp)"},
        {"data_pipeline", "inputs: made on a tf.data thread or by a Dataset or Iterator op"},
        {"gradient_of_weight",
         "gradients: outputs under gradient_tape/ of a marked weight's shape"},
        {"backward_value", "temporaries: other outputs under gradient_tape/"},
        {"optimizer_initializer",
         "optimizer state: made by an Initializer in an optimizer's scope"},
        {"optimizer_step", "temporaries: other values in an optimizer's scope"},
        {"temp_region", "workspace: TensorFlow's temp regions (a kernel's scratch)"},
        {"function_output", "activations: other outputs of a tf.function's ops"},
        {"eager_freed", "temporaries: outputs of eager ops, freed"},
        {"eager_alive", "unknown: outputs of eager ops alive at the end"},
        {"function_constant",
         "unknown: values of an op with no region (a function's constants and folded values)"},
        {"before_profile", "unknown: in use before the profile began"},
        {"no_rule", "unknown: no op recorded"},
    };
    std::vector<std::string> parts;
    for (const auto& [rule, sentence] : kSentences) {
      const auto it = tallies_.find(rule);
      if (it == tallies_.end()) continue;
      parts.push_back(fmt::format("{} ({} allocations, {})", sentence,
                                  FormatCount(static_cast<int64_t>(it->second.count)),
                                  FormatBytes(static_cast<int64_t>(it->second.bytes))));
    }
    return fmt::format("categories, by rule: {}", fmt::join(parts, "; "));
  }

  Result<model::Trace> Finish() {
    if (t_.events.count() == 0) {
      return Error("its memory events belong to no allocator it can read");
    }
    t_.source.path = path_;
    t_.source.format = "profiler XSpace memory events (TensorFlow's profiler, .xplane.pb)";
    t_.source.generation = "xplane.proto";
    std::vector<std::string> allocators;
    for (const auto& [name, device] : devices_) {
      allocators.push_back(fmt::format("{} (device {})", ForMessage(name, 40), device));
    }
    t_.source.generation_evidence = fmt::format(
        "{} planes; {} MemoryAllocation/MemoryDeallocation events of {}", s_.planes_size(),
        FormatCount(static_cast<int64_t>(memory_.size())), fmt::join(allocators, ", "));
    model::TraceFacts& f = t_.facts;
    f.has_trace = true;
    f.has_times = true;
    f.sizes_are_block_sizes = true;  // allocation_bytes: the allocator's rounded sizes
    std::vector<std::string>& notes = f.notes;
    notes.push_back(
        "sizes are the BFC allocator's (allocation_bytes, rounded up to 256 B); each "
        "allocation's requested bytes are kept. The allocator's reserved memory is not in the "
        "events");
    if (!host_allocator_.empty()) {
      t_.source.device_type = "cpu";
      notes.push_back(
          fmt::format("no GPU allocator in the profile: the host allocator {} is shown as cpu:0",
                      ForMessage(host_allocator_, 40)));
    }
    for (const auto& [name, n] : left_out_) {
      notes.push_back(fmt::format("{} events of allocator {} (host memory) are left out",
                                  FormatCount(static_cast<int64_t>(n)), ForMessage(name, 40)));
    }
    for (const auto& [device, limit] : limit_by_device_) {
      notes.push_back(fmt::format(
          "device {}: the allocator's limit is {} (in use + available at its last event); its "
          "own peak since it started is {}",
          device, FormatBytes(limit), FormatBytes(peak_by_device_[device])));
    }
    if (before_profile_ > 0) {
      notes.push_back(fmt::format(
          "{} were in use before the profile began (allocated before the profiler started)",
          FormatBytes(static_cast<int64_t>(before_profile_))));
    }
    notes.push_back(RuleNote());
    if (marks_.empty()) {
      notes.push_back(
          "no vramscope.variable marks: variables are not told apart from other long-lived "
          "buffers; profile with vramscope.tf.profile(logdir, model) to mark them");
    } else {
      // A variable is unmatched when none of its marks found its buffer.
      std::vector<std::string> unmatched;
      for (const auto& [path, bytes] : unmatched_paths_) {
        if (unmatched.size() < 3) unmatched.push_back(ForMessage(path, 60));
      }
      notes.push_back(fmt::format(
          "{} variables marked by vramscope.tf ({} marks){}", marked_paths_.size(), marks_.size(),
          unmatched_paths_.empty()
              ? std::string(", each matched to its buffer")
              : fmt::format("; {} ({}) never matched a buffer, being outside this allocator's "
                            "memory: {}{}",
                            unmatched_paths_.size(),
                            FormatBytes(static_cast<int64_t>(unmatched_mark_bytes_)),
                            fmt::join(unmatched, ", "),
                            unmatched_paths_.size() > 3 ? ", ..." : "")));
    }
    if (bad_marks_ > 0) {
      notes.push_back(fmt::format(
          "{} vramscope.variable events lack an address, path or known role and are ignored",
          bad_marks_));
    }
    if (step_count_ > 0) {
      notes.push_back(fmt::format("steps: the {} calls of tf.function {} (the most called)",
                                  step_count_, step_function_));
    }
    if (levels_disagree_ > 0) {
      notes.push_back(fmt::format(
          "at {} events bytes_allocated does not follow from the previous one (events of two "
          "threads in the same nanosecond): the curve follows the events",
          levels_disagree_));
    }
    if (size_mismatch_ > 0 || reused_addresses_ > 0 || negative_start_ > 0) {
      notes.push_back(fmt::format(
          "{} releases differ in size from their allocation, {} allocations reuse a live "
          "address, {} devices free more than was in use before the profile",
          size_mismatch_, reused_addresses_, negative_start_));
    }
    if (aggregated_ > 0) {
      notes.push_back(
          fmt::format("{} aggregated memory events (no time) are left out", aggregated_));
    }
    model::BuildAllocations(t_);
    for (model::Allocation& a : t_.allocations) {
      if (a.alloc_event == model::kNoEvent) continue;
      const auto it = requested_.find(static_cast<uint32_t>(a.alloc_event));
      if (it != requested_.end()) a.requested_size = it->second;
    }
    return std::move(t_);
  }

  const XSpace& s_;
  const std::string& path_;
  model::Trace t_;
  std::vector<MemoryEvent> memory_;  // stable: lifetimes_ point into it
  std::vector<VariableMark> marks_;
  std::vector<Call> calls_;
  std::map<std::string_view, int32_t> devices_;
  std::string_view host_allocator_;
  std::vector<std::pair<std::string_view, uint64_t>> left_out_;
  std::vector<Lifetime> lifetimes_;
  std::unordered_map<uint64_t, std::vector<size_t>> by_address_;
  std::unordered_map<uint32_t, uint64_t> requested_;
  std::unordered_map<uint32_t, Category> decided_;
  std::set<std::pair<std::string, int64_t>> weight_shapes_;  // (shape, bytes) of marked weights
  std::set<std::string> optimizer_scopes_;
  std::map<std::string_view, RuleTally> tallies_;
  std::map<int32_t, int64_t> peak_by_device_, limit_by_device_;
  std::set<std::string> marked_paths_;
  std::map<std::string_view, int64_t> unmatched_paths_;  // path -> bytes
  std::string step_function_;
  uint64_t step_count_ = 0, aggregated_ = 0, bad_marks_ = 0;
  uint64_t unmatched_mark_bytes_ = 0, before_profile_ = 0, levels_disagree_ = 0;
  uint64_t size_mismatch_ = 0, reused_addresses_ = 0, negative_start_ = 0;
};

}  // namespace

Result<model::Trace> TraceFromXSpace(std::span<const uint8_t> bytes, const std::string& path) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidInput(fmt::format(
        "{}: {} of protobuf is more than libprotobuf parses at once (2 GiB); profile fewer "
        "steps (tf.profiler.experimental.start/stop around them)",
        path, FormatBytes(static_cast<int64_t>(bytes.size()))));
  }
  // libprotobuf logs what it refuses to stderr; the refusal here is the one line a user sees.
  const google::protobuf::LogSilencer silence;
  XSpace space;
  if (!space.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidInput(fmt::format("{}: not a valid XSpace protobuf; {}", path, kWhat));
  }
  return Converter(space, path).Convert();
}

}  // namespace vramscope::xspace
