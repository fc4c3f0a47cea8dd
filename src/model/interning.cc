#include "model/interning.h"

namespace vramscope::model {

StringTable::StringTable() { Intern(""); }

StringId StringTable::Intern(std::string_view s) {
  const auto it = index_.find(s);
  if (it != index_.end()) return it->second;
  const std::string& stored = storage_.emplace_back(s);
  const auto id = static_cast<StringId>(by_id_.size());
  by_id_.push_back(stored);
  index_.emplace(stored, id);
  return id;
}

FrameKind ClassifyFrame(std::string_view filename) {
  const auto ends_with = [&](std::string_view suffix) {
    return filename.size() >= suffix.size() &&
           filename.substr(filename.size() - suffix.size()) == suffix;
  };
  if (ends_with(".py") || ends_with(".pyx") || ends_with(".pyi")) return FrameKind::kPython;
  // <frozen importlib._bootstrap>, <string>, <stdin>, <ipython-input-...>, but not "<unknown>"
  // from native unwinding.
  if (filename.size() > 2 && filename.front() == '<' && filename.back() == '>' &&
      filename != "<unknown>") {
    return FrameKind::kPython;
  }
  return FrameKind::kNative;
}

FrameId FrameTable::Intern(const Frame& frame) {
  const auto it = index_.find(frame);
  if (it != index_.end()) return it->second;
  const auto id = static_cast<FrameId>(frames_.size());
  frames_.push_back(frame);
  index_.emplace(frame, id);
  return id;
}

StackTable::StackTable() { nodes_.push_back({0, kEmptyStack, 0}); }

StackId StackTable::Push(StackId parent, FrameId frame) {
  const uint64_t key = (uint64_t{parent} << 32) | frame;
  const auto it = children_.find(key);
  if (it != children_.end()) return it->second;
  const auto id = static_cast<StackId>(nodes_.size());
  nodes_.push_back({frame, parent, nodes_[parent].depth + 1});
  children_.emplace(key, id);
  return id;
}

StackId StackTable::Intern(std::span<const FrameId> innermost_first) {
  StackId id = kEmptyStack;
  for (auto it = innermost_first.rbegin(); it != innermost_first.rend(); ++it) id = Push(id, *it);
  return id;
}

std::vector<FrameId> StackTable::Frames(StackId id) const {
  std::vector<FrameId> out;
  out.reserve(depth(id));
  ForEachFrame(id, [&](FrameId f) { out.push_back(f); });
  return out;
}

}  // namespace vramscope::model
