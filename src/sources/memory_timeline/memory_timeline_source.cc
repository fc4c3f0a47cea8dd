#include "sources/memory_timeline/memory_timeline_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/units.h"

namespace vramscope::memory_timeline {

namespace {

using model::Action;
using model::Category;

// PyTorch's Action enum values (enum.auto(), so 1-based), as export_memory_timeline_raw writes
// them (_ACTION_TO_INDEX maps each action to its .value).
enum RecordAction : int { kPreexisting = 1, kCreate = 2, kIncrementVersion = 3, kDestroy = 4 };
constexpr std::array<const char*, 5> kActionNames = {"?", "PREEXISTING", "CREATE",
                                                     "INCREMENT_VERSION", "DESTROY"};

// _CATEGORY_TO_INDEX: the position of each category in _CATEGORY_TO_COLORS.
constexpr int kCategoryCount = 8;
constexpr int kAutogradDetail = 6;

// Our category for PyTorch's; nullopt for None (the profiler could not tell), which is left to
// attribution.
//
// AUTOGRAD_DETAIL: MemoryProfile._set_autograd_detail gives it to every tensor version that an
// op in the autograd engine's backward pass (RecordScope.BACKWARD_FUNCTION) outputs, when that
// version had no category yet and is not a parameter's gradient (GRADIENT is set first, by
// AccumulateGrad and the Python tracer's .grad). Those are the gradients flowing back through
// activations and the engine's scratch: short-lived, freed as backward moves on, which is what
// our kTemporary holds ("activation gradients"). The cost: TEMPORARY (op intermediates) and
// AUTOGRAD_DETAIL become one category here; they stay apart from None, which is not set.
std::optional<Category> MapCategory(int64_t index) {
  switch (index) {
    case 0:
      return Category::kWeight;
    case 1:
      return Category::kOptimizerState;
    case 2:
      return Category::kInput;
    case 3:
      return Category::kTemporary;
    case 4:
      return Category::kActivation;
    case 5:
      return Category::kGradient;
    case kAutogradDetail:
      return Category::kTemporary;
    default:
      return std::nullopt;
  }
}

// The shared plausibility limits (model/limits.h): one tensor, and what is live at once.
constexpr auto kMaxTensorBytes = static_cast<int64_t>(model::kMaxPlausibleBytes);
constexpr auto kMaxLiveBytes = static_cast<int64_t>(model::kMaxPlausibleLiveBytes);
// Synthetic addresses: 512 B apart, one per tensor, never reused.
constexpr uint64_t kAddressStep = 512;

constexpr const char* kRecordShape = "each record is [t_ns, action, bytes, category]";

struct Record {
  uint64_t index = 0;
  int64_t t_ns = 0;
  int64_t action = 0;
  int64_t bytes = 0;
  int64_t category = 0;
};

// Turns the records, in file order, into the events of one device.
class Builder {
 public:
  explicit Builder(const std::string& path) : path_(path) { trace_.source.path = path; }

  Status Add(const Record& r) {
    RETURN_IF_ERROR(Validate(r));
    ++records_;
    ++action_counts_[r.action];
    if (r.t_ns != -1 && first_time_us_ == model::kNoTime) {
      // PREEXISTING tensors (all before the first timed record) take its time, as PyTorch's own
      // plot does (_coalesce_timeline's t_min).
      first_time_us_ = r.t_ns / 1000;
      for (int64_t& t : trace_.events.time_us) t = first_time_us_;
    }
    if (pending_) {
      const Record old = *pending_;
      pending_.reset();
      if (r.action == kIncrementVersion && r.t_ns == old.t_ns && r.bytes == -old.bytes &&
          r.category == old.category) {
        return Status::Ok();  // an in-place update that keeps its category: no memory moved
      }
      RETURN_IF_ERROR(Apply(old));
    }
    if (r.bytes == 0) {
      ++zero_byte_records_;  // an empty tensor; the sign of 0 tells nothing either
      return Status::Ok();
    }
    if (r.action == kIncrementVersion && r.bytes < 0) {
      pending_ = r;  // the first of a pair: wait for the second
      return Status::Ok();
    }
    return Apply(r);
  }

  Result<model::Trace> Finish() {
    if (pending_) {
      const Record old = *pending_;
      pending_.reset();
      RETURN_IF_ERROR(Apply(old));
    }
    if (records_ == 0) {
      return InvalidInput(fmt::format(
          "{}: the memory timeline holds no records; the profile recorded no memory events on "
          "the exported device (profile with profile_memory=True, record_shapes=True and "
          "with_stack=True, and export the device the model ran on)",
          path_));
    }
    model::Trace& t = trace_;
    const size_t n = t.events.count();
    if (n > 0) {
      t.devices = {0};
      t.device_event_ranges = {{0, n}};
    }
    t.start_levels = {model::StartLevels{0, 0, 0}};

    model::TraceFacts& f = t.facts;
    f.has_allocator_state = false;
    f.sizes_are_block_sizes = false;
    f.has_trace = n > 0;
    f.has_times = first_time_us_ != model::kNoTime;
    f.has_stacks = false;

    t.source.format = "PyTorch memory timeline (export_memory_timeline raw)";
    t.source.generation = "torch 2.1+";
    t.source.generation_evidence = fmt::format(
        "a JSON list of [t_ns, action, bytes, category] records, the layout of "
        "MemoryProfileTimeline.export_memory_timeline_raw since it was added (pytorch#105094, "
        "torch 2.1); {} records: {} PREEXISTING, {} CREATE, {} INCREMENT_VERSION, {} DESTROY",
        FormatCount(static_cast<int64_t>(records_)), FormatCount(action_counts_[kPreexisting]),
        FormatCount(action_counts_[kCreate]), FormatCount(action_counts_[kIncrementVersion]),
        FormatCount(action_counts_[kDestroy]));

    std::vector<std::string>& notes = f.notes;
    notes.push_back("device not recorded in the file; shown as device 0");
    notes.push_back(
        "sizes are tensor storage bytes, not allocator blocks: allocated memory counts each "
        "rounded up to 512 B as the caching allocator would (real blocks may be larger); "
        "reserved memory is not recorded (shown as 0)");
    notes.push_back(
        "the file records no addresses or stacks: each tensor gets a synthetic address, and a "
        "release is matched with the latest live tensor of the same category and size (equal "
        "tensors may swap lifetimes; totals by category are exact)");
    if (action_counts_[kPreexisting] > 0) {
      notes.push_back(fmt::format(
          "{} tensors existed before profiling began (PREEXISTING): they count as allocated "
          "from the first timed record",
          FormatCount(action_counts_[kPreexisting])));
    }
    if (autograd_detail_allocs_ > 0) {
      notes.push_back(fmt::format(
          "categories are PyTorch's memory profiler's; {} tensor versions it marks "
          "AUTOGRAD_DETAIL (made by the autograd engine in backward, not parameter gradients) "
          "count as temporary",
          FormatCount(autograd_detail_allocs_)));
    }
    if (unmatched_releases_ > 0) {
      notes.push_back(fmt::format(
          "{} releases match no live tensor of their category and size (the first at record "
          "{}): counted as tensors alive from the start",
          FormatCount(unmatched_releases_), first_unmatched_record_));
    }
    if (zero_byte_records_ > 0) {
      notes.push_back(fmt::format("{} records of 0 bytes (empty tensors) were skipped",
                                  FormatCount(zero_byte_records_)));
    }
    model::BuildAllocations(t);
    return std::move(trace_);
  }

 private:
  Status Error(const Record& r, const std::string& what) const {
    return InvalidInput(fmt::format("{}: record {}: {}", path_, r.index, what));
  }

  Status Validate(const Record& r) {
    if (r.action < kPreexisting || r.action > kDestroy) {
      return Error(r, fmt::format("action is {}; PyTorch's are 1 PREEXISTING, 2 CREATE, "
                                  "3 INCREMENT_VERSION, 4 DESTROY (is this a raw memory "
                                  "timeline from torch.profiler?)",
                                  r.action));
    }
    const char* action = kActionNames[static_cast<size_t>(r.action)];
    if (r.category < 0 || r.category >= kCategoryCount) {
      return Error(r, fmt::format("category is {}; PyTorch's are 0 PARAMETER, 1 OPTIMIZER_STATE, "
                                  "2 INPUT, 3 TEMPORARY, 4 ACTIVATION, 5 GRADIENT, "
                                  "6 AUTOGRAD_DETAIL, 7 None (is this a raw memory timeline from "
                                  "torch.profiler?)",
                                  r.category));
    }
    if (r.t_ns < -1) {
      return Error(r, fmt::format("time is {} ns; times are nanoseconds since the epoch, or -1 "
                                  "for tensors that existed before profiling",
                                  r.t_ns));
    }
    if ((r.t_ns == -1) != (r.action == kPreexisting)) {
      return Error(r, r.t_ns == -1
                          ? fmt::format("a {} record at time -1; only PREEXISTING records have "
                                        "t = -1 (the file was edited?)",
                                        action)
                          : fmt::format("a PREEXISTING record at time {} ns; PyTorch writes "
                                        "pre-existing tensors with t = -1 (the file was edited?)",
                                        r.t_ns));
    }
    if (r.t_ns < last_t_ns_) {
      return Error(r, fmt::format("time {} ns is before the previous record's {} ns; PyTorch "
                                  "writes the records sorted by time, pre-existing ones first "
                                  "(was the file edited or concatenated?)",
                                  r.t_ns, last_t_ns_));
    }
    last_t_ns_ = r.t_ns;
    if (r.bytes > kMaxTensorBytes || r.bytes < -kMaxTensorBytes) {
      return Error(r, fmt::format("{} bytes is more than 1 PiB for one tensor; the file is "
                                  "damaged or not a memory timeline",
                                  r.bytes));
    }
    const bool wants_positive = r.action == kPreexisting || r.action == kCreate;
    if ((wants_positive && r.bytes < 0) || (r.action == kDestroy && r.bytes > 0)) {
      return Error(r, fmt::format("a {} record of {} bytes; PREEXISTING and CREATE records "
                                  "carry positive sizes, DESTROY records negative ones (the "
                                  "file was edited?)",
                                  action, r.bytes));
    }
    if (trace_.events.count() + 2 > model::kMaxEvents) {
      return Error(r, fmt::format("more than {} events; profile a shorter window",
                                  FormatCount(static_cast<int64_t>(model::kMaxEvents))));
    }
    return Status::Ok();
  }

  static uint64_t Key(int64_t category, int64_t bytes) {
    return (static_cast<uint64_t>(bytes) << 3) | static_cast<uint64_t>(category);
  }

  // Exact integer division; PyTorch's plot computes int(t / 1000) in floating point, which
  // can land 1 us away for epoch nanoseconds.
  int64_t Time(const Record& r) const { return r.t_ns == -1 ? first_time_us_ : r.t_ns / 1000; }

  // One record of nonzero size: an alloc, or a release of the latest live tensor of its
  // category and size.
  Status Apply(const Record& r) {
    model::Events& ev = trace_.events;
    const int64_t t = Time(r);
    if (r.bytes > 0) {
      if (live_bytes_ + r.bytes > kMaxLiveBytes) {
        return Error(r,
                     "more than 64 PiB would be live at once; the file is damaged or not a "
                     "memory timeline");
      }
      live_bytes_ += r.bytes;
      const uint64_t addr = NextAddress();
      if (const auto category = MapCategory(r.category)) {
        ev.category.emplace(static_cast<uint32_t>(ev.count()), *category);
      }
      if (r.category == kAutogradDetail) ++autograd_detail_allocs_;
      ev.Push(Action::kAlloc, 0, addr, static_cast<uint64_t>(r.bytes), 0, t, model::kEmptyStack);
      open_[Key(r.category, r.bytes)].push_back(addr);
      return Status::Ok();
    }
    const int64_t bytes = -r.bytes;
    uint64_t addr = 0;
    auto it = open_.find(Key(r.category, bytes));
    if (it != open_.end() && !it->second.empty()) {
      addr = it->second.back();
      it->second.pop_back();
      live_bytes_ -= bytes;
    } else {
      // Nothing to release: a tensor alive before the trace that PyTorch did not list as
      // PREEXISTING. BuildAllocations counts it from the start.
      if (before_trace_bytes_ + bytes > kMaxLiveBytes) {
        return Error(r,
                     "more than 64 PiB would be live at once; the file is damaged or not a "
                     "memory timeline");
      }
      before_trace_bytes_ += bytes;
      if (unmatched_releases_ == 0) first_unmatched_record_ = r.index;
      ++unmatched_releases_;
      addr = NextAddress();
    }
    ev.Push(Action::kFreeRequested, 0, addr, static_cast<uint64_t>(bytes), 0, t,
            model::kEmptyStack);
    ev.Push(Action::kFreeCompleted, 0, addr, static_cast<uint64_t>(bytes), 0, t,
            model::kEmptyStack);
    return Status::Ok();
  }

  uint64_t NextAddress() { return ++tensors_ * kAddressStep; }

  const std::string& path_;
  model::Trace trace_;
  std::optional<Record> pending_;  // the negative half of an INCREMENT_VERSION pair
  std::unordered_map<uint64_t, std::vector<uint64_t>> open_;  // (category, bytes) -> addresses
  int64_t first_time_us_ = model::kNoTime;
  int64_t last_t_ns_ = -1;
  int64_t live_bytes_ = 0;
  int64_t before_trace_bytes_ = 0;
  uint64_t tensors_ = 0;
  uint64_t records_ = 0;
  std::array<int64_t, 5> action_counts_{};
  int64_t zero_byte_records_ = 0;
  int64_t autograd_detail_allocs_ = 0;
  int64_t unmatched_releases_ = 0;
  uint64_t first_unmatched_record_ = 0;
};

// Keeps a message one printable line of reasonable length.
std::string Printable(std::string_view text, size_t max_chars = 160) {
  std::string out;
  for (const char c : text) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7f) ? '?' : c;
  }
  return out;
}

// Reads the list with common/json_sax.h: records become events as they are read (no document
// tree; memory stays proportional to the events), nesting deeper than a record is refused at
// once, and nothing throws.
class Handler {
 public:
  Handler(const std::string& path, Builder& builder) : path_(path), builder_(builder) {}

  bool null() { return Scalar("null"); }
  bool boolean(bool value) { return Scalar(value ? "true" : "false"); }
  bool number_integer(int64_t value) { return Number(value); }
  bool number_unsigned(uint64_t value) {
    if (value > static_cast<uint64_t>(INT64_MAX)) {
      if (depth_ != 2) return Scalar("a number");
      return Fail(
          RecordError(fmt::format("{} is {}, beyond any value PyTorch writes; the file "
                                  "is damaged or not a memory timeline",
                                  FieldName(), value)));
    }
    return Number(static_cast<int64_t>(value));
  }
  bool number_float(double, const std::string& text) {
    if (depth_ != 2) return Scalar("a number");
    return Fail(RecordError(fmt::format("{} is {}, not an integer; {} of whole numbers",
                                        FieldName(), Printable(text, 40), kRecordShape)));
  }
  bool string(std::string&) { return Scalar("a string"); }
  bool start_object(std::size_t) { return Scalar("an object"); }
  bool key(std::string&) { return false; }  // never reached: objects are refused
  bool end_object() { return false; }
  bool start_array(std::size_t) {
    if (depth_ == 2) return Scalar("a list");
    if (depth_ == 1) {
      fields_ = 0;
      record_ = Record{};
      record_.index = records_;
    }
    ++depth_;
    return true;
  }
  bool end_array() {
    if (depth_ == 2) {
      if (fields_ != 4) {
        return Fail(RecordError(fmt::format("has {} elements, not 4; {}", fields_, kRecordShape),
                                /*colon=*/false));
      }
      if (Status s = builder_.Add(record_); !s.ok()) return Fail(std::move(s));
      ++records_;
    }
    --depth_;
    if (depth_ == 0) done_ = true;
    return true;
  }
  bool done() const { return done_; }
  const Status& status() const { return status_; }

 private:
  const char* FieldName() const {
    static constexpr const char* kFields[] = {"t_ns", "action", "bytes", "category"};
    return fields_ < 4 ? kFields[fields_] : "element";
  }

  Status RecordError(const std::string& what, bool colon = true) const {
    return InvalidInput(
        fmt::format("{}: record {}{}{}", path_, records_, colon ? ": " : " ", what));
  }

  bool Fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
    return false;
  }

  bool Number(int64_t value) {
    if (depth_ != 2) return Scalar("a number");
    if (fields_ >= 4) {
      return Fail(RecordError(fmt::format("has more than 4 elements; {}", kRecordShape), false));
    }
    switch (fields_) {
      case 0:
        record_.t_ns = value;
        break;
      case 1:
        record_.action = value;
        break;
      case 2:
        record_.bytes = value;
        break;
      default:
        record_.category = value;
        break;
    }
    ++fields_;
    return true;
  }

  // A value where it does not belong.
  bool Scalar(const char* kind) {
    if (depth_ == 0) {
      return Fail(InvalidInput(
          fmt::format("{}: the top level is {}, not a list; a raw memory timeline is a JSON list "
                      "of [t_ns, action, bytes, category] records (export_memory_timeline with a "
                      "path ending in raw.json.gz)",
                      path_, kind)));
    }
    if (depth_ == 1) {
      return Fail(RecordError(fmt::format("is {}, not a list; {}", kind, kRecordShape), false));
    }
    if (fields_ >= 4) {
      return Fail(RecordError(fmt::format("has more than 4 elements; {}", kRecordShape), false));
    }
    return Fail(RecordError(fmt::format("{} is {}, not an integer; {} of whole numbers",
                                        FieldName(), kind, kRecordShape)));
  }

  const std::string& path_;
  Builder& builder_;
  Status status_;
  int depth_ = 0;
  size_t fields_ = 0;
  uint64_t records_ = 0;
  Record record_;
  bool done_ = false;
};

// export_memory_timeline's other JSON form, [times, sizes] (what a path ending in .json or
// .json.gz without "raw" gets): "[[t0, t1, ...], [[...], ...]]", or "[[], []]" when empty.
bool LooksLikePlottedForm(std::string_view s) {
  size_t i = 0;
  auto space = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  };
  auto expect = [&](char c) {
    space();
    if (i >= s.size() || s[i] != c) return false;
    ++i;
    return true;
  };
  if (!expect('[') || !expect('[')) return false;
  bool any = false;
  for (; i < s.size() && s[i] != ']'; ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' ||
          c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
      return false;
    }
    any |= c >= '0' && c <= '9';
  }
  if (!expect(']') || !expect(',') || !expect('[')) return false;
  space();
  if (i >= s.size()) return false;
  // The sizes list holds lists (one per time); with no times, both lists are empty.
  return s[i] == '[' || (!any && s[i] == ']');
}

}  // namespace

Result<model::Trace> TraceFromMemoryTimeline(std::string_view json, const std::string& path,
                                             const json_sax::ParseOptions& options) {
  if (LooksLikePlottedForm(json)) {
    return InvalidInput(fmt::format(
        "{}: this is export_memory_timeline's plotted form ([times, sizes by category]: totals "
        "per category, no tensors); export the raw records instead: "
        "prof.export_memory_timeline(\"memory.raw.json.gz\", device=\"cuda:0\")",
        path));
  }
  Builder builder(path);
  Handler handler(path, builder);
  try {
    const json_sax::JsonSaxResult parsed = json_sax::Parse(json, handler, options);
    if (!handler.status().ok()) return handler.status();
    if (!parsed.ok) {
      // Byte offsets from 0, as everywhere in this source's messages.
      return InvalidInput(fmt::format("{}: invalid JSON at byte {} ({}); the file is {}", path,
                                      parsed.position - 1, parsed.message,
                                      parsed.ended_early ? "truncated" : "damaged"));
    }
  } catch (const std::bad_alloc&) {
    return InvalidInput(fmt::format("{}: out of memory while reading the memory timeline", path));
  }
  if (!handler.done()) {
    return InvalidInput(fmt::format("{}: invalid JSON; the file is truncated or damaged", path));
  }
  return builder.Finish();
}

}  // namespace vramscope::memory_timeline
