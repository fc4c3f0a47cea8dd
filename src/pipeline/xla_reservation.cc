#include "pipeline/xla_reservation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "common/units.h"

namespace vramscope::pipeline {

namespace {

std::string_view Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// The library that made a driver allocation: the module of its innermost frame, skipping CUDA's
// runtime (the recorder already skips the driver, CUPTI and itself). "" without a stack.
std::string OwnerLibrary(const model::Trace& t, model::StackId stack) {
  std::string owner;
  t.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    if (!owner.empty()) return;
    const std::string_view module = Basename(t.strings.Get(t.frames.Get(id).filename));
    if (module.starts_with("libcudart")) return;
    owner = std::string(module);
  });
  return owner;
}

}  // namespace

bool IsXlaLibrary(std::string_view module) {
  const std::string_view base = Basename(module);
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

void ApplyXlaReservations(const std::vector<XlaReservation>& reservations,
                          const std::string& native_path, model::Trace& profile,
                          std::vector<std::string>& notes) {
  if (reservations.empty()) {
    notes.push_back(fmt::format(
        "the native trace {} holds no driver allocation by XLA's libraries: XLA's pool is not "
        "known",
        native_path));
    return;
  }
  bool applied = false;
  for (const XlaReservation& r : reservations) {
    auto level = std::find_if(profile.start_levels.begin(), profile.start_levels.end(),
                              [&](const model::StartLevels& l) { return l.device == r.device; });
    uint64_t live = 0;
    for (const model::Allocation& a : profile.allocations) {
      if (a.device == r.device && a.alive_at_end) live += a.size;
    }
    const std::string outside = r.other_owners.empty()
                                    ? std::string()
                                    : fmt::format("; outside it the driver held {} more ({})",
                                                  FormatBytes(static_cast<int64_t>(r.other_bytes)),
                                                  fmt::join(r.other_owners, ", "));
    if (level == profile.start_levels.end() || live > r.pool_bytes) {
      notes.push_back(fmt::format(
          "device {}: XLA's pool in the native trace ({}) cannot hold this profile's {} of live "
          "buffers{}: not the same run? reserved memory is left unknown",
          r.device, FormatBytes(static_cast<int64_t>(r.pool_bytes)),
          FormatBytes(static_cast<int64_t>(live)),
          level == profile.start_levels.end() ? " (the profile has no such device)" : ""));
      continue;
    }
    level->reserved = static_cast<int64_t>(r.pool_bytes);
    applied = true;
    notes.push_back(fmt::format(
        "device {}: reserved is XLA's pool, its driver allocations at their largest in the native "
        "trace {} ({}) = the live buffers here ({}) + XLA's free pool ({}){}",
        r.device, native_path, FormatBytes(static_cast<int64_t>(r.pool_bytes)),
        FormatBytes(static_cast<int64_t>(live)),
        FormatBytes(static_cast<int64_t>(r.pool_bytes - live)), outside));
  }
  if (applied) profile.facts.reserved_known = true;
}

}  // namespace vramscope::pipeline
