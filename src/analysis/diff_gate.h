// `vramscope diff --fail-if`: thresholds on what changed, for CI. The grammar (docs/guide/diff.md):
//
//   GATE   := METRIC OP LIMIT
//   METRIC := peak_allocated | peak_reserved | growth_per_step | a category (weight, gradient,
//             optimizer_state, activation, input, workspace, temporary, unknown: its bytes at the
//             peak)
//   OP     := > | >= | < | <=
//   LIMIT  := +N% | -N%      B against A's value times (1 + N/100)
//           | +SIZE | -SIZE  B against A's value plus SIZE (24GiB, 512MiB, 1.5GB, 4096)
//           | SIZE           B against SIZE
//
// A gate fails when B's value OP the limit holds, on any device pair; several gates fail the
// diff when any one does. An unknown metric or a malformed gate is a usage error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/diff.h"
#include "common/status.h"

namespace vramscope::analysis {

struct Gate {
  enum class Op : uint8_t { kGreater, kGreaterEqual, kLess, kLessEqual };
  enum class Limit : uint8_t { kPercentOfA, kBytesOverA, kBytes };
  std::string text;  // as given, for messages
  std::string metric;
  Op op = Op::kGreater;
  Limit limit = Limit::kBytes;
  double value = 0;  // percent (kPercentOfA) or bytes, signed
};

// The metrics a gate may name, with what each is.
const std::vector<std::pair<std::string, std::string>>& GateMetrics();

// Parses one --fail-if; a usage error (naming the gate and what is expected) when malformed.
Result<Gate> ParseGate(const std::string& text);

struct GateOutcome {
  Gate gate;
  int32_t device = 0;  // of B
  int64_t a = 0, b = 0;
  int64_t limit = 0;  // the threshold B was compared with
  bool failed = false;
};

// Every gate on every device pair of the diff.
std::vector<GateOutcome> EvaluateGates(const std::vector<Gate>& gates, const Diff& diff);

}  // namespace vramscope::analysis
