#include "common/json_sax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace vramscope::json_sax {
namespace {

// Every event as text, as fuzz/json_sax compares them.
struct Events {
  std::vector<std::string> seen;
  size_t stop_after = SIZE_MAX;

  bool null() { return Add("null"); }
  bool boolean(bool v) { return Add(v ? "true" : "false"); }
  bool number_integer(int64_t v) { return Add("int " + std::to_string(v)); }
  bool number_unsigned(uint64_t v) { return Add("uint " + std::to_string(v)); }
  bool number_float(double v, const std::string& literal) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return Add("float " + std::string(buf) + " " + literal);
  }
  bool string(std::string& v) { return Add("string " + v); }
  bool key(std::string& v) { return Add("key " + v); }
  bool start_object(size_t size) { return Add(size == kUnknownSize ? "{" : "{?"); }
  bool end_object() { return Add("}"); }
  bool start_array(size_t size) { return Add(size == kUnknownSize ? "[" : "[?"); }
  bool end_array() { return Add("]"); }
  bool Add(std::string e) {
    seen.push_back(std::move(e));
    return seen.size() < stop_after;
  }
};

std::vector<std::string> Read(std::string_view text) {
  Events events;
  const JsonSaxResult r = Parse(text, events);
  EXPECT_TRUE(r.ok) << text << ": " << r.message << " at " << r.position;
  return events.seen;
}

JsonSaxResult Fails(std::string_view text) {
  Events events;
  const JsonSaxResult r = Parse(text, events);
  EXPECT_FALSE(r.ok) << text;
  EXPECT_FALSE(r.stopped) << text;
  EXPECT_FALSE(r.message.empty()) << text;
  return r;
}

TEST(JsonSax, EventsOfAProfilerEvent) {
  EXPECT_EQ(Read(R"({"traceEvents": [{"ph": "i", "ts": 1.5e3, "args": {"Bytes": -512}}]})"),
            (std::vector<std::string>{"{", "key traceEvents", "[", "{", "key ph", "string i",
                                      "key ts", "float 1500 1.5e3", "key args", "{", "key Bytes",
                                      "int -512", "}", "}", "]", "}"}));
}

TEST(JsonSax, IntegersAsNlohmannTypesThem) {
  EXPECT_EQ(Read("[0, -0, 18446744073709551615, -9223372036854775808]"),
            (std::vector<std::string>{"[", "uint 0", "int 0", "uint 18446744073709551615",
                                      "int -9223372036854775808", "]"}));
  // Past 64 bits: a float, with its literal.
  EXPECT_EQ(Read("18446744073709551616"),
            (std::vector<std::string>{"float 1.84467e+19 18446744073709551616"}));
  EXPECT_EQ(Read("-9223372036854775809"),
            (std::vector<std::string>{"float -9.22337e+18 -9223372036854775809"}));
  // An underflow is zero, as strtod makes it.
  EXPECT_EQ(Read("1e-400"), (std::vector<std::string>{"float 0 1e-400"}));
}

TEST(JsonSax, StringsDecoded) {
  EXPECT_EQ(
      Read(R"(["a\"\\\/\b\f\n\r\t", "\u00e9\ud83d\ude00", "caf)"
           "\xc3\xa9\"]"),
      (std::vector<std::string>{"[", "string a\"\\/\b\f\n\r\t", "string \xc3\xa9\xf0\x9f\x98\x80",
                                "string caf\xc3\xa9", "]"}));
  // Long strings cross the 16-byte scan with escapes and multi-byte characters on both sides.
  const std::string long_text(40, 'x');
  EXPECT_EQ(Read("\"" + long_text + "\\n" + long_text + "\xc3\xa9" + long_text + "\""),
            (std::vector<std::string>{"string " + long_text + "\n" + long_text + "\xc3\xa9" +
                                      long_text}));
}

TEST(JsonSax, ByteOrderMarkAndTrailingNulAsNlohmannReadsThem) {
  EXPECT_EQ(Read("\xef\xbb\xbf[1]"), (std::vector<std::string>{"[", "uint 1", "]"}));
  EXPECT_EQ(Read(std::string("[1] \0\0garbage", 14)),
            (std::vector<std::string>{"[", "uint 1", "]"}));
}

TEST(JsonSax, ErrorsSayWhichByte) {
  // The byte that is wrong, counted from 1.
  JsonSaxResult r = Fails(R"({"traceEvents": [tru]})");
  EXPECT_EQ(r.position, 21u);  // the ']' where 'e' should be
  EXPECT_FALSE(r.ended_early);
  r = Fails("[1, 2x");
  EXPECT_EQ(r.position, 6u);
  EXPECT_FALSE(r.ended_early);
  EXPECT_EQ(r.message, "expected ',' or ']' after an array item");
  r = Fails("[1] x");
  EXPECT_EQ(r.position, 5u);
  EXPECT_EQ(r.message, "unexpected content after the JSON value");
  // Cut off: the byte just past the end, and ended_early.
  for (const std::string_view cut :
       {"", "[", "[1,", "{\"a\"", "{\"a\":", "\"abc", "tr", "-", "1.", "1e", "\"\\u12", "\"\\"}) {
    r = Fails(cut);
    EXPECT_EQ(r.position, cut.size() + 1) << cut;
    EXPECT_TRUE(r.ended_early) << cut;
  }
}

TEST(JsonSax, RejectsWhatStrictJsonRejects) {
  for (const std::string_view bad : {"01",
                                     "-a",
                                     "1.e5",
                                     ".5",
                                     "+1",
                                     "[1,]",
                                     "{\"a\":1,}",
                                     "{a:1}",
                                     "'a'",
                                     "[1 2]",
                                     "\"\\x\"",
                                     "\"\\ud800\"",
                                     "\"\\udc00\"",
                                     "\"\\ud800\\u0041\"",
                                     "1e999",
                                     "-1e999",
                                     "nul",
                                     "True",
                                     "[\"\x01\"]",
                                     "\"\xc0\xaf\"",
                                     "\"\xed\xa0\x80\"",
                                     "\"\xf4\x90\x80\x80\"",
                                     "\"\x80\"",
                                     "{\"a\" 1}",
                                     "[}",
                                     "{]"}) {
    Fails(bad);
  }
}

TEST(JsonSax, TheConsumerStopsIt) {
  Events events;
  events.stop_after = 3;
  const JsonSaxResult r = Parse("[1, 2, 3, 4]", events);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(events.seen.size(), 3u);
}

TEST(JsonSax, DeepNestingNeedsNoStack) {
  const std::string deep = std::string(1 << 20, '[') + std::string(1 << 20, ']');
  Events events;
  EXPECT_TRUE(Parse(deep, events).ok);
  EXPECT_EQ(events.seen.size(), size_t{2} << 20);
}

// ParseStream's source: the text in chunks of `chunk` bytes.
class Chunks : public Source {
 public:
  Chunks(std::string_view text, size_t chunk) : text_(text), chunk_(chunk) {}
  size_t Read(char* out, size_t size) override {
    const size_t n = std::min({size, chunk_, text_.size() - at_});
    std::copy_n(text_.data() + at_, n, out);
    at_ += n;
    return n;
  }

 private:
  std::string_view text_;
  size_t chunk_, at_ = 0;
};

// Pulled through ParseStream in chunks of every size from 1 byte up (so that each token is cut
// at each of its bytes, BOM, escapes, surrogate pairs and UTF-8 sequences included), a text gives
// the events and the result Parse gives, error positions counted from the whole input's start.
TEST(JsonSax, StreamedInChunksReadsAsTheWholeText) {
  const std::string long_string(3 << 20, 'x');  // longer than the stream's buffer
  const std::string texts[] = {
      "\xEF\xBB\xBF"
      R"({"traceEvents": [{"ph": "i", "ts": 1.5e3, "args": {"Bytes": -512}}]})",
      R"(["\u00e9\ud83d\ude00 caf\u00e9 \n\"", "café ✓ 😀", 12345678901234567890123, -0.25e-3])",
      "[\"" + long_string + "\", 7]",
      R"({"a": [1, 2, {"b": null}], "c": true, "d": false})",
      R"({"a": [1, 2,)",      // ends early
      R"(["\ud83d\u0041"])",  // a high surrogate without its low one
      R"({"a": 01})",         // a leading zero
      "[1e400]",              // overflows a double
      "[\"\xC3\"]",           // invalid UTF-8
      R"([1] x)",             // content after the value
  };
  for (const std::string& text : texts) {
    Events whole;
    const JsonSaxResult expected = Parse(text, whole);
    for (const size_t chunk :
         {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{7}, size_t{64}, size_t{1} << 20}) {
      Chunks source(text, chunk);
      Events streamed;
      ParseOptions options;
      options.stream_chunk = chunk < 64 ? 16 : options.stream_chunk;  // the smallest buffer too
      const JsonSaxResult got = ParseStream(source, streamed, options);
      const std::string what = text.substr(0, 40) + " in chunks of " + std::to_string(chunk);
      EXPECT_EQ(got.ok, expected.ok) << what;
      EXPECT_EQ(got.position, expected.position) << what;
      EXPECT_EQ(got.ended_early, expected.ended_early) << what;
      EXPECT_EQ(got.message, expected.message) << what;
      EXPECT_EQ(streamed.seen, whole.seen) << what;
    }
  }
}

// A mapped input hears how far the reader is, between tokens, about every progress_step bytes:
// what it may release.
TEST(JsonSax, ProgressSaysHowMuchIsRead) {
  std::string text = "[";
  for (int i = 0; i < 10000; ++i) text += R"({"ph": "i", "ts": 12345},)";
  text += "0]";
  ParseOptions options;
  options.progress_step = 4096;
  std::vector<uint64_t> done;
  options.progress = [&](uint64_t at) { done.push_back(at); };
  Events events;
  ASSERT_TRUE(Parse(text, events, options).ok);
  ASSERT_GE(done.size(), text.size() / 4096 - 1);
  for (size_t i = 1; i < done.size(); ++i) {
    EXPECT_GE(done[i] - done[i - 1], 4096u);
    EXPECT_LT(done[i] - done[i - 1], 4096u + 64);  // a token at most past the step
  }
  EXPECT_LE(done.back(), text.size());
}

}  // namespace
}  // namespace vramscope::json_sax
