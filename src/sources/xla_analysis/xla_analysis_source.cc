#include "sources/xla_analysis/xla_analysis_source.h"

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"
#include "model/limits.h"

namespace vramscope::xla_analysis {

namespace {

using json = nlohmann::json;
using model::Action;
using model::Category;

constexpr std::string_view kFormat = "xla-memory-analysis";
constexpr int64_t kVersion = 1;
// The document is one small tree (a leaf per array of the step's pytrees): refuse what no step
// writes before building it, and nesting deeper than the format's before parsing.
constexpr size_t kMaxDocumentBytes = size_t{256} << 20;
constexpr int kMaxDepth = 16;
constexpr size_t kMaxLeaves = 4'000'000;
// Synthetic addresses: one per buffer, 512 B apart, never reused.
constexpr uint64_t kAddressStep = 512;
constexpr const char* kWhat =
    "write it again with vramscope.xla.save_memory_analysis (docs/guide/report.md, JAX)";

// The deepest nesting of `text`'s arrays and objects, stopping once past `limit`.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

struct Leaf {
  std::string path;
  uint64_t bytes = 0;
  Category category = Category::kUnknown;
  std::string rule;
  std::optional<uint64_t> alias;  // arguments: aliased_output; outputs: aliases_argument
};

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  Status Error(const std::string& where, const std::string& what) const {
    return InvalidInput(fmt::format("{}: {}: {}; {}", path_, where, what, kWhat));
  }

  Result<uint64_t> Bytes(const json& object, const char* key, const std::string& where,
                         bool required = true) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
      if (!required) return uint64_t{0};
      return Error(where, fmt::format("\"{}\" is missing", key));
    }
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
      return Error(where,
                   fmt::format("\"{}\" is {}, not a byte count", key, ForMessage(it->dump(), 40)));
    }
    const auto value = it->get<uint64_t>();
    if (value > model::kMaxPlausibleBytes) {
      return Error(where, fmt::format("\"{}\" is {} bytes, more than 1 PiB", key, value));
    }
    return value;
  }

  // The leaves under `key`; `alias_key` indexes the `other_count` leaves of `other` (the outputs
  // for an argument's aliased_output, the arguments for an output's aliases_argument).
  Result<std::vector<Leaf>> Leaves(const json& document, const char* key, const char* alias_key,
                                   const char* other, size_t other_count) const {
    const auto it = document.find(key);
    if (it == document.end() || !it->is_array()) {
      return Error(fmt::format("\"{}\"", key), "missing or not a list of leaves");
    }
    if (it->size() > kMaxLeaves) {
      return Error(fmt::format("\"{}\"", key),
                   fmt::format("{} leaves, more than any step holds", it->size()));
    }
    std::vector<Leaf> leaves;
    leaves.reserve(it->size());
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      const std::string where = fmt::format("{}[{}]", key, i);
      if (!v.is_object()) return Error(where, "is not an object");
      Leaf leaf;
      const auto path = v.find("path");
      if (path == v.end() || !path->is_string()) return Error(where, "\"path\" is not a string");
      leaf.path = path->get<std::string>();
      ASSIGN_OR_RETURN(leaf.bytes, Bytes(v, "bytes", where));
      const auto category = v.find("category");
      if (category == v.end() || !category->is_string()) {
        return Error(where, "\"category\" is not a string");
      }
      const auto parsed = model::ParseCategory(category->get<std::string>());
      if (!parsed) {
        return Error(where,
                     fmt::format("category \"{}\" is not one of vramscope's (weight, gradient, "
                                 "optimizer_state, activation, input, workspace, temporary, "
                                 "unknown)",
                                 ForMessage(category->get<std::string>(), 40)));
      }
      leaf.category = *parsed;
      if (const auto rule = v.find("rule"); rule != v.end() && rule->is_string()) {
        leaf.rule = rule->get<std::string>();
      }
      if (const auto alias = v.find(alias_key); alias != v.end() && !alias->is_null()) {
        if (!alias->is_number_unsigned() || alias->get<uint64_t>() >= other_count) {
          return Error(where,
                       fmt::format("\"{}\" is {}, not the index of one of the {} {}", alias_key,
                                   ForMessage(alias->dump(), 40), other_count, other));
        }
        leaf.alias = alias->get<uint64_t>();
      }
      leaves.push_back(std::move(leaf));
    }
    return leaves;
  }

 private:
  const std::string& path_;
};

// The rules' sentences the writer put in "rules", by name.
std::map<std::string, std::string> Rules(const json& document) {
  std::map<std::string, std::string> rules;
  const auto it = document.find("rules");
  if (it == document.end() || !it->is_object()) return rules;
  for (const auto& [name, sentence] : it->items()) {
    if (sentence.is_string()) rules[name] = sentence.get<std::string>();
  }
  return rules;
}

std::string StringField(const json& document, const char* key) {
  const auto it = document.find(key);
  return it != document.end() && it->is_string() ? ForMessage(it->get<std::string>(), 80)
                                                 : std::string();
}

// One line per (category, rule) that decided leaves, with their count and bytes.
void RuleNotes(const std::vector<Leaf>& leaves, const char* which,
               const std::map<std::string, std::string>& rules, std::vector<std::string>& notes) {
  std::map<std::pair<Category, std::string>, std::pair<uint64_t, uint64_t>> by_rule;
  for (const Leaf& l : leaves) {
    auto& [count, bytes] = by_rule[{l.category, l.rule}];
    ++count;
    bytes += l.bytes;
  }
  for (const auto& [key, totals] : by_rule) {
    const auto sentence = rules.find(key.second);
    const std::string rule = sentence != rules.end() ? ForMessage(sentence->second, 160)
                             : key.second.empty()    ? std::string("no rule named")
                                                     : ForMessage(key.second, 40);
    notes.push_back(fmt::format(
        "{} {} {} ({}) {} {}: {}", FormatCount(totals.first), which,
        totals.first == 1 ? "leaf" : "leaves", FormatBytes(static_cast<int64_t>(totals.second)),
        totals.first == 1 ? "is" : "are", model::CategoryName(key.first), rule));
  }
}

}  // namespace

bool IsXlaMemoryAnalysis(std::string_view json_text) {
  size_t i = 0;
  auto space = [&] {
    while (i < json_text.size() && (json_text[i] == ' ' || json_text[i] == '\n' ||
                                    json_text[i] == '\r' || json_text[i] == '\t')) {
      ++i;
    }
  };
  space();
  if (i >= json_text.size() || json_text[i] != '{') return false;
  ++i;
  space();
  return json_text.substr(i).starts_with("\"vramscope_format\"");
}

Result<model::Trace> TraceFromXlaMemoryAnalysis(std::string_view json_text,
                                                const std::string& path) {
  const Reader reader(path);
  if (json_text.size() > kMaxDocumentBytes) {
    return reader.Error("the file",
                        fmt::format("{} is more than an XLA memory analysis holds",
                                    FormatBytes(static_cast<int64_t>(json_text.size()))));
  }
  if (NestingDepth(json_text, kMaxDepth) > kMaxDepth) {
    return reader.Error("the file", fmt::format("nested deeper than {} levels", kMaxDepth));
  }
  const json document = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) {
    return InvalidInput(fmt::format(
        "{}: invalid JSON (an XLA memory analysis from vramscope.xla, truncated or damaged); {}",
        path, kWhat));
  }
  if (!document.is_object()) return reader.Error("the top level", "not an object");
  const auto format = document.find("vramscope_format");
  if (format == document.end() || !format->is_string() || format->get<std::string>() != kFormat) {
    return reader.Error(
        "\"vramscope_format\"",
        fmt::format("not \"{}\"; this reader reads vramscope.xla's files", kFormat));
  }
  const auto version = document.find("version");
  if (version == document.end() || !version->is_number_integer()) {
    return reader.Error("\"version\"", "missing or not an integer");
  }
  if (version->get<int64_t>() != kVersion) {
    return Unsupported(fmt::format(
        "{}: an XLA memory analysis of version {}; this vramscope reads version {} (a newer "
        "vramscope wrote it: use the vramscope that wrote it, or upgrade)",
        path, version->get<int64_t>(), kVersion));
  }
  const auto stats = document.find("memory_analysis");
  if (stats == document.end() || !stats->is_object()) {
    return reader.Error("\"memory_analysis\"", "missing or not an object");
  }
  ASSIGN_OR_RETURN(const uint64_t argument_size,
                   reader.Bytes(*stats, "argument_size_in_bytes", "memory_analysis"));
  ASSIGN_OR_RETURN(const uint64_t output_size,
                   reader.Bytes(*stats, "output_size_in_bytes", "memory_analysis"));
  ASSIGN_OR_RETURN(const uint64_t alias_size,
                   reader.Bytes(*stats, "alias_size_in_bytes", "memory_analysis"));
  ASSIGN_OR_RETURN(const uint64_t temp_size,
                   reader.Bytes(*stats, "temp_size_in_bytes", "memory_analysis"));
  ASSIGN_OR_RETURN(const uint64_t xla_peak,
                   reader.Bytes(*stats, "peak_memory_in_bytes", "memory_analysis", false));
  ASSIGN_OR_RETURN(const uint64_t code_size,
                   reader.Bytes(*stats, "generated_code_size_in_bytes", "memory_analysis", false));

  const auto count = [&](const char* key) {
    const auto it = document.find(key);
    return it != document.end() && it->is_array() ? it->size() : size_t{0};
  };
  ASSIGN_OR_RETURN(
      std::vector<Leaf> arguments,
      reader.Leaves(document, "arguments", "aliased_output", "outputs", count("outputs")));
  ASSIGN_OR_RETURN(std::vector<Leaf> outputs, reader.Leaves(document, "outputs", "aliases_argument",
                                                            "arguments", count("arguments")));
  uint64_t argument_leaves = 0, output_leaves = 0, new_output_leaves = 0;
  for (const Leaf& l : arguments) argument_leaves += l.bytes;
  for (const Leaf& l : outputs) {
    output_leaves += l.bytes;
    if (!l.alias) new_output_leaves += l.bytes;
  }
  if (argument_leaves + output_leaves + temp_size > model::kMaxPlausibleLiveBytes) {
    return reader.Error("the leaves", "more than 64 PiB in all");
  }

  model::Trace t;
  t.source.path = path;
  t.source.format = "XLA memory analysis of a jitted step (vramscope.xla)";
  const std::string jax_version = [&] {
    const auto producer = document.find("producer");
    return producer != document.end() && producer->is_object() ? StringField(*producer, "jax")
                                                               : std::string();
  }();
  const std::string backend = StringField(document, "backend");
  const std::string device_kind = StringField(document, "device_kind");
  const std::string function = StringField(document, "function");
  t.source.generation = jax_version.empty() ? "jax (version not recorded)" : "jax " + jax_version;
  t.source.generation_evidence =
      fmt::format("\"vramscope_format\": \"{}\", version {}; compiled for {} ({})", kFormat,
                  kVersion, backend.empty() ? "an unnamed backend" : backend,
                  device_kind.empty() ? "device kind not recorded" : device_kind);

  model::Events& ev = t.events;
  uint64_t next_address = 0;
  auto alloc = [&](uint64_t bytes, Category category, const std::string& name,
                   const std::string& operation) {
    const auto index = static_cast<uint32_t>(ev.count());
    ev.category.emplace(index, category);
    ev.tensor_name.emplace(index, t.strings.Intern(name));
    if (!operation.empty()) ev.operation.emplace(index, t.strings.Intern(operation));
    next_address += kAddressStep;
    ev.Push(Action::kAlloc, 0, next_address, bytes, 0, model::kNoTime, model::kEmptyStack);
    return next_address;
  };
  uint64_t zero_byte_leaves = 0;
  for (const Leaf& l : arguments) {
    if (l.bytes == 0) {
      ++zero_byte_leaves;
      continue;
    }
    alloc(l.bytes, l.category, l.path, "");
  }
  const std::string step_name = function.empty() ? "the jitted step" : function;
  uint64_t temp_address = 0;
  if (temp_size > 0) {
    temp_address =
        alloc(temp_size, Category::kTemporary,
              "XLA temp buffer (the step's activations, gradients and scratch)", step_name);
  }
  for (const Leaf& l : outputs) {
    if (l.alias) continue;  // written into its argument's buffer
    if (l.bytes == 0) {
      ++zero_byte_leaves;
      continue;
    }
    alloc(l.bytes, l.category, l.path, step_name);
  }
  // output_size_in_bytes counts the output tuple's index tables beside the leaves (a pointer per
  // element of each tuple) and the aliased leaves.
  const uint64_t output_tables =
      output_size > output_leaves ? output_size - output_leaves : uint64_t{0};
  if (output_tables > 0) {
    alloc(output_tables, Category::kTemporary, "XLA output tuple tables", step_name);
  }
  if (temp_size > 0) {
    ev.Push(Action::kFreeRequested, 0, temp_address, temp_size, 0, model::kNoTime,
            model::kEmptyStack);
    ev.Push(Action::kFreeCompleted, 0, temp_address, temp_size, 0, model::kNoTime,
            model::kEmptyStack);
  }
  if (ev.count() > 0) {
    t.devices = {0};
    t.device_event_ranges = {{0, ev.count()}};
  }
  t.start_levels = {model::StartLevels{}};  // device 0, nothing before the step

  model::TraceFacts& f = t.facts;
  f.has_trace = ev.count() > 0;
  f.sizes_are_block_sizes = true;  // XLA's buffer bytes; no caching allocator rounds them
  std::vector<std::string>& notes = f.notes;
  notes.push_back(fmt::format(
      "one execution of {} as XLA's compiler accounts for it (compiled.memory_analysis(), jax "
      "{}): its arguments {}, XLA's temp buffer {}, its new outputs {}; no stacks, times or "
      "addresses (device 0 stands for the one device it was compiled for)",
      step_name, jax_version.empty() ? "?" : jax_version,
      FormatBytes(static_cast<int64_t>(argument_leaves)),
      FormatBytes(static_cast<int64_t>(temp_size)),
      FormatBytes(static_cast<int64_t>(new_output_leaves + output_tables))));
  RuleNotes(arguments, "argument", Rules(document), notes);
  RuleNotes(outputs, "output", Rules(document), notes);
  notes.push_back(
      "the temp buffer is one allocation holding the step's activations, gradients and scratch "
      "together: the memory analysis does not split it (shown as temporary)");
  if (alias_size > 0) {
    notes.push_back(fmt::format(
        "{} of outputs are written into donated arguments' buffers (alias_size_in_bytes): "
        "they take no new memory",
        FormatBytes(static_cast<int64_t>(alias_size))));
  }
  if (argument_leaves != argument_size) {
    notes.push_back(fmt::format(
        "the argument leaves add up to {} but XLA counts {} for the arguments (jit drops unused "
        "arguments; a file edited by hand?)",
        FormatBytes(static_cast<int64_t>(argument_leaves)),
        FormatBytes(static_cast<int64_t>(argument_size))));
  }
  if (output_leaves > output_size) {
    notes.push_back(
        fmt::format("the output leaves add up to {}, more than the {} XLA counts for the outputs",
                    FormatBytes(static_cast<int64_t>(output_leaves)),
                    FormatBytes(static_cast<int64_t>(output_size))));
  }
  if (xla_peak > 0) {
    notes.push_back(fmt::format(
        "XLA's own peak from buffer liveness (peak_memory_in_bytes) is {}; the peak here counts "
        "the temp buffer whole, as the runtime allocates it for the execution",
        FormatBytes(static_cast<int64_t>(xla_peak))));
  }
  if (code_size > 0) {
    notes.push_back(fmt::format("the compiled code takes {} of device memory beside the buffers",
                                FormatBytes(static_cast<int64_t>(code_size))));
  }
  if (backend == "cpu") {
    t.source.device_type = "cpu";
    notes.push_back(
        "compiled for the CPU: a GPU compile fuses, lays out and rematerialises differently and "
        "adds cuBLAS/cuDNN workspaces, so the temp buffer on a GPU differs");
  }
  notes.push_back(
      "sizes are XLA's buffer bytes: the BFC allocator's 256 B rounding and XLA's up-front "
      "reservation (XLA_PYTHON_CLIENT_PREALLOCATE) are not in this file");
  if (zero_byte_leaves > 0) {
    notes.push_back(fmt::format("{} empty leaves (0 bytes) take no memory and are not shown",
                                FormatCount(static_cast<int64_t>(zero_byte_leaves))));
  }
  model::BuildAllocations(t);
  return t;
}

}  // namespace vramscope::xla_analysis
