// Models named by their Hugging Face Hub id ("meta-llama/Llama-3.2-3B", "org/name@revision"),
// read offline from the local Hugging Face cache, laid out as huggingface_hub writes it:
//   {cache}/models--{org}--{name}/refs/{revision}            a text file holding a commit hash
//   {cache}/models--{org}--{name}/snapshots/{commit}/config.json   (often a symlink into blobs/)
// Nothing here touches the network; pipeline/hub_download.h fetches what is not cached.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace vramscope::predict {

struct HubId {
  std::string repo;      // "org/name"
  std::string revision;  // "main" unless "@revision" was given; a branch, a tag or a commit
  // "org/name" when the revision is main, else "org/name@revision" (the form the user wrote).
  std::string Text() const;
};

// "org/name" or "org/name@revision" with the Hub's characters ([A-Za-z0-9._-], no "..", no
// leading or trailing '.' or '-'; a revision may hold '/' as "refs/pr/1" does); nullopt for
// anything else. Says nothing about whether it is a file: see IsHubModel.
std::optional<HubId> ParseHubId(std::string_view text);

// True when --model names a Hub id rather than a file: it parses as one, has no .json, .jsonl
// or .py suffix, and nothing exists at that path.
bool IsHubModel(std::string_view model);

// The cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub (huggingface_hub's own order). Empty when none can be formed.
std::filesystem::path HubCacheDir();

// True when HF_HUB_OFFLINE is set to 1, ON, YES or TRUE (any case), as huggingface_hub reads it.
bool HubOffline();

struct CachedConfig {
  std::filesystem::path config;  // the snapshot's config.json (a symlink is fine)
  std::string commit;            // the snapshot's commit hash
};

// The cached config.json of `id`: the revision's ref names the commit, or a 40-hex revision
// names the snapshot itself. nullopt when it is not there, or the ref holds no commit hash, or the
// link into blobs/ is broken: all of which a download (huggingface_hub) writes afresh.
std::optional<CachedConfig> FindCachedConfig(const std::filesystem::path& cache, const HubId& id);

// "hf download org/name config.json [--revision R]": what to run to fill the cache (the CLI of
// huggingface_hub 1.x and later; 0.x called it huggingface-cli).
std::string HubDownloadCommand(const HubId& id);

}  // namespace vramscope::predict
