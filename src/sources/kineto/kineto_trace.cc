// The trace made of what the profiler trace's parse kept (kineto_parser.h): each [memory]
// event's stack from the spans enclosing it, the events and levels per device, the steps, and
// the notes on what was left out.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sources/kineto/kineto_parser.h"

namespace vramscope::kineto::internal {

// "torch/nn/modules/linear.py(125): forward" -> (file, line, function); "<built-in method to of
// Tensor object at 0x7f...>" -> function without the object's address (which would make every
// call a different frame).
FrameId Parser::PythonFrame(model::Trace& trace, std::string_view text) {
  model::Frame f;
  f.kind = model::FrameKind::kPython;
  const size_t close = text.find("): ");
  const size_t open = close == std::string_view::npos ? close : text.rfind('(', close);
  bool parsed = false;
  if (open != std::string_view::npos && open + 1 < close && close - open - 1 <= 9) {
    int32_t line = 0;
    bool digits = true;
    for (size_t i = open + 1; i < close; ++i) {
      if (text[i] < '0' || text[i] > '9') {
        digits = false;
        break;
      }
      line = line * 10 + (text[i] - '0');
    }
    if (digits) {
      f.filename = trace.strings.Intern(text.substr(0, open));
      f.line = line;
      f.function = trace.strings.Intern(text.substr(close + 3));
      parsed = true;
    }
  }
  if (!parsed) {
    std::string function(text);
    if (function.rfind("<built-in ", 0) == 0) {
      if (const size_t at = function.rfind(" at 0x");
          at != std::string::npos && function.back() == '>') {
        function.erase(at, function.size() - 1 - at);
      }
    }
    f.function = trace.strings.Intern(function);
  }
  return trace.frames.Intern(f);
}

FrameId Parser::FrameOfLabel(model::Trace& trace, uint32_t label) {
  if (label_frames_[label] != kNoFrame) return label_frames_[label];
  const Label& l = labels_[label];
  FrameId id = 0;
  switch (l.kind) {
    case SpanKind::kOperator: {
      model::Frame f;
      f.kind = model::FrameKind::kNative;
      f.function = trace.strings.Intern(l.name);
      id = trace.frames.Intern(f);
      break;
    }
    case SpanKind::kModule: {
      model::Frame f;
      f.kind = model::FrameKind::kPython;
      f.filename = trace.strings.Intern("nn.Module");
      f.function = trace.strings.Intern(std::string_view(l.name).substr(11));
      id = trace.frames.Intern(f);
      break;
    }
    case SpanKind::kPython:
      id = PythonFrame(trace, l.name);
      break;
  }
  label_frames_[label] = id;
  return id;
}

// The Python frames of a legacy "Call stack" arg ("file.py(12): f;main.py(3): <module>",
// innermost first) as a stack.
StackId Parser::CallStackOf(model::Trace& trace, uint32_t call_stack) {
  if (call_stack_ids_[call_stack] != kNoStack) return call_stack_ids_[call_stack];
  std::vector<FrameId> frames;
  std::string_view rest = call_stacks_[call_stack];
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    const std::string_view part = rest.substr(0, semi);
    if (!part.empty()) frames.push_back(PythonFrame(trace, part));
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  return call_stack_ids_[call_stack] = trace.stacks.Intern(frames);
}

// The operators and Python functions open at each [memory] event of a thread: the thread's spans
// sorted once (outer before inner) and swept together with its memory events.
void Parser::AssignStacks(model::Trace& trace) {
  label_frames_.assign(labels_.size(), kNoFrame);
  call_stack_ids_.assign(call_stacks_.size(), kNoStack);
  // With Python function events, the nesting already gives the Python stack.
  const bool use_call_stacks = !saw_python_function_;
  auto rank = [&](const Span& s) { return labels_[s.label].kind == SpanKind::kOperator ? 1 : 0; };
  std::sort(spans_.begin(), spans_.end(), [&](const Span& a, const Span& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;  // the enclosing one first
    if (rank(a) != rank(b)) return rank(a) < rank(b);      // Python calls operators
    return a.order < b.order;
  });
  std::vector<uint32_t> by_thread(memory_.size());
  for (uint32_t i = 0; i < by_thread.size(); ++i) by_thread[i] = i;
  std::sort(by_thread.begin(), by_thread.end(), [&](uint32_t a, uint32_t b) {
    const MemoryEvent& x = memory_[a];
    const MemoryEvent& y = memory_[b];
    if (x.thread != y.thread) return x.thread < y.thread;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.order < y.order;
  });

  std::vector<uint32_t> open;       // spans enclosing the current time, outermost first
  std::vector<StackId> open_stack;  // the stack up to and including each (kNoStack: not yet)
  auto stack_of_top = [&]() -> StackId {
    if (open.empty()) return model::kEmptyStack;
    size_t k = open.size();
    while (k > 0 && open_stack[k - 1] == kNoStack) --k;
    for (; k < open.size(); ++k) {
      const Span& s = spans_[open[k]];
      StackId base = k == 0 ? model::kEmptyStack : open_stack[k - 1];
      if (use_call_stacks && s.call_stack != UINT32_MAX) base = CallStackOf(trace, s.call_stack);
      open_stack[k] = trace.stacks.Push(base, FrameOfLabel(trace, s.label));
    }
    return open_stack.back();
  };
  size_t next_span = 0;
  uint32_t thread = UINT32_MAX;
  for (const uint32_t index : by_thread) {
    MemoryEvent& m = memory_[index];
    if (m.thread != thread) {
      thread = m.thread;
      open.clear();
      open_stack.clear();
      while (next_span < spans_.size() && spans_[next_span].thread < thread) ++next_span;
    }
    for (; next_span < spans_.size() && spans_[next_span].thread == thread &&
           spans_[next_span].start_ns <= m.ts_ns;
         ++next_span) {
      const Span& s = spans_[next_span];
      // Close what does not contain the new span.
      while (!open.empty() && spans_[open.back()].end_ns < s.end_ns) {
        open.pop_back();
        open_stack.pop_back();
      }
      open.push_back(static_cast<uint32_t>(next_span));
      open_stack.push_back(kNoStack);
    }
    while (!open.empty() && spans_[open.back()].end_ns < m.ts_ns) {
      open.pop_back();
      open_stack.pop_back();
    }
    m.stack = stack_of_top();
  }
}

std::string Parser::NoMemoryEventsMessage() const {
  std::string detail;
  if (memory_seen_ == 0) {
    detail = event_index_ == 0
                 ? std::string("its event list is empty")
                 : fmt::format("{} events, none of them a [memory] event", event_index_);
  } else {
    std::vector<std::string> parts;
    if (cpu_skipped_ > 0) parts.push_back(fmt::format("{} of CPU memory", cpu_skipped_));
    for (const auto& [type, n] : other_types_skipped_) {
      parts.push_back(fmt::format("{} of device type {}", n, type));
    }
    if (zero_bytes_skipped_ > 0) parts.push_back(fmt::format("{} of 0 bytes", zero_bytes_skipped_));
    detail = fmt::format(
        "its {} [memory] events are {}; CUDA (Device Type 1) and ROCm (6) are "
        "read",
        memory_seen_, fmt::join(parts, ", "));
  }
  return fmt::format(
      "{}: this JSON profiler trace holds no GPU [memory] events ({}); record with "
      "torch.profiler.profile(profile_memory=True) and a CUDA or ROCm device",
      path_, detail);
}

Result<model::Trace> Parser::Finish() {
  if (!has_events_) {
    if (root_object_) {
      std::vector<std::string> quoted;
      for (const std::string& k : root_keys_) {
        std::string q = Quote(k);  // one line, whatever the key holds
        q.front() = q.back() = '\'';
        quoted.push_back(std::move(q));
      }
      if (root_key_count_ > root_keys_.size()) quoted.push_back("...");
      return InvalidInput(fmt::format(
          "{}: a JSON object without 'traceEvents' (its keys: {}): not a PyTorch profiler trace "
          "or memory timeline; vramscope reads profiler traces (export_chrome_trace with "
          "profile_memory=True), memory timelines (export_memory_timeline, .raw.json) and "
          "memory snapshots (torch.cuda.memory._dump_snapshot)",
          path_,
          quoted.empty() ? std::string("none") : fmt::format("{}", fmt::join(quoted, ", "))));
    }
    return InvalidInput(
        fmt::format("{}: the JSON text holds no trace events; {}", path_, kWhatToDo));
  }
  if (memory_.empty()) return InvalidInput(NoMemoryEventsMessage());

  model::Trace trace;
  AssignStacks(trace);

  // Device runs in time order: a stable sort by time keeps the file's order for equal times,
  // which is the order the profiler recorded them in.
  std::vector<uint32_t> order(memory_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const MemoryEvent& x = memory_[a];
    const MemoryEvent& y = memory_[b];
    if (x.device != y.device) return x.device < y.device;
    if (x.ts_ns != y.ts_ns) return x.ts_ns < y.ts_ns;
    return x.order < y.order;
  });

  const bool by_addr = has_addr_.value_or(false);
  const bool totals = has_total_allocated_.value_or(false);
  const bool reserved_totals = has_total_reserved_.value_or(false);
  model::Events& ev = trace.events;
  ev.Reserve(memory_.size() * 2);
  uint64_t synthetic_next = kSyntheticAddressBase;
  uint64_t segment_events = 0, totals_disagree = 0, size_mismatch = 0, legacy_unpaired = 0;
  size_t with_stack = 0;
  for (size_t k = 0; k < order.size();) {
    const int32_t device = memory_[order[k]].device;
    const size_t begin = ev.count();
    const MemoryEvent& first = memory_[order[k]];
    int64_t reserved = first.total_reserved;
    int64_t level = first.total_allocated - first.bytes;  // allocated before the first event
    int64_t alive_before = 0;  // bytes of frees without an alloc in the trace
    std::unordered_map<uint64_t, uint64_t> open_by_addr;               // addr -> bytes
    std::unordered_map<uint64_t, std::vector<uint64_t>> open_by_size;  // legacy: bytes -> addrs
    for (; k < order.size() && memory_[order[k]].device == device; ++k) {
      const MemoryEvent& m = memory_[order[k]];
      const int64_t t = RoundToUs(m.ts_ns);
      if (reserved_totals && m.total_reserved != reserved) {
        const int64_t delta = m.total_reserved - reserved;
        ev.Push(delta > 0 ? Action::kSegmentAlloc : Action::kSegmentFree, device, 0,
                static_cast<uint64_t>(delta > 0 ? delta : -delta), 0, t, model::kEmptyStack);
        reserved = m.total_reserved;
        ++segment_events;
      }
      if (totals) {
        level += m.bytes;
        if (level != m.total_allocated) {
          ++totals_disagree;
          level = m.total_allocated;
        }
      }
      if (m.stack != model::kEmptyStack) ++with_stack;
      const auto size = static_cast<uint64_t>(m.bytes > 0 ? m.bytes : -m.bytes);
      if (m.bytes > 0) {
        uint64_t addr = m.addr;
        if (by_addr) {
          open_by_addr[addr] = size;
        } else {
          addr = synthetic_next;
          synthetic_next += kSyntheticAddressStep;
          open_by_size[size].push_back(addr);
        }
        ev.Push(Action::kAlloc, device, addr, size, 0, t, m.stack);
        continue;
      }
      uint64_t addr = m.addr;
      if (by_addr) {
        const auto it = open_by_addr.find(addr);
        if (it == open_by_addr.end()) {
          alive_before += static_cast<int64_t>(size);
        } else {
          if (it->second != size) ++size_mismatch;
          open_by_addr.erase(it);
        }
      } else {
        auto it = open_by_size.find(size);
        if (it != open_by_size.end() && !it->second.empty()) {
          addr = it->second.back();
          it->second.pop_back();
        } else {
          addr = synthetic_next;
          synthetic_next += kSyntheticAddressStep;
          alive_before += static_cast<int64_t>(size);
          ++legacy_unpaired;
        }
      }
      ev.Push(Action::kFreeRequested, device, addr, size, 0, t, m.stack);
      ev.Push(Action::kFreeCompleted, device, addr, size, 0, t, m.stack);
    }
    trace.devices.push_back(device);
    trace.device_event_ranges.emplace_back(begin, ev.count());
    model::StartLevels start;
    start.device = device;
    // The profiler's counter before the first event, less what the trace itself will count as
    // alive at the start (allocations it sees freed but never allocated).
    start.untracked_allocated = totals ? first.total_allocated - first.bytes - alive_before : 0;
    start.reserved = reserved_totals ? first.total_reserved : 0;
    trace.start_levels.push_back(start);
  }

  // Profiler steps, on every device (they are host-side annotations).
  std::stable_sort(steps_.begin(), steps_.end(),
                   [](const Step& a, const Step& b) { return a.start_ns < b.start_ns; });
  for (const Step& s : steps_) {
    for (const int32_t device : trace.devices) {
      for (const char* stage : {"START", "END"}) {
        model::Annotation a;
        a.device = device;
        a.time_us = RoundToUs(std::string_view(stage) == "START" ? s.start_ns : s.end_ns);
        a.fields = {{"stage", stage}, {"name", s.name}};
        trace.annotations.push_back(std::move(a));
      }
    }
  }

  // Source and facts.
  model::SourceInfo& src = trace.source;
  src.path = path_;
  src.format = "PyTorch profiler trace (Kineto JSON)";
  std::vector<std::string> evidence;
  if (by_addr && totals) {
    src.generation = "Kineto, memory schema with Addr/Total Allocated (torch >=1.10)";
    evidence.push_back(reserved_totals
                           ? "[memory] args carry 'Addr', 'Total Allocated' and 'Total Reserved'"
                           : "[memory] args carry 'Addr' and 'Total Allocated'");
  } else if (!by_addr && !totals) {
    src.generation = "legacy memory schema (torch 1.9: Bytes only)";
    evidence.push_back(
        "[memory] args are only 'Device Type', 'Device Id' and 'Bytes' (no 'Addr', no 'Total "
        "Allocated')");
  } else {
    src.generation = "Kineto, partial memory schema";
    evidence.push_back(by_addr ? "[memory] args carry 'Addr' but no 'Total Allocated'"
                               : "[memory] args carry 'Total Allocated' but no 'Addr'");
  }
  if (saw_hip_) evidence.push_back("Device Type 6 (HIP: a ROCm build)");
  if (saw_python_function_) evidence.push_back("python_function events (with_stack=True)");
  if (saw_call_stack_) evidence.push_back("operators carry 'Call stack' (with_stack, torch 1.9)");
  if (!schema_version_.empty()) evidence.push_back("schemaVersion " + schema_version_);
  src.generation_evidence = fmt::format("{}", fmt::join(evidence, "; "));

  model::TraceFacts& f = trace.facts;
  f.has_allocator_state = false;
  f.sizes_are_block_sizes = true;
  f.reserved_known = reserved_totals;
  f.synthetic_segment_addresses = reserved_totals;
  f.has_trace = true;
  f.has_times = true;
  f.has_segment_events = segment_events > 0;
  for (size_t i = 0; i < trace.frames.size(); ++i) {
    if (trace.frames.Get(static_cast<FrameId>(i)).kind == model::FrameKind::kPython) {
      f.has_python_frames = true;
    } else {
      f.has_native_frames = true;
    }
  }
  f.has_stacks = trace.frames.size() > 0;
  if (!by_addr) {
    f.notes.push_back(fmt::format(
        "[memory] events without 'Addr' (legacy schema): each free is paired with the most "
        "recent open allocation of the same size on its device, a guess; addresses are "
        "synthetic{}",
        legacy_unpaired > 0 ? fmt::format(" ({} frees matched no allocation)", legacy_unpaired)
                            : std::string()));
  }
  if (!totals) {
    f.notes.push_back(
        "no 'Total Allocated' in the [memory] events: memory allocated before recording began is "
        "unknown, the allocated curve counts only what the trace shows");
  }
  if (!reserved_totals) {
    f.notes.push_back(
        "no 'Total Reserved' in the [memory] events: reserved memory is unknown and shown as 0");
  } else if (segment_events > 0) {
    f.notes.push_back(fmt::format(
        "reserved memory follows the profiler's 'Total Reserved': its {} changes appear as "
        "segment events (sizes exact, addresses unknown)",
        segment_events));
  }
  if (totals_disagree > 0) {
    f.notes.push_back(fmt::format(
        "at {} [memory] events 'Total Allocated' does not follow from the previous one and "
        "'Bytes' (lost or reordered events): the allocated curve follows 'Bytes' there",
        totals_disagree));
  }
  if (size_mismatch > 0) {
    f.notes.push_back(fmt::format(
        "{} frees release a different number of bytes than their allocation at the same 'Addr'",
        size_mismatch));
  }
  if (cpu_skipped_ > 0) {
    f.notes.push_back(
        fmt::format("{} CPU [memory] events skipped (host memory is not reported)", cpu_skipped_));
  }
  for (const auto& [type, n] : other_types_skipped_) {
    f.notes.push_back(
        fmt::format("{} [memory] events of device type {} skipped (only CUDA and "
                    "ROCm device memory is read)",
                    n, type));
  }
  if (zero_bytes_skipped_ > 0) {
    f.notes.push_back(fmt::format("{} [memory] events of 0 bytes skipped", zero_bytes_skipped_));
  }
  if (unusable_spans_ > 0) {
    f.notes.push_back(fmt::format(
        "{} operator or Python events without a usable 'ts'/'dur' were left out of the stacks",
        unusable_spans_));
  }
  if (with_stack * 2 < memory_.size()) {
    f.notes.push_back(fmt::format(
        "only {} of {} GPU [memory] events happen inside a recorded operator or Python function "
        "(profile with activities=[ProfilerActivity.CPU, ...] and with_stack=True for stacks)",
        with_stack, memory_.size()));
  }
  model::BuildAllocations(trace);
  return trace;
}

}  // namespace vramscope::kineto::internal
