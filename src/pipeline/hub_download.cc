#include "pipeline/hub_download.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "capture/child_process.h"
#include "predict/hub_cache.h"

namespace vramscope::pipeline {

namespace {

// argv: repo, revision, cache folder. The path on stdout; on failure an exit status naming the
// kind (below) and huggingface_hub's own message as the last line of stderr. cache_dir is ours,
// so that the file lands where FindCachedConfig looks, whatever the Python's environment says.
constexpr const char* kScript = R"(import sys
try:
    from huggingface_hub import hf_hub_download
except ImportError:
    sys.exit(10)
try:
    from huggingface_hub import errors as E
except ImportError:
    from huggingface_hub import utils as E
repo, revision, cache = sys.argv[1:4]
try:
    print(hf_hub_download(repo, "config.json", revision=revision, cache_dir=cache))
except Exception as e:
    kinds = [("GatedRepoError", 11), ("RepositoryNotFoundError", 12), ("RevisionNotFoundError", 13),
             ("LocalEntryNotFoundError", 15), ("EntryNotFoundError", 14)]
    code = next((c for n, c in kinds if isinstance(e, getattr(E, n, ()))), 1)
    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
    print(type(e).__name__ + (": " + lines[0] if lines else ""), file=sys.stderr)
    sys.exit(code)
)";

constexpr auto kTimeout = std::chrono::seconds(120);
constexpr size_t kMaxOutput = 64 << 10;

std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - start);
}

}  // namespace

Status FetchHubConfig(const std::string& model, const std::string& python, const Control& control) {
  if (!predict::IsHubModel(model)) return Status::Ok();
  const predict::HubId id = *predict::ParseHubId(model);
  const std::string cache = predict::HubCacheDir().string();
  if (predict::FindCachedConfig(cache, id)) return Status::Ok();
  const std::string download = predict::HubDownloadCommand(id);
  const std::string where = fmt::format("--model {}: no file of that name, and", model);
  if (predict::HubOffline()) {
    return UsageError(fmt::format(
        "{} its config.json is not in the Hugging Face cache ({}) while HF_HUB_OFFLINE is set: "
        "run '{}' online, or point HF_HUB_CACHE at a cache that holds it",
        where, cache, download));
  }
  control.Stage(fmt::format("downloading {}'s config.json from the Hugging Face Hub", id.Text()));
  auto run = capture::RunBounded({python, "-c", kScript, id.repo, id.revision, cache}, kTimeout,
                                 kMaxOutput);
  control.Finish();
  if (!run.ok()) {
    return UsageError(fmt::format(
        "{} downloading its config.json needs a Python with huggingface_hub, but {}: give "
        "--python, or run '{}'",
        where, run.status().message(), download));
  }
  const std::string error = LastLine(run->err);
  const char* endpoint = std::getenv("HF_ENDPOINT");
  switch (run->timed_out ? -1 : run->exit_code) {
    case 0:
      break;
    case -1:
      return InvalidInput(fmt::format(
          "{} downloading its config.json took over {} s (is the Hub reachable? HF_ENDPOINT: "
          "{}); run '{}', or set HF_HUB_OFFLINE=1 to use only the cache",
          where, kTimeout.count(), endpoint ? endpoint : "unset", download));
    case 10:
      return UsageError(fmt::format(
          "{} downloading its config.json needs huggingface_hub, which {} lacks: run '{} -m pip "
          "install huggingface_hub' (or give --python), or download it with '{}'",
          where, python, python, download));
    case 11:
      return InvalidInput(fmt::format(
          "--model {}: a gated model; accept its licence on https://huggingface.co/{} and set "
          "HF_TOKEN to a token of that account ({})",
          model, id.repo, error));
    case 12:
      return InvalidInput(fmt::format(
          "--model {}: no such model on the Hugging Face Hub, nor a file (a private one needs "
          "HF_TOKEN set; {})",
          model, error));
    case 13:
      return InvalidInput(fmt::format("--model {}: the Hub has no revision '{}' of {} ({})", model,
                                      id.revision, id.repo, error));
    case 14:
      return InvalidInput(fmt::format(
          "--model {}: the repository has no config.json (not a transformers model?); give a "
          "config.json or a layer list instead",
          model));
    case 15:
      return InvalidInput(fmt::format(
          "{} its config.json is neither in the Hugging Face cache ({}) nor could it be "
          "downloaded (offline? {}); run '{}' when online",
          where, cache, error, download));
    default:
      return InvalidInput(fmt::format(
          "{} downloading its config.json failed ({}{} exited with status {}); run '{}'", where,
          error.empty() ? "" : error + "; ", python, run->exit_code, download));
  }
  if (!predict::FindCachedConfig(cache, id)) {
    return InternalError(fmt::format(
        "--model {}: huggingface_hub downloaded its config.json to {}, not into the cache "
        "vramscope reads ({})",
        model, LastLine(run->out), cache));
  }
  return Status::Ok();
}

}  // namespace vramscope::pipeline
