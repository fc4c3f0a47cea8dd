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
#include "sources/snapshot/snapshot_converter.h"

namespace vramscope::snapshot {

namespace converter {

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
        // One line, whatever the key holds (input_file_fuzzer found a key with a newline).
        keys.push_back("'" + ForMessage(ScalarText(pairs[i]), 30) + "'");
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
  for (size_t i = 0; i < t.events.count(); ++i) {
    const int32_t d = t.events.device[i];
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
  for (int32_t d : devices) t.device_event_ranges.push_back(model::DeviceEventRange(t.events, d));

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

}  // namespace converter

namespace {

using converter::Converter;
using pickle::Document;
using pickle::Value;

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
        // A name of a profiler trace (.json, .json.gz) gets the profiler's command.
        hint = file.path().ends_with(".json") || file.path().ends_with(".json.gz")
                   ? "the file is empty (0 bytes): nothing of the profiler trace was written, "
                     "which is what a job killed while exporting or a full disk leaves behind; "
                     "export it again (prof.export_chrome_trace) with room on the disk"
                   : "the file is empty (0 bytes): nothing of the snapshot was written, which is "
                     "what a job killed while dumping or a full disk leaves behind; dump it "
                     "again (torch.cuda.memory._dump_snapshot) with room on the disk";
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
  // The reader's pre-scan reads the whole file before the parse does: release it behind the
  // scan too, or all of it would be resident at once.
  parse_options.scanned = [&](uint64_t begin, uint64_t end) { file.ReleasePages(begin, end); };
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
