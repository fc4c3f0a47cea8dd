// NearestPreset: the "did you mean" of an unknown --model word.
#include <algorithm>
#include <cctype>
#include <numeric>
#include <vector>

#include "predict/model_description.h"

namespace vramscope::predict {

namespace {

// Lower case, without the separators people write in model names in many ways.
std::string Folded(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == '-' || c == '_' || c == '.' || c == ' ') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// Levenshtein distance (the names are short: a row of the table at a time).
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> NearestPreset(std::string_view name) {
  const std::string folded = Folded(name);
  // Two edits in a name of four letters would make most short names "near" one another.
  const size_t allowed = folded.size() >= 6 ? 2 : folded.size() >= 4 ? 1 : 0;
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  for (const std::string& preset : PresetNames()) {
    const size_t d = EditDistance(folded, Folded(preset));
    if (d < best_distance) {
      best_distance = d;
      best = preset;
    }
  }
  return best;
}

}  // namespace vramscope::predict
