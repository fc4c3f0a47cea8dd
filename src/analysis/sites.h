// Allocation sites: the one frame of a stack that best tells a user "this line allocated it".
//
// Preference, innermost first within each level: a Python frame inside the project root; a Python
// frame outside torch and jax (the user's code or a model library such as transformers); any Python
// frame; an operator frame (at::native, at::_ops); any named native frame past the allocator's own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/trace.h"

namespace vramscope::analysis {

// Answers "is this file part of the user's project?" and gives project-relative paths, as the
// Skyline report's stack_frames table requires.
class ProjectRoot {
 public:
  // `root` should be absolute; it is normalised ('\\' to '/', no trailing '/').
  explicit ProjectRoot(std::string root);
  const std::string& path() const { return root_; }
  // The path of `filename` relative to the root, or nullopt when it is outside.
  std::optional<std::string> Relative(std::string_view filename) const;

 private:
  std::string root_;
};

class SiteNamer {
 public:
  SiteNamer(const model::Trace& trace, const ProjectRoot& root);

  static constexpr uint32_t kNoSite = UINT32_MAX;
  // The site frame of `stack`, or kNoSite when the stack is empty. Computed on first use while the
  // analysis runs; the const overload reads what NameAll() computed for every stack.
  uint32_t Site(model::StackId stack);
  uint32_t Site(model::StackId stack) const;
  // Names the site of every allocation's stack and every frame's project path, so that what
  // reporters ask of the const accessors is already there (Analyze calls it before the namer
  // becomes part of its read-only result); other stacks are computed when asked, uncached.
  void NameAll();
  // "train.py:57 main" (project-relative) or "transformers/models/llama/modeling_llama.py:183
  // apply_rotary_pos_emb" (last path components) or "at::native::addmm".
  std::string Label(uint32_t site) const;
  // Frames of `stack` inside the project root, innermost first, as (relative path, line).
  std::vector<std::pair<std::string, int32_t>> ProjectFrames(model::StackId stack) const;

 private:
  uint32_t Compute(model::StackId stack) const;

  // Each frame's path relative to the project root: index into relative_paths_, -1 outside
  // the root, -2 not computed yet. Reports list the frames of many stacks that share frames.
  int32_t RelativePathIndex(model::FrameId frame) const;

  const model::Trace& trace_;
  const ProjectRoot& root_;
  std::vector<uint32_t> cache_;
  std::vector<bool> done_;
  mutable std::vector<int32_t> relative_of_frame_;
  mutable std::vector<std::string> relative_paths_;
};

// A native frame's function without its argument list; operator frames as "aten::op".
std::string NativeName(std::string_view function);

// A shortened display path: the last `components` components, with '/' separators.
std::string ShortPath(std::string_view path, int components = 3);

}  // namespace vramscope::analysis
