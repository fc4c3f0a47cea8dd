#include "sources/snapshot/segment_invariants.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "model/allocator_constants.h"

namespace vramscope::snapshot {

namespace {

using model::Action;
using model::Block;
using model::BlockState;
using model::Segment;

using model::kMinBlockSize;        // PyTorch's (model/allocator_constants.h)
using model::kSegmentGranularity;  // what every segment size PyTorch makes is a multiple of

std::string Hex(uint64_t v) { return fmt::format("0x{:x}", v); }

// The checks of one segment and its blocks; `seg_index` is its position in trace.segments.
std::optional<Violation> CheckSegment(const model::Trace& trace, size_t seg_index,
                                      const SegmentOrigin& origin,
                                      std::span<const BlockOrigin> blocks) {
  const Segment& seg = trace.segments[seg_index];
  auto segment_violation = [&](std::string what) {
    return Violation{origin.index, std::nullopt, std::move(what)};
  };
  if (seg.total_size == 0 || seg.total_size % kSegmentGranularity != 0) {
    return segment_violation(fmt::format(
        "'total_size' is {}, expected a positive multiple of 1 MiB (1048576 bytes: PyTorch's "
        "segments are 2 MiB, 20 MiB or a request rounded up to 2 MiB)",
        seg.total_size));
  }
  if (seg.address > UINT64_MAX - seg.total_size) {
    return segment_violation(
        fmt::format("'address' {} + 'total_size' {} passes the end of the 64-bit address space",
                    Hex(seg.address), seg.total_size));
  }
  const uint64_t end = seg.address + seg.total_size;
  uint64_t next = seg.address;  // where the next block must start
  uint64_t allocated = 0, active = 0, requested = 0;
  bool requested_known = true;  // every active block carried the requested_size PyTorch summed
  for (uint32_t b = seg.first_block; b < seg.first_block + seg.block_count; ++b) {
    const Block& block = trace.blocks[b];
    const BlockOrigin& bo = blocks[b];
    auto block_violation = [&](std::string what) {
      return Violation{origin.index, bo.index, std::move(what)};
    };
    if (block.size == 0 || block.size % kMinBlockSize != 0) {
      return block_violation(fmt::format(
          "'size' is {}, expected a positive multiple of 512 (PyTorch rounds every block to "
          "512 bytes)",
          block.size));
    }
    if (block.address != next) {
      return block_violation(fmt::format(
          "starts at {}, expected {} ({}): the blocks of a segment tile it without gaps or "
          "overlaps",
          Hex(block.address), Hex(next),
          b == seg.first_block ? "the segment's address" : "where the previous block ends"));
    }
    if (block.size > end - next) {
      return block_violation(
          fmt::format("ends at {}, past the end of its segment ({} = 'address' {} + 'total_size' "
                      "{})",
                      Hex(block.address + block.size), Hex(end), Hex(seg.address), seg.total_size));
    }
    next += block.size;
    if (block.state == BlockState::kActiveAllocated) allocated += block.size;
    if (model::IsActive(block.state)) {
      active += block.size;
      requested += block.requested_size;
      requested_known = requested_known && bo.has_requested_size;
      if (bo.has_requested_size && block.requested_size > block.size) {
        return block_violation(fmt::format(
            "'requested_size' is {}, more than its 'size' {} (an active block holds at least "
            "what was requested)",
            block.requested_size, block.size));
      }
    }
  }
  if (next != end) {
    return segment_violation(fmt::format(
        "its blocks end at {}, short of its end {} ('address' {} + 'total_size' {}): they cover "
        "{} of its {} bytes",
        Hex(next), Hex(end), Hex(seg.address), seg.total_size, next - seg.address, seg.total_size));
  }
  if (origin.has_allocated_size && seg.allocated_size != allocated) {
    return segment_violation(
        fmt::format("'allocated_size' is {}, but its active_allocated blocks' sizes sum to {}",
                    seg.allocated_size, allocated));
  }
  if (origin.has_active_size && seg.active_size != active) {
    return segment_violation(
        fmt::format("'active_size' is {}, but its active blocks' sizes (active_allocated and "
                    "active_pending_free) sum to {}",
                    seg.active_size, active));
  }
  if (origin.has_requested_size && requested_known && seg.requested_size != requested) {
    return segment_violation(
        fmt::format("'requested_size' is {}, but its active blocks' requested sizes sum to {}",
                    seg.requested_size, requested));
  }
  return std::nullopt;
}

}  // namespace

std::optional<Violation> FindSegmentViolation(const model::Trace& trace,
                                              std::span<const SegmentOrigin> segments,
                                              std::span<const BlockOrigin> blocks) {
  // One segment at a time, in the file's order, so that the error names the first damaged one.
  std::vector<uint32_t> order(trace.segments.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t x, uint32_t y) { return segments[x].index < segments[y].index; });
  for (const uint32_t s : order) {
    if (auto v = CheckSegment(trace, s, segments[s], blocks)) return v;
  }
  // Then each device's segments against each other. They are sorted by (device, address) and
  // each one's end is known not to wrap: if any two overlap, two neighbours do.
  for (size_t s = 1; s < trace.segments.size(); ++s) {
    const Segment& prev = trace.segments[s - 1];
    const Segment& cur = trace.segments[s];
    if (prev.device != cur.device || prev.address + prev.total_size <= cur.address) continue;
    return Violation{
        segments[s].index, std::nullopt,
        fmt::format("[{}, {}) overlaps segments[{}] [{}, {}) on device {}: the segments of a "
                    "device are disjoint",
                    Hex(cur.address), Hex(cur.address + cur.total_size), segments[s - 1].index,
                    Hex(prev.address), Hex(prev.address + prev.total_size), cur.device)};
  }
  return std::nullopt;
}

std::optional<std::string> FindEntrySizeViolation(Action action, uint64_t size) {
  switch (action) {
    case Action::kAlloc:
    case Action::kFreeRequested:
    case Action::kFreeCompleted:
      if (size != 0) return std::nullopt;
      return fmt::format(
          "'size' of {} entry is 0, expected at least 1 (the requested bytes: PyTorch's "
          "allocator never sees a request of 0 bytes)",
          action == Action::kAlloc ? "an alloc" : fmt::format("a {}", model::ActionName(action)));
    case Action::kSegmentAlloc:
    case Action::kSegmentFree:
    case Action::kSegmentMap:
    case Action::kSegmentUnmap:
      if (size != 0 && size % kSegmentGranularity == 0) return std::nullopt;
      return fmt::format(
          "'size' of a {} entry is {}, expected a positive multiple of 1 MiB (1048576 bytes: "
          "PyTorch's segments and pages are 2 MiB, 20 MiB or a request rounded up to 2 MiB)",
          model::ActionName(action), size);
    case Action::kOom:
      if (size != 0 && size % kMinBlockSize == 0) return std::nullopt;
      return fmt::format(
          "'size' of an oom entry is {}, expected a positive multiple of 512 (the request as "
          "PyTorch rounds it)",
          size);
    default:
      return std::nullopt;
  }
}

}  // namespace vramscope::snapshot
