#include "sources/native_trace/native_trace_source.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/path_names.h"
#include "common/units.h"
#include "sources/native_trace/vstrace_reader.h"

namespace vramscope::native_trace {

namespace {

// No device holds more (model/limits.h): a bigger size is a damaged record.
using model::kMaxPlausibleBytes;

using model::Action;
using model::Phase;
using vstrace::RecordKind;

// The NVTX path kept for an event: its innermost ranges.
constexpr size_t kMaxPathDepth = 16;

std::vector<std::string> Words(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  unsigned char prev = 0;
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (!std::isalnum(c)) {
      flush();
      prev = 0;
      continue;
    }
    if (prev != 0) {
      const bool case_change = std::islower(prev) && std::isupper(c);
      const bool digit_change = (std::isdigit(prev) != 0) != (std::isdigit(c) != 0);
      if (case_change || digit_change) flush();
    }
    word.push_back(static_cast<char>(std::tolower(c)));
    prev = c;
  }
  flush();
  return words;
}

std::string Demangle(const std::string& symbol) {
  if (symbol.size() < 3 || symbol.size() > 1024 || symbol.compare(0, 2, "_Z") != 0) return symbol;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out != nullptr ? std::string(out.get()) : symbol;
}

struct Live {
  uint64_t bytes = 0;
  int32_t device = 0;
  uint64_t stream = 0;
};

struct Handle {
  uint64_t bytes = 0;
  int32_t device = 0;
  bool mapped = false;
};

struct Pending {
  Action action;
  int32_t device;
  uint64_t addr;
  uint64_t size;
  uint64_t stream;
  int64_t time_us;
  uint32_t native_stack;
  model::StringId path;
  int32_t step;
  Phase phase;
};

class Builder {
 public:
  Builder(const ParsedTrace& parsed, const std::string& path) : in_(parsed), path_(path) {}

  Result<model::Trace> Build(uint64_t file_bytes) {
    for (const Record& r : in_.records) {
      if (pending_.size() + 2 > model::kMaxEvents) {
        return LimitExceeded(fmt::format("{}: more than {} events; capture a shorter run", path_,
                                         FormatCount(static_cast<int64_t>(model::kMaxEvents))));
      }
      Apply(r);
    }
    Finish(file_bytes);
    return std::move(trace_);
  }

 private:
  int64_t TimeUs(uint64_t time_ns) {
    // Wrapping arithmetic: a damaged time must not overflow (signed overflow is undefined).
    const uint64_t realtime_ns =
        in_.header.start_realtime_ns + (time_ns - in_.header.start_clock_ns);
    int64_t t = static_cast<int64_t>(realtime_ns / 1000);
    if (t < last_time_us_) {
      ++times_out_of_order_;
      t = last_time_us_;
    }
    last_time_us_ = t;
    return t;
  }

  int32_t Device(int32_t device) {
    if (device < 0 || device > model::kMaxDeviceOrdinal) {
      ++unknown_device_;
      return 0;
    }
    return device;
  }

  const std::vector<std::string>* PathOf(uint32_t tid) const {
    auto it = nvtx_.find(tid);
    if (it != nvtx_.end() && !it->second.empty()) return &it->second;
    it = nvtx_.find(last_nvtx_tid_);
    if (it != nvtx_.end() && !it->second.empty()) return &it->second;
    return nullptr;
  }

  model::StringId PathId(uint32_t tid) {
    const std::vector<std::string>* ranges = PathOf(tid);
    if (ranges == nullptr) return model::kEmptyString;
    std::string joined;
    const size_t first = ranges->size() > kMaxPathDepth ? ranges->size() - kMaxPathDepth : 0;
    if (first > 0) joined = ".../";
    for (size_t i = first; i < ranges->size(); ++i) {
      if (i > first) joined.push_back('/');
      joined += (*ranges)[i];
    }
    return trace_.strings.Intern(joined);
  }

  void Push(Action action, int32_t device, uint64_t addr, uint64_t size, uint64_t stream,
            const Record& r, int64_t t) {
    pending_.push_back(
        {action, device, addr, size, stream, t, r.stack, PathId(r.tid), step_, phase_});
  }

  // Closes a live driver allocation: the allocation, then its segment.
  void Release(uint64_t addr, const Live& live, Action segment_action, const Record& r, int64_t t) {
    Push(Action::kFreeCompleted, live.device, addr, live.bytes, live.stream, r, t);
    Push(segment_action, live.device, addr, live.bytes, live.stream, r, t);
  }

  // Opens one: its segment, then the allocation of the same bytes.
  void Open(uint64_t addr, const Live& live, Action segment_action, const Record& r, int64_t t,
            std::map<uint64_t, Live>& table, Action close_action) {
    if (const auto it = table.find(addr); it != table.end()) {
      ++reused_addresses_;  // the trace lost its free: close the old one here
      Release(addr, it->second, close_action, r, t);
      table.erase(it);
    }
    Push(segment_action, live.device, addr, live.bytes, live.stream, r, t);
    Push(Action::kAlloc, live.device, addr, live.bytes, live.stream, r, t);
    table[addr] = live;
  }

  void UpdatePhase(std::optional<Phase> phase) {
    if (!phase) {
      // Nothing named a phase: the phase goes on (the loss after forward belongs to it), except
      // that the optimizer's end starts the stretch before the next forward.
      if (phase_ == Phase::kOptimizer) phase_ = Phase::kBeforeForward;
      return;
    }
    any_phase_ = true;
    if (*phase == Phase::kForward) {
      if (phase_ != Phase::kForward && (step_ == 0 || saw_backward_or_optimizer_)) {
        ++step_;
        saw_backward_or_optimizer_ = false;
      }
    } else {
      saw_backward_or_optimizer_ = true;
    }
    phase_ = *phase;
  }

  // The phase the innermost named range of `tid` (then the newest open start/end range) says.
  std::optional<Phase> PhaseOfThread(uint32_t tid) const {
    if (const auto it = nvtx_.find(tid); it != nvtx_.end()) {
      for (auto name = it->second.rbegin(); name != it->second.rend(); ++name) {
        if (const auto p = PhaseOfRangeName(*name)) return p;
      }
    }
    for (auto range = open_ranges_.rbegin(); range != open_ranges_.rend(); ++range) {
      if (const auto p = PhaseOfRangeName(range->second)) return p;
    }
    return std::nullopt;
  }

  void Apply(const Record& r) {
    switch (r.kind) {
      case RecordKind::kAlloc: {
        const int64_t t = TimeUs(r.time_ns);
        if (r.bytes > kMaxPlausibleBytes) {
          ++implausible_sizes_;
          return;
        }
        if (r.address == 0 || r.bytes == 0) {
          ++empty_allocs_;
          return;
        }
        ++driver_allocs_;
        if (r.api == static_cast<uint8_t>(vstrace::Api::kMemAllocManaged)) {
          ++managed_allocs_;
        } else if (r.api == static_cast<uint8_t>(vstrace::Api::kMemAllocAsync) ||
                   r.api == static_cast<uint8_t>(vstrace::Api::kMemAllocFromPoolAsync)) {
          ++pool_allocs_;
        }
        Open(r.address, {r.bytes, Device(r.device), r.stream}, Action::kSegmentAlloc, r, t, live_,
             Action::kSegmentFree);
        return;
      }
      case RecordKind::kFree: {
        const int64_t t = TimeUs(r.time_ns);
        if (r.address == 0) return;  // cuMemFree(0) frees nothing
        const auto it = live_.find(r.address);
        if (it == live_.end()) {
          ++unknown_frees_;
          return;
        }
        Release(r.address, it->second, Action::kSegmentFree, r, t);
        live_.erase(it);
        return;
      }
      case RecordKind::kAllocFailed: {
        const int64_t t = TimeUs(r.time_ns);
        ++failed_allocs_;
        Push(Action::kOom, Device(r.device), 0, r.bytes, r.stream, r, t);
        return;
      }
      case RecordKind::kVmmCreate: {
        TimeUs(r.time_ns);
        const int32_t device = r.location_device >= 0 ? r.location_device : r.device;
        handles_[r.handle] = {r.bytes, Device(device), false};
        ++vmm_creates_;
        return;
      }
      case RecordKind::kVmmRelease: {
        TimeUs(r.time_ns);
        if (const auto it = handles_.find(r.handle); it != handles_.end()) {
          if (!it->second.mapped) never_mapped_bytes_ += it->second.bytes;
          handles_.erase(it);
        }
        return;
      }
      case RecordKind::kVmmMap: {
        const int64_t t = TimeUs(r.time_ns);
        if (r.bytes > kMaxPlausibleBytes) {
          ++implausible_sizes_;
          return;
        }
        if (r.address == 0 || r.bytes == 0) {
          ++empty_allocs_;
          return;
        }
        int32_t device = Device(r.device);
        if (const auto it = handles_.find(r.handle); it != handles_.end()) {
          device = it->second.device;
          it->second.mapped = true;
        } else {
          ++maps_of_unknown_handles_;
        }
        ++vmm_maps_;
        Open(r.address, {r.bytes, device, 0}, Action::kSegmentMap, r, t, mapped_,
             Action::kSegmentUnmap);
        return;
      }
      case RecordKind::kVmmUnmap: {
        const int64_t t = TimeUs(r.time_ns);
        const uint64_t end = r.address + r.bytes < r.address ? UINT64_MAX : r.address + r.bytes;
        auto it = mapped_.lower_bound(r.address);
        if (it == mapped_.end() || it->first >= end) ++unknown_unmaps_;
        while (it != mapped_.end() && it->first < end) {
          Release(it->first, it->second, Action::kSegmentUnmap, r, t);
          it = mapped_.erase(it);
        }
        return;
      }
      case RecordKind::kVaReserve:
        TimeUs(r.time_ns);
        ++va_reserves_;
        va_reserved_[r.address] = r.bytes;
        va_reserved_bytes_ += r.bytes;
        va_reserved_peak_ = std::max(va_reserved_peak_, va_reserved_bytes_);
        return;
      case RecordKind::kVaFree:
        TimeUs(r.time_ns);
        if (const auto it = va_reserved_.find(r.address); it != va_reserved_.end()) {
          va_reserved_bytes_ -= it->second;
          va_reserved_.erase(it);
        }
        return;
      case RecordKind::kNvtxPush:
        TimeUs(r.time_ns);
        ++nvtx_records_;
        nvtx_[r.tid].push_back(r.name);
        last_nvtx_tid_ = r.tid;
        UpdatePhase(PhaseOfThread(r.tid));
        return;
      case RecordKind::kNvtxPop: {
        TimeUs(r.time_ns);
        ++nvtx_records_;
        auto& ranges = nvtx_[r.tid];
        if (ranges.empty()) {
          ++unmatched_pops_;
          return;
        }
        ranges.pop_back();
        last_nvtx_tid_ = r.tid;
        UpdatePhase(PhaseOfThread(r.tid));
        return;
      }
      case RecordKind::kNvtxStart:
        TimeUs(r.time_ns);
        ++nvtx_records_;
        open_ranges_.emplace_back(r.range_id, r.name);
        UpdatePhase(PhaseOfThread(r.tid));
        return;
      case RecordKind::kNvtxEnd: {
        TimeUs(r.time_ns);
        ++nvtx_records_;
        const auto it = std::find_if(open_ranges_.begin(), open_ranges_.end(),
                                     [&](const auto& range) { return range.first == r.range_id; });
        if (it != open_ranges_.end()) open_ranges_.erase(it);
        UpdatePhase(PhaseOfThread(r.tid));
        return;
      }
      case RecordKind::kNvtxMark:
        TimeUs(r.time_ns);
        ++nvtx_records_;
        ++nvtx_marks_;
        if (const auto p = PhaseOfRangeName(r.name)) UpdatePhase(p);
        return;
      default:
        return;
    }
  }

  model::StackId StackOf(uint32_t native) {
    if (native == 0) return model::kEmptyStack;
    if (const auto it = stack_ids_.find(native); it != stack_ids_.end()) return it->second;
    model::StackId id = model::kEmptyStack;
    if (const auto it = in_.stacks.find(native); it != in_.stacks.end()) {
      std::vector<model::FrameId> frames;
      frames.reserve(it->second.size());
      for (const uint32_t f : it->second) {
        const auto frame = FrameOf(f);
        if (frame) frames.push_back(*frame);
      }
      id = trace_.stacks.Intern(frames);
    } else {
      ++missing_stacks_;
    }
    stack_ids_.emplace(native, id);
    return id;
  }

  std::optional<model::FrameId> FrameOf(uint32_t native) {
    if (const auto it = frame_ids_.find(native); it != frame_ids_.end()) return it->second;
    const auto it = in_.frames.find(native);
    if (it == in_.frames.end()) {
      ++missing_frames_;
      return std::nullopt;
    }
    const Frame& f = it->second;
    const auto string_of = [&](uint32_t id) -> std::string {
      if (id == 0) return {};
      const auto s = in_.strings.find(id);
      return s == in_.strings.end() ? std::string() : s->second;
    };
    std::string module = string_of(f.module);
    std::string symbol = string_of(f.symbol);
    if (module.empty()) module = "??";
    std::string function = symbol.empty() ? fmt::format("{}+0x{:x}", PathBasename(module), f.offset)
                                          : Demangle(symbol);
    model::Frame frame;
    frame.filename = trace_.strings.Intern(module);
    frame.function = trace_.strings.Intern(function);
    frame.line = 0;
    frame.kind = model::FrameKind::kNative;
    const model::FrameId id = trace_.frames.Intern(frame);
    frame_ids_.emplace(native, id);
    return id;
  }

  void Finish(uint64_t file_bytes) {
    model::Trace& t = trace_;
    // Devices in ascending order, each one's events contiguous in recorded order.
    std::vector<int32_t> devices;
    for (const Pending& p : pending_) devices.push_back(p.device);
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    model::Events& ev = t.events;
    ev.Reserve(pending_.size());
    bool any_stack = false;
    for (const int32_t device : devices) {
      const size_t begin = ev.count();
      bool first = true;
      int32_t step = 0;
      Phase phase = Phase::kSetup;
      for (const Pending& p : pending_) {
        if (p.device != device) continue;
        const auto index = static_cast<uint32_t>(ev.count());
        const model::StackId stack = StackOf(p.native_stack);
        any_stack = any_stack || stack != model::kEmptyStack;
        ev.Push(p.action, device, p.addr, p.size, p.stream, p.time_us, stack);
        if (p.path != model::kEmptyString) ev.user_metadata.emplace(index, p.path);
        if (any_phase_ && (first || p.step != step || p.phase != phase)) {
          t.phase_marks.push_back({device, index, p.step, p.phase});
          step = p.step;
          phase = p.phase;
        }
        first = false;
      }
      t.devices.push_back(device);
      t.device_event_ranges.emplace_back(begin, ev.count());
      t.start_levels.push_back({device, 0, 0, {}});
    }

    model::TraceFacts& f = t.facts;
    f.has_allocator_state = false;
    f.sizes_are_block_sizes = true;
    // The segment events are the driver's own allocations, at their real addresses: the
    // reserved curve they make is recorded, not inferred.
    f.reserved_known = ev.count() > 0;
    f.has_trace = ev.count() > 0;
    f.has_times = true;
    f.has_stacks = any_stack;
    f.has_native_frames = any_stack && t.frames.size() > 0;
    f.has_python_frames = false;
    f.has_segment_events = ev.count() > 0;

    const vstrace::Header& h = in_.header;
    model::SourceInfo& src = t.source;
    src.path = path_;
    src.format = "vramscope native trace (.vstrace)";
    src.generation = fmt::format("native trace format {}.{}", h.major, h.minor);
    src.file_bytes = file_bytes;
    std::vector<std::string> evidence;
    evidence.push_back(fmt::format("header: format {}.{}, pid {}{}", h.major, h.minor, h.pid,
                                   h.rank >= 0 ? fmt::format(", rank {}", h.rank) : ""));
    for (const auto& [key, value] : in_.facts) {
      if (key == "exe" || key == "hostname") evidence.push_back(fmt::format("{} {}", key, value));
      if (key == "unwinder") evidence.push_back("stacks by " + value);
    }
    evidence.push_back(fmt::format("{} records: {} driver allocations, {} VMM mappings, {} NVTX",
                                   FormatCount(static_cast<int64_t>(in_.record_count)),
                                   FormatCount(driver_allocs_), FormatCount(vmm_maps_),
                                   FormatCount(nvtx_records_)));
    if (!h.clock.empty()) evidence.push_back("clock: " + h.clock);
    src.generation_evidence = fmt::format("{}", fmt::join(evidence, "; "));

    std::vector<std::string>& notes = f.notes;
    notes.push_back(
        "driver-level memory: each segment and allocation is one CUDA driver allocation "
        "(cuMemAlloc*, stream-ordered pools, VMM mappings) recorded with CUPTI; a framework's own "
        "allocator (PyTorch's caching allocator, XLA's BFC allocator) sub-allocates its tensors "
        "inside them, so 'allocated' here is what the framework reserved from the driver, not "
        "its tensors");
    if (!in_.stopped.empty()) {
      notes.push_back(fmt::format(
          "the trace was truncated: {}; read up to byte {} ({} intact records), the events after "
          "that are lost (the process crashed, was killed or ran out of disk while writing)",
          in_.stopped, in_.valid_bytes, FormatCount(static_cast<int64_t>(in_.record_count))));
    } else if (!in_.ended) {
      notes.push_back(
          "the trace has no end record: the process crashed, was killed or is still running; "
          "it holds what happened up to its last record");
    }
    if (in_.ended && in_.end_reason != "exit") {
      notes.push_back("capture stopped inside the process before it exited: " + in_.end_reason);
    }
    for (const auto& [key, value] : in_.facts) {
      if (key == "nvtx" && value != "on") {
        notes.push_back("NVTX ranges were not recorded: " + value);
      }
    }
    if (nvtx_records_ > 0 && !any_phase_) {
      notes.push_back(
          "no NVTX range is named for a training phase (forward/fwd, backward/bwd, "
          "optimizer/optim, step): phases are not marked");
    }
    if (unmatched_pops_ > 0) {
      notes.push_back(fmt::format("{} NVTX pops without a matching push were ignored",
                                  FormatCount(unmatched_pops_)));
    }
    if (managed_allocs_ > 0) {
      notes.push_back(fmt::format(
          "{} allocations are managed memory (cuMemAllocManaged): counted on the allocating "
          "context's device, although the driver may keep their pages on the host",
          FormatCount(managed_allocs_)));
    }
    if (pool_allocs_ > 0) {
      notes.push_back(fmt::format(
          "{} allocations come from stream-ordered pools (cuMemAllocAsync): the memory a pool "
          "keeps cached after their frees is not visible to CUPTI and is not counted",
          FormatCount(pool_allocs_)));
    }
    if (vmm_maps_ > 0 || vmm_creates_ > 0) {
      notes.push_back(
          fmt::format("virtual memory API: physical memory counts while it is mapped (cuMemMap to "
                      "cuMemUnmap); {} cuMemCreate, {} mappings",
                      FormatCount(vmm_creates_), FormatCount(vmm_maps_)));
    }
    uint64_t unmapped_alive = 0;
    for (const auto& [handle, info] : handles_) {
      if (!info.mapped) unmapped_alive += info.bytes;
    }
    if (never_mapped_bytes_ + unmapped_alive > 0) {
      notes.push_back(fmt::format(
          "{} of physical memory was created with cuMemCreate but never mapped: not counted",
          FormatBytes(static_cast<int64_t>(never_mapped_bytes_ + unmapped_alive))));
    }
    if (va_reserves_ > 0) {
      notes.push_back(fmt::format(
          "{} virtual address reservations (cuMemAddressReserve, at most {} at once) use no "
          "device memory and are not counted",
          FormatCount(va_reserves_), FormatBytes(static_cast<int64_t>(va_reserved_peak_))));
    }
    if (failed_allocs_ > 0) {
      notes.push_back(fmt::format("{} driver allocations failed (shown as OOM events)",
                                  FormatCount(failed_allocs_)));
    }
    if (unknown_frees_ > 0) {
      notes.push_back(fmt::format(
          "{} frees release an address the trace never allocated (allocated before capture "
          "began, or the record was lost): ignored",
          FormatCount(unknown_frees_)));
    }
    if (unknown_unmaps_ > 0) {
      notes.push_back(fmt::format("{} cuMemUnmap calls cover no mapping the trace saw: ignored",
                                  FormatCount(unknown_unmaps_)));
    }
    if (maps_of_unknown_handles_ > 0) {
      notes.push_back(fmt::format(
          "{} mappings are of handles the trace did not see created: counted on the mapping "
          "context's device",
          FormatCount(maps_of_unknown_handles_)));
    }
    if (reused_addresses_ > 0) {
      notes.push_back(fmt::format(
          "{} allocations reuse an address that was still live (a lost free): the older one is "
          "closed there",
          FormatCount(reused_addresses_)));
    }
    if (implausible_sizes_ > 0) {
      notes.push_back(fmt::format(
          "{} allocation or mapping records of more than 256 TiB (a damaged trace) were skipped",
          FormatCount(implausible_sizes_)));
    }
    if (empty_allocs_ > 0) {
      notes.push_back(
          fmt::format("{} allocation or mapping records of 0 bytes or at address 0 were skipped",
                      FormatCount(empty_allocs_)));
    }
    if (unknown_device_ > 0) {
      notes.push_back(fmt::format("{} records have no valid device: shown as device 0",
                                  FormatCount(unknown_device_)));
    }
    if (times_out_of_order_ > 0) {
      notes.push_back(fmt::format(
          "{} records are timed before the record ahead of them: given that record's time",
          FormatCount(times_out_of_order_)));
    }
    if (missing_stacks_ + missing_frames_ > 0) {
      notes.push_back(fmt::format(
          "{} stacks and {} frames are referenced but never defined in the trace (lost records): "
          "left out",
          FormatCount(missing_stacks_), FormatCount(missing_frames_)));
    }
    if (in_.unknown_records > 0) {
      notes.push_back(fmt::format(
          "{} records of kinds this vramscope does not know (written by a newer minor version "
          "{}.{}) were skipped",
          FormatCount(static_cast<int64_t>(in_.unknown_records)), h.major, h.minor));
    }
    model::BuildAllocations(t);
  }

  const ParsedTrace& in_;
  const std::string& path_;
  model::Trace trace_;
  std::vector<Pending> pending_;
  std::map<uint64_t, Live> live_;    // driver allocations by address
  std::map<uint64_t, Live> mapped_;  // VMM mappings by address
  std::unordered_map<uint64_t, Handle> handles_;
  std::map<uint64_t, uint64_t> va_reserved_;
  std::unordered_map<uint32_t, std::vector<std::string>> nvtx_;  // thread -> pushed ranges
  std::vector<std::pair<uint64_t, std::string>> open_ranges_;    // start/end ranges
  std::unordered_map<uint32_t, model::StackId> stack_ids_;
  std::unordered_map<uint32_t, model::FrameId> frame_ids_;
  uint32_t last_nvtx_tid_ = 0;
  int64_t last_time_us_ = std::numeric_limits<int64_t>::min();
  int32_t step_ = 0;
  Phase phase_ = Phase::kSetup;
  bool any_phase_ = false;
  bool saw_backward_or_optimizer_ = false;
  int64_t driver_allocs_ = 0, managed_allocs_ = 0, pool_allocs_ = 0, failed_allocs_ = 0;
  int64_t vmm_creates_ = 0, vmm_maps_ = 0, va_reserves_ = 0;
  int64_t unknown_frees_ = 0, unknown_unmaps_ = 0, maps_of_unknown_handles_ = 0;
  int64_t reused_addresses_ = 0, empty_allocs_ = 0, unknown_device_ = 0, implausible_sizes_ = 0;
  int64_t times_out_of_order_ = 0, missing_stacks_ = 0, missing_frames_ = 0;
  int64_t nvtx_records_ = 0, nvtx_marks_ = 0, unmatched_pops_ = 0;
  uint64_t never_mapped_bytes_ = 0, va_reserved_bytes_ = 0, va_reserved_peak_ = 0;
};

}  // namespace

std::optional<Phase> PhaseOfRangeName(std::string_view name) {
  const std::vector<std::string> words = Words(name);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "forward" || w == "fwd") return Phase::kForward;
    if (w == "backward" || w == "bwd") return Phase::kBackward;
    if (w == "optimizer" || w == "optim") return Phase::kOptimizer;
    if (w == "step" && (words.size() == 1 || (i > 0 && words[i - 1] == "opt"))) {
      return Phase::kOptimizer;
    }
  }
  return std::nullopt;
}

Result<model::Trace> TraceFromNativeTrace(std::span<const uint8_t> bytes, const std::string& path) {
  ASSIGN_OR_RETURN(ParsedTrace parsed, ReadNativeTrace(bytes, path));
  return Builder(parsed, path).Build(bytes.size());
}

}  // namespace vramscope::native_trace
