// The XSpace source on a profile TensorFlow 2.21.0 (tensorflow-cpu, Keras 3.15.1) recorded on the
// CPU with TF_CPU_ALLOCATOR_USE_BFC=true (tests/data/xspace/record_profiles.py): a Keras MLP
// 64-128-10 trained for two steps with Adam under vramscope.tf.profile, its variables marked
// when training began and after each batch. The recording printed the model's variables at
// 38,440 B and the optimizer's at 76,892 B (4 B of them adam/learning_rate, a buffer outside the
// BFC allocator). What no real file shows (a GPU allocator, damaged files) is made here with the
// same fields TensorFlow writes.
#include "sources/xspace/xspace_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/mapped_file.h"
#include "sources/input_format.h"
#include "sources/load_source.h"

namespace vramscope::xspace {
namespace {

using model::Category;
using ::testing::HasSubstr;

const std::filesystem::path kData =
    std::filesystem::path(VRAMSCOPE_SOURCE_DIR) / "tests/data/xspace";

model::Trace Load() {
  auto file = MappedFile::Open((kData / "keras_mlp_adam.xplane.pb.gz").string());
  EXPECT_TRUE(file.ok()) << file.status().message();
  auto trace = sources::LoadTrace(**file);  // gzipped, picked by content
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? std::move(*trace) : model::Trace{};
}

// Requested bytes of the allocations alive at the end of the profile, of one category.
uint64_t RequestedAtEnd(const model::Trace& t, Category category) {
  uint64_t sum = 0;
  for (const model::Allocation& a : t.allocations) {
    if (!a.alive_at_end || a.alloc_event == model::kNoEvent) continue;
    const auto c = t.events.category.find(static_cast<uint32_t>(a.alloc_event));
    if (c != t.events.category.end() && c->second == category) sum += a.requested_size;
  }
  return sum;
}

bool HasNote(const model::Trace& t, const std::string& text) {
  for (const std::string& n : t.facts.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(TensorflowProfile, VariablesAreWeightsAndTheirSlotsOptimizerState) {
  const model::Trace t = Load();
  EXPECT_EQ(t.source.format, "profiler XSpace memory events (TensorFlow's profiler, .xplane.pb)");
  EXPECT_EQ(t.source.device_type, "cpu");
  EXPECT_EQ(t.devices, std::vector<int32_t>{0});
  // At the end, the marked buffers hold exactly the variables.
  EXPECT_EQ(RequestedAtEnd(t, Category::kWeight), 38'440u);
  EXPECT_EQ(RequestedAtEnd(t, Category::kOptimizerState), 76'892u - 4u);
  // 14 variables, marked when training began, after each of the 2 batches and at the end.
  EXPECT_TRUE(HasNote(t, "14 variables marked by vramscope.tf ("));
  EXPECT_TRUE(HasNote(t,
                      "; 1 (4 B) never matched a buffer, being outside this allocator's "
                      "memory: adam/learning_rate"));
  bool named = false;
  for (const auto& [event, name] : t.events.tensor_name) {
    named |= t.strings.Get(name) == "adam/sequential_dense_kernel_velocity";
  }
  EXPECT_TRUE(named);
}

TEST(TensorflowProfile, TheBackwardPassMakesGradientsOfTheWeightsShapes) {
  const model::Trace t = Load();
  uint64_t gradients = 0, under_tape = 0;
  for (const auto& [event, c] : t.events.category) {
    const auto op = t.events.operation.find(event);
    const bool tape = op != t.events.operation.end() &&
                      t.strings.Get(op->second).find("gradient_tape/") != std::string::npos;
    if (c == Category::kGradient) {
      ++gradients;
      EXPECT_TRUE(tape);
    }
    under_tape += tape;
  }
  EXPECT_GT(gradients, 0u);
  EXPECT_GT(under_tape, gradients);  // the activations' gradients are temporaries
}

TEST(TensorflowProfile, TheCurveFollowsTheAllocatorsOwnCount) {
  const model::Trace t = Load();
  // Every event's bytes_allocated follows from the one before: nothing lost or reordered.
  EXPECT_FALSE(HasNote(t, "does not follow"));
  EXPECT_FALSE(HasNote(t, "differ in size"));
  ASSERT_EQ(t.start_levels.size(), 1u);
  EXPECT_EQ(t.start_levels[0].untracked_allocated, 0);  // made events: in use before the profile
  EXPECT_TRUE(HasNote(t, "the allocator's limit is 64.00 GiB"));
  for (size_t i = 0; i < t.events.count(); ++i) EXPECT_NE(t.events.time_us[i], model::kNoTime);
}

TEST(TensorflowProfile, StepsAreTheMostCalledFunction) {
  const model::Trace t = Load();
  int starts = 0;
  for (const model::Annotation& a : t.annotations) {
    ASSERT_EQ(a.fields.size(), 3u);
    EXPECT_EQ(a.fields[2].second, "multi_step_on_iterator");
    starts += a.fields[0].second == "START";
  }
  EXPECT_EQ(starts, 2);  // 64 samples in batches of 32
  EXPECT_TRUE(HasNote(t, "steps: the 2 calls of tf.function multi_step_on_iterator"));
}

// A protobuf writer for what no real file shows, field by field as xplane.proto numbers them.
std::string Varint(uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v != 0);
  return out;
}
std::string Field(int number, uint64_t value) { return Varint(number << 3) + Varint(value); }
std::string Field(int number, const std::string& bytes) {
  return Varint((number << 3) | 2) + Varint(bytes.size()) + bytes;
}
std::string Stat(int id, int64_t number) { return Field(1, id) + Field(4, number); }
std::string Stat(int id, const std::string& text) { return Field(1, id) + Field(5, text); }

// A host plane whose events are `events`, with the names TensorFlow gives its stats.
std::string Space(const std::vector<std::string>& events) {
  std::string plane = Field(2, std::string("/host:CPU"));
  for (const auto& [id, name] : std::vector<std::pair<int, std::string>>{
           {1, "MemoryAllocation"}, {2, "MemoryDeallocation"}}) {
    plane += Field(4, Field(1, id) + Field(2, Field(1, id) + Field(2, name)));
  }
  const std::vector<std::string> stats = {"addr", "allocation_bytes", "bytes_allocated",
                                          "allocator_name", "requested_bytes"};
  for (size_t i = 0; i < stats.size(); ++i) {
    plane += Field(5, Field(1, 10 + i) + Field(2, Field(1, 10 + i) + Field(2, stats[i])));
  }
  std::string line = Field(2, std::string("tf_Compute")) + Field(3, 1'000'000);
  for (const std::string& e : events) line += Field(4, e);
  plane += Field(3, line);
  return Field(1, plane);
}

std::string Event(int kind, int64_t offset_ps, uint64_t addr, int64_t bytes, int64_t in_use,
                  const std::string& allocator) {
  return Field(1, kind) + Field(2, offset_ps) + Field(4, Stat(10, addr)) +
         Field(4, Stat(11, bytes)) + Field(4, Stat(12, in_use)) + Field(4, Stat(13, allocator));
}

Result<model::Trace> Convert(const std::string& bytes) {
  return TraceFromXSpace(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                         "p.xplane.pb");
}

TEST(XSpaceSource, PickedByContentNotTakenForPprof) {
  const std::string space = Space({Event(1, 5, 0x1000, 512, 512, "GPU_0_bfc")});
  const auto head = std::span(reinterpret_cast<const uint8_t*>(space.data()), space.size());
  EXPECT_EQ(sources::DetectInputFormat(head), sources::InputFormat::kXSpace);
  // A pprof profile's first ValueType: type then unit, both varints.
  const std::string pprof = Field(1, Field(1, 1) + Field(2, 2));
  EXPECT_EQ(sources::DetectInputFormat(
                std::span(reinterpret_cast<const uint8_t*>(pprof.data()), pprof.size())),
            sources::InputFormat::kPprof);
}

TEST(XSpaceSource, GpuAllocatorsAreDevicesAndHostOnesAreLeftOut) {
  const auto t = Convert(Space({
      Event(1, 5'000, 0x7f0000001000, 1024, 4096 + 1024, "GPU_1_bfc"),
      Event(1, 6'000, 0x5000, 256, 256, "gpu_host_bfc"),
      Event(2, 7'000, 0x7f0000000000, 2048, 3072, "GPU_1_bfc"),  // alive before the profile
      Event(2, 8'000, 0x7f0000001000, 1024, 2048, "GPU_1_bfc"),
  }));
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->source.device_type, "cuda");
  EXPECT_EQ(t->devices, std::vector<int32_t>{1});
  // 4 KiB in use before the first event: 2 KiB the profile sees freed, 2 KiB it never sees,
  // each an unknown allocation at the start.
  ASSERT_EQ(t->start_levels.size(), 1u);
  EXPECT_EQ(t->start_levels[0].untracked_allocated, 0);
  ASSERT_GE(t->events.count(), 2u);
  EXPECT_EQ(t->events.size[0], 2048u);
  EXPECT_EQ(t->events.addr[0], 0x7f0000000000u);
  EXPECT_EQ(t->events.size[1], 2048u);
  for (uint32_t i : {0u, 1u}) {
    EXPECT_EQ(t->events.category.at(i), Category::kUnknown);
    EXPECT_EQ(t->strings.Get(t->events.tensor_name.at(i)), "in use before the profile began");
  }
  EXPECT_EQ(t->facts.frees_without_alloc, 0u);
  EXPECT_TRUE(HasNote(*t, "1 events of allocator gpu_host_bfc (host memory) are left out"));
  EXPECT_FALSE(HasNote(*t, "does not follow"));
}

TEST(XSpaceSource, RefusesWhatItCannotRead) {
  auto refused = [](const std::string& bytes, const std::string& why) {
    const auto t = Convert(bytes);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr("p.xplane.pb: "));
    EXPECT_THAT(t.status().message(), HasSubstr(why));
    EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
  };
  refused(Field(1, Field(2, std::string("/host:CPU"))), "TF_CPU_ALLOCATOR_USE_BFC=true");
  const std::string space = Space({Event(1, 5, 0x1000, 512, 512, "GPU_0_bfc")});
  refused(space.substr(0, space.size() - 3), "not a valid XSpace protobuf");
  refused(Space({Field(1, 1) + Field(2, 5) + Field(4, Stat(11, 512))}), "has no addr stat");
  refused(Space({Event(1, 5, 0x1000, -512, 0, "GPU_0_bfc")}), "of -512 bytes");
  refused(Space({Field(1, 1) + Field(2, 5) + Field(4, Stat(10, 0x10)) + Field(4, Stat(11, 256)) +
                 Field(4, Field(1, 13) + Field(7, 99))}),
          "refers to name 99");
  refused(Space({Event(1, -5, 0x1000, 512, 512, "GPU_0_bfc")}), "offset -5 ps");
}

}  // namespace
}  // namespace vramscope::xspace
