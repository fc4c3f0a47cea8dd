// `predict --model org/name[@revision]` when the Hub id's config.json is not in the local
// Hugging Face cache: it is downloaded into that cache by huggingface_hub, run by the --python
// Python, so that HF_ENDPOINT, HF_TOKEN (gated models) and the user's own login apply as they do
// to transformers. The predictor then reads it from the cache (predict/hub_cache.h).
#pragma once

#include <string>

#include "common/progress.h"
#include "common/status.h"

namespace vramscope::pipeline {

// Ok at once when `model` is no Hub id or is cached. Otherwise runs `python` (at most 120 s) to
// download config.json. Every failure is one line saying what, why and what to do:
//   HF_HUB_OFFLINE set, no Python, no huggingface_hub           -> UsageError
//   not on the Hub, no such revision or file, gated, a timeout  -> InvalidInput
Status FetchHubConfig(const std::string& model, const std::string& python, const Control& control);

}  // namespace vramscope::pipeline
