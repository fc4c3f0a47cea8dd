// The snapshot source's converter: a pickle Document of torch.cuda.memory._snapshot() into the
// model's Trace (model/trace.h). Internal to sources/snapshot: its member functions live in
// snapshot_source.cc (the run, the source's generation, loading), snapshot_entries.cc (segments,
// blocks, trace entries, settings and annotations) and snapshot_cut.cc (a file cut off while
// it was written).
#pragma once

#include <absl/container/flat_hash_map.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "common/units.h"
#include "model/trace.h"
#include "sources/pickle/pickle_reader.h"
#include "sources/snapshot/segment_invariants.h"
#include "sources/snapshot/skipped_actions.h"

namespace vramscope::snapshot::converter {

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
  // ..., "device_traces", T, L0, ..., L(k-1) -> device k + len(T). nullopt for other lists, and
  // for a stack PyTorch never writes: T again among the L (DUP or a memo read of it) or one list
  // twice in a row. Those are read from the whole document instead, as every other layout is
  // (the pickle fuzzer found DUPs of T counted as devices, and the two readings disagreeing).
  std::optional<int32_t> TraceListDevice(std::span<const Value> context) const {
    size_t j = context.size(), lists = 0;
    while (j > 0 && doc_->kind(context[j - 1]) == Kind::kList) {
      --j;
      ++lists;
    }
    if (lists == 0 || j == 0) return std::nullopt;
    for (size_t i = j + 1; i < context.size(); ++i) {
      if (context[i] == context[j] || context[i] == context[i - 1]) return std::nullopt;
    }
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
  // Inline for what a snapshot holds (an inline, in-range integer: three per trace entry); the
  // rest, and every error, out of line.
  Status ToU64(Value v, const Path& where, const char* key, const IntRange& range,
               uint64_t* out) const {
    if (doc_->kind(v) == Kind::kInt) {
      if (const auto u = doc_->AsUint64(v); u && *u <= range.max) {
        *out = *u;
        return Status::Ok();
      }
    }
    return CheckedToU64(v, where, key, range, out);
  }
  [[gnu::noinline]] Status CheckedToU64(Value v, const Path& where, const char* key,
                                        const IntRange& range, uint64_t* out) const {
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
        // A frame dict converted before (nearly all of them): one load, no call.
        if (const auto frame_id = doc_->ContainerId(items[i]);
            frame_id && *frame_id < converted_.size() && converted_[*frame_id] < kClaimed) {
          scratch_.push_back(converted_[*frame_id]);
          continue;
        }
        FrameId f;
        RETURN_IF_ERROR(ConvertFrame(items[i], p.Index(static_cast<int64_t>(i)), &f));
        scratch_.push_back(f);
      }
    }
    *out = InternByContent(scratch_);
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

  // PyTorch gives each trace entry a frames list of its own (tens of frames, most of them a
  // stack seen before), so the list's identity caches nothing: the stack is found by its
  // content, one hash lookup and one comparison with a copy of its frames, instead of
  // StackTable::Intern's lookup per frame (measured: a quarter of the time of a real-shaped
  // 1M-entry file). The copies are capped (kMaxCachedFrames); stacks past the cap, and hash
  // collisions, are interned by the table alone.
  StackId InternByContent(std::span<const FrameId> innermost_first) {
    const size_t n = innermost_first.size();
    uint64_t h = n;
    for (const FrameId f : innermost_first) h = ((h ^ f) * 0x9E3779B97F4A7C15ull) ^ (h >> 29);
    const auto [it, inserted] = stacks_by_content_.try_emplace(h);
    if (!inserted) {
      const CachedStack& c = it->second;
      if (c.size == n && std::equal(innermost_first.begin(), innermost_first.end(),
                                    cached_frames_.begin() + static_cast<ptrdiff_t>(c.offset))) {
        return c.stack;
      }
      return trace_.stacks.Intern(innermost_first);
    }
    const StackId stack = trace_.stacks.Intern(innermost_first);
    if (cached_frames_.size() + n > kMaxCachedFrames) {
      stacks_by_content_.erase(it);
      return stack;
    }
    it->second = {stack, static_cast<uint32_t>(n), cached_frames_.size()};
    cached_frames_.insert(cached_frames_.end(), innermost_first.begin(), innermost_first.end());
    return stack;
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
  // InternByContent's cache: by a hash of the frames, the stack and where its frames are kept.
  struct CachedStack {
    StackId stack = model::kEmptyStack;
    uint32_t size = 0;
    uint64_t offset = 0;  // into cached_frames_
  };
  static constexpr size_t kMaxCachedFrames = size_t{16} << 20;  // 64 MiB of FrameIds
  absl::flat_hash_map<uint64_t, CachedStack> stacks_by_content_;
  std::vector<FrameId> cached_frames_;
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

}  // namespace vramscope::snapshot::converter
