// `vramscope diff`: two reports compared (before/after a change, measured against predicted, two
// ranks of one job). The figures of each side are read from its report database
// (report/diff_side_reader.h); this file compares them and finds memory that grows step over step.
// Pure data: no reading, no rendering.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace vramscope::analysis {

// One training step of one device, as the report found it.
struct DiffStep {
  int32_t step = 0;
  int64_t peak_allocated = 0;
  std::string peak_phase;
  // Bytes live as the step begins (right before its first event; allocations made before the
  // trace included), in all and by owner label: the same point of every step, where a training
  // loop holds its weights, its optimizer's state and nothing of the step's own.
  int64_t live_at_start = 0;
  std::map<std::string, int64_t> owners_at_start;
};

// What one device of one report holds: the figures diff compares.
struct DiffDevice {
  int32_t device = 0;
  int64_t peak_allocated = 0, peak_reserved = 0;
  int32_t peak_step = 0;
  std::string peak_phase;
  std::map<std::string, int64_t> categories;  // category -> bytes live at the peak (all eight)
  std::map<std::pair<std::string, std::string>, int64_t> owners;  // (category, owner) at the peak
  std::map<std::string, int64_t> sites;                           // allocation site at the peak
  std::vector<DiffStep> steps;                                    // in step order
};

struct DiffSide {
  std::string name;  // the input as the user named it
  bool predicted = false;
  std::string device_type = "cuda";  // the report's: "cuda", or "cpu" for host recordings
  std::vector<DiffDevice> devices;   // by ordinal
};

// Memory that grows step over step: the bytes live at the start of each step rise at every step
// from the second on (the first is the warm-up: the optimizer's state and the libraries'
// workspaces appear in it), at least twice (four steps), by `per_step` bytes on average, with
// the owners whose own bytes at each start rise likewise (largest growth first).
struct Growth {
  int32_t first_step = 0, last_step = 0;
  int64_t per_step = 0;
  std::vector<std::pair<std::string, int64_t>> owners;  // owner label, bytes per step
};
// The growth of a device's steps, or nullopt when it does not rise at every step.
std::optional<Growth> FindGrowth(const DiffDevice& device);

// One figure on both sides. `a`/`b` nullopt: absent on that side (an owner only one side has).
struct Change {
  std::string what;  // a category, an owner ("category: owner"), a site, "step N"
  std::optional<int64_t> a, b;
  int64_t Delta() const { return b.value_or(0) - a.value_or(0); }
};

struct DeviceDiff {
  int32_t device_a = 0, device_b = 0;
  Change peak_allocated, peak_reserved;
  std::vector<Change> categories;  // the eight, in the report's order
  std::vector<Change> owners;      // every owner that differs, largest |delta| first
  std::vector<Change> sites;       // every site that differs, largest |delta| first
  std::vector<Change> steps;       // each step's peak allocated, in step order
  std::optional<Growth> growth_a, growth_b;
};

struct Diff {
  std::string a, b;
  bool predicted_a = false, predicted_b = false;
  std::string device_type_a = "cuda", device_type_b = "cuda";
  std::vector<DeviceDiff> devices;
};

// Pairs the devices (by ordinal; one device on each side is paired whatever its ordinal; `device`
// set: only that ordinal) and compares them. An error (one line) when no device pairs.
Result<Diff> CompareReports(const DiffSide& a, const DiffSide& b, std::optional<int32_t> device);

}  // namespace vramscope::analysis
