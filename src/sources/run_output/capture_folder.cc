#include "sources/run_output/capture_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <system_error>

namespace vramscope::sources {

namespace fs = std::filesystem;

namespace {

// "rank12" -> ("rank", 12); anything else -> nullopt.
std::optional<std::pair<std::string, int64_t>> ParseLabel(const std::string& label) {
  for (const char* prefix : {"rank", "pid"}) {
    const std::string p = prefix;
    if (label.size() <= p.size() || label.compare(0, p.size(), p) != 0) continue;
    const std::string digits = label.substr(p.size());
    if (digits.size() > 12 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return {};
    return std::make_pair(p, std::stoll(digits));
  }
  return std::nullopt;
}

// ("rank3", kind) for a capture file name; nullopt for other files.
enum class Kind { kSnapshot, kSidecar, kNative, kProfile };
std::optional<std::pair<std::string, Kind>> Classify(const std::string& name) {
  static const std::pair<const char*, Kind> kSuffixes[] = {
      {".pickle", Kind::kSnapshot},      {".pickle.gz", Kind::kSnapshot},
      {".sidecar.json", Kind::kSidecar}, {".vstrace", Kind::kNative},
      {".jax.prof", Kind::kProfile},     {".xplane.pb", Kind::kProfile}};
  for (const auto& [suffix, kind] : kSuffixes) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string label = name.substr(0, name.size() - s.size());
      if (ParseLabel(label)) return std::make_pair(label, kind);
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<fs::path> CaptureFilesIn(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (Classify(name) || name == "report.sqlite" || name == "report.html") {
      out.push_back(it->path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<Capture>> FindCaptures(const fs::path& dir) {
  std::map<std::pair<int, int64_t>, Capture> by_key;  // (rank first, then pid) -> capture
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return InvalidInput(fmt::format("{}: cannot be read: {}", dir.string(), ec.message()));
  for (fs::directory_iterator end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto classified = Classify(name);
    if (!classified) continue;
    const auto [kind_name, number] = *ParseLabel(classified->first);
    Capture& c = by_key[{kind_name == "rank" ? 0 : 1, number}];
    c.label = classified->first;
    (kind_name == "rank" ? c.rank : c.pid) = number;
    switch (classified->second) {
      case Kind::kSnapshot:
        c.snapshot = it->path();
        break;
      case Kind::kSidecar:
        c.sidecar = it->path();
        break;
      case Kind::kNative:
        c.native = it->path();
        break;
      case Kind::kProfile:
        c.profile = it->path();
        break;
    }
  }
  std::vector<Capture> out;
  for (auto& [key, c] : by_key) {
    if (!c.Recording().empty()) out.push_back(std::move(c));
  }
  if (out.empty()) {
    return InvalidInput(fmt::format(
        "{}: holds no captures (expected rank<N>.pickle or pid<N>.pickle snapshots, .jax.prof or "
        ".xplane.pb framework profiles, or .vstrace native traces, as 'vramscope run' writes "
        "them)",
        dir.string()));
  }
  return out;
}

const fs::path& Capture::Recording() const {
  return !snapshot.empty() ? snapshot : !profile.empty() ? profile : native;
}

fs::path SidecarBeside(const fs::path& snapshot) {
  std::string name = snapshot.filename().string();
  for (const std::string suffix : {".pickle.gz", ".pickle", ".jax.prof", ".xplane.pb"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const fs::path candidate =
          snapshot.parent_path() / (name.substr(0, name.size() - suffix.size()) + ".sidecar.json");
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec)) return candidate;
      return {};
    }
  }
  return {};
}

}  // namespace vramscope::sources
