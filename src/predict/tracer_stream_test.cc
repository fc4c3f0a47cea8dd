// The tracer stream reader: versions, and CUDA graph pools as private pools of the predicted trace.
#include "predict/tracer_stream.h"

#include <gtest/gtest.h>

#include <string>

#include "predict/build_trace.h"

namespace vramscope::predict {
namespace {

std::string Header(int version) {
  return R"({"format":"vramscope-tensor-stream","version":)" + std::to_string(version) +
         R"(,"model":"m.py:build","model_class":"M","notes":["traced"]})"
         "\n";
}

// Three allocations in CUDA graph pool 1 (ids 2-4), two in the default pools (ids 1 and 5).
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

// The reader keeps each allocation's pool; the predicted trace serves the pool's allocations
// from a private pool of the allocator model: its own 2 MiB small-pool segment (every request
// here is under 1 MiB), which the default pools' requests (the weight, id 5) never share, held
// to the end with segment_pool_id (0, 1).
TEST(TracerStreamTest, GraphPoolIsAPrivatePoolOfTheAllocatorModel) {
  auto stream = ParseTracerStream(Header(2) + kPooled, "t.jsonl");
  ASSERT_TRUE(stream.ok()) << stream.status().message();
  std::vector<std::pair<uint64_t, uint32_t>> pools;  // (id, pool) of the allocations
  for (const StreamEvent& e : stream->events) {
    if (e.kind == StreamEvent::Kind::kAlloc) pools.emplace_back(e.id, e.pool);
  }
  const std::vector<std::pair<uint64_t, uint32_t>> expected = {
      {1, 0}, {2, 1}, {3, 1}, {4, 1}, {5, 0}};
  EXPECT_EQ(pools, expected);
  auto built = BuildPredictedTrace(std::move(stream).value(), BuildOptions{});
  ASSERT_TRUE(built.ok()) << built.status().message();
  const model::Trace& trace = built->trace;
  ASSERT_EQ(trace.segments.size(), 2u);
  int private_segments = 0;
  for (const model::Segment& s : trace.segments) {
    EXPECT_EQ(s.total_size, uint64_t{2} << 20);
    if (s.pool_id[1] == 1) {
      ++private_segments;
      EXPECT_EQ(s.pool_id[0], 0);
      EXPECT_EQ(s.allocated_size, 0u);  // everything in it was freed; the pool keeps it
    } else {
      EXPECT_EQ(s.allocated_size, 4096u);  // the weight
    }
  }
  EXPECT_EQ(private_segments, 1);
  EXPECT_EQ(built->peak_reserved, uint64_t{4} << 20);
  ASSERT_TRUE(trace.prediction.has_value());
  ASSERT_EQ(trace.prediction->assumptions.size(), 2u);
  EXPECT_NE(trace.prediction->assumptions[1].find(
                "CUDA graph pool 1: its 3 allocations are served from a private pool"),
            std::string::npos)
      << trace.prediction->assumptions[1];
  EXPECT_NE(trace.prediction->assumptions[1].find("reserves 2.00 MiB at its peak"),
            std::string::npos);
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
  auto v4 = ParseTracerStream(Header(4) + end, "t.jsonl");
  ASSERT_FALSE(v4.ok());
  EXPECT_NE(v4.status().message().find("reads versions 1 to 3"), std::string::npos);
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

// Version 3: an allocation made on another CUDA stream (FSDP2's all-gather copy-in stream) is
// served from that stream's blocks. A 12 MiB block freed on the default stream is cached (a
// segment of its own: over 10 MiB), yet a 12 MiB request on stream 1 cannot take it: a second
// segment, as the caching allocator does. The same request on the default stream reuses it.
TEST(TracerStreamTest, EachStreamHasItsOwnCachedBlocks) {
  auto events = [](const char* second) {
    return std::string(R"({"ev":"phase","step":0,"phase":"setup"}
{"ev":"alloc","id":1,"bytes":12582912,"category":"temporary","name":"a","op":"aten::empty"}
{"ev":"free","id":1}
{"ev":"alloc","id":2,"bytes":12582912,"category":"weight","name":"b","op":"aten::empty")") +
           second + R"(}
{"ev":"end","allocs":2,"frees":1,"live_at_end":1}
)";
  };
  auto other = ParseTracerStream(Header(3) + events(R"(,"stream":1)"), "t.jsonl");
  ASSERT_TRUE(other.ok()) << other.status().message();
  EXPECT_EQ(other->events[3].cuda_stream, 1u);
  auto built = BuildPredictedTrace(std::move(other).value(), BuildOptions{});
  ASSERT_TRUE(built.ok()) << built.status().message();
  EXPECT_EQ(built->peak_reserved, uint64_t{24} << 20);
  ASSERT_EQ(built->trace.segments.size(), 2u);
  auto same = ParseTracerStream(Header(3) + events(""), "t.jsonl");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(SimulatePeaks(*same, {})->peak_reserved, uint64_t{12} << 20);
  for (const char* bad : {"-1", "\"x\"", "1000001"}) {
    auto refused = ParseTracerStream(
        Header(3) + events((std::string(R"(,"stream":)") + bad).c_str()), "t.jsonl");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("\"stream\" must be a non-negative integer"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace vramscope::predict
