// Where a ModelSpec comes from: a preset name ("gpt2", "llama2-7b", "resnet50"), a Hugging Face
// style config.json (model_type gpt2, llama, mistral, qwen2, bert, roberta, vit), or a vramscope
// layer list (a JSON file {"layers": [...]}; docs/predict-models.md), or the config.json of a
// Hugging Face Hub id in the local cache.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "predict/hub_cache.h"
#include "predict/model_spec.h"

namespace vramscope::predict {

// The preset names, in the order --help lists them.
std::vector<std::string> PresetNames();

// The preset a mistyped name most likely meant ("llama-3-8b", "Llama2_7B", "gpt-2" -> the preset
// that differs only in case, '-', '_' and '.', or by at most two letters after that), or nothing
// when no preset is that close (preset_suggestion.cc).
std::optional<std::string> NearestPreset(std::string_view name);

// A preset, a config.json path, a layer-list path, or a Hugging Face Hub id ("org/name",
// "org/name@revision") whose config.json is in the local cache (predict/hub_cache.h; offline:
// a missing one is an error saying how to download it). Errors name the file, the field (as a
// JSON pointer) and what is expected.
Result<ModelSpec> LoadModelSpec(std::string_view model);

// A Hub id's config.json found in the cache, labelled "org/name@<12 hex of the commit>".
Result<ModelSpec> LoadHubConfig(const HubId& id, const CachedConfig& found);

// The same from JSON text (tests and fuzzing); `where` names the source in errors.
Result<ModelSpec> ParseModelJson(std::string_view text, std::string_view where);

}  // namespace vramscope::predict
