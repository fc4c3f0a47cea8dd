#include "pipeline/window.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/replay.h"
#include "attribution/phases.h"
#include "attribution/stack_facts.h"
#include "common/units.h"

namespace vramscope::pipeline {

namespace {

using model::Action;

constexpr const char* kBoundHelp =
    "an event number as the report prints them (from 1), or a time since the first event with "
    "its unit: 1200us, 250ms, 2.5s";

// One end of the window: an event number (from 1) or a time since the first event.
struct Bound {
  bool is_time = false;
  uint64_t event = 0;   // from 1
  int64_t time_us = 0;  // since the first event
};

Result<std::optional<Bound>> ParseBound(const std::string& text, const char* flag) {
  if (text.empty()) return std::optional<Bound>();
  const char* begin = text.data();
  const char* end = begin + text.size();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr == begin || !(value >= 0) || value > 1e15) {
    return UsageError(fmt::format("{} '{}': give {}", flag, text, kBoundHelp));
  }
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  Bound b;
  if (unit.empty()) {
    if (value < 1 || value != static_cast<double>(static_cast<uint64_t>(value))) {
      return UsageError(fmt::format("{} '{}': event numbers are whole and start at 1; give {}",
                                    flag, text, kBoundHelp));
    }
    b.event = static_cast<uint64_t>(value);
    return std::optional<Bound>(b);
  }
  double scale = 0;
  if (unit == "us") scale = 1;
  if (unit == "ms") scale = 1e3;
  if (unit == "s") scale = 1e6;
  if (unit == "min") scale = 60e6;
  if (scale == 0) {
    return UsageError(
        fmt::format("{} '{}': unknown unit '{}'; give {}", flag, text, unit, kBoundHelp));
  }
  b.is_time = true;
  b.time_us = static_cast<int64_t>(value * scale);
  return std::optional<Bound>(b);
}

// --step-range: [first, last], 0 for an open end.
Result<std::pair<int32_t, int32_t>> ParseSteps(const std::string& text) {
  const auto number = [&](std::string_view part) -> Result<int32_t> {
    if (part.empty()) return 0;
    int32_t v = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || ptr != part.data() + part.size() || v < 1) {
      return UsageError(fmt::format(
          "--step-range '{}': give iterations as the report numbers them (from 1): 5:7, 5, 5: "
          "or :7",
          text));
    }
    return v;
  };
  const size_t colon = text.find(':');
  const std::string_view all(text);
  ASSIGN_OR_RETURN(const int32_t first, number(all.substr(0, colon)));
  ASSIGN_OR_RETURN(const int32_t last, colon == std::string::npos ? Result<int32_t>(first)
                                                                  : number(all.substr(colon + 1)));
  if (first == 0 && last == 0) {
    return UsageError(
        fmt::format("--step-range '{}': give at least one iteration: 5:7, 5, 5: or :7", text));
  }
  if (first != 0 && last != 0 && last < first) {
    return UsageError(
        fmt::format("--step-range '{}': the last iteration comes before the first", text));
  }
  return std::make_pair(first, last);
}

// Each device's kept events: [begin, end) of Trace::events.
struct DeviceWindow {
  int32_t device = 0;
  size_t begin = 0, end = 0;            // kept
  size_t full_begin = 0, full_end = 0;  // the device's events
};

int64_t FirstTime(const model::Events& ev) {
  int64_t t0 = model::kNoTime;
  for (const int64_t t : ev.time_us) {
    if (t != model::kNoTime && (t0 == model::kNoTime || t < t0)) t0 = t;
  }
  return t0;
}

// Narrows each device's range by one bound (events sorted by time within a device).
void ApplyBound(const Bound& b, bool is_from, int64_t t0, const model::Events& ev,
                DeviceWindow& w) {
  if (!b.is_time) {
    const size_t index = w.full_begin + static_cast<size_t>(b.event - 1);
    if (is_from) {
      w.begin = std::max(w.begin, std::min(index, w.full_end));
    } else {
      w.end = std::min(w.end, std::min(index + 1, w.full_end));
    }
    return;
  }
  const int64_t at = t0 + b.time_us;
  size_t i = w.full_begin;
  if (is_from) {
    while (i < w.full_end && (ev.time_us[i] == model::kNoTime || ev.time_us[i] < at)) ++i;
    w.begin = std::max(w.begin, i);
  } else {
    while (i < w.full_end && (ev.time_us[i] == model::kNoTime || ev.time_us[i] <= at)) ++i;
    w.end = std::min(w.end, i);
  }
}

// The iterations' events of each device, from phase detection on the whole trace.
// `said`: which iterations, for the report's notes.
Status ApplySteps(std::pair<int32_t, int32_t> steps, const Loaded& loaded,
                  std::vector<DeviceWindow>& windows, std::string& said) {
  attribution::StackFactsCache facts(loaded.trace);
  const attribution::Phases phases = attribution::DetectPhases(loaded.view(), facts);
  int32_t highest = 0;
  for (const attribution::Iteration& it : phases.iterations) highest = std::max(highest, it.step);
  if (highest == 0) {
    return InvalidInput(fmt::format(
        "{}: --step-range needs the iterations of a training loop, and none were found in this "
        "trace ({}); use --from/--to with event numbers or times",
        loaded.input.Name(), phases.evidence.empty() ? "no phase evidence" : phases.evidence));
  }
  const int32_t first = steps.first == 0 ? 1 : steps.first;
  const int32_t last = steps.second == 0 ? highest : steps.second;
  if (first > highest) {
    return InvalidInput(fmt::format(
        "{}: --step-range starts at iteration {} but the trace holds iterations 1 to {}",
        loaded.input.Name(), first, highest));
  }
  said = fmt::format("iteration{} {} of the trace's {}, numbered from 1 in this report",
                     first == last ? "" : "s",
                     first == last ? std::to_string(first)
                                   : fmt::format("{} to {}", first, std::min(last, highest)),
                     highest);
  for (DeviceWindow& w : windows) {
    size_t begin = w.full_end, end = w.full_end;
    bool any = false;
    for (const attribution::Iteration& it : phases.iterations) {
      if (it.device != w.device || it.step < first || it.step > last) continue;
      begin = any ? std::min<size_t>(begin, it.first_event) : it.first_event;
      end = any ? std::max<size_t>(end, it.last_event + 1) : it.last_event + 1;
      any = true;
    }
    if (!any) {
      w.begin = w.end = w.full_end;
      continue;
    }
    w.begin = std::max(w.begin, begin);
    w.end = std::min(w.end, end);
  }
  return Status::Ok();
}

model::BlockState StateOf(allocator::BlockView::State s) {
  switch (s) {
    case allocator::BlockView::State::kAllocated:
      return model::BlockState::kActiveAllocated;
    case allocator::BlockView::State::kPendingFree:
      return model::BlockState::kActivePendingFree;
    default:
      return model::BlockState::kInactive;
  }
}

}  // namespace

Result<AllocatorState> AllocatorStateAfter(const Loaded& loaded, int32_t device, size_t end) {
  const model::Trace& t = loaded.trace;
  const auto [full_begin, full_end] = t.EventRange(device);
  const DeviceWindow w{device, full_begin, end, full_begin, full_end};
  AllocatorState out;
  const auto add = [&out](model::Segment seg, std::span<const model::Block> blocks) {
    seg.first_block = static_cast<uint32_t>(out.blocks.size());
    seg.block_count = static_cast<uint32_t>(blocks.size());
    for (model::Block b : blocks) {
      b.segment = static_cast<uint32_t>(out.segments.size());
      out.blocks.push_back(b);
    }
    out.segments.push_back(seg);
  };
  if (w.end == w.full_end) {
    for (const model::Segment& s : t.segments) {
      if (s.device != w.device) continue;
      add(s, std::span(t.blocks).subspan(s.first_block, s.block_count));
    }
    return out;
  }
  allocator::ReplayOptions options;
  if (!t.allocator_settings.empty()) {
    ASSIGN_OR_RETURN(options.settings, allocator::SettingsFromSnapshot(t.allocator_settings));
  }
  options.follow_recording = true;
  options.record_curves = false;
  options.stop_at_oom = false;
  options.stop_before_event = static_cast<int64_t>(w.end);
  Result<allocator::ReplayResult> replay = allocator::Replay(t, w.device, options);
  if (!replay.ok()) {
    return InvalidInput(fmt::format(
        "{}: the window ends before the trace does, and the allocator's state there comes from "
        "the model's replay, which failed: {}; end the window at the trace's end (drop --to)",
        loaded.input.Name(), replay.status().message()));
  }
  // Who holds each address at the window's end: the last allocation there made before it and
  // not released by then, else a block the dump shows alive before the trace.
  std::unordered_map<uint64_t, model::StackId> holder;
  for (const model::Allocation& a : t.allocations) {
    if (a.device != w.device) continue;
    const bool made =
        a.alloc_event == model::kNoEvent || static_cast<size_t>(a.alloc_event) < w.end;
    const int64_t released = a.ReleaseEvent();
    const bool alive = released == model::kNoEvent || static_cast<size_t>(released) >= w.end;
    if (!made || !alive) continue;
    model::StackId stack = a.alloc_stack;
    if (stack == model::kEmptyStack && a.block >= 0) stack = t.blocks[a.block].stack;
    holder[a.addr] = stack;
  }
  std::unordered_map<uint64_t, model::StackId> segment_stack;
  for (const model::Segment& s : t.segments) {
    if (s.device == w.device) segment_stack[s.address] = s.stack;
  }
  for (size_t i = w.full_begin; i < w.end; ++i) {
    if (t.events.action[i] == Action::kSegmentAlloc || t.events.action[i] == Action::kSegmentMap) {
      segment_stack[t.events.addr[i]] = t.events.stack[i];
    }
  }
  for (const allocator::SegmentView& v : replay->final_state) {
    model::Segment s;
    s.device = w.device;
    s.address = v.addr;
    s.total_size = v.size;
    s.stream = v.stream;
    s.pool = v.pool;
    s.pool_id[0] = v.pool_id.first;
    s.pool_id[1] = v.pool_id.second;
    s.is_expandable = v.expandable;
    if (auto it = segment_stack.find(v.addr); it != segment_stack.end()) s.stack = it->second;
    std::vector<model::Block> blocks;
    for (const allocator::BlockView& bv : v.blocks) {
      if (bv.state == allocator::BlockView::State::kUnmapped) continue;
      model::Block b;
      b.address = bv.addr;
      b.size = bv.size;
      b.state = StateOf(bv.state);
      if (model::IsActive(b.state)) {
        // As PyTorch sums them (model::CheckStateInvariants): allocated counts the allocated
        // blocks, active and requested those waiting for other streams too.
        b.requested_size = bv.requested;
        s.active_size += b.size;
        s.requested_size += b.requested_size;
        if (b.state == model::BlockState::kActiveAllocated) s.allocated_size += b.size;
        if (auto it = holder.find(bv.addr); it != holder.end()) b.stack = it->second;
      }
      blocks.push_back(b);
    }
    add(s, blocks);
  }
  return out;
}

void AppendState(const AllocatorState& from, AllocatorState& into) {
  for (model::Segment s : from.segments) {
    const uint32_t first = s.first_block;
    s.first_block = static_cast<uint32_t>(into.blocks.size());
    for (uint32_t k = 0; k < s.block_count; ++k) {
      model::Block b = from.blocks[first + k];
      b.segment = static_cast<uint32_t>(into.segments.size());
      into.blocks.push_back(b);
    }
    into.segments.push_back(s);
  }
}

namespace {

// A sparse per-event map with its keys moved to the window's numbering.
template <typename V>
void Remap(std::unordered_map<uint32_t, V>& map, const std::vector<int64_t>& index) {
  std::unordered_map<uint32_t, V> out;
  for (auto& [old, value] : map) {
    if (old < index.size() && index[old] >= 0)
      out.emplace(static_cast<uint32_t>(index[old]), value);
  }
  map = std::move(out);
}

void RemapMarks(std::vector<model::PhaseMark>& marks, const std::vector<int64_t>& index) {
  std::vector<model::PhaseMark> out;
  for (model::PhaseMark m : marks) {
    if (m.event >= index.size() || index[m.event] < 0) continue;
    m.event = static_cast<uint32_t>(index[m.event]);
    out.push_back(m);
  }
  marks = std::move(out);
}

// Segments in the order a Trace keeps them, (device, address), their blocks told which is theirs.
void SortSegments(std::vector<model::Segment>& segments, std::vector<model::Block>& blocks) {
  std::stable_sort(segments.begin(), segments.end(), [](const auto& a, const auto& b) {
    return a.device != b.device ? a.device < b.device : a.address < b.address;
  });
  for (uint32_t k = 0; k < segments.size(); ++k) {
    for (uint32_t b = 0; b < segments[k].block_count; ++b) {
      blocks[segments[k].first_block + b].segment = k;
    }
  }
}

std::string Describe(const WindowRequest& r) {
  std::string flags;
  if (!r.from.empty()) flags += " --from " + r.from;
  if (!r.to.empty()) flags += " --to " + r.to;
  if (!r.steps.empty()) flags += " --step-range " + r.steps;
  return flags.substr(1);
}

}  // namespace

Status CheckWindow(const WindowRequest& window) {
  ASSIGN_OR_RETURN(const std::optional<Bound> from, ParseBound(window.from, "--from"));
  ASSIGN_OR_RETURN(const std::optional<Bound> to, ParseBound(window.to, "--to"));
  if (from && to && from->is_time == to->is_time &&
      (from->is_time ? to->time_us < from->time_us : to->event < from->event)) {
    return UsageError(fmt::format("--to {} comes before --from {}", window.to, window.from));
  }
  if (!window.steps.empty()) RETURN_IF_ERROR(ParseSteps(window.steps).status());
  return Status::Ok();
}

Status ApplyWindow(const WindowRequest& window, Loaded& loaded) {
  RETURN_IF_ERROR(CheckWindow(window));
  model::Trace& t = loaded.trace;
  const std::string flags = Describe(window);
  if (!t.facts.has_allocator_state || !t.facts.has_trace) {
    return InvalidInput(fmt::format(
        "{}: {} needs a memory snapshot with its alloc/free trace (the allocator's state at the "
        "dump lets a window start and end anywhere); this input is a {}",
        loaded.input.Name(), flags,
        t.source.format.empty() ? "trace without one" : t.source.format));
  }
  std::vector<DeviceWindow> windows;
  for (size_t d = 0; d < t.devices.size(); ++d) {
    const auto [begin, end] = t.device_event_ranges[d];
    if (begin == end) continue;
    windows.push_back({t.devices[d], begin, end, begin, end});
  }
  ASSIGN_OR_RETURN(const std::optional<Bound> from, ParseBound(window.from, "--from"));
  ASSIGN_OR_RETURN(const std::optional<Bound> to, ParseBound(window.to, "--to"));
  const int64_t t0 = FirstTime(t.events);
  if (((from && from->is_time) || (to && to->is_time)) && t0 == model::kNoTime) {
    return InvalidInput(fmt::format(
        "{}: the trace records no times (torch before 2.2), so a window by time cannot be cut; "
        "give event numbers to --from/--to",
        loaded.input.Name()));
  }
  for (DeviceWindow& w : windows) {
    if (from) ApplyBound(*from, true, t0, t.events, w);
    if (to) ApplyBound(*to, false, t0, t.events, w);
  }
  std::string iterations;
  if (!window.steps.empty()) {
    ASSIGN_OR_RETURN(const auto steps, ParseSteps(window.steps));
    RETURN_IF_ERROR(ApplySteps(steps, loaded, windows, iterations));
  }
  size_t kept = 0, total = t.events.count();
  for (const DeviceWindow& w : windows) kept += w.end > w.begin ? w.end - w.begin : 0;
  if (kept == 0) {
    std::string range;
    for (const DeviceWindow& w : windows) {
      range += fmt::format("{}device {}: events 1 to {}", range.empty() ? "" : "; ", w.device,
                           FormatCount(static_cast<int64_t>(w.full_end - w.full_begin)));
    }
    if (t0 != model::kNoTime) {
      int64_t t_last = t0;
      for (const int64_t v : t.events.time_us) t_last = std::max(t_last, v);
      range += fmt::format("; times 0 to {:.3f}s", static_cast<double>(t_last - t0) / 1e6);
    }
    return InvalidInput(
        fmt::format("{}: {} holds no event of the trace ({})", loaded.input.Name(), flags, range));
  }

  // The state at each window's end, from the whole trace, before anything changes.
  std::vector<AllocatorState> states;
  for (const DeviceWindow& w : windows) {
    if (w.end <= w.begin) continue;
    ASSIGN_OR_RETURN(AllocatorState s, AllocatorStateAfter(loaded, w.device, w.end));
    states.push_back(std::move(s));
  }

  // The events kept, renumbered; the sparse fields and marks follow them.
  std::vector<int64_t> index(total, -1);
  model::Events events;
  events.Reserve(kept);
  for (const DeviceWindow& w : windows) {
    for (size_t i = w.begin; i < w.end; ++i) {
      index[i] = static_cast<int64_t>(events.count());
      events.Push(t.events.action[i], t.events.device[i], t.events.addr[i], t.events.size[i],
                  t.events.stream[i], t.events.time_us[i], t.events.stack[i]);
    }
  }
  events.oom_device_free = std::move(t.events.oom_device_free);
  events.compile_context = std::move(t.events.compile_context);
  events.user_metadata = std::move(t.events.user_metadata);
  events.other_action = std::move(t.events.other_action);
  events.category = std::move(t.events.category);
  events.tensor_name = std::move(t.events.tensor_name);
  events.operation = std::move(t.events.operation);
  Remap(events.oom_device_free, index);
  Remap(events.compile_context, index);
  Remap(events.user_metadata, index);
  Remap(events.other_action, index);
  Remap(events.category, index);
  Remap(events.tensor_name, index);
  Remap(events.operation, index);
  RemapMarks(t.phase_marks, index);
  model::Interpretation& in = loaded.interpretation;
  RemapMarks(in.phase_marks, index);
  Remap(in.category, index);
  Remap(in.tensor_name, index);

  // The dump becomes the state at the windows' ends.
  AllocatorState end;
  for (const AllocatorState& s : states) AppendState(s, end);
  std::vector<model::Segment>& segments = end.segments;
  std::vector<model::Block>& blocks = end.blocks;
  SortSegments(segments, blocks);

  std::vector<std::string> notes;
  if (!iterations.empty()) notes.push_back(fmt::format("window ({}): {}", flags, iterations));
  for (const DeviceWindow& w : windows) {
    const size_t n = w.full_end - w.full_begin;
    if (w.end <= w.begin) {
      notes.push_back(fmt::format("window ({}): device {} has no event in it and is left out",
                                  flags, w.device));
      continue;
    }
    notes.push_back(fmt::format(
        "window ({}): device {}'s events {} to {} of {}, numbered from 1 in this report; {} "
        "before and {} after are left out; the allocator's state at its end is {}",
        flags, w.device, FormatCount(static_cast<int64_t>(w.begin - w.full_begin + 1)),
        FormatCount(static_cast<int64_t>(w.end - w.full_begin)),
        FormatCount(static_cast<int64_t>(n)),
        FormatCount(static_cast<int64_t>(w.begin - w.full_begin)),
        FormatCount(static_cast<int64_t>(w.full_end - w.end)),
        w.end == w.full_end ? "the snapshot's own"
                            : "the allocator model's replay of the recording up to there"));
  }

  t.events = std::move(events);
  t.segments = std::move(segments);
  t.blocks = std::move(blocks);
  t.allocations.clear();
  t.devices.clear();
  t.device_event_ranges.clear();
  for (const model::Segment& s : t.segments) t.devices.push_back(s.device);
  for (const int32_t d : t.events.device.distinct()) t.devices.push_back(d);
  if (t.events.device.wide()) {
    for (size_t i = 0; i < t.events.count(); ++i) t.devices.push_back(t.events.device[i]);
  }
  std::sort(t.devices.begin(), t.devices.end());
  t.devices.erase(std::unique(t.devices.begin(), t.devices.end()), t.devices.end());
  for (const int32_t d : t.devices) {
    t.device_event_ranges.push_back(model::DeviceEventRange(t.events, d));
  }
  t.facts.has_trace = t.events.count() > 0;
  t.facts.starts_mid_run = false;
  t.facts.frees_without_alloc = 0;
  t.facts.allocations_alive_before_trace = 0;
  for (std::string& n : notes) t.facts.notes.push_back(std::move(n));
  model::BuildAllocations(t);
  return Status::Ok();
}

}  // namespace vramscope::pipeline
