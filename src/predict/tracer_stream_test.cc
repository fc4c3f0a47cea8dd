// The tracer stream reader: versions, and CUDA graph pools folded into one held reservation.
#include "predict/tracer_stream.h"

#include <gtest/gtest.h>

#include <string>

namespace vramscope::predict {
namespace {

std::string Header(int version) {
  return R"({"format":"vramscope-tensor-stream","version":)" + std::to_string(version) +
         R"(,"model":"m.py:build","model_class":"M","notes":["traced"]})"
         "\n";
}

// Pool 1 (rounded to 512 B): +1024 (id 2), +1024 (id 3) -> 2048, -1024 (id 2) -> 1024,
// +2048 (id 4) -> 3072, then frees: high-water 3072 B.
constexpr const char* kPooled =
    R"({"ev":"phase","step":0,"phase":"setup"}
{"ev":"alloc","id":1,"bytes":4096,"category":"weight","name":"w","op":"aten::empty_strided"}
{"ev":"phase","step":1,"phase":"forward"}
{"ev":"alloc","id":2,"bytes":1000,"category":"temporary","name":"","op":"aten::mm","graph":1,"node":"mm","pool":1}
{"ev":"alloc","id":3,"bytes":600,"category":"input","name":"x","op":"aten::empty_strided","graph":1,"node":"primals_1","pool":1}
{"ev":"free","id":2}
{"ev":"alloc","id":4,"bytes":2000,"category":"temporary","name":"","op":"aten::mm","graph":2,"node":"mm_1","pool":1}
{"ev":"alloc","id":5,"bytes":100,"category":"temporary","name":"","op":"aten::sum","graph":2,"node":"sum"}
{"ev":"free","id":3}
{"ev":"free","id":4}
{"ev":"free","id":5}
{"ev":"end","allocs":5,"frees":4,"live_at_end":1}
)";

TEST(TracerStreamTest, GraphPoolIsOneHeldReservationOfItsHighWaterMark) {
  auto stream = ParseTracerStream(Header(2) + kPooled, "t.jsonl");
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  using K = StreamEvent::Kind;
  std::vector<std::pair<K, uint64_t>> seen;  // (kind, id) of allocs and frees
  const StreamEvent* pool = nullptr;
  for (const StreamEvent& e : stream->events) {
    if (e.kind == K::kAlloc || e.kind == K::kFree) seen.emplace_back(e.kind, e.id);
    if (e.kind == K::kAlloc && e.id == 6) pool = &e;
  }
  // the pool's reservation takes the place of its first allocation; its members and their
  // frees are gone; the reservation is never freed; allocations outside the pool stay
  const std::vector<std::pair<K, uint64_t>> expected = {
      {K::kAlloc, 1}, {K::kAlloc, 6}, {K::kAlloc, 5}, {K::kFree, 5}};
  EXPECT_EQ(seen, expected);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->bytes, 3072u);
  EXPECT_EQ(pool->pool, 0u);
  EXPECT_EQ(stream->strings.Get(pool->name), "CUDA graph pool 1");
  ASSERT_EQ(stream->info.assumptions.size(), 2u);
  EXPECT_EQ(stream->info.assumptions[0], "traced");
  EXPECT_NE(stream->info.assumptions[1].find("CUDA graph pool 1: its 3 allocations are one "
                                             "reservation of 3.00 KiB"),
            std::string::npos)
      << stream->info.assumptions[1];
}

TEST(TracerStreamTest, WithoutPoolsNothingIsFolded) {
  const std::string events =
      R"({"ev":"phase","step":0,"phase":"setup"}
{"ev":"alloc","id":1,"bytes":4096,"category":"weight","name":"w","op":"aten::empty_strided","graph":1,"node":"mm"}
{"ev":"end","allocs":1,"frees":0,"live_at_end":1}
)";
  for (int version : {1, 2}) {
    auto stream = ParseTracerStream(Header(version) + events, "t.jsonl");
    ASSERT_TRUE(stream.ok()) << stream.status().message();
    ASSERT_EQ(stream->events.size(), 2u);
    EXPECT_EQ(stream->events[1].bytes, 4096u);
    EXPECT_EQ(stream->info.assumptions.size(), 1u);
  }
}

TEST(TracerStreamTest, UnknownVersionsAndBadPoolsAreRefused) {
  const std::string end = R"({"ev":"end","allocs":0,"frees":0,"live_at_end":0})"
                          "\n";
  auto v3 = ParseTracerStream(Header(3) + end, "t.jsonl");
  ASSERT_FALSE(v3.ok());
  EXPECT_NE(v3.status().message().find("reads versions 1 and 2"), std::string::npos);
  auto v0 = ParseTracerStream(Header(0) + end, "t.jsonl");
  EXPECT_FALSE(v0.ok());
  for (const char* pool : {"0", "-1", "\"a\""}) {
    const std::string line =
        std::string(R"({"ev":"alloc","id":1,"bytes":8,"category":"temporary","pool":)") + pool +
        "}\n";
    auto bad = ParseTracerStream(Header(2) + line + end, "t.jsonl");
    ASSERT_FALSE(bad.ok()) << pool;
    EXPECT_NE(bad.status().message().find("\"pool\" must be a positive integer"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace vramscope::predict
