#include "predict/hub_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace vramscope::predict {

namespace fs = std::filesystem;

namespace {

bool EndsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// One part of a repo id: the Hub's repo-name rule (huggingface_hub's validate_repo_id).
bool RepoPart(std::string_view p) {
  if (p.empty() || p.size() > 96 || p.find("..") != std::string_view::npos) return false;
  if (p.front() == '.' || p.front() == '-' || p.back() == '.' || p.back() == '-') return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

bool Revision(std::string_view r) {
  if (r.empty() || r.size() > 255 || r.find("..") != std::string_view::npos) return false;
  if (r.front() == '/' || r.back() == '/') return false;
  return std::all_of(r.begin(), r.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
           c == '/';
  });
}

bool IsCommit(std::string_view r) {
  return r.size() == 40 && std::all_of(r.begin(), r.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

}  // namespace

std::string HubId::Text() const {
  return revision == "main" ? repo : fmt::format("{}@{}", repo, revision);
}

std::optional<HubId> ParseHubId(std::string_view text) {
  const size_t at = text.find('@');
  const std::string_view repo = text.substr(0, at);
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  if (!RepoPart(repo.substr(0, slash)) || !RepoPart(repo.substr(slash + 1))) return std::nullopt;
  HubId id{std::string(repo), "main"};
  if (at != std::string_view::npos) {
    if (!Revision(text.substr(at + 1))) return std::nullopt;
    id.revision = std::string(text.substr(at + 1));
  }
  return id;
}

bool IsHubModel(std::string_view model) {
  if (!ParseHubId(model)) return false;
  for (std::string_view suffix : {".json", ".jsonl", ".py"}) {
    if (EndsWith(model, suffix)) return false;
  }
  std::error_code ec;
  return !fs::exists(fs::path(std::string(model)), ec);
}

fs::path HubCacheDir() {
  if (std::string v = Env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = Env("HF_HOME"); !v.empty()) return fs::path(v) / "hub";
  if (std::string v = Env("XDG_CACHE_HOME"); !v.empty()) return fs::path(v) / "huggingface/hub";
  if (std::string v = Env("HOME"); !v.empty()) return fs::path(v) / ".cache/huggingface/hub";
  return {};
}

bool HubOffline() {
  std::string v = Env("HF_HUB_OFFLINE");
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

std::optional<CachedConfig> FindCachedConfig(const fs::path& cache, const HubId& id) {
  std::string folder = "models--" + id.repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = cache / folder;
  std::string commit = id.revision;
  if (std::ifstream in(repo / "refs" / id.revision); in) std::getline(in, commit);
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) {
    commit.pop_back();
  }
  if (!IsCommit(commit)) return std::nullopt;
  const fs::path config = repo / "snapshots" / commit / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return std::nullopt;  // follows the link into blobs/
  return CachedConfig{config, commit};
}

std::string HubDownloadCommand(const HubId& id) {
  std::string command = fmt::format("hf download {} config.json", id.repo);
  if (id.revision != "main") command += fmt::format(" --revision {}", id.revision);
  return command;
}

}  // namespace vramscope::predict
