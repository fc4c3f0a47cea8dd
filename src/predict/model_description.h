// Where a ModelSpec comes from: a preset name ("gpt2", "llama2-7b", "resnet50"), a Hugging Face
// style config.json (model_type gpt2, llama, mistral, qwen2, bert, roberta, vit), or a vramscope
// layer list (a JSON file {"layers": [...]}; docs/predict-models.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "predict/model_spec.h"

namespace vramscope::predict {

// The preset names, in the order --help lists them.
std::vector<std::string> PresetNames();

// A preset, a config.json path or a layer-list path. Errors name the file, the field (as a
// JSON pointer) and what is expected.
Result<ModelSpec> LoadModelSpec(std::string_view model);

// The same from JSON text (tests and fuzzing); `where` names the source in errors.
Result<ModelSpec> ParseModelJson(std::string_view text, std::string_view where);

}  // namespace vramscope::predict
