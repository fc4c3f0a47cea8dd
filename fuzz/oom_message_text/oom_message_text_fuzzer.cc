// libFuzzer target for `vramscope explain`: finds the out-of-memory messages in arbitrary text,
// explains each and renders the explanation as text and JSON. Checks that every figure read is a
// well-formed range (lo <= hi) and never NVML's "not available" (2^64 B), that a message's line
// lies within the text, that the verdict has a sentence and its holders are well-formed,
// non-negative and ranked, and that the renderings are produced; ASan/UBSan catch the rest. The
// text's size bounds every search (oom_message_text.h), so no input may take long.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target oom_message_text_fuzzer).
// Run:   oom_message_text_fuzzer -max_len=8192
// -dict=src/sources/oom_message/oom_message_text_fuzzer.dict
//                                fuzz/oom_message_text/corpus
#include <cstddef>
#include <cstdint>
#include <string>

#include "analysis/oom_message_explain.h"
#include "report/explain_output.h"
#include "sources/oom_message/oom_message_text.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

void CheckFigure(const std::optional<vramscope::model::PrintedBytes>& b) {
  if (b) Check(b->lo <= b->hi && !b->text.empty() && !b->IsNotAvailable());
}

void CheckVerdict(const vramscope::analysis::OomVerdict& v) {
  Check(!v.sentence.empty());
  for (size_t i = 0; i < v.holdings.size(); ++i) {
    const auto& h = v.holdings[i];
    Check(0 <= h.bytes.lo && h.bytes.lo <= h.bytes.hi);
    if (i > 0) Check(v.holdings[i - 1].bytes.Mid() >= h.bytes.Mid());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t left_out = 0;
  const auto found = vramscope::sources::FindOomMessages(text, 16, &left_out);
  size_t lines = 1;
  for (const char c : text) lines += c == '\n' || c == '\r' ? 1 : 0;
  vramscope::report::ExplainReport report;
  report.source = "fuzz";
  report.left_out = left_out;
  for (const auto& m : found) {
    Check(m.line >= 1 && m.line <= lines);
    for (const auto& f : vramscope::model::OomMessageFigures()) CheckFigure(m.*f.field);
    vramscope::analysis::ExplainOptions options;
    if (!m.processes.empty()) options.alloc_conf = "expandable_segments:True";
    vramscope::report::ExplainedMessage em;
    em.explanation = vramscope::analysis::ExplainOomMessage(m, options);
    for (const auto& s : em.explanation.shares) Check(s.bytes.lo <= s.bytes.hi);
    for (const auto& p : m.processes) Check(!p.in_use.IsNotAvailable());
    CheckVerdict(em.explanation.verdict);
    em.lines.push_back(m.line);
    report.messages.push_back(std::move(em));
  }
  const std::string rendered = vramscope::report::RenderExplainText(report);
  Check(!rendered.empty());
  // As the CLI prints it: invalid UTF-8 from the text is replaced.
  Check(!vramscope::report::RenderExplainJson(report)
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
             .empty());
  return 0;
}
