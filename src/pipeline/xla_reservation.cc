#include "pipeline/xla_reservation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/path_names.h"
#include "common/units.h"

namespace vramscope::pipeline {

namespace {

// The library that made a driver allocation: the module of its innermost frame, skipping CUDA's
// runtime (the recorder already skips the driver, CUPTI and itself). "" without a stack.
std::string OwnerLibrary(const model::Trace& t, model::StackId stack) {
  std::string owner;
  t.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    if (!owner.empty()) return;
    const std::string_view module = PathBasename(t.strings.Get(t.frames.Get(id).filename));
    if (module.starts_with("libcudart")) return;
    owner = std::string(module);
  });
  return owner;
}

}  // namespace

bool IsXlaLibrary(std::string_view module) {
  const std::string_view base = PathBasename(module);
  return base.find("xla") != std::string_view::npos || base.find("jax") != std::string_view::npos;
}

std::vector<XlaReservation> XlaReservations(const model::Trace& native) {
  // Each allocation's size enters at its alloc event and leaves at its release, in event order
  // (one device's events are contiguous and in recorded order).
  struct Change {
    int64_t event;
    int64_t bytes;
    bool xla;
    const std::string* owner;
  };
  std::map<int32_t, std::vector<Change>> changes;
  std::vector<std::string> owners(native.allocations.size());
  for (size_t i = 0; i < native.allocations.size(); ++i) {
    const model::Allocation& a = native.allocations[i];
    owners[i] = OwnerLibrary(native, a.alloc_stack);
    const bool xla = IsXlaLibrary(owners[i]);
    const auto bytes = static_cast<int64_t>(a.size);
    changes[a.device].push_back({a.alloc_event, bytes, xla, &owners[i]});
    if (const int64_t end = a.ReleaseEvent(); end != model::kNoEvent) {
      changes[a.device].push_back({end, -bytes, xla, &owners[i]});
    }
  }
  std::vector<XlaReservation> out;
  for (auto& [device, list] : changes) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Change& a, const Change& b) { return a.event < b.event; });
    int64_t xla = 0, peak = 0;
    for (const Change& c : list) {
      xla += c.xla ? c.bytes : 0;
      peak = std::max(peak, xla);
    }
    // What else the driver held while the pool was at that size, at its most (a workspace made
    // after the pool counts).
    xla = 0;
    int64_t other = 0, most = -1;
    std::map<std::string, int64_t> others, others_at_peak;
    for (const Change& c : list) {
      if (c.xla) {
        xla += c.bytes;
      } else {
        others[c.owner->empty() ? "no stack" : *c.owner] += c.bytes;
        other += c.bytes;
      }
      if (xla == peak && other > most) {
        most = other;
        others_at_peak = others;
      }
    }
    if (peak == 0) continue;  // XLA took nothing from the driver on this device
    XlaReservation r;
    r.device = device;
    r.pool_bytes = static_cast<uint64_t>(peak);
    std::vector<std::pair<int64_t, std::string>> held;
    for (const auto& [owner, bytes] : others_at_peak) {
      if (bytes > 0) held.emplace_back(bytes, owner);
    }
    std::sort(held.rbegin(), held.rend());
    for (const auto& [bytes, owner] : held) {
      r.other_bytes += static_cast<uint64_t>(bytes);
      r.other_owners.push_back(fmt::format("{} {}", owner, FormatBytes(bytes)));
    }
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Makes `pool` the profile's reserved memory on `device` when it can hold the live buffers, with
// one note; `whence` says where the pool's size comes from. Whether it was applied.
bool SplitPool(int32_t device, uint64_t pool, const std::string& whence, const std::string& outside,
               model::Trace& profile, std::vector<std::string>& notes) {
  auto level = std::find_if(profile.start_levels.begin(), profile.start_levels.end(),
                            [&](const model::StartLevels& l) { return l.device == device; });
  uint64_t live = 0;
  for (const model::Allocation& a : profile.allocations) {
    if (a.device == device && a.alive_at_end) live += a.size;
  }
  if (level == profile.start_levels.end() || live > pool) {
    notes.push_back(fmt::format(
        "device {}: XLA's pool ({}, {}) cannot hold this profile's {} of live buffers{}: not the "
        "same run? reserved memory is left unknown",
        device, FormatBytes(static_cast<int64_t>(pool)), whence,
        FormatBytes(static_cast<int64_t>(live)),
        level == profile.start_levels.end() ? " (the profile has no such device)" : ""));
    return false;
  }
  level->reserved = static_cast<int64_t>(pool);
  profile.facts.reserved_known = true;
  notes.push_back(fmt::format(
      "device {}: reserved is XLA's pool, {} ({}) = the live buffers here ({}) + XLA's free "
      "pool ({}){}",
      device, whence, FormatBytes(static_cast<int64_t>(pool)),
      FormatBytes(static_cast<int64_t>(live)), FormatBytes(static_cast<int64_t>(pool - live)),
      outside));
  return true;
}

}  // namespace

void ApplyXlaReservations(const std::vector<XlaReservation>& reservations,
                          const std::string& native_path, model::Trace& profile,
                          std::vector<std::string>& notes) {
  if (reservations.empty()) {
    notes.push_back(fmt::format(
        "the native trace {} holds no driver allocation by XLA's libraries: XLA's pool is not "
        "known from it",
        native_path));
    return;
  }
  for (const XlaReservation& r : reservations) {
    const std::string outside = r.other_owners.empty()
                                    ? std::string()
                                    : fmt::format("; outside it the driver held {} more ({})",
                                                  FormatBytes(static_cast<int64_t>(r.other_bytes)),
                                                  fmt::join(r.other_owners, ", "));
    SplitPool(
        r.device, r.pool_bytes,
        fmt::format("its driver allocations at their largest in the native trace {}", native_path),
        outside, profile, notes);
  }
}

void ApplyXlaAllocatorPool(uint64_t pool_bytes, model::Trace& profile,
                           std::vector<std::string>& notes) {
  SplitPool(0, pool_bytes, "as XLA's allocator gave it at the end (memory_stats pool_bytes)", "",
            profile, notes);
}

}  // namespace vramscope::pipeline
