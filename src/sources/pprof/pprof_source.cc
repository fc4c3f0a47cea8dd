#include "sources/pprof/pprof_source.h"

#include <fmt/format.h>
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/units.h"
#include "model/limits.h"
#include "pprof_profile.pb.h"

namespace vramscope::pprof {

namespace {

using model::Action;
using model::Category;

// Synthetic addresses: one per sample, 512 B apart, never reused.
constexpr uint64_t kAddressStep = 512;
// At most this many events from splitting samples of equal-sized buffers (then one per sample),
// and this many of the profile's comments shown.
constexpr size_t kMaxSplit = 1u << 22;
constexpr int kMaxComments = 16;
// The `kind` label of the sample vramscope's writer adds to name the step.
constexpr std::string_view kStepKind = "vramscope_step";
constexpr const char* kWhat =
    "the file is damaged or not a device memory profile (jax.profiler."
    "save_device_memory_profile writes one)";

// "cuda:3" -> 3: the ordinal after the last colon; 0 when there is none or it is out of range.
int32_t DeviceOrdinal(std::string_view label) {
  const size_t colon = label.rfind(':');
  if (colon == std::string_view::npos || colon + 1 >= label.size() || colon + 7 <= label.size()) {
    return 0;
  }
  int64_t ordinal = 0;
  for (const char c : label.substr(colon + 1)) {
    if (c < '0' || c > '9') return 0;
    ordinal = ordinal * 10 + (c - '0');
  }
  return ordinal <= model::kMaxDeviceOrdinal ? static_cast<int32_t>(ordinal) : 0;
}

class Converter {
 public:
  Converter(const Profile& profile, const std::string& path) : p_(profile), path_(path) {}

  Status Error(const std::string& what) const {
    return InvalidInput(fmt::format("{}: {}; {}", path_, what, kWhat));
  }

  // string_table[index], or an error naming the field.
  Result<std::string_view> String(int64_t index, const char* field) const {
    if (index < 0 || index >= p_.string_table_size()) {
      return Error(
          fmt::format("{} names string {} of a table of {}", field, index, p_.string_table_size()));
    }
    return std::string_view(p_.string_table(static_cast<int>(index)));
  }

  Result<model::Trace> Convert() {
    if (p_.string_table_size() == 0 || !p_.string_table(0).empty()) {
      return Error("its string table does not start with \"\" as pprof's does");
    }
    RETURN_IF_ERROR(FindSampleTypes());
    RETURN_IF_ERROR(IndexLocations());
    for (int i = 0; i < p_.sample_size(); ++i) RETURN_IF_ERROR(AddSample(i));
    return Finish();
  }

 private:
  Status FindSampleTypes() {
    std::vector<std::string> seen;
    for (int i = 0; i < p_.sample_type_size(); ++i) {
      ASSIGN_OR_RETURN(const std::string_view type,
                       String(p_.sample_type(i).type(), "a sample type"));
      ASSIGN_OR_RETURN(const std::string_view unit,
                       String(p_.sample_type(i).unit(), "a sample unit"));
      if (unit == "bytes" && (type == "space" || type == "inuse_space")) bytes_index_ = i;
      if (unit == "count" && (type == "allocations" || type == "inuse_objects")) count_index_ = i;
      seen.push_back(fmt::format("{} ({})", ForMessage(type, 30), ForMessage(unit, 20)));
    }
    if (!bytes_index_) {
      return Unsupported(fmt::format(
          "{}: a pprof profile of {}, not of memory in use; vramscope reads device memory "
          "profiles (jax.profiler.save_device_memory_profile), whose sample type is space (bytes)",
          path_, seen.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(seen, ", "))));
    }
    return Status::Ok();
  }

  Status IndexLocations() {
    for (int i = 0; i < p_.function_size(); ++i) {
      const Function& f = p_.function(i);
      ASSIGN_OR_RETURN(const std::string_view name, String(f.name(), "a function's name"));
      ASSIGN_OR_RETURN(const std::string_view file, String(f.filename(), "a function's file"));
      functions_[f.id()] = {t_.strings.Intern(file), t_.strings.Intern(name)};
      optax_functions_[f.id()] = file.find("/optax/") != std::string_view::npos;
    }
    for (int i = 0; i < p_.location_size(); ++i) {
      const Location& l = p_.location(i);
      std::vector<model::FrameId>& frames = locations_[l.id()];
      bool optax = false;
      for (const Line& line : l.line()) {
        const auto f = functions_.find(line.function_id());
        if (f == functions_.end()) {
          return Error(fmt::format("location {} names function {}, which the profile does not hold",
                                   l.id(), line.function_id()));
        }
        model::Frame frame;
        frame.filename = f->second.first;
        frame.function = f->second.second;
        frame.line = static_cast<int32_t>(std::clamp<int64_t>(line.line(), 0, INT32_MAX));
        frame.kind = model::ClassifyFrame(t_.strings.Get(frame.filename));
        frames.push_back(t_.frames.Intern(frame));
        optax |= optax_functions_[line.function_id()];
      }
      optax_locations_[l.id()] = optax;
    }
    return Status::Ok();
  }

  Status AddSample(int index) {
    const Sample& s = p_.sample(index);
    if (s.value_size() != p_.sample_type_size()) {
      return Error(fmt::format("sample {} has {} values for {} sample types", index, s.value_size(),
                               p_.sample_type_size()));
    }
    const int64_t bytes = s.value(*bytes_index_);
    const int64_t count = count_index_ ? s.value(*count_index_) : 1;
    if (bytes < 0 || static_cast<uint64_t>(bytes) > model::kMaxPlausibleBytes || count < 0) {
      return Error(fmt::format("sample {} holds {} bytes in {} buffers", index, bytes, count));
    }
    std::string_view kind = "buffer", role, rule, array_name;
    std::map<std::string, uint64_t> figures;  // vramscope_<what>_bytes numeric labels
    int32_t device = 0;
    for (const Label& label : s.label()) {
      ASSIGN_OR_RETURN(const std::string_view key, String(label.key(), "a label's key"));
      ASSIGN_OR_RETURN(const std::string_view value, String(label.str(), "a label's value"));
      if (key == "kind") kind = value;
      if (key == "vramscope_role") role = value;
      if (key == "vramscope_rule") rule = value;
      if (key == "vramscope_name") array_name = value;
      if (key.starts_with("vramscope_") && key.ends_with("_bytes")) {
        if (label.num() < 0 || static_cast<uint64_t>(label.num()) > model::kMaxPlausibleBytes) {
          return Error(fmt::format("sample {}'s label {} is {} bytes", index, ForMessage(key, 40),
                                   label.num()));
        }
        figures[std::string(key)] = static_cast<uint64_t>(label.num());
      }
      if (key == "device") {
        device_names_[std::string(ForMessage(value, 30))] += 1;
        device = DeviceOrdinal(value);
      }
    }
    std::vector<model::FrameId> frames;
    bool optax = false;
    for (const uint64_t id : s.location_id()) {
      const auto l = locations_.find(id);
      if (l == locations_.end()) {
        return Error(
            fmt::format("sample {} names location {}, which the profile does not hold", index, id));
      }
      if (frames.size() + l->second.size() > 4096) {
        return Error(fmt::format("sample {} has a stack deeper than 4,096 frames", index));
      }
      frames.insert(frames.end(), l->second.begin(), l->second.end());
      optax |= optax_locations_[id];
    }
    if (kind == kStepKind) {
      if (std::none_of(steps_.begin(), steps_.end(),
                       [&](const Step& st) { return st.device == device; })) {
        steps_.push_back({device, t_.stacks.Intern(frames),
                          std::string(ForMessage(array_name.empty() ? "?" : array_name, 100)),
                          figures["vramscope_argument_bytes"], figures["vramscope_output_bytes"],
                          figures["vramscope_alias_bytes"], figures["vramscope_temp_bytes"]});
      }
      return Status::Ok();
    }
    const bool executable = kind == "executable";
    if (executable) {
      executables_ += static_cast<uint64_t>(count);
      executable_bytes_ += static_cast<uint64_t>(bytes);
    } else {
      buffers_ += static_cast<uint64_t>(count);
    }
    if (bytes == 0) {
      ++empty_samples_;
      return Status::Ok();
    }
    live_bytes_ += static_cast<uint64_t>(bytes);
    if (live_bytes_ > model::kMaxPlausibleLiveBytes) return Error("more than 64 PiB in all");
    if (events_.size() + 1 > model::kMaxEvents) return Error("more samples than a trace holds");
    Category category = Category::kUnknown;
    // A role label is vramscope's decision, "unknown" included; only samples without one (JAX's
    // own profile, a sample the writer kept whole) fall back to optax's frames.
    if (!role.empty() && !executable) {
      const std::optional<Category> marked = model::ParseCategory(role);
      if (marked) {
        category = *marked;
        marked_[{std::string(role), std::string(ForMessage(rule, 200))}] +=
            static_cast<uint64_t>(bytes);
      } else {
        unknown_roles_[std::string(ForMessage(role, 40))] += 1;
      }
    } else if (!executable) {
      unlabelled_bytes_ += static_cast<uint64_t>(bytes);
      if (optax) {
        category = Category::kOptimizerState;
        optax_bytes_ += static_cast<uint64_t>(bytes);
      }
    }
    const model::StackId stack = t_.stacks.Intern(frames);
    if (executable) {
      events_.push_back({device, static_cast<uint64_t>(bytes), stack, category,
                         fmt::format("compiled executable{} ({})", count == 1 ? "" : "s", count)});
      return Status::Ok();
    }
    // JAX groups buffers by stack, device and size: a sample of `count` buffers is that many
    // buffers of bytes/count each. Any other grouping stays one allocation of the total.
    const bool equal_sizes = count > 1 && bytes % count == 0 && events_.size() + count <= kMaxSplit;
    if (count > 1 && !equal_sizes) ++multi_buffer_samples_;
    const int64_t pieces = equal_sizes ? count : 1;
    std::string name = !array_name.empty()         ? std::string(ForMessage(array_name, 200))
                       : count > 1 && !equal_sizes ? fmt::format("{} buffers", count)
                                                   : std::string();
    for (int64_t k = 0; k < pieces; ++k) {
      events_.push_back({device, static_cast<uint64_t>(bytes / pieces), stack, category, name});
    }
    return Status::Ok();
  }

  Result<model::Trace> Finish() {
    if (p_.sample_size() == 0) {
      return Error("it holds no samples (a profile saved with no buffers alive?)");
    }
    model::Events& ev = t_.events;
    uint64_t address = 0;
    for (const Pending& e : events_) {
      const auto i = static_cast<uint32_t>(ev.count());
      ev.category.emplace(i, e.category);
      if (!e.name.empty()) ev.tensor_name.emplace(i, t_.strings.Intern(e.name));
      address += kAddressStep;
      ev.Push(Action::kAlloc, e.device, address, e.bytes, 0, model::kNoTime, e.stack);
    }
    AddSteps();
    model::StableSortEventsByDevice(ev);
    for (size_t i = 0; i < ev.count(); ++i) {
      if (t_.devices.empty() || t_.devices.back() != ev.device[i]) {
        t_.devices.push_back(ev.device[i]);
        t_.device_event_ranges.emplace_back(i, i);
        model::StartLevels levels;
        levels.device = ev.device[i];
        t_.start_levels.push_back(std::move(levels));
      }
      t_.device_event_ranges.back().second = i + 1;
    }
    t_.source.path = path_;
    t_.source.format = "pprof device memory profile (jax.profiler.save_device_memory_profile)";
    t_.source.generation = "pprof profile.proto";
    t_.source.generation_evidence = fmt::format(
        "protobuf with a string table starting \"\" and sample types of unit bytes; {} samples, "
        "{} locations, {} functions",
        p_.sample_size(), p_.location_size(), p_.function_size());
    model::TraceFacts& f = t_.facts;
    f.has_trace = ev.count() > 0;
    f.sizes_are_block_sizes = true;  // the runtime's buffer bytes
    for (size_t i = 0; i < t_.frames.size(); ++i) {
      const bool python =
          t_.frames.Get(static_cast<model::FrameId>(i)).kind == model::FrameKind::kPython;
      f.has_python_frames |= python;
      f.has_native_frames |= !python;
    }
    f.has_stacks = t_.frames.size() > 0;
    std::vector<std::string>& notes = f.notes;
    notes.push_back(fmt::format(
        "the {} buffers alive when the profile was saved ({}), as {} samples grouped by the "
        "stack that created them, the device and the size: a sample of n buffers is n "
        "allocations of its bytes/n",
        FormatCount(static_cast<int64_t>(buffers_)),
        FormatBytes(static_cast<int64_t>(live_bytes_ - executable_bytes_)),
        FormatCount(p_.sample_size())));
    if (multi_buffer_samples_ > 0) {
      notes.push_back(
          fmt::format("{} samples hold buffers of unequal sizes (not JAX's grouping): each is one "
                      "allocation of its total",
                      FormatCount(static_cast<int64_t>(multi_buffer_samples_))));
    }
    notes.push_back(fmt::format(
        "no times, addresses or allocator state: the peak is {}; device memory the runtime "
        "reserved up front (XLA_PYTHON_CLIENT_PREALLOCATE) is not in the file",
        steps_.empty() ? "what was alive at that moment" : "the step's (above)"));
    if (marked_.empty()) {
      notes.push_back(fmt::format(
          "categories: buffers created under optax's code are optimizer state ({}); the rest is "
          "unknown, as the profile records no role. A jitted step's outputs carry the line that "
          "called it, so after a step the weights, the optimizer state and the step's outputs "
          "share one stack: vramscope run, or vramscope.jax_memory.save_profile, saves the "
          "profile with each buffer's role; vramscope.xla.save_memory_analysis gives the step's "
          "inside",
          FormatBytes(static_cast<int64_t>(optax_bytes_))));
    } else {
      std::vector<std::string> parts;
      for (const auto& [what, n] : marked_) {
        parts.push_back(fmt::format("{} {}, {}", what.first, FormatBytes(static_cast<int64_t>(n)),
                                    what.second));
      }
      std::string unlabelled;
      if (unlabelled_bytes_ > 0) {
        unlabelled = fmt::format(
            "; buffers without a role ({}, samples the writer kept whole): under optax's code "
            "optimizer state ({}), the rest unknown",
            FormatBytes(static_cast<int64_t>(unlabelled_bytes_)),
            FormatBytes(static_cast<int64_t>(optax_bytes_)));
      }
      notes.push_back(fmt::format(
          "categories: each buffer's role as vramscope marked it when the profile was saved "
          "(vramscope run, vramscope.jax_memory.save_profile): {}{}",
          fmt::join(parts, "; "), unlabelled));
    }
    if (!unknown_roles_.empty()) {
      std::vector<std::string> names;
      for (const auto& [role, n] : unknown_roles_) names.push_back(role);
      notes.push_back(fmt::format(
          "roles this vramscope does not know (a newer vramscope wrote them?) are unknown: {}",
          fmt::join(names, ", ")));
    }
    for (int i = 0; i < p_.comment_size() && i < kMaxComments; ++i) {
      const auto comment = String(p_.comment(i), "a comment");
      if (comment.ok())
        notes.push_back(fmt::format("the profile says: {}", ForMessage(*comment, 400)));
    }
    if (executables_ > 0) {
      notes.push_back(fmt::format("{} compiled executables (kind=executable) hold {}",
                                  FormatCount(static_cast<int64_t>(executables_)),
                                  FormatBytes(static_cast<int64_t>(executable_bytes_))));
    }
    bool host_only = !device_names_.empty();
    for (const auto& [name, samples] : device_names_) host_only &= name.starts_with("cpu:");
    if (host_only) t_.source.device_type = "cpu";  // a jax[cpu] profile
    if (!device_names_.empty()) {
      std::vector<std::string> names;
      for (const auto& [name, samples] : device_names_) names.push_back(name);
      notes.push_back(fmt::format("devices as the profile names them: {} (shown by ordinal)",
                                  fmt::join(names, ", ")));
    }
    if (empty_samples_ > 0) {
      notes.push_back(fmt::format("{} samples of 0 bytes are not shown",
                                  FormatCount(static_cast<int64_t>(empty_samples_))));
    }
    model::BuildAllocations(t_);
    return std::move(t_);
  }

  // The step vramscope's writer named (the largest compiled computation alive), after the
  // device's live buffers: its temp buffer and, where XLA's arguments plus outputs (aliased ones
  // once) exceed what is alive after it, the arguments it replaced; both then freed. The peak is
  // then XLA's own figure for the step, or the live buffers plus the temp buffer, whichever is
  // more: a lower bound of what the device held while the step ran.
  void AddSteps() {
    model::Events& ev = t_.events;
    uint64_t address = (events_.size() + 1) * kAddressStep;
    std::map<std::string, std::vector<std::string>> said;
    for (const Step& st : steps_) {
      uint64_t live = 0;
      for (const Pending& e : events_) live += e.device == st.device ? e.bytes : 0;
      const uint64_t own = st.argument + st.output - std::min(st.alias, st.argument + st.output);
      const uint64_t replaced = own > live ? own - live : 0;
      struct Part {
        uint64_t bytes;
        Category category;
        const char* what;
        uint64_t address = 0;
      };
      Part parts[] = {
          {replaced, Category::kUnknown,
           "its arguments and outputs beyond what is alive after it (XLA's analysis: the "
           "previous weights and state, unless donated)"},
          {st.temp, Category::kTemporary, "its temp buffer (activations, gradients, scratch)"}};
      for (Part& part : parts) {
        if (part.bytes == 0) continue;
        const auto i = static_cast<uint32_t>(ev.count());
        ev.category.emplace(i, part.category);
        ev.tensor_name.emplace(i, t_.strings.Intern(fmt::format("{}: {}", st.name, part.what)));
        address += kAddressStep;
        part.address = address;
        ev.Push(Action::kAlloc, st.device, address, part.bytes, 0, model::kNoTime, st.stack);
      }
      for (const Part& part : parts) {
        if (part.bytes == 0) continue;
        ev.Push(Action::kFreeRequested, st.device, part.address, part.bytes, 0, model::kNoTime,
                st.stack);
        ev.Push(Action::kFreeCompleted, st.device, part.address, part.bytes, 0, model::kNoTime,
                st.stack);
      }
      const auto bytes = [](uint64_t b) { return FormatBytes(static_cast<int64_t>(b)); };
      said[fmt::format("the step: {} (the largest compiled computation still alive whose "
                       "parameters all have live arrays' shapes), as XLA's analysis gives it: "
                       "arguments {}, outputs {} ({} of them written into donated arguments), "
                       "temp buffer {}, which a profile of live buffers never shows; shown after "
                       "the live buffers as its temp buffer and {} of its arguments and outputs "
                       "beyond them, both then freed: the peak is the step's, at least",
                       st.name, bytes(st.argument), bytes(st.output), bytes(st.alias),
                       bytes(st.temp), bytes(replaced))]
          .push_back(std::to_string(st.device));
    }
    for (const auto& [note, devices] : said) {
      t_.facts.notes.push_back(devices.size() == 1 ? note
                                                   : fmt::format("{} (on each of devices {})", note,
                                                                 fmt::join(devices, ", ")));
    }
  }

  struct Step {
    int32_t device = 0;
    model::StackId stack = model::kEmptyStack;
    std::string name;
    uint64_t argument = 0, output = 0, alias = 0, temp = 0;
  };

  struct Pending {
    int32_t device = 0;
    uint64_t bytes = 0;
    model::StackId stack = model::kEmptyStack;
    Category category = Category::kUnknown;
    std::string name;
  };

  const Profile& p_;
  const std::string& path_;
  model::Trace t_;
  std::optional<int> bytes_index_, count_index_;
  std::unordered_map<uint64_t, std::pair<model::StringId, model::StringId>> functions_;
  std::unordered_map<uint64_t, bool> optax_functions_, optax_locations_;
  std::unordered_map<uint64_t, std::vector<model::FrameId>> locations_;
  std::map<std::string, uint64_t> device_names_, unknown_roles_;
  std::map<std::pair<std::string, std::string>, uint64_t> marked_;  // (role, rule): bytes
  std::vector<Pending> events_;
  std::vector<Step> steps_;
  uint64_t buffers_ = 0, executables_ = 0, executable_bytes_ = 0, live_bytes_ = 0;
  uint64_t optax_bytes_ = 0, unlabelled_bytes_ = 0, multi_buffer_samples_ = 0, empty_samples_ = 0;
};

}  // namespace

Result<model::Trace> TraceFromPprof(std::span<const uint8_t> bytes, const std::string& path) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidInput(
        fmt::format("{}: {} of protobuf is more than a pprof profile may hold (2 GiB)", path,
                    FormatBytes(static_cast<int64_t>(bytes.size()))));
  }
  // libprotobuf logs what it refuses (too deep, malformed) to stderr; the refusal here is the
  // one line a user sees.
  const google::protobuf::LogSilencer silence;
  Profile profile;
  if (!profile.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidInput(fmt::format("{}: not a valid pprof protobuf; {}", path, kWhat));
  }
  return Converter(profile, path).Convert();
}

}  // namespace vramscope::pprof
