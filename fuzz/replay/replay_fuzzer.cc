// Fuzz target for the allocator model and the replay: any trace a source can produce, however
// inconsistent (frees of unknown blocks, overlapping segments, absurd sizes, releases of segments
// the model still uses), must replay without a crash, and the model's own invariants must hold
// at the end. The input bytes are decoded directly into a Trace (no pickle), 8 bytes per record,
// so the fuzzer spends its time in the model.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "allocator/replay.h"
#include "model/trace.h"

namespace {

using vramscope::allocator::AllocatorSettings;
using vramscope::allocator::Replay;
using vramscope::allocator::ReplayOptions;
using vramscope::model::Action;

constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  bool Has(size_t n) const { return pos + n <= size; }
  uint8_t U8() { return pos < size ? data[pos++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
};

// Sizes: mostly realistic (bytes to a few hundred MiB, not multiples of 512), sometimes huge.
uint64_t Size(uint32_t raw, uint8_t scale) {
  switch (scale & 3) {
    case 0:
      return raw & 0xfffff;  // < 1 MiB
    case 1:
      return (raw & 0xffff) * 1024 + (raw >> 24);  // < 64 MiB
    case 2:
      return uint64_t{raw} * 512;  // multiples of 512, < 2 TiB
    default:
      return (uint64_t{raw} << 32) | raw;  // absurd
  }
}

void Check(const vramscope::Result<vramscope::allocator::ReplayResult>& r) {
  if (!r.ok()) return;
  if (!r->invariant_violations.empty()) {
    std::fprintf(stderr, "invariant violated: %s\n", r->invariant_violations.front().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  vramscope::model::Trace trace;
  const uint8_t flags = in.U8();
  // Segments at the dump, each with one block that is active or not.
  const int dump_segments = in.U8() % 6;
  for (int s = 0; s < dump_segments && in.Has(8); ++s) {
    const uint64_t addr = kBase + uint64_t{in.U16()} * 2 * kMiB;
    const uint8_t kind = in.U8();
    const uint64_t seg_size = (kind & 1) ? 2 * kMiB : (1 + (in.U8() % 40)) * 2 * kMiB;
    vramscope::model::Segment seg;
    seg.address = addr;
    seg.total_size = seg_size;
    seg.pool = (kind & 1) ? vramscope::model::Pool::kSmall : vramscope::model::Pool::kLarge;
    seg.first_block = static_cast<uint32_t>(trace.blocks.size());
    seg.block_count = 1;
    vramscope::model::Block block;
    block.address = addr;
    block.size = seg_size;
    block.state = (kind & 2) ? vramscope::model::BlockState::kActiveAllocated
                             : vramscope::model::BlockState::kInactive;
    block.segment = static_cast<uint32_t>(trace.segments.size());
    trace.blocks.push_back(block);
    trace.segments.push_back(seg);
    in.U32();
  }
  while (in.Has(8)) {
    const uint8_t a = in.U8();
    const uint8_t stream = in.U8() % 3;
    const uint64_t addr = kBase + uint64_t{in.U16()} * 64 * 1024;
    const uint32_t raw = in.U32();
    static constexpr Action kActions[] = {
        Action::kAlloc,        Action::kAlloc,       Action::kFreeRequested, Action::kFreeCompleted,
        Action::kSegmentAlloc, Action::kSegmentFree, Action::kSegmentMap,    Action::kSegmentUnmap,
        Action::kOom,          Action::kSnapshot};
    const Action action = kActions[(a & 0x3f) % 10];
    trace.events.Push(action, 0, addr, Size(raw, a >> 6), stream, vramscope::model::kNoTime,
                      vramscope::model::kEmptyStack);
  }
  trace.devices = {0};
  trace.device_event_ranges = {{0, trace.events.count()}};
  trace.facts.has_trace = true;
  vramscope::model::BuildAllocations(trace);

  AllocatorSettings settings;
  if (flags & 1) settings.expandable_segments = true;
  if (flags & 2) settings.max_split_size = 40 * kMiB;
  if (flags & 4) settings.roundup_power2_divisions.fill(4);
  ReplayOptions options;
  options.settings = settings;
  options.check_invariants = true;
  Check(Replay(trace, 0, options));  // compare mode, with resynchronisation
  // Stopped part-way, as a window's end is found (pipeline/window.h).
  options.stop_before_event = static_cast<int64_t>(trace.events.count() * (flags >> 5) / 8);
  Check(Replay(trace, 0, options));
  options.stop_before_event = -1;
  options.follow_recording = false;
  options.settings.capacity = (1 + (flags >> 4)) * 16 * kMiB;
  if (flags & 8) {
    options.settings.memory_fraction = 0.75;
    options.settings.garbage_collection_threshold = 0.5;
  }
  Check(Replay(trace, 0, options));  // what-if under a small device
  options.stop_at_oom = false;
  Check(Replay(trace, 0, options));
  return 0;
}
