// What the snapshot source's tests build synthetic snapshots from: a trace loaded from pickle
// bytes, and the segment, block and trace-entry dicts PyTorch writes (support/pickle_builder.h
// pickles them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/mapped_file.h"
#include "sources/snapshot/snapshot_source.h"
#include "support/pickle_builder.h"

namespace vramscope::snapshot {

inline Result<model::Trace> FromBytes(const std::string& bytes,
                                      const std::string& name = "test.pickle") {
  const auto file = MappedFile::FromBytes(
      name, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  return LoadSnapshot(*file);
}

inline vramscope::testing::P Segment(uint64_t address, uint64_t total,
                                     std::vector<vramscope::testing::P> blocks,
                                     bool expandable = false, const char* type = "large",
                                     uint64_t allocated = 0, uint64_t active = 0,
                                     uint64_t requested = 0) {
  return vramscope::testing::Dict(
      {{"device", vramscope::testing::Int(0)},
       {"address", vramscope::testing::UInt(address)},
       {"total_size", vramscope::testing::Int(static_cast<int64_t>(total))},
       {"allocated_size", vramscope::testing::Int(static_cast<int64_t>(allocated))},
       {"active_size", vramscope::testing::Int(static_cast<int64_t>(active))},
       {"requested_size", vramscope::testing::Int(static_cast<int64_t>(requested))},
       {"stream", vramscope::testing::Int(0)},
       {"segment_type", vramscope::testing::Str(type)},
       {"segment_pool_id",
        vramscope::testing::Tuple({vramscope::testing::Int(0), vramscope::testing::Int(0)})},
       {"is_expandable", vramscope::testing::Bool(expandable)},
       {"frames", vramscope::testing::List({})},
       {"blocks", vramscope::testing::List(std::move(blocks))}});
}
inline vramscope::testing::P Block(uint64_t address, uint64_t size, uint64_t requested,
                                   const char* state,
                                   vramscope::testing::P frames = vramscope::testing::List({})) {
  return vramscope::testing::Dict(
      {{"address", vramscope::testing::UInt(address)},
       {"size", vramscope::testing::Int(static_cast<int64_t>(size))},
       {"requested_size", vramscope::testing::Int(static_cast<int64_t>(requested))},
       {"state", vramscope::testing::Str(state)},
       {"frames", std::move(frames)}});
}
inline vramscope::testing::P Entry(
    const char* action, uint64_t addr, uint64_t size, vramscope::testing::P frames,
    std::vector<std::pair<std::string, vramscope::testing::P>> extra = {}) {
  std::vector<std::pair<std::string, vramscope::testing::P>> pairs = {
      {"action", vramscope::testing::Str(action)},
      {"addr", vramscope::testing::UInt(addr)},
      {"size", vramscope::testing::Int(static_cast<int64_t>(size))},
      {"stream", vramscope::testing::Int(0)},
      {"time_us", vramscope::testing::Int(1700000000000000)},
      {"frames", std::move(frames)}};
  for (auto& e : extra) pairs.push_back(std::move(e));
  return vramscope::testing::Dict(std::move(pairs));
}

}  // namespace vramscope::snapshot
