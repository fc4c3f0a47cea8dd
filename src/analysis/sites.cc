#include "analysis/sites.h"

#include <fmt/format.h>

namespace vramscope::analysis {

namespace {

std::string Normalise(std::string_view path) {
  std::string out(path);
  for (char& c : out) {
    if (c == '\\') c = '/';
  }
  return out;
}

bool Contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The framework's own code (PyTorch's, JAX's): a user's line or a model library's is a better
// site than the framework's dispatch that made the buffer.
bool IsFrameworkFile(std::string_view file) {
  return Contains(file, "/torch/") || Contains(file, "/jax/") || Contains(file, "/jaxlib/");
}

// Frames of the allocator, the unwinder and the interpreter: never a useful site.
bool IsPlumbing(std::string_view function) {
  return function.empty() || function == "??" || function.starts_with("torch::unwind") ||
         function.starts_with("torch::CapturedTraceback") ||
         function.starts_with("torch::cuda::(anonymous") || function.starts_with("c10::") ||
         function.starts_with("_Py") || function.starts_with("Py") ||
         function.starts_with("THPVariable") || function.starts_with("std::") ||
         function.starts_with("at::detail::") || function.starts_with("at::empty") ||
         function.starts_with("at::_ops::empty") || function.starts_with("at::native::empty") ||
         Contains(function, "_vectorcall") || Contains(function, "EvalFrame") ||
         Contains(function, "do_call_core") || Contains(function, "slot_tp_call");
}

}  // namespace

std::string NativeName(std::string_view function) {
  // "at::_ops::addmm::call(at::Tensor const&, ...)" -> "aten::addmm"
  constexpr std::string_view kOps = "at::_ops::";
  if (function.starts_with(kOps)) {
    const std::string_view rest = function.substr(kOps.size());
    return "aten::" + std::string(rest.substr(0, rest.find("::")));
  }
  // Drop the argument list, keeping "(anonymous namespace)" inside qualified names.
  std::string name;
  size_t i = 0;
  while (i < function.size()) {
    if (function[i] == '(') {
      constexpr std::string_view kAnon = "(anonymous namespace)";
      if (function.substr(i, kAnon.size()) == kAnon) {
        name += kAnon;
        i += kAnon.size();
        continue;
      }
      break;
    }
    name.push_back(function[i++]);
  }
  return name.empty() ? std::string("??") : name;
}

ProjectRoot::ProjectRoot(std::string root) : root_(Normalise(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::optional<std::string> ProjectRoot::Relative(std::string_view filename) const {
  const std::string file = Normalise(filename);
  if (root_.empty() || file.size() <= root_.size()) return std::nullopt;
  if (file.compare(0, root_.size(), root_) != 0) return std::nullopt;
  if (root_ != "/" && file[root_.size()] != '/') return std::nullopt;
  return file.substr(root_ == "/" ? 1 : root_.size() + 1);
}

std::string ShortPath(std::string_view path, int components) {
  const std::string p = Normalise(path);
  size_t cut = p.size();
  for (int i = 0; i < components; ++i) {
    const size_t slash = p.rfind('/', cut == 0 ? 0 : cut - 1);
    if (slash == std::string::npos || cut == 0) return p;
    cut = slash;
  }
  return p.substr(cut + 1);
}

SiteNamer::SiteNamer(const model::Trace& trace, const ProjectRoot& root)
    : trace_(trace), root_(root), cache_(trace.stacks.size()), done_(trace.stacks.size()) {}

uint32_t SiteNamer::Site(model::StackId stack) {
  if (stack >= cache_.size()) return Compute(stack);
  if (!done_[stack]) {
    cache_[stack] = Compute(stack);
    done_[stack] = true;
  }
  return cache_[stack];
}

uint32_t SiteNamer::Site(model::StackId stack) const {
  if (stack < cache_.size() && done_[stack]) return cache_[stack];
  return Compute(stack);
}

void SiteNamer::NameAll() {
  for (const model::Allocation& a : trace_.allocations) Site(a.alloc_stack);
  for (model::FrameId frame = 0; frame < trace_.frames.size(); ++frame) RelativePathIndex(frame);
}

uint32_t SiteNamer::Compute(model::StackId stack) const {
  if (stack == model::kEmptyStack) return kNoSite;
  // Best candidate per preference level (lower is better); innermost wins within a level.
  constexpr int kLevels = 6;
  uint32_t best[kLevels];
  for (auto& b : best) b = kNoSite;
  trace_.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    const model::Frame& f = trace_.frames.Get(id);
    const std::string_view file = trace_.strings.Get(f.filename);
    const std::string_view function = trace_.strings.Get(f.function);
    int level;
    const auto fx = trace_.fx_frames.find(id);
    if (fx != trace_.fx_frames.end() && fx->second.original_file != model::kEmptyString) {
      level = 0;  // generated code whose FX node names the model line it came from
    } else if (f.kind == model::FrameKind::kPython) {
      const std::string norm = Normalise(file);
      if (norm.empty()) {
        level = 3;  // a built-in ("<built-in function linear>" in profiler traces): its caller
                    // is the line to show
      } else if (root_.Relative(norm)) {
        level = 0;
      } else if (!IsFrameworkFile(norm) && !Contains(norm, "<frozen")) {
        level = 1;  // the user's code or a model library (transformers, ...): innermost wins
      } else {
        level = 3;
      }
    } else if (function.starts_with("at::native::") || function.starts_with("at::_ops::")) {
      level = IsPlumbing(function) ? 5 : 4;
    } else {
      if (IsPlumbing(function)) return;
      level = 5;
    }
    if (best[level] == kNoSite) best[level] = id;
  });
  for (const uint32_t b : best) {
    if (b != kNoSite) return b;
  }
  // Only plumbing frames: name the innermost one rather than nothing.
  return trace_.stacks.frame(stack);
}

std::string SiteNamer::Label(uint32_t site) const {
  if (site == kNoSite) return "(no stack recorded)";
  const model::Frame& f = trace_.frames.Get(site);
  const std::string_view file = trace_.strings.Get(f.filename);
  const std::string_view function = trace_.strings.Get(f.function);
  if (const auto fx = trace_.fx_frames.find(site); fx != trace_.fx_frames.end()) {
    // Generated code (Inductor, AOTAutograd): the model line its FX node came from, and the node.
    const model::FxFrame& x = fx->second;
    const std::string_view node = trace_.strings.Get(x.node_name);
    const std::string node_text = node.empty() ? std::string() : fmt::format(" (FX {})", node);
    if (x.original_file != model::kEmptyString) {
      const std::string_view original = trace_.strings.Get(x.original_file);
      const auto rel = root_.Relative(original);
      return fmt::format("{}:{} {}{}", rel ? *rel : ShortPath(original), x.original_line,
                         trace_.strings.Get(x.original_function), node_text);
    }
    const auto rel = root_.Relative(file);
    return fmt::format("{}:{} {}{}", rel ? *rel : ShortPath(file), f.line, function, node_text);
  }
  if (f.kind == model::FrameKind::kPython) {
    if (file.empty()) return std::string(function);
    const auto rel = root_.Relative(file);
    const std::string path = rel ? *rel : ShortPath(file);
    if (f.line <= 0) return fmt::format("{} {}", path, function);  // the line is unknown
    return fmt::format("{}:{} {}", path, f.line, function);
  }
  return NativeName(function);
}

int32_t SiteNamer::RelativePathIndex(model::FrameId frame) const {
  if (relative_of_frame_.size() < trace_.frames.size()) {
    relative_of_frame_.resize(trace_.frames.size(), -2);
  }
  int32_t& slot = relative_of_frame_[frame];
  if (slot == -2) {
    auto rel = root_.Relative(trace_.strings.Get(trace_.frames.Get(frame).filename));
    if (rel) {
      slot = static_cast<int32_t>(relative_paths_.size());
      relative_paths_.push_back(std::move(*rel));
    } else {
      slot = -1;
    }
  }
  return slot;
}

std::vector<std::pair<std::string, int32_t>> SiteNamer::ProjectFrames(model::StackId stack) const {
  std::vector<std::pair<std::string, int32_t>> out;
  trace_.stacks.ForEachFrame(stack, [&](model::FrameId id) {
    const int32_t rel = RelativePathIndex(id);
    if (rel >= 0) out.emplace_back(relative_paths_[rel], trace_.frames.Get(id).line);
  });
  return out;
}

}  // namespace vramscope::analysis
