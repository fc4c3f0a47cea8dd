// The event model: the one contract every stage after the sources reads.
//
// A `Trace` holds (1) the allocator state at the moment the snapshot was taken (segments and
// their blocks), (2) the ordered trace of allocator events with device, stream, time, sizes and
// interned stacks, (3) allocation lifetimes derived from those events, and (4) the facts the
// source could establish about itself (format generation, whether the trace starts mid-run,
// whether stacks were recorded). Sources fill it once; later stages only read it.
//
// Sizes are bytes. "requested" is what the caller asked for; "size" of a block is what the
// allocator handed out (a multiple of 512 B), which is what torch.cuda.memory_allocated() counts.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/category.h"
#include "model/interned_column.h"
#include "model/interning.h"
#include "model/limits.h"
#include "model/phase.h"

namespace vramscope::model {

enum class Action : uint8_t {
  kAlloc,
  kFreeRequested,  // the tensor was released; the block may still wait for other streams
  kFreeCompleted,  // the block is back in the allocator's cache
  kSegmentAlloc,   // cudaMalloc
  kSegmentFree,    // cudaFree (empty_cache, or the OOM retry releasing cached blocks)
  kSegmentMap,     // expandable segments: pages mapped
  kSegmentUnmap,
  kOom,       // an allocation failed
  kSnapshot,  // a snapshot was taken at this point; size = active bytes then
  kUserDefined,
  kAnnotate,
  kOther,  // an action this version does not know; its name is kept
};
const char* ActionName(Action action);
std::optional<Action> ParseAction(std::string_view name);

inline constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kNoEvent = -1;

// Columnar: a million events take 33 MB. Events of one device are contiguous and in
// recorded order; `device_ranges` gives each device's [begin, end).
struct Events {
  std::vector<Action> action;
  // Devices and streams repeat: 2 bytes an event each (interned_column.h), not 4 and 8.
  InternedColumn<int32_t> device;
  std::vector<uint64_t> addr;
  std::vector<uint64_t> size;
  InternedColumn<uint64_t> stream;
  std::vector<int64_t> time_us;  // kNoTime when the snapshot did not record times (before 2.2)
  std::vector<StackId> stack;
  // Rare per-event fields, keyed by event index.
  std::unordered_map<uint32_t, uint64_t> oom_device_free;  // oom: bytes free on the device
  std::unordered_map<uint32_t, StringId> compile_context;
  std::unordered_map<uint32_t, StringId> user_metadata;
  std::unordered_map<uint32_t, StringId> other_action;  // kOther: the recorded action name
  // kAlloc: the category the source itself recorded for this tensor (PyTorch's memory
  // profiler, a capture sidecar). Attribution takes it as the strongest evidence.
  std::unordered_map<uint32_t, Category> category;
  // kAlloc: the source's name for the tensor ("h.0.attn.c_attn.weight", "h.0.mlp.act" for an
  // activation made in that module) and the operation that produced it ("aten::addmm"). The
  // predictor knows both; a capture sidecar knows the names of weights and their state.
  std::unordered_map<uint32_t, StringId> tensor_name;
  std::unordered_map<uint32_t, StringId> operation;

  size_t count() const { return action.size(); }
  void Reserve(size_t n);
  void Push(Action a, int32_t dev, uint64_t address, uint64_t bytes, uint64_t strm, int64_t t,
            StackId s);
};

enum class BlockState : uint8_t { kActiveAllocated, kActivePendingFree, kInactive };
const char* BlockStateName(BlockState state);
inline bool IsActive(BlockState s) { return s != BlockState::kInactive; }

// The caching allocator's pools: requests rounded to 1 MiB or less go to the small one. Used by the
// snapshot's segments, the allocator model and every report (one vocabulary).
enum class Pool : uint8_t { kSmall = 0, kLarge = 1 };
const char* PoolName(Pool pool);

struct Block {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  BlockState state = BlockState::kInactive;
  StackId stack = kEmptyStack;
  uint32_t segment = 0;
};

struct Segment {
  int32_t device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  uint64_t stream = 0;
  Pool pool = Pool::kLarge;
  int64_t pool_id[2] = {0, 0};  // (0, 0): the default pool; else a CUDA graph / MemPool pool
  bool is_expandable = false;
  StackId stack = kEmptyStack;
  uint32_t first_block = 0;
  uint32_t block_count = 0;
};

// One tensor allocation's lifetime. Ring-buffer traces start mid-run, so an allocation may have
// been alive before the trace began (alloc_event == kNoEvent) and may still be alive at the end
// (free_completed_event == kNoEvent and alive_at_end).
// Event indices are 32-bit (a trace holds at most kMaxEvents): there is one Allocation for every
// few events, so its size matters for long traces.
struct Allocation {
  uint64_t addr = 0;
  uint64_t requested_size = 0;
  uint64_t size = 0;  // block bytes: exact when size_exact, else the 512 B rounding
  uint64_t stream = 0;
  int32_t alloc_event = kNoEvent;
  int32_t free_requested_event = kNoEvent;
  int32_t free_completed_event = kNoEvent;
  int32_t device = 0;
  StackId alloc_stack = kEmptyStack;
  StackId free_stack = kEmptyStack;
  int32_t block = -1;  // index into Trace::blocks when alive at the end
  bool size_exact = false;
  bool alive_at_end = false;

  // When the tensor was released: free_requested, or free_completed when the trace holds only
  // that (it began between the two). kNoEvent while alive.
  int64_t ReleaseEvent() const {
    return free_requested_event != kNoEvent ? free_requested_event : free_completed_event;
  }
};
static_assert(sizeof(Allocation) == 64, "one per tensor allocation: keep it one cache line");

// A phase of a training step the source recorded itself (the predictor knows its own phases; a
// capture marks them): from event `event` on, the device's events belong to `phase` of
// iteration `step` (0: set-up before the first iteration). Phase detection takes these over any
// evidence from stacks.
struct PhaseMark {
  int32_t device = 0;
  uint32_t event = 0;
  int32_t step = 0;
  Phase phase = Phase::kSetup;  // never kUnknown: a source that marks a phase knows it
};

// What a prediction assumed and found, for reports to show next to the figures (absent for
// measured traces).
struct PredictionInfo {
  std::string model;  // "gpt2 (built-in family: GPT-2)", "mlp.json (layer list)"
  std::string setup;  // "batch 8, seq 1024, bf16 autocast, AdamW (foreach), 3 steps"
  std::string gpu;    // "NVIDIA H100 80GB HBM3 (capacity 79.1 GiB for the allocator)"
  std::string torch_version;
  uint64_t parameters = 0;            // every parameter element
  uint64_t trainable_parameters = 0;  // the elements the optimizer updates
  uint64_t parameter_bytes = 0;
  uint64_t buffer_bytes = 0;
  uint64_t capacity = 0;  // bytes the allocator may reserve on the GPU; 0: unlimited
  // Host memory the set-up needs at its most (offloaded states, activations or checkpoints in
  // pinned buffers, unified-memory optimizer pages); of it, the unified-memory pages, which stay
  // on the GPU while it has room.
  uint64_t host_bytes = 0;
  uint64_t paged_bytes = 0;
  std::vector<std::pair<std::string, std::string>> facts;  // more key/value lines
  std::vector<std::string> assumptions;                    // one line each
};

// What PyTorch adds to a frame of FX-generated code when the snapshot is taken with
// torch.cuda.memory._snapshot(augment_with_fx_traces=True): the FX node the line runs and, when
// the node kept one, the stack trace of the model code that produced it. Ids are into
// Trace::strings; kEmptyString where the frame did not carry the field.
struct FxFrame {
  StringId node_op = kEmptyString;      // "call_function", ...
  StringId node_name = kEmptyString;    // "addmm_1"
  StringId node_target = kEmptyString;  // "aten.addmm.default"
  StringId original_trace = kEmptyString;
  // The innermost `File "...", line N, in fn` entry of original_trace: the model line the node
  // came from (original_file is kEmptyString when the trace names none).
  StringId original_file = kEmptyString;
  StringId original_function = kEmptyString;
  int32_t original_line = 0;
};

// The innermost (last) `File "PATH", line N, in FUNCTION` entry of a Python traceback text, as FX
// nodes record it in `stack_trace`. nullopt when the text holds no such entry.
struct TracebackEntry {
  std::string_view file;
  int32_t line = 0;
  std::string_view function;
};
std::optional<TracebackEntry> LastTracebackEntry(std::string_view text);

struct Annotation {
  int32_t device = 0;
  int64_t time_us = kNoTime;
  std::vector<std::pair<std::string, std::string>> fields;
};

// What the source could establish about itself. Facts, not guesses.
struct SourceInfo {
  std::string path;
  std::string format;      // "PyTorch memory snapshot (pickle)"
  std::string generation;  // e.g. "torch 2.3-2.4" with the evidence in generation_evidence
  std::string generation_evidence;
  int pickle_protocol = 0;
  uint64_t file_bytes = 0;
  bool built_in_example = false;
  // What the device ordinals number: "cuda" (GPUs), or "cpu" for memory a framework recorded on
  // the host (TensorFlow's CPU allocator, a jax[cpu] profile or compile). Reports label devices
  // "<device_type>:<ordinal>".
  std::string device_type = "cuda";
};

struct TraceFacts {
  // The source holds the allocator's state at its end (segments and blocks of a snapshot).
  // Without it (profiler traces, memory timelines), levels are anchored by `start_levels`.
  bool has_allocator_state = false;
  // Alloc event sizes are block sizes (what memory_allocated() counts), not requested sizes.
  bool sizes_are_block_sizes = false;
  // The input records reserved memory (torch.cuda.memory_reserved()): an allocator state at the
  // dump, a profiler's "Total Reserved", or the driver-level allocations of a native trace. Without
  // it reports show no reserved figures.
  bool reserved_known = false;
  // The segment events were made from recorded totals (a profiler's "Total Reserved"): their
  // sizes are right, their addresses are not segment addresses.
  bool synthetic_segment_addresses = false;
  bool has_trace = false;  // alloc/free events were recorded
  bool has_times = false;
  bool has_stacks = false;  // any event or block carries frames
  bool has_python_frames = false;
  bool has_native_frames = false;
  bool has_segment_events = false;
  bool starts_mid_run = false;  // frees of allocations the trace never saw
  bool ring_buffer_overflowed = false;
  bool predicted = false;  // made by `vramscope predict`, not measured
  // The file was cut off before its end and read up to the cut (`cut_at_byte`); notes say where
  // the cut fell and what that leaves out.
  bool partial = false;
  uint64_t cut_at_byte = 0;
  // Kinds of trace entries the recording left out (torch 2.9+'s
  // _record_memory_history(skip_actions=[...])), as the trace shows them: "alloc",
  // "free_requested", "free_completed", "segment_alloc". With free_completed skipped, a block's
  // lifetime ends at its free_requested.
  std::vector<std::string> skipped_actions;
  bool Skipped(std::string_view action) const {
    for (const std::string& a : skipped_actions) {
      if (a == action) return true;
    }
    return false;
  }
  uint64_t frees_without_alloc = 0;
  uint64_t allocations_alive_before_trace = 0;
  std::vector<std::string> notes;  // caveats worth telling the user, one line each
};

// Levels before the first event of a device, for sources without an allocator state: memory
// allocated before recording began that no event of the trace explains (BuildAllocations makes
// it one allocation alive throughout), and reserved memory.
struct StartLevels {
  int32_t device = 0;
  int64_t untracked_allocated = 0;
  int64_t reserved = 0;
  // Of `untracked_allocated`, the blocks the source knows one by one (a snapshot cut off in its
  // trace: the dump's blocks no event read touches), each an allocation of its own with its
  // stack; the rest stays one allocation.
  struct Known {
    uint64_t addr = 0, size = 0, requested_size = 0, stream = 0;
    StackId stack = kEmptyStack;
  };
  std::vector<Known> known;
};

struct Trace {
  StringTable strings;
  FrameTable frames;
  StackTable stacks;

  std::vector<int32_t> devices;   // ordinals that have segments or events, ascending
  std::vector<Segment> segments;  // sorted by (device, address)
  std::vector<Block> blocks;      // grouped by segment, sorted by address
  Events events;
  std::vector<std::pair<size_t, size_t>> device_event_ranges;  // parallel to `devices`
  std::vector<Allocation> allocations;

  std::vector<std::pair<std::string, std::string>> allocator_settings;
  // FX metadata of frames of generated code, by frame (see FxFrame); empty for most traces.
  std::unordered_map<FrameId, FxFrame> fx_frames;
  std::vector<Annotation> annotations;
  std::vector<StartLevels> start_levels;  // only when !facts.has_allocator_state
  std::vector<PhaseMark> phase_marks;     // by device, then event
  std::optional<PredictionInfo> prediction;
  SourceInfo source;
  TraceFacts facts;

  // [begin, end) of the events of `device` (empty when it has none).
  std::pair<size_t, size_t> EventRange(int32_t device) const;
};

// Reorders events so that each device's events are contiguous, keeping their order within a
// device; the sparse per-event fields follow their events.
void StableSortEventsByDevice(Events& events);

// [begin, end) of the events of `device` in events sorted by device (StableSortEventsByDevice);
// empty when it has none.
std::pair<size_t, size_t> DeviceEventRange(const Events& events, int32_t device);

// The block size PyTorch's allocator gives a request before any split decision: at least 512 B,
// rounded up to a multiple of 512 B (without roundup_power2_divisions).
uint64_t RoundedRequestSize(uint64_t requested);

// Derives `trace.allocations` from the events and the end state, and fills the lifetime facts
// (starts_mid_run, frees_without_alloc, allocations_alive_before_trace). Source-independent.
void BuildAllocations(Trace& trace);

// Allocator-state invariants of the dump (blocks tile each segment; the segment totals equal the
// sums over its blocks). Returns one line per violation; empty when all hold.
std::vector<std::string> CheckStateInvariants(const Trace& trace);

}  // namespace vramscope::model
