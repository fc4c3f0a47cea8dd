// Interned strings, frames and stacks: the shared vocabulary of the event model.
//
// A million trace events point at a few thousand distinct stacks, exactly as snapshot pickles
// share them through the memo. Stacks are stored as a prefix tree rooted at the outermost frame:
// a stack is the id of its innermost node, and walking `parent` links yields frames from the
// innermost (most specific) to the outermost. Stacks that share their callers share nodes.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vramscope::model {

using StringId = uint32_t;
using FrameId = uint32_t;
using StackId = uint32_t;

inline constexpr StringId kEmptyString = 0;
inline constexpr StackId kEmptyStack = 0;

class StringTable {
 public:
  StringTable();
  StringTable(const StringTable&) = delete;
  StringTable& operator=(const StringTable&) = delete;
  StringTable(StringTable&&) = default;
  StringTable& operator=(StringTable&&) = default;

  StringId Intern(std::string_view s);
  std::string_view Get(StringId id) const { return by_id_[id]; }
  size_t size() const { return by_id_.size(); }

 private:
  std::deque<std::string> storage_;  // deque: stable addresses for the views below
  std::unordered_map<std::string_view, StringId> index_;
  std::vector<std::string_view> by_id_;
};

enum class FrameKind : uint8_t {
  kPython,  // a Python source line (filename ends in .py, or <frozen ...>, <string>, ...)
  kNative,  // C++/C frames recorded with stacks="all" (a .so/.cpp file, "??", or empty)
};

struct Frame {
  StringId filename = kEmptyString;
  StringId function = kEmptyString;
  int32_t line = 0;
  FrameKind kind = FrameKind::kNative;
  bool operator==(const Frame&) const = default;
};

// Classifies a recorded frame by its file name.
FrameKind ClassifyFrame(std::string_view filename);

class FrameTable {
 public:
  FrameId Intern(const Frame& frame);
  const Frame& Get(FrameId id) const { return frames_[id]; }
  size_t size() const { return frames_.size(); }

 private:
  struct Hash {
    size_t operator()(const Frame& f) const {
      return (uint64_t{f.filename} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{f.function} << 17) ^
             static_cast<uint32_t>(f.line);
    }
  };
  std::vector<Frame> frames_;
  std::unordered_map<Frame, FrameId, Hash> index_;
};

class StackTable {
 public:
  StackTable();

  // `innermost_first` lists frames as snapshots do: the allocating call first.
  StackId Intern(std::span<const FrameId> innermost_first);
  // The stack made of `parent` (the callers) with `frame` called from it.
  StackId Push(StackId parent, FrameId frame);

  FrameId frame(StackId id) const { return nodes_[id].frame; }
  StackId parent(StackId id) const { return nodes_[id].parent; }
  uint32_t depth(StackId id) const { return nodes_[id].depth; }
  size_t size() const { return nodes_.size(); }

  // Frames innermost first.
  std::vector<FrameId> Frames(StackId id) const;
  template <typename Fn>
  void ForEachFrame(StackId id, Fn&& fn) const {
    for (; id != kEmptyStack; id = nodes_[id].parent) fn(nodes_[id].frame);
  }

 private:
  struct Node {
    FrameId frame;
    StackId parent;
    uint32_t depth;
  };
  std::vector<Node> nodes_;                         // nodes_[0] is the empty stack
  std::unordered_map<uint64_t, StackId> children_;  // (parent << 32 | frame) -> node
};

}  // namespace vramscope::model
