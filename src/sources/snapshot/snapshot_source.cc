#include "sources/snapshot/snapshot_source.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "common/units.h"
#include "sources/input_format.h"
#include "sources/pickle/pickle_reader.h"
#include "sources/snapshot/segment_invariants.h"
#include "sources/snapshot/skipped_actions.h"

namespace vramscope::snapshot {

namespace {

using model::Action;
using model::FrameId;
using model::StackId;
using pickle::Document;
using pickle::Kind;
using pickle::Value;

// Lazily built location of a value, for error messages: "segments[3].blocks[7]".
struct Path {
  const Path* parent = nullptr;
  const char* key = nullptr;
  int64_t index = -1;

  std::string ToString() const {
    std::string prefix = parent != nullptr ? parent->ToString() : std::string();
    if (key != nullptr) return prefix.empty() ? key : prefix + "." + key;
    return prefix + fmt::format("[{}]", index);
  }
  Path Index(int64_t i) const { return Path{this, nullptr, i}; }
  Path Key(const char* k) const { return Path{this, k, -1}; }
};

// What an integer field of a snapshot may hold, for checking and for the error messages.
struct IntRange {
  const char* what;      // "a size in bytes"
  uint64_t max;          // inclusive
  const char* max_text;  // how the messages write `max`
};
// No GPU holds 2^50 bytes (1 PiB, model::kMaxPlausibleBytes, the bound every source applies); a
// size beyond that is damage (an unsigned -1, a wrapped subtraction), and would wrap the sums the
// report makes.
static_assert(model::kMaxPlausibleBytes == uint64_t{1} << 50, "kBytes' text says 2^50");
constexpr IntRange kBytes{"a size in bytes", model::kMaxPlausibleBytes,
                          "2^50 (1 PiB: more than any GPU holds)"};
constexpr IntRange kAddress{"a device address", UINT64_MAX, "2^64-1"};
constexpr IntRange kStream{"a CUDA stream handle", UINT64_MAX, "2^64-1"};
static_assert(model::kMaxDeviceOrdinal == (int64_t{1} << 16) - 1, "kOrdinal's text says 2^16-1");
constexpr IntRange kOrdinal{"a device ordinal", static_cast<uint64_t>(model::kMaxDeviceOrdinal),
                            "2^16-1"};
// What to do about a value no snapshot PyTorch writes holds.
constexpr const char* kRemedy =
    "the snapshot is damaged or was not written by PyTorch: dump it again with "
    "torch.cuda.memory._dump_snapshot() (if PyTorch wrote it as it is, please report it to "
    "vramscope with the torch version)";

class Converter {
 public:
  // The document being built (while streaming) or built; rebound when the parse finishes.
  void SetDocument(const Document& doc) { doc_ = &doc; }
  void ReserveEvents(size_t n) { trace_.events.Reserve(n); }
  // The parse ended at a cut (pickle::ParseOptions::recover_truncated): `info` says where.
  void SetParseInfo(const pickle::ParseInfo& info) { parse_info_ = info; }
  // The reader is closing what was open at a cut: the entries it still hands over end with the
  // one the cut fell in, which is dropped if it does not convert.
  void Recovering() { recovering_ = true; }
  Result<model::Trace> Run();

  // Streaming (see SnapshotSink): the device a trace list belongs to, from the stack below it:
  // ..., "device_traces", T, L0, ..., L(k-1) -> device k + len(T). nullopt for other lists.
  std::optional<int32_t> TraceListDevice(std::span<const Value> context) const {
    size_t j = context.size(), lists = 0;
    while (j > 0 && doc_->kind(context[j - 1]) == Kind::kList) {
      --j;
      ++lists;
    }
    if (lists == 0 || j == 0) return std::nullopt;
    const auto key = doc_->AsString(context[j - 1]);
    if (!key || *key != "device_traces") return std::nullopt;
    const size_t device = lists - 1 + doc_->Items(context[j]).size();
    if (device > static_cast<size_t>(model::kMaxDeviceOrdinal)) return std::nullopt;
    return static_cast<int32_t>(device);
  }
  Status ConsumeEntries(int32_t device, Value list, std::span<const Value> entries) {
    if (static_cast<size_t>(device) >= streamed_.size()) {
      streamed_.resize(device + 1, 0);
      streamed_list_.resize(device + 1, kNoList);
    }
    // One list per device; Run() checks that it is the one the snapshot's root holds.
    const uint64_t id = *doc_->ContainerId(list);
    if (streamed_list_[device] != kNoList && streamed_list_[device] != id) {
      return InvalidInput(fmt::format(
          "device_traces[{}]: two different trace lists claim this device (corrupt pickle)",
          device));
    }
    streamed_list_[device] = id;
    consumed_lists_.insert(id);
    if (!trace_.events.device.empty() && trace_.events.device.back() > device) unsorted_ = true;
    const Path traces{nullptr, "device_traces", -1};
    const Path dp = traces.Index(device);
    for (size_t i = 0; i < entries.size(); ++i) {
      const Status s =
          ConvertEntry(entries[i], dp.Index(static_cast<int64_t>(streamed_[device])), device);
      if (!s.ok()) {
        if (!recovering_) return s;
        cut_entries_ += entries.size() - i;  // the record the cut fell in, and what follows it
        break;
      }
      ++streamed_[device];
    }
    return Status::Ok();
  }
  // The cache of stacks with C++ frames, after the reader dropped or moved containers.
  void RekeyMixedStacks(uint64_t first, std::span<const std::pair<uint64_t, uint64_t>> moved) {
    if (mixed_stacks_.empty()) return;
    std::unordered_map<uint64_t, uint64_t> renamed(moved.begin(), moved.end());
    auto rekey = [&](uint64_t old_id) -> std::optional<uint64_t> {
      if (old_id == kNoList || old_id < first) return old_id;
      const auto it = renamed.find(old_id);
      if (it == renamed.end()) return std::nullopt;  // dropped: never reached again
      return it->second;
    };
    std::map<std::pair<uint64_t, uint64_t>, StackId> stacks;
    std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> sizes;
    for (const auto& [key, stack] : mixed_stacks_) {
      const auto a = rekey(key.first), b = rekey(key.second);
      if (!a || !b) continue;
      stacks.emplace(std::pair{*a, *b}, stack);
      sizes.emplace(std::pair{*a, *b}, mixed_sizes_.at(key));
    }
    mixed_stacks_ = std::move(stacks);
    mixed_sizes_ = std::move(sizes);
  }
  // Containers from `first` on were dropped or moved by the reader: re-key the cache.
  void Reclaimed(uint64_t first, std::span<const std::pair<uint64_t, uint64_t>> moved) {
    RekeyMixedStacks(first, moved);
    if (first >= converted_.size()) return;
    std::vector<std::pair<uint32_t, uint64_t>> keep;  // (result, size) of each moved container
    keep.reserve(moved.size());
    for (const auto& [old_id, new_id] : moved) {
      keep.emplace_back(old_id < converted_.size() ? converted_[old_id] : kNotConverted,
                        old_id < converted_.size() ? converted_size_[old_id] : 0);
    }
    // Only [first, highest id seen) can hold entries; the rest is still kNotConverted.
    const uint64_t end = std::min<uint64_t>(converted_.size(), highest_slot_ + 1);
    if (end > first) {
      std::fill(converted_.begin() + static_cast<ptrdiff_t>(first),
                converted_.begin() + static_cast<ptrdiff_t>(end), kNotConverted);
    }
    highest_slot_ = first;
    for (size_t i = 0; i < moved.size(); ++i) {
      Slot(moved[i].second) = keep[i].first;
      converted_size_[moved[i].second] = keep[i].second;
    }
  }

 private:
  // --- typed access -------------------------------------------------------------------------
  Status TypeError(const Path& where, const char* key, Value v, const char* want) const {
    return InvalidInput(fmt::format("{}: '{}' is {}, expected {}; {}", where.ToString(), key,
                                    pickle::KindWithArticle(doc_->kind(v)), want, kRemedy));
  }
  // An integer as the error messages show it: its value, or what it is when no 64-bit type
  // holds it.
  std::string IntegerText(Value v) const {
    if (const auto i = doc_->AsInt64(v)) return std::to_string(*i);
    if (const auto u = doc_->AsUint64(v)) return std::to_string(*u);
    return "an integer wider than 64 bits";
  }
  // An integer field that is out of its range: which field of which entry, the value, the range.
  Status RangeError(const Path& where, const char* key, Value v, const IntRange& range) const {
    return InvalidInput(fmt::format("{}: '{}' is {}, expected {}: an integer from 0 to {}; {}",
                                    where.ToString(), key, IntegerText(v), range.what,
                                    range.max_text, kRemedy));
  }
  // An unsigned integer in `range`, from an int value; an error naming the field otherwise.
  Status ToU64(Value v, const Path& where, const char* key, const IntRange& range,
               uint64_t* out) const {
    const Kind kind = doc_->kind(v);
    if (kind != Kind::kInt && kind != Kind::kBool) {
      return TypeError(where, key, v, fmt::format("{} (an integer)", range.what).c_str());
    }
    const auto u = doc_->AsUint64(v);
    if (!u || *u > range.max) return RangeError(where, key, v, range);
    *out = *u;
    return Status::Ok();
  }
  // An unsigned integer under `key`; `fallback` when absent or None.
  Status GetU64(Value dict, const Path& where, const char* key, const IntRange& range,
                uint64_t fallback, uint64_t* out) const {
    const Value v = doc_->Get(dict, key);
    if (doc_->IsMissing(v) || doc_->IsNone(v)) {
      *out = fallback;
      return Status::Ok();
    }
    return ToU64(v, where, key, range, out);
  }
  // Whether `dict` carries `key` with a value (None counts as absent, as GetU64 reads it).
  bool Has(Value dict, const char* key) const {
    const Value v = doc_->Get(dict, key);
    return !doc_->IsMissing(v) && !doc_->IsNone(v);
  }
  Status RequireU64(Value dict, const Path& where, const char* key, const IntRange& range,
                    uint64_t* out) const {
    if (doc_->IsMissing(doc_->Get(dict, key))) {
      return InvalidInput(fmt::format("{}: missing '{}'; {}", where.ToString(), key, kRemedy));
    }
    return GetU64(dict, where, key, range, 0, out);
  }
  Status RequireDict(Value v, const Path& where) const {
    if (doc_->kind(v) != Kind::kDict) {
      return InvalidInput(fmt::format("{}: is {}, expected a dict", where.ToString(),
                                      pickle::KindWithArticle(doc_->kind(v))));
    }
    return Status::Ok();
  }
  Status RequireList(Value v, const Path& where) const {
    const Kind k = doc_->kind(v);
    if (k != Kind::kList && k != Kind::kTuple) {
      return InvalidInput(
          fmt::format("{}: is {}, expected a list", where.ToString(), pickle::KindWithArticle(k)));
    }
    return Status::Ok();
  }
  std::string ScalarText(Value v) const {
    switch (doc_->kind(v)) {
      case Kind::kString:
        return std::string(*doc_->AsString(v));
      case Kind::kBool:
        return *doc_->AsBool(v) ? "True" : "False";
      case Kind::kInt:
        if (const auto i = doc_->AsInt64(v)) return std::to_string(*i);
        if (const auto u = doc_->AsUint64(v)) return std::to_string(*u);
        return "<integer wider than 64 bits>";
      case Kind::kFloat:
        return fmt::format("{}", *doc_->AsDouble(v));
      case Kind::kNone:
        return "None";
      default:
        return fmt::format("<{}>", pickle::KindName(doc_->kind(v)));
    }
  }

  // --- stacks -------------------------------------------------------------------------------
  FrameId InternFrame(std::string_view filename, std::string_view function, int64_t line) {
    model::Frame f;
    f.filename = trace_.strings.Intern(filename);
    f.function = trace_.strings.Intern(function);
    f.line = static_cast<int32_t>(std::clamp<int64_t>(line, 0, INT32_MAX));
    f.kind = model::ClassifyFrame(filename);
    return trace_.frames.Intern(f);
  }
  Status ConvertFrame(Value v, const Path& where, FrameId* out) {
    if (const auto id = doc_->ContainerId(v)) {
      if (Slot(*id) == kClaimed) return NotAStack(where, "a frame");
      if (Slot(*id) != kNotConverted) {
        *out = Slot(*id);
        return Status::Ok();
      }
    }
    if (const auto text = doc_->AsString(v)) {  // 2.0 cpp_frames are plain strings
      *out = InternFrame("", *text, 0);
      return Status::Ok();
    }
    RETURN_IF_ERROR(RequireDict(v, where));
    if (doc_->HasPendingItems(v)) {
      return InvalidInput(where.ToString() + ": a frame with more than 1000 keys");
    }
    const Value filename = doc_->Get(v, "filename");
    const Value name = doc_->Get(v, "name");
    const auto filename_text = doc_->AsString(filename);
    const auto name_text = doc_->AsString(name);
    if (!doc_->IsMissing(filename) && !filename_text) {
      return TypeError(where, "filename", filename, "a str");
    }
    if (!doc_->IsMissing(name) && !name_text) return TypeError(where, "name", name, "a str");
    // The line number; 0 when unknown. PyTorch stores it unsigned and writes an unsigned -1
    // (2^64-1) for a frame without one (torch.compile's generated code on Python 3.13): any
    // value no source line has is such an unknown line, not damage.
    const Value line = doc_->Get(v, "line");
    int64_t line_number = 0;
    if (!doc_->IsMissing(line) && !doc_->IsNone(line)) {
      const Kind kind = doc_->kind(line);
      if (kind != Kind::kInt && kind != Kind::kBool) {
        return TypeError(where, "line", line, "a line number (an integer, or None)");
      }
      const auto l = doc_->AsInt64(line);
      if (l && *l > 0 && *l <= INT32_MAX) line_number = *l;
    }
    *out = InternFrame(filename_text.value_or(""), name_text.value_or(""), line_number);
    if (const auto id = doc_->ContainerId(v)) Remember(*id, *out);
    ConvertFxKeys(v, *out);
    return Status::Ok();
  }
  // The FX keys of a frame of generated code (augment_with_fx_traces=True), kept beside the frame
  // (Trace::fx_frames). PyTorch writes them as str, or None where the node lacked the field; any
  // other value is left out and counted for one note, never an error: the frame itself is sound.
  void ConvertFxKeys(Value frame, FrameId id) {
    static constexpr const char* kKeys[] = {"fx_node_op", "fx_node_name", "fx_node_target",
                                            "fx_original_trace"};
    model::FxFrame fx;
    model::StringId* fields[] = {&fx.node_op, &fx.node_name, &fx.node_target, &fx.original_trace};
    bool any = false;
    for (size_t k = 0; k < 4; ++k) {
      const Value v = doc_->Get(frame, kKeys[k]);
      if (doc_->IsMissing(v) || doc_->IsNone(v)) continue;
      const auto text = doc_->AsString(v);
      if (!text) {
        ++malformed_fx_fields_;
        continue;
      }
      if (text->empty()) continue;
      *fields[k] = trace_.strings.Intern(*text);
      any = true;
    }
    if (!any) return;
    if (fx.original_trace != model::kEmptyString) {
      if (const auto entry = model::LastTracebackEntry(trace_.strings.Get(fx.original_trace))) {
        fx.original_file = trace_.strings.Intern(entry->file);
        fx.original_function = trace_.strings.Intern(entry->function);
        fx.original_line = entry->line;
      }
    }
    // One generated line runs one node: the first frame dict seen for it names it.
    trace_.fx_frames.emplace(id, fx);
  }
  // `frames` (innermost first) plus optional 2.0 `cpp_frames`, which are more specific than the
  // Python frames and so go first.
  Status ConvertStack(Value frames, Value cpp_frames, const Path& where, StackId* out) {
    const bool plain = doc_->IsMissing(cpp_frames) || doc_->IsNone(cpp_frames);
    if (plain && (doc_->IsMissing(frames) || doc_->IsNone(frames))) {
      *out = model::kEmptyStack;
      return Status::Ok();
    }
    const auto id = doc_->ContainerId(frames);
    if (plain && id) {
      if (Slot(*id) == kClaimed) return NotAStack(where, "'frames'");
      if (Slot(*id) != kNotConverted) {
        *out = Slot(*id);
        return Status::Ok();
      }
    }
    // A stack with C++ frames is cached on the pair of lists: shared lists must stay as cheap as
    // plain shared stacks, whatever the pickle pairs them with.
    const auto cpp_id = plain ? std::nullopt : doc_->ContainerId(cpp_frames);
    const std::pair<uint64_t, uint64_t> pair_key{id.value_or(kNoList), cpp_id.value_or(kNoList)};
    if (cpp_id) {
      if (const auto it = mixed_stacks_.find(pair_key); it != mixed_stacks_.end()) {
        *out = it->second;
        return Status::Ok();
      }
    }
    // (After the cache: a consumed trace list is never cached, its conversion is refused here.)
    if (id && consumed_lists_.count(*id) != 0) {
      // The trace list itself used as a stack: while streaming it is still empty, in the final
      // object it holds the entries. Not a snapshot; refuse rather than read either.
      return InvalidInput(where.ToString() + ": 'frames' refers to a trace list (corrupt pickle)");
    }
    scratch_.clear();
    if (!plain) {
      RETURN_IF_ERROR(RequireList(cpp_frames, where.Key("cpp_frames")));
      const Path p = where.Key("cpp_frames");
      const auto items = doc_->Items(cpp_frames);
      for (size_t i = 0; i < items.size(); ++i) {
        FrameId f;
        RETURN_IF_ERROR(ConvertFrame(items[i], p.Index(static_cast<int64_t>(i)), &f));
        scratch_.push_back(f);
      }
    }
    if (!doc_->IsMissing(frames) && !doc_->IsNone(frames)) {
      const Path p = where.Key("frames");
      RETURN_IF_ERROR(RequireList(frames, p));
      const auto items = doc_->Items(frames);
      for (size_t i = 0; i < items.size(); ++i) {
        FrameId f;
        RETURN_IF_ERROR(ConvertFrame(items[i], p.Index(static_cast<int64_t>(i)), &f));
        scratch_.push_back(f);
      }
    }
    *out = trace_.stacks.Intern(scratch_);
    if (plain && id) Remember(*id, *out);
    if (cpp_id) {
      // Either list may still grow later in the pickle; CheckUnchanged covers what Remember
      // records, so both lists are remembered as seen (their own conversion stays uncached).
      mixed_stacks_.emplace(pair_key, *out);
      mixed_sizes_.emplace(pair_key, std::pair{doc_->ContainerItemCount(pair_key.first),
                                               doc_->ContainerItemCount(pair_key.second)});
    }
    return Status::Ok();
  }

  // PyTorch writes each segment, block, trace entry and annotation (and each trace list) once,
  // as its own object; the pickle memo would let a file reference one thousands of times for a
  // few bytes each (10^4 segments of 10^4 blocks in 40 KB), so that reading cost far more than
  // the file. Each such container is claimed as it is converted; a second claim is refused.
  // A frame or stack that is a container already read as something else (a segment, an entry).
  Status NotAStack(const Path& where, const char* what) const {
    return InvalidInput(fmt::format(
        "{}: {} is the same object as a segment, block or trace entry read before (corrupt "
        "pickle)",
        where.ToString(), what));
  }
  Status Claim(Value v, const Path& where, const char* what) {
    const auto id = doc_->ContainerId(v);
    if (!id) return Status::Ok();
    uint32_t& slot = Slot(*id);
    if (slot != kNotConverted) {
      return InvalidInput(fmt::format(
          "{}: this {} is the same object as one read before (a shared pickle reference); "
          "PyTorch writes each {} once, so the file was crafted or damaged: dump the snapshot "
          "again with torch.cuda.memory._dump_snapshot()",
          where.ToString(), what, what));
    }
    Remember(*id, kClaimed);
    return Status::Ok();
  }

  // Entries converted while parsing must come from lists the root's device_traces holds (a
  // mangled pickle can stream a list and then return something else as its root).
  Status CheckStreamedListsFound() const {
    for (size_t d = 0; d < streamed_.size(); ++d) {
      if (streamed_[d] > 0 && streamed_list_[d] != kNoList) {
        return InvalidInput(
            fmt::format("device_traces[{}]: trace entries were found outside the "
                        "snapshot's device_traces (corrupt pickle)",
                        d));
      }
    }
    return Status::Ok();
  }
  Status ConvertSegments(Value segments, const Path& where);
  // `origin` gets what the invariants need beyond the model (its position is set by the caller).
  Status ConvertBlock(Value block, const Path& where, uint64_t address, model::Block* out,
                      BlockOrigin* origin);
  Status ConvertTraces(Value traces, const Path& where);
  Status ConvertEntry(Value entry, const Path& where, int32_t device);
  Status ConvertSettings(Value settings);
  Status ConvertAnnotations(Value annotations, const Path& where);
  // A file cut off inside its trace: the state at the dump describes a moment after the cut.
  void StartFromTheCut();
  void DescribeCut(Value segments, Value traces);
  Status NothingBeforeTheCut() const {
    return InvalidInput(fmt::format(
        "the file is truncated at byte {}, before any segment or trace entry: nothing of the "
        "snapshot was written (a job killed while dumping, a disk full); dump it again",
        parse_info_.cut_at));
  }
  void DescribeGeneration(Value root);

  uint32_t& Slot(uint64_t id) {
    if (id >= converted_.size()) {
      converted_.resize(id + 1 + id / 2, kNotConverted);
      converted_size_.resize(converted_.size(), 0);
    }
    highest_slot_ = std::max(highest_slot_, id);
    return converted_[id];
  }
  // Caches what container `id` became, with its size then: a pickle may append to an object
  // after a streamed entry used it, and the final object is what counts (CheckUnchanged).
  void Remember(uint64_t id, uint32_t result) {
    Slot(id) = result;
    converted_size_[id] = doc_->ContainerItemCount(id);
  }
  Status CheckUnchanged() const {
    for (const auto& [key, sizes] : mixed_sizes_) {
      if (doc_->ContainerItemCount(key.first) != sizes.first ||
          doc_->ContainerItemCount(key.second) != sizes.second) {
        return InvalidInput(
            "a stack that trace entries use is modified later in the pickle (corrupt pickle)");
      }
    }
    for (uint64_t id = 0; id < converted_.size(); ++id) {
      if (converted_[id] != kNotConverted && converted_size_[id] != doc_->ContainerItemCount(id)) {
        return InvalidInput(
            "a stack or frame that trace entries use is modified later in the "
            "pickle (corrupt pickle)");
      }
    }
    return Status::Ok();
  }

  const Document* doc_ = nullptr;
  model::Trace trace_;
  uint64_t highest_slot_ = 0;
  static constexpr uint64_t kNoList = UINT64_MAX;
  std::vector<uint64_t> streamed_list_;          // per device: the list whose entries were streamed
  std::unordered_set<uint64_t> consumed_lists_;  // every list whose entries were streamed
  std::vector<uint64_t> streamed_;  // per device: trace entries converted while parsing
  bool unsorted_ = false;           // streamed devices arrived out of order
  // What each shared container became: a FrameId for a frame dict, a StackId for a frames list.
  // Snapshots reference one stack from thousands of entries; each is converted once.
  static constexpr uint32_t kNotConverted = UINT32_MAX;
  static constexpr uint32_t kClaimed = UINT32_MAX - 1;  // a single-owner container, read (Claim)
  // Stacks with C++ frames, by (frames list id, cpp_frames list id), with both lists' sizes then.
  std::map<std::pair<uint64_t, uint64_t>, StackId> mixed_stacks_;
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> mixed_sizes_;
  std::vector<uint32_t> converted_;
  std::vector<uint64_t> converted_size_;  // item count of each converted container, then
  std::vector<FrameId> scratch_;
  // Evidence for the format generation.
  bool bare_list_ = false;
  bool has_device_traces_ = false;
  bool history_blocks_ = false;
  bool segment_frames_ = false;
  bool times_ = false;
  bool compile_context_ = false;
  bool user_metadata_ = false;
  bool pool_id_ = false;
  bool annotate_action_ = false;
  bool host_memory_ = false;
  uint64_t malformed_fx_fields_ = 0;  // FX frame keys that were not str (left out, noted)
  // A file cut off before its end (see SetParseInfo).
  pickle::ParseInfo parse_info_;
  bool recovering_ = false;
  uint64_t cut_entries_ = 0;  // trace entries cut short, left out
  // StartFromTheCut: what the dump's state held that the events read never touch.
  uint64_t untouched_blocks_ = 0, untouched_block_bytes_ = 0, untouched_segment_bytes_ = 0;
  size_t dump_segments_ = 0;
  bool started_from_cut_ = false;
  std::map<int32_t, int64_t> start_allocated_, start_reserved_;  // per device
  std::map<int32_t, std::vector<model::StartLevels::Known>> start_known_;
};

Status Converter::ConvertBlock(Value block, const Path& where, uint64_t address, model::Block* out,
                               BlockOrigin* origin) {
  RETURN_IF_ERROR(RequireDict(block, where));
  RETURN_IF_ERROR(Claim(block, where, "block"));
  RETURN_IF_ERROR(RequireU64(block, where, "size", kBytes, &out->size));
  const Value state = doc_->Get(block, "state");
  const auto state_text = doc_->AsString(state);
  if (!state_text) {
    if (doc_->IsMissing(state)) return InvalidInput(where.ToString() + ": missing 'state'");
    return TypeError(where, "state", state, "a str");
  }
  if (*state_text == "active_allocated") {
    out->state = model::BlockState::kActiveAllocated;
  } else if (*state_text == "active_pending_free" || *state_text == "active_awaiting_free") {
    out->state = model::BlockState::kActivePendingFree;
  } else if (*state_text == "inactive") {
    out->state = model::BlockState::kInactive;
  } else {
    return InvalidInput(fmt::format("{}: unknown block state '{}'", where.ToString(),
                                    std::string(state_text->substr(0, 40))));
  }
  // 2.1+ blocks carry their address; older ones tile the segment from its start.
  RETURN_IF_ERROR(GetU64(block, where, "address", kAddress, address, &out->address));
  RETURN_IF_ERROR(GetU64(block, where, "requested_size", kBytes, 0, &out->requested_size));
  origin->has_requested_size = Has(block, "requested_size");
  const Value history = doc_->Get(block, "history");
  if (!doc_->IsMissing(history) && !doc_->IsNone(history)) {
    // 1.13/2.0: the allocations this block has held, oldest first; the last is the current one.
    history_blocks_ = true;
    const Path p = where.Key("history");
    RETURN_IF_ERROR(RequireList(history, p));
    const auto records = doc_->Items(history);
    if (!records.empty() && model::IsActive(out->state)) {
      const Value last = records.back();
      const Path lp = p.Index(static_cast<int64_t>(records.size() - 1));
      RETURN_IF_ERROR(RequireDict(last, lp));
      if (out->requested_size == 0) {
        RETURN_IF_ERROR(GetU64(last, lp, "real_size", kBytes, 0, &out->requested_size));
        origin->has_requested_size = false;  // not the value PyTorch summed for the segment
      }
      RETURN_IF_ERROR(
          ConvertStack(doc_->Get(last, "frames"), doc_->Get(last, "cpp_frames"), lp, &out->stack));
    }
  } else {
    RETURN_IF_ERROR(ConvertStack(doc_->Get(block, "frames"), Value(), where, &out->stack));
  }
  return Status::Ok();
}

Status Converter::ConvertSegments(Value segments, const Path& where) {
  RETURN_IF_ERROR(RequireList(segments, where));
  const auto items = doc_->Items(segments);
  struct Pending {
    model::Segment segment;
    SegmentOrigin origin;
    std::vector<std::pair<model::Block, BlockOrigin>> blocks;
  };
  std::vector<Pending> pending(items.size());
  for (size_t s = 0; s < items.size(); ++s) {
    const Path sp = where.Index(static_cast<int64_t>(s));
    const Value seg = items[s];
    RETURN_IF_ERROR(RequireDict(seg, sp));
    RETURN_IF_ERROR(Claim(seg, sp, "segment"));
    model::Segment& out = pending[s].segment;
    pending[s].origin.index = static_cast<uint32_t>(s);
    uint64_t device = 0;
    RETURN_IF_ERROR(GetU64(seg, sp, "device", kOrdinal, 0, &device));
    out.device = static_cast<int32_t>(device);
    RETURN_IF_ERROR(RequireU64(seg, sp, "address", kAddress, &out.address));
    RETURN_IF_ERROR(RequireU64(seg, sp, "total_size", kBytes, &out.total_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "allocated_size", kBytes, 0, &out.allocated_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "active_size", kBytes, 0, &out.active_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "requested_size", kBytes, 0, &out.requested_size));
    pending[s].origin.has_allocated_size = Has(seg, "allocated_size");
    pending[s].origin.has_active_size = Has(seg, "active_size");
    pending[s].origin.has_requested_size = Has(seg, "requested_size");
    RETURN_IF_ERROR(GetU64(seg, sp, "stream", kStream, 0, &out.stream));
    const Value type = doc_->Get(seg, "segment_type");
    if (const auto t = doc_->AsString(type)) {
      out.pool = *t == "small" ? model::Pool::kSmall : model::Pool::kLarge;
    } else if (!doc_->IsMissing(type)) {
      return TypeError(sp, "segment_type", type, "a str");
    }
    const Value pool_id = doc_->Get(seg, "segment_pool_id");
    if (!doc_->IsMissing(pool_id) && !doc_->IsNone(pool_id)) {
      const auto ids = doc_->Items(pool_id);
      // PyTorch's pool ids are unsigned (CaptureId_t): one past INT64_MAX keeps its identity
      // as the same 64 bits rather than falling into the default pool.
      for (size_t k = 0; k < ids.size() && k < 2; ++k) {
        const auto u = doc_->AsUint64(ids[k]);
        out.pool_id[k] = u ? static_cast<int64_t>(*u) : doc_->AsInt64(ids[k]).value_or(0);
      }
    }
    if (const auto e = doc_->AsBool(doc_->Get(seg, "is_expandable"))) out.is_expandable = *e;
    const Value frames = doc_->Get(seg, "frames");
    if (!doc_->IsMissing(frames)) segment_frames_ = true;
    RETURN_IF_ERROR(ConvertStack(frames, Value(), sp, &out.stack));

    const Value blocks = doc_->Get(seg, "blocks");
    const Path bp = sp.Key("blocks");
    if (doc_->IsMissing(blocks)) return InvalidInput(sp.ToString() + ": missing 'blocks'");
    RETURN_IF_ERROR(RequireList(blocks, bp));
    uint64_t next_address = out.address;
    for (size_t b = 0; b < doc_->Items(blocks).size(); ++b) {
      model::Block block;
      BlockOrigin origin{static_cast<uint32_t>(b)};
      RETURN_IF_ERROR(ConvertBlock(doc_->Items(blocks)[b], bp.Index(static_cast<int64_t>(b)),
                                   next_address, &block, &origin));
      next_address = block.address + block.size;
      pending[s].blocks.emplace_back(block, origin);
    }
    std::stable_sort(
        pending[s].blocks.begin(), pending[s].blocks.end(),
        [](const auto& x, const auto& y) { return x.first.address < y.first.address; });
  }
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& x, const Pending& y) {
    return std::tie(x.segment.device, x.segment.address) <
           std::tie(y.segment.device, y.segment.address);
  });
  std::vector<SegmentOrigin> segment_origins;
  std::vector<BlockOrigin> block_origins;
  segment_origins.reserve(pending.size());
  for (Pending& p : pending) {
    p.segment.first_block = static_cast<uint32_t>(trace_.blocks.size());
    p.segment.block_count = static_cast<uint32_t>(p.blocks.size());
    for (auto& [b, origin] : p.blocks) {
      b.segment = static_cast<uint32_t>(trace_.segments.size());
      trace_.blocks.push_back(b);
      block_origins.push_back(origin);
    }
    trace_.segments.push_back(p.segment);
    segment_origins.push_back(p.origin);
  }
  // The allocator-state invariants (segment_invariants.h): a file PyTorch wrote holds them all.
  if (const auto v = FindSegmentViolation(trace_, segment_origins, block_origins)) {
    const Path sp = where.Index(v->segment);
    const std::string path =
        v->block ? sp.Key("blocks").Index(*v->block).ToString() : sp.ToString();
    return InvalidInput(fmt::format("{}: {}; {}", path, v->what, kRemedy));
  }
  return Status::Ok();
}

Status Converter::ConvertEntry(Value entry, const Path& where, int32_t device) {
  RETURN_IF_ERROR(RequireDict(entry, where));
  RETURN_IF_ERROR(Claim(entry, where, "trace entry"));
  const auto pairs = doc_->DictItems(entry);
  std::optional<std::string_view> action_name;
  uint64_t addr = 0, size = 0, stream = 0, device_free = 0;
  int64_t time_us = model::kNoTime;
  Value frames, compile_context, user_metadata, size_value, device_free_value;
  // One pass over the entry's keys: this loop runs once per trace entry (millions).
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const auto key = doc_->AsString(pairs[i]);
    if (!key) continue;
    const Value v = pairs[i + 1];
    if (*key == "action") {
      action_name = doc_->AsString(v);
      if (!action_name) return TypeError(where, "action", v, "a str");
    } else if (*key == "addr") {
      if (!doc_->IsNone(v)) RETURN_IF_ERROR(ToU64(v, where, "addr", kAddress, &addr));
    } else if (*key == "size") {
      size_value = v;  // checked below, once the action is known
    } else if (*key == "stream") {
      if (!doc_->IsNone(v)) RETURN_IF_ERROR(ToU64(v, where, "stream", kStream, &stream));
    } else if (*key == "time_us") {
      time_us = model::kNoTime;
      if (!doc_->IsNone(v)) {
        const Kind kind = doc_->kind(v);
        if (kind != Kind::kInt && kind != Kind::kBool) {
          return TypeError(where, "time_us", v,
                           "a time in microseconds since the epoch (an integer, or None)");
        }
        // A time no 64-bit clock holds (an unsigned -1) is an unknown time, as None is.
        if (const auto t = doc_->AsInt64(v); t && *t != model::kNoTime) {
          time_us = *t;
          times_ = true;
        }
      }
    } else if (*key == "frames") {
      frames = v;
    } else if (*key == "device_free") {
      device_free_value = v;
    } else if (*key == "compile_context") {
      compile_context = v;
      compile_context_ = true;
    } else if (*key == "user_metadata") {
      user_metadata = v;
      user_metadata_ = true;
    } else if (*key == "pool_id") {
      pool_id_ = true;
    }
  }
  if (!action_name) return InvalidInput(where.ToString() + ": missing 'action'");
  const std::optional<Action> action = model::ParseAction(*action_name);
  // The memory actions' sizes are bytes the device held, and bounded; an action this vramscope
  // does not know (or a user_defined / annotate entry) keeps whatever unsigned value it has.
  const bool memory_action = action && *action <= Action::kSnapshot;
  static constexpr IntRange kAnyUnsigned{"an unsigned integer", UINT64_MAX, "2^64-1"};
  if (!doc_->IsMissing(size_value) && !doc_->IsNone(size_value)) {
    RETURN_IF_ERROR(ToU64(size_value, where, "size", memory_action ? kBytes : kAnyUnsigned, &size));
    // Only a size the file carried: an entry without one holds 0 in the model, and says nothing.
    if (action) {
      if (const auto problem = FindEntrySizeViolation(*action, size)) {
        return InvalidInput(fmt::format("{}: {}; {}", where.ToString(), *problem, kRemedy));
      }
    }
  }
  const bool has_device_free =
      !doc_->IsMissing(device_free_value) && !doc_->IsNone(device_free_value);
  if (has_device_free) {
    RETURN_IF_ERROR(ToU64(device_free_value, where, "device_free", kBytes, &device_free));
  }
  StackId stack;
  RETURN_IF_ERROR(ConvertStack(frames, Value(), where, &stack));
  model::Events& ev = trace_.events;
  if (ev.count() >= model::kMaxEvents) {
    return LimitExceeded(
        fmt::format("{}: more than {} trace events; traces this long are not "
                    "supported (record fewer with max_entries)",
                    where.ToString(), model::kMaxEvents));
  }
  const auto index = static_cast<uint32_t>(ev.count());
  ev.Push(action.value_or(Action::kOther), device, addr, size, stream, time_us, stack);
  if (!action) ev.other_action.emplace(index, trace_.strings.Intern(*action_name));
  if (action == Action::kAnnotate) annotate_action_ = true;
  if (has_device_free) ev.oom_device_free.emplace(index, device_free);
  auto keep_text = [&](Value v, std::unordered_map<uint32_t, model::StringId>& into) {
    if (doc_->IsMissing(v) || doc_->IsNone(v)) return;
    const std::string text = ScalarText(v);
    if (!text.empty()) into.emplace(index, trace_.strings.Intern(text));
  };
  keep_text(compile_context, ev.compile_context);
  keep_text(user_metadata, ev.user_metadata);
  return Status::Ok();
}

Status Converter::ConvertTraces(Value traces, const Path& where) {
  RETURN_IF_ERROR(RequireList(traces, where));
  const auto per_device = doc_->Items(traces);
  size_t total = trace_.events.count();
  for (const Value t : per_device) total += doc_->Items(t).size();
  trace_.events.Reserve(total);
  for (size_t d = 0; d < per_device.size(); ++d) {
    const Path dp = where.Index(static_cast<int64_t>(d));
    RETURN_IF_ERROR(RequireList(per_device[d], dp));
    const auto entries = doc_->Items(per_device[d]);
    // (A list whose every entry was dropped at a cut was streamed too, with nothing kept.)
    if (d < streamed_.size() &&
        (streamed_[d] > 0 || doc_->ContainerId(per_device[d]) == streamed_list_[d])) {
      // Converted while parsing; nothing may be left behind in the list.
      if (doc_->ContainerId(per_device[d]) != streamed_list_[d] || !entries.empty()) {
        return InvalidInput(dp.ToString() + ": trace entries arrived in an unexpected layout");
      }
      streamed_list_[d] = kNoList;  // found where it belongs
      continue;
    }
    // A list whose entries were consumed for another device (the same list twice) is empty now.
    if (const auto id = doc_->ContainerId(per_device[d]); id && consumed_lists_.count(*id) != 0) {
      return InvalidInput(dp.ToString() +
                          ": the same trace list appears for two devices "
                          "(corrupt pickle)");
    }
    if (!entries.empty()) RETURN_IF_ERROR(Claim(per_device[d], dp, "trace list"));
    if (!entries.empty() && !trace_.events.device.empty() &&
        trace_.events.device.back() > static_cast<int32_t>(d)) {
      unsorted_ = true;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const Status s =
          ConvertEntry(entries[i], dp.Index(static_cast<int64_t>(i)), static_cast<int32_t>(d));
      if (!s.ok()) {
        // At a cut, the list the cut fell in ends with the entry cut short.
        if (!doc_->IsIncomplete(per_device[d])) return s;
        cut_entries_ += entries.size() - i;
        break;
      }
    }
  }
  return Status::Ok();
}

Status Converter::ConvertSettings(Value settings) {
  // Flattened to text: nested dicts become "outer.inner" keys (roundup_power2_divisions.1024).
  const auto pairs = doc_->DictItems(settings);
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const std::string key = ScalarText(pairs[i]);
    const Value v = pairs[i + 1];
    if (doc_->kind(v) == Kind::kDict) {
      RETURN_IF_ERROR(Claim(v, Path{nullptr, "allocator_settings", -1}, "setting"));
      const auto inner = doc_->DictItems(v);
      for (size_t k = 0; k + 1 < inner.size(); k += 2) {
        trace_.allocator_settings.emplace_back(key + "." + ScalarText(inner[k]),
                                               ScalarText(inner[k + 1]));
      }
      if (inner.empty()) trace_.allocator_settings.emplace_back(key, "{}");
    } else {
      trace_.allocator_settings.emplace_back(key, ScalarText(v));
      if (key == "trace_alloc_overflowed" && doc_->AsBool(v).value_or(false)) {
        trace_.facts.ring_buffer_overflowed = true;
      }
    }
  }
  return Status::Ok();
}

Status Converter::ConvertAnnotations(Value annotations, const Path& where) {
  RETURN_IF_ERROR(RequireList(annotations, where));
  const auto items = doc_->Items(annotations);
  for (size_t i = 0; i < items.size(); ++i) {
    const Path p = where.Index(static_cast<int64_t>(i));
    RETURN_IF_ERROR(RequireDict(items[i], p));
    RETURN_IF_ERROR(Claim(items[i], p, "annotation"));
    model::Annotation a;
    const auto pairs = doc_->DictItems(items[i]);
    for (size_t k = 0; k + 1 < pairs.size(); k += 2) {
      const std::string key = ScalarText(pairs[k]);
      if (key == "device") {
        a.device = static_cast<int32_t>(doc_->AsInt64(pairs[k + 1]).value_or(0));
      } else if (key == "time_us") {
        a.time_us = doc_->AsInt64(pairs[k + 1]).value_or(model::kNoTime);
      } else {
        a.fields.emplace_back(key, ScalarText(pairs[k + 1]));
      }
    }
    trace_.annotations.push_back(std::move(a));
  }
  return Status::Ok();
}

void Converter::DescribeGeneration(Value root) {
  model::SourceInfo& src = trace_.source;
  std::vector<std::string> evidence;
  if (bare_list_) {
    src.generation = "torch 1.x";
    evidence.push_back("a bare list of segments (torch.cuda.memory_snapshot())");
  } else if (history_blocks_) {
    src.generation = has_device_traces_ ? "torch 2.0" : "torch 1.13";
    evidence.push_back("blocks carry 'history' instead of 'address' and 'frames'");
  } else {
    src.generation = "torch 2.1";
    if (segment_frames_) evidence.push_back("segments carry 'frames'");
    const auto add = [&](bool present, const char* generation, const char* what) {
      if (present) {
        src.generation = generation;
        evidence.push_back(what);
      }
    };
    add(times_, "torch 2.2+", "trace entries carry 'time_us'");
    add(!doc_->IsMissing(doc_->Get(root, "allocator_settings")), "torch 2.3+",
        "'allocator_settings' present");
    add(!doc_->IsMissing(doc_->Get(root, "external_annotations")) || compile_context_, "torch 2.5+",
        "'external_annotations' or 'compile_context' present");
    add(user_metadata_, "torch 2.10+", "trace entries carry 'user_metadata'");
    add(pool_id_ || annotate_action_ || host_memory_, "torch 2.11+",
        "'pool_id', 'annotate' or host memory present");
  }
  src.generation_evidence = fmt::format("{}", fmt::join(evidence, "; "));
}

Result<model::Trace> Converter::Run() {
  RETURN_IF_ERROR(CheckUnchanged());
  const Value root = doc_->root();
  Value segments;
  if (doc_->kind(root) == Kind::kList) {
    bare_list_ = true;
    segments = root;
  } else if (doc_->kind(root) == Kind::kDict) {
    segments = doc_->Get(root, "segments");
    if (doc_->IsMissing(segments) && parse_info_.truncated) return NothingBeforeTheCut();
    if (doc_->IsMissing(segments)) {
      std::vector<std::string> keys;
      const auto pairs = doc_->DictItems(root);
      for (size_t i = 0; i + 1 < pairs.size() && keys.size() < 6; i += 2) {
        keys.push_back("'" + ScalarText(pairs[i]).substr(0, 30) + "'");
      }
      return InvalidInput(fmt::format(
          "not a PyTorch memory snapshot: the pickle holds a dict without 'segments' (its keys: "
          "{}); write one with torch.cuda.memory._dump_snapshot()",
          keys.empty() ? std::string("none") : fmt::format("{}", fmt::join(keys, ", "))));
    }
  } else {
    return InvalidInput(fmt::format(
        "not a PyTorch memory snapshot: the pickle holds {}, expected a dict with 'segments' "
        "and 'device_traces' (or a list of segments)",
        pickle::KindWithArticle(doc_->kind(root))));
  }
  RETURN_IF_ERROR(ConvertSegments(segments, Path{nullptr, "segments", -1}));
  if (!bare_list_) {
    const Value traces = doc_->Get(root, "device_traces");
    if (!doc_->IsMissing(traces) && !doc_->IsNone(traces)) {
      has_device_traces_ = true;
      RETURN_IF_ERROR(ConvertTraces(traces, Path{nullptr, "device_traces", -1}));
    }
    const Value settings = doc_->Get(root, "allocator_settings");
    if (const Status s = CheckStreamedListsFound(); !s.ok()) return s;
    if (doc_->kind(settings) == Kind::kDict) RETURN_IF_ERROR(ConvertSettings(settings));
    const Value annotations = doc_->Get(root, "external_annotations");
    if (!doc_->IsMissing(annotations) && !doc_->IsNone(annotations)) {
      RETURN_IF_ERROR(ConvertAnnotations(annotations, Path{nullptr, "external_annotations", -1}));
    }
    host_memory_ = !doc_->IsMissing(doc_->Get(root, "host_segments")) ||
                   !doc_->IsMissing(doc_->Get(root, "host_traces"));
  }
  RETURN_IF_ERROR(CheckStreamedListsFound());  // also when the root is a bare list
  const Value traces = bare_list_ ? Value() : doc_->Get(root, "device_traces");
  if (parse_info_.truncated && has_device_traces_ && doc_->IsIncomplete(traces)) {
    StartFromTheCut();
  }

  // Devices: every ordinal with segments or events; events are grouped by device (sorted here
  // in the rare case the pickle listed them out of order).
  model::Trace& t = trace_;
  if (unsorted_) model::StableSortEventsByDevice(t.events);
  std::vector<int32_t> devices;
  for (const auto& s : t.segments) devices.push_back(s.device);
  for (int32_t d : t.events.device) {
    if (devices.empty() || devices.back() != d) devices.push_back(d);
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  t.devices = devices;
  if (started_from_cut_) {
    for (int32_t d : devices) {
      t.start_levels.push_back(
          {d, start_allocated_[d], start_reserved_[d], std::move(start_known_[d])});
    }
  }
  for (int32_t d : devices) {
    const auto first = std::lower_bound(t.events.device.begin(), t.events.device.end(), d);
    const auto last = std::upper_bound(first, t.events.device.end(), d);
    t.device_event_ranges.emplace_back(first - t.events.device.begin(),
                                       last - t.events.device.begin());
  }

  // Facts.
  model::TraceFacts& f = t.facts;
  f.has_allocator_state = !started_from_cut_;
  f.reserved_known = true;
  for (const Action a : t.events.action) {
    switch (a) {
      case Action::kAlloc:
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        f.has_trace = true;
        break;
      case Action::kSegmentAlloc:
      case Action::kSegmentFree:
      case Action::kSegmentMap:
      case Action::kSegmentUnmap:
        f.has_segment_events = true;
        break;
      default:
        break;
    }
  }
  DescribeSkippedActions(trace_);
  f.has_times = times_;
  for (size_t i = 0; i < t.frames.size(); ++i) {
    if (t.frames.Get(static_cast<FrameId>(i)).kind == model::FrameKind::kPython) {
      f.has_python_frames = true;
    } else {
      f.has_native_frames = true;
    }
  }
  f.has_stacks = t.frames.size() > 0;
  if (f.ring_buffer_overflowed) {
    f.notes.push_back(
        "the allocator's trace ring buffer overflowed (trace_alloc_overflowed): the trace "
        "holds only the most recent events");
  }
  if (!f.has_trace) {
    f.notes.push_back(
        "the snapshot holds no alloc/free trace (history was not recorded, or was cleared): "
        "figures are the allocator state at the moment of the dump");
  }
  if (malformed_fx_fields_ > 0) {
    f.notes.push_back(fmt::format(
        "{} FX frame field(s) (fx_node_op, fx_node_name, fx_node_target, fx_original_trace) were "
        "not text and were left out; the frames themselves were read",
        malformed_fx_fields_));
  }
  if (!t.fx_frames.empty()) {
    f.notes.push_back(fmt::format(
        "{} frame(s) of FX-generated code carry FX node metadata "
        "(_snapshot(augment_with_fx_traces=True)): their allocations are attributed to the model "
        "line the node came from, with the node's name",
        t.fx_frames.size()));
  }
  if (host_memory_) {
    f.notes.push_back(
        "pinned host memory (host_segments/host_traces) is present and not "
        "reported yet");
  }
  DescribeGeneration(root);
  if (parse_info_.truncated) {
    if (t.segments.empty() && t.events.count() == 0 && !started_from_cut_) {
      return NothingBeforeTheCut();
    }
    DescribeCut(segments, traces);
  }
  return std::move(trace_);
}

// The trace was cut: its events stop at the cut, and the segments and blocks the file holds
// are the allocator's state when the snapshot was taken, a moment the events never reach. Like
// a source without an allocator state, the trace then starts from levels (model::StartLevels):
// what was allocated before it began is what the dump holds at addresses no event read ever
// touches (blocks PyTorch kept alive throughout, such as the weights; anything the lost part
// of the trace allocated at a new address and kept is counted too, which the note says), and
// reserved memory the dump's segments no segment event touches, plus the segments the events
// free without having made them.
void Converter::StartFromTheCut() {
  started_from_cut_ = true;
  const model::Events& ev = trace_.events;
  std::map<int32_t, std::unordered_set<uint64_t>> touched, segment_touched, segment_made;
  for (size_t i = 0; i < ev.count(); ++i) {
    const int32_t d = ev.device[i];
    switch (ev.action[i]) {
      case Action::kAlloc:
      case Action::kFreeRequested:
      case Action::kFreeCompleted:
        touched[d].insert(ev.addr[i]);
        break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap:
        segment_made[d].insert(ev.addr[i]);
        segment_touched[d].insert(ev.addr[i]);
        break;
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        if (segment_made[d].count(ev.addr[i]) == 0) {
          start_reserved_[d] += static_cast<int64_t>(ev.size[i]);
        }
        segment_touched[d].insert(ev.addr[i]);
        break;
      default:
        break;
    }
  }
  for (const model::Segment& seg : trace_.segments) {
    if (segment_touched[seg.device].count(seg.address) != 0) continue;
    start_reserved_[seg.device] += static_cast<int64_t>(seg.total_size);
    untouched_segment_bytes_ += seg.total_size;
    for (uint32_t b = seg.first_block; b < seg.first_block + seg.block_count; ++b) {
      const model::Block& block = trace_.blocks[b];
      if (!IsActive(block.state) || touched[seg.device].count(block.address) != 0) continue;
      start_allocated_[seg.device] += static_cast<int64_t>(block.size);
      start_known_[seg.device].push_back(
          {block.address, block.size, block.requested_size, seg.stream, block.stack});
      ++untouched_blocks_;
      untouched_block_bytes_ += block.size;
    }
  }
  dump_segments_ = trace_.segments.size();
  trace_.segments.clear();
  trace_.blocks.clear();
}

void Converter::DescribeCut(Value segments, Value traces) {
  model::TraceFacts& f = trace_.facts;
  f.partial = true;
  f.cut_at_byte = parse_info_.cut_at;
  f.notes.push_back(fmt::format(
      "partial file: it ends at byte {} before the snapshot does (a job killed or a disk filled "
      "while it was written); this report holds what was written before the cut",
      parse_info_.cut_at));
  const uint64_t cut_short = parse_info_.dropped_records + cut_entries_;
  if (doc_->IsIncomplete(segments)) {
    f.notes.push_back(fmt::format(
        "the cut falls in the allocator state ('segments'): {} segment(s) were read whole; the "
        "others{} were never written, so totals are lower bounds of the state at the dump",
        trace_.segments.size(), has_device_traces_ ? "" : " and the whole trace"));
  } else if (started_from_cut_) {
    f.notes.push_back(fmt::format(
        "the cut falls in the trace: its first {} events were read and the rest is lost; the "
        "dump's {} segment(s) describe a later moment, so levels start from what the dump holds "
        "at addresses the events read never touch: {} in {} block(s) allocated before the trace "
        "(some may have been allocated after the cut) and {} reserved",
        trace_.events.count(), dump_segments_,
        FormatBytes(static_cast<int64_t>(untouched_block_bytes_)), untouched_blocks_,
        FormatBytes(static_cast<int64_t>(untouched_segment_bytes_))));
  } else {
    (void)traces;
    f.notes.push_back(
        "the cut falls after the segments and the trace, which are complete; only what follows "
        "them (allocator settings, annotations) may be missing");
  }
  if (cut_short > 0) {
    f.notes.push_back(fmt::format("{} record(s) the cut fell in were left out", cut_short));
  }
}

// Converts each device's trace entries while the reader parses them, so the millions of entry
// dicts of a long trace never exist together; the reader then reclaims their storage.
class SnapshotSink : public pickle::ListSink {
 public:
  explicit SnapshotSink(Converter& converter) : converter_(converter) {}

  bool Wants(const Document& doc, std::span<const Value> context, Value) override {
    converter_.SetDocument(doc);
    return converter_.TraceListDevice(context).has_value();
  }
  Status Consume(const Document& doc, std::span<const Value> context, Value list,
                 std::span<const Value> items) override {
    converter_.SetDocument(doc);
    const auto device = converter_.TraceListDevice(context);
    // Wants() placed this list in device_traces; a pickle that rebuilds the lists around it
    // before it closes (PyTorch's never does) moves it out of its place, or past the devices a
    // GPU can have. Found by input_file_fuzzer
    // (fuzz/pickle_reader/corpus/regression_trace_list_moved.pickle).
    if (!device) {
      return InvalidInput(
          "device_traces: a device's trace list is no longer where it started when it ends (the "
          "lists around it were rebuilt while it was read); this is not a snapshot PyTorch "
          "wrote, or it is corrupt");
    }
    return converter_.ConsumeEntries(*device, list, items);
  }
  void Reclaimed(uint64_t first, std::span<const std::pair<uint64_t, uint64_t>> moved) override {
    converter_.Reclaimed(first, moved);
  }
  void Recovering() override { converter_.Recovering(); }

 private:
  Converter& converter_;
};

}  // namespace

Result<model::Trace> TraceFromPickle(const pickle::Document& doc) {
  Converter converter;
  converter.SetDocument(doc);
  auto trace = converter.Run();
  if (trace.ok()) model::BuildAllocations(*trace);
  return trace;
}

Result<model::Trace> LoadSnapshot(const MappedFile& file, const LoadOptions& options,
                                  LoadTimings* timings) {
  const auto bytes = file.bytes();
  const auto prefix = file.path() + ": ";
  const sources::InputFormat format =
      sources::DetectInputFormat(bytes.first(std::min<size_t>(bytes.size(), 64)));
  if (format != sources::InputFormat::kPickle) {
    std::string hint;
    switch (format) {
      case sources::InputFormat::kEmpty:
        // torchtitan#2991: dumps of a job that was killed, or whose disk filled, come out empty.
        hint =
            "the file is empty (0 bytes): nothing of the snapshot was written, which is what a "
            "job killed while dumping or a full disk leaves behind; dump it again "
            "(torch.cuda.memory._dump_snapshot) with room on the disk";
        break;
      case sources::InputFormat::kJson:
        hint =
            "this is a JSON file (a profiler trace?), not a memory snapshot; write a "
            "snapshot with torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")";
        break;
      case sources::InputFormat::kSqlite:
        hint = "this is a SQLite database (a report?), not a memory snapshot";
        break;
      default:
        hint = fmt::format(
            "this is {}, not a memory snapshot pickle; write one with "
            "torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")",
            sources::InputFormatName(format));
    }
    // An empty file is damaged; anything else is a format of its own that vramscope does not
    // read as a snapshot.
    return format == sources::InputFormat::kEmpty ? InvalidInput(prefix + hint)
                                                  : Unsupported(prefix + hint);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Converter converter;
  // Address space for the events (untouched pages cost nothing): a trace entry takes at least
  // ~16 bytes of pickle. Capped so that huge inputs stay within what overcommit allows.
  const size_t phys =
      static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  converter.ReserveEvents(std::min(bytes.size() / 16 + 16, phys / 256));
  SnapshotSink sink(converter);
  pickle::ParseOptions parse_options;
  // Parsed input is rarely read again (shared strings are, and fault back in from the page
  // cache): let the kernel drop what lies well behind the reader, so a large input does not stay
  // resident while its model is built.
  parse_options.progress = [&](uint64_t done, uint64_t total) {
    constexpr uint64_t kKeepBehind = uint64_t{4} << 20;
    if (done > kKeepBehind) file.ReleasePages(done - kKeepBehind);
    return !options.progress || options.progress(done, total);
  };
  parse_options.sink = options.stream_trace ? &sink : nullptr;
  parse_options.recover_truncated = options.read_partial;
  pickle::ParseInfo info;
  auto doc = pickle::Parse(bytes, parse_options, &info);
  if (!doc.ok()) return doc.status().WithPrefix(prefix);
  const auto t1 = std::chrono::steady_clock::now();
  converter.SetDocument(*doc);
  converter.SetParseInfo(info);
  auto trace = converter.Run();
  if (!trace.ok()) return trace.status().WithPrefix(prefix);
  // The model owns copies of everything it needs: release the document and the input before
  // the lifetimes are built, which is where memory peaks.
  doc = pickle::Document();
  file.ReleasePages(bytes.size());
  model::BuildAllocations(*trace);
  const auto t2 = std::chrono::steady_clock::now();
  trace->source.path = file.path();
  trace->source.format = "PyTorch memory snapshot (pickle)";
  trace->source.pickle_protocol = info.protocol;
  trace->source.file_bytes = bytes.size();
  if (timings != nullptr) {
    timings->parse_s = std::chrono::duration<double>(t1 - t0).count();
    timings->build_model_s = std::chrono::duration<double>(t2 - t1).count();
  }
  return trace;
}

}  // namespace vramscope::snapshot
