// Differential: vramscope's JSON reader (common/json_sax.h) against nlohmann::json's strict SAX
// parser on the same bytes. Both must accept or reject alike, and on acceptance hand over the
// same events with the same values (numbers by kind and value, floats by literal too). Then the
// reader pulling the same bytes through ParseStream in chunks of 1 to 16 bytes (sizes from the
// input's bytes) must give the same events and the same result, error position included. Any
// disagreement aborts, so libFuzzer keeps the input.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_sax.h"

namespace {

// Every event as one line of text: the two readers' transcripts must be equal.
struct Transcript {
  using json = nlohmann::json;
  std::vector<std::string> events;

  bool null() { return Add("null"); }
  bool boolean(bool v) { return Add(v ? "true" : "false"); }
  bool number_integer(int64_t v) { return Add("int " + std::to_string(v)); }
  bool number_unsigned(uint64_t v) { return Add("uint " + std::to_string(v)); }
  bool number_float(double v, const std::string& literal) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%a", v);
    return Add("float " + std::string(buf) + " " + literal);
  }
  bool string(std::string& v) { return Add("string " + v); }
  bool key(std::string& v) { return Add("key " + v); }
  bool binary(json::binary_t&) { return Add("binary"); }
  bool start_object(std::size_t) { return Add("{"); }
  bool end_object() { return Add("}"); }
  bool start_array(std::size_t) { return Add("["); }
  bool end_array() { return Add("]"); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    return false;
  }
  bool Add(std::string e) {
    events.push_back(std::move(e));
    return true;
  }
};

// The input in small chunks whose sizes the input's own bytes decide.
class ChunkedSource : public vramscope::json_sax::Source {
 public:
  explicit ChunkedSource(std::string_view text) : text_(text) {}
  size_t Read(char* out, size_t size) override {
    if (at_ == text_.size()) return 0;
    const size_t n = std::min(
        {size, text_.size() - at_, size_t{1} + static_cast<unsigned char>(text_[at_]) % 16});
    std::copy_n(text_.data() + at_, n, out);
    at_ += n;
    return n;
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Transcript theirs;
  bool their_ok = false;
  try {
    their_ok = nlohmann::json::sax_parse(text.begin(), text.end(), &theirs,
                                         nlohmann::json::input_format_t::json, /*strict=*/true,
                                         /*ignore_comments=*/false);
  } catch (const std::exception&) {
    their_ok = false;
  }
  Transcript ours;
  const vramscope::json_sax::JsonSaxResult result = vramscope::json_sax::Parse(text, ours);
  if (result.ok != their_ok) {
    std::fprintf(stderr, "accept differs: ours %d (%s at %zu), nlohmann %d\n", result.ok,
                 result.message.c_str(), result.position, their_ok);
    std::abort();
  }
  if (result.ok && ours.events != theirs.events) {
    for (size_t i = 0; i < std::max(ours.events.size(), theirs.events.size()); ++i) {
      const std::string a = i < ours.events.size() ? ours.events[i] : "(none)";
      const std::string b = i < theirs.events.size() ? theirs.events[i] : "(none)";
      if (a != b) {
        std::fprintf(stderr, "event %zu differs: ours '%s', nlohmann '%s'\n", i, a.c_str(),
                     b.c_str());
        break;
      }
    }
    std::abort();
  }
  // Streamed in chunks: the same transcript and the same result.
  Transcript streamed;
  ChunkedSource source(text);
  vramscope::json_sax::ParseOptions small;
  small.stream_chunk = 32;  // tokens longer than the buffer make it grow, as 1 MiB ones would
  const vramscope::json_sax::JsonSaxResult chunked =
      vramscope::json_sax::ParseStream(source, streamed, small);
  if (chunked.ok != result.ok || chunked.stopped != result.stopped ||
      chunked.position != result.position || chunked.ended_early != result.ended_early ||
      chunked.message != result.message || streamed.events != ours.events) {
    std::fprintf(stderr, "streamed differs: ok %d/%d at %zu/%zu (%s / %s), %zu/%zu events\n",
                 chunked.ok, result.ok, chunked.position, result.position, chunked.message.c_str(),
                 result.message.c_str(), streamed.events.size(), ours.events.size());
    std::abort();
  }
  // An error says what, and where: a byte of the input, or just past its end when it ended early.
  if (!result.ok && !result.stopped &&
      (result.message.empty() || result.position == 0 ||
       result.position != (result.ended_early ? size + 1 : result.position) ||
       (!result.ended_early && result.position > size))) {
    std::fprintf(stderr, "an error must say where and what: %zu (ended early %d) '%s'\n",
                 result.position, result.ended_early, result.message.c_str());
    std::abort();
  }
  return 0;
}
