// Unit tests for the pickle reader's ListSink: a list's items consumed while it is parsed, and
// the storage of a consumed batch reclaimed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "sources/pickle/pickle_reader.h"

// ============================================================================================
// ListSink: consuming a list's items while it is parsed, and reclaiming their storage
// ============================================================================================
namespace vramscope::pickle {
namespace {

using ::testing::HasSubstr;

// Consumes the items of any list that sits right after the key "records".
class RecordSink : public ListSink {
 public:
  bool Wants(const Document& doc, std::span<const Value> context, Value) override {
    return !context.empty() && doc.AsString(context.back()) == "records";
  }
  Status Consume(const Document& doc, std::span<const Value> context, Value,
                 std::span<const Value> items) override {
    for (const Value item : items) {
      // Each record is {"n": int, "tag": <shared list of str>}; read them fully now.
      const auto n = doc.AsInt64(doc.Get(item, "n"));
      if (!n) return InvalidInput("record without n");
      seen.push_back(*n);
      std::string tags;
      for (const Value t : doc.Items(doc.Get(item, "tag"))) tags += *doc.AsString(t);
      tag_text.push_back(tags);
    }
    return Status::Ok();
  }
  void Reclaimed(uint64_t, std::span<const std::pair<uint64_t, uint64_t>> moved) override {
    ++reclaims;
    kept += moved.size();
  }
  std::vector<int64_t> seen;
  std::vector<std::string> tag_text;
  int reclaims = 0;
  size_t kept = 0;
};

// {"records": [ {"n": i, "tag": T(i)} for i in range(n) ], "after": T(0)} where T(i) is one of
// three shared lists, the third first created in the middle of the records (inside a batch).
// With `fresh_tags`, every record makes a list of its own instead (memoized, as pickle does),
// of which only the first is read back (by "after").
std::vector<uint8_t> RecordsPickle(int n, bool fresh_tags = false) {
  std::string out = "\x80\x04}\x94(";  // root dict, memo 0, MARK
  int memo = 1;
  auto str = [&](const std::string& s) {
    out += "\x8c";
    out.push_back(static_cast<char>(s.size()));
    out += s;
    out += "\x94";
    return memo++;
  };
  auto get = [&](int index) {
    out += "j";
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((index >> (8 * k)) & 0xFF));
  };
  str("records");
  out += "]\x94";  // the records list
  ++memo;
  int n_key = -1, tag_key = -1, tags[3] = {-1, -1, -1};
  for (int i = 0; i < n; ++i) {
    if (i % 1000 == 0) out += "(";  // batch MARK
    out += "}\x94";                 // record dict
    ++memo;
    out += "(";
    if (n_key < 0) {
      n_key = str("n");
    } else {
      get(n_key);
    }
    out += "J";
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((i >> (8 * k)) & 0xFF));
    if (tag_key < 0) {
      tag_key = str("tag");
    } else {
      get(tag_key);
    }
    const int which = i < n / 2 ? i % 2 : 2;
    if (fresh_tags && i > 0) {
      out += "]\x94(";
      ++memo;
      str("t");
      str(std::to_string(i));
      out += "e";
    } else if (tags[which] < 0) {
      out += "]\x94";
      tags[which] = memo++;
      out += "(";
      str("t");
      str(std::to_string(which));
      out += "e";
    } else {
      get(tags[which]);
    }
    out += "u";                                     // SETITEMS of the record
    if (i % 1000 == 999 || i == n - 1) out += "e";  // APPENDS of the batch
  }
  str("after");
  get(tags[0]);
  out += "u.";  // SETITEMS of the root, STOP
  return {out.begin(), out.end()};
}

TEST(ListSink, ConsumesBatchesAndKeepsWhatIsSharedAcrossThem) {
  const std::vector<uint8_t> bytes = RecordsPickle(2500);
  RecordSink sink;
  ParseOptions options;
  options.sink = &sink;
  ParseInfo info;
  auto doc = Parse(bytes, options, &info);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ASSERT_EQ(sink.seen.size(), 2500u);
  for (int i = 0; i < 2500; ++i) EXPECT_EQ(sink.seen[i], i);
  EXPECT_EQ(sink.tag_text[0], "t0");
  EXPECT_EQ(sink.tag_text[1], "t1");
  EXPECT_EQ(sink.tag_text[2499], "t2");  // created inside the second batch, kept and moved
  EXPECT_EQ(info.consumed_items, 2500u);
  EXPECT_EQ(info.reclaimed_batches, 3u);
  EXPECT_EQ(sink.reclaims, 3);
  EXPECT_GE(sink.kept, 3u);  // the shared tag lists
  // The consumed list is empty; what came after the records is intact.
  EXPECT_TRUE(doc->Items(doc->Get(doc->root(), "records")).empty());
  std::string after;
  for (const Value t : doc->Items(doc->Get(doc->root(), "after"))) after += *doc->AsString(t);
  EXPECT_EQ(after, "t0");
  // Without a sink, the same pickle parses into the full list.
  auto plain = Parse(bytes);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Items(plain->Get(plain->root(), "records")).size(), 2500u);
}

TEST(ListSink, AReferenceBackToAConsumedRecordIsAClearError) {
  std::vector<uint8_t> bytes = RecordsPickle(10);
  // Replace the final "after": T(0) reference with a reference to memo 4 (the first record).
  // The pickle ends with: LONG_BINGET <tags[0]> SETITEMS STOP.
  const size_t get = bytes.size() - 7;
  ASSERT_EQ(bytes[get], 'j');
  bytes[get + 1] = 3;  // memo 3: the first record dict (0 root, 1 "records", 2 list)
  bytes[get + 2] = bytes[get + 3] = bytes[get + 4] = 0;
  RecordSink sink;
  ParseOptions options;
  options.sink = &sink;
  auto doc = Parse(bytes, options);
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("already converted and released"));
  EXPECT_TRUE(Parse(bytes).ok());  // fine without a sink
}

// A record is never read back once consumed, even when a container the batch keeps refers to
// it: the verdict is the same whether unread memo slots keep what they hold or not (the pickle
// fuzzer found the two disagreeing).
TEST(ListSink, AConsumedRecordIsNotReadBackThoughAKeptContainerRefersToIt) {
  // {"records": [R], "again": R} with R = {"n": 1}, and inside the batch a dict H = {"r": R}
  // made, memoized and popped: only its memo slot, which nothing reads, keeps H and through it R.
  // Memo: 0 root, 1 "records", 2 the list, 3 R, 4 "n", 5 H, 6 "r", 7 "again".
  const std::string text(
      "\x80\x04}\x94(\x8c\x07records\x94]\x94("  // root, MARK, "records", the list, batch MARK
      "}\x94(\x8c\x01n\x94K\x01u"                // R = {"n": 1}
      "}\x94(\x8c\x01r\x94h\x03u0"               // H = {"r": R}, popped
      "e"                                        // APPENDS: R consumed
      "\x8c\x05"
      "again\x94h\x03u.",  // "again": R (memo 3), SETITEMS, STOP
      52);
  const std::vector<uint8_t> bytes(text.begin(), text.end());
  for (const bool drop_unread_memo : {true, false}) {
    RecordSink sink;
    ParseOptions options;
    options.sink = &sink;
    options.drop_unread_memo = drop_unread_memo;
    auto doc = Parse(bytes, options);
    ASSERT_FALSE(doc.ok()) << drop_unread_memo;
    EXPECT_THAT(doc.status().message(), HasSubstr("memo reference 3 points to a trace entry"));
    EXPECT_EQ(sink.seen, std::vector<int64_t>{1});
  }
  EXPECT_TRUE(Parse(bytes).ok());  // fine without a sink
}

// A memo slot nothing reads back keeps nothing: a record's own list goes with its batch (the
// shape of PyTorch's frames lists), and what the sink sees and the document holds are the same.
TEST(ListSink, AListNothingReadsBackIsDroppedWithItsBatch) {
  const std::vector<uint8_t> bytes = RecordsPickle(2500, /*fresh_tags=*/true);
  auto parse = [&](bool drop_unread_memo, RecordSink* sink) {
    ParseOptions options;
    options.sink = sink;
    options.drop_unread_memo = drop_unread_memo;
    return Parse(bytes, options);
  };
  RecordSink trimmed, kept_all;
  auto doc = parse(true, &trimmed);
  auto reference = parse(false, &kept_all);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ASSERT_TRUE(reference.ok()) << reference.status().message();
  EXPECT_EQ(trimmed.seen, kept_all.seen);
  EXPECT_EQ(trimmed.tag_text, kept_all.tag_text);
  EXPECT_EQ(trimmed.tag_text[1234], "t1234");
  // Kept: the first record's list, which "after" reads, not the 2,499 others.
  EXPECT_EQ(trimmed.kept, 1u);
  EXPECT_EQ(kept_all.kept, 2500u);
  EXPECT_LT(doc->container_count(), 8u);
  EXPECT_GT(reference->container_count(), 2500u);
  std::string after;
  for (const Value t : doc->Items(doc->Get(doc->root(), "after"))) after += *doc->AsString(t);
  EXPECT_EQ(after, "t0");
}

}  // namespace
}  // namespace vramscope::pickle
