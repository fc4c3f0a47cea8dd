#include "sources/memory_timeline/memory_timeline_source.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/gzip.h"
#include "common/mapped_file.h"
#include "sources/load_source.h"

namespace vramscope::memory_timeline {
namespace {

using model::Action;
using model::Category;
using model::kNoEvent;
using model::kNoTime;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kFixture =
    std::string(VRAMSCOPE_SHARED_DIR) + "/fixtures/real/memory_timeline_raw_oct2023.json.gz";

Result<model::Trace> Load(const std::string& json) {
  return TraceFromMemoryTimeline(json, "t.json");
}

model::Trace LoadOk(const std::string& json) {
  auto trace = Load(json);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? std::move(trace).value() : model::Trace{};
}

std::optional<Category> CategoryOf(const model::Trace& t, size_t event) {
  const auto it = t.events.category.find(static_cast<uint32_t>(event));
  if (it == t.events.category.end()) return std::nullopt;
  return it->second;
}

bool HasNote(const model::Trace& t, const std::string& part) {
  for (const std::string& note : t.facts.notes) {
    if (note.find(part) != std::string::npos) return true;
  }
  return false;
}

// ---- mapping rules ------------------------------------------------------------------------

TEST(MemoryTimelineSource, EachPyTorchCategoryMapsOntoOurs) {
  std::string json = "[";
  for (int c = 0; c < 8; ++c) {
    json += fmt::format("{}[{}, 2, {}, {}]", c == 0 ? "" : ",", 1000 * (c + 1), 512 * (c + 1), c);
  }
  json += "]";
  const model::Trace t = LoadOk(json);
  ASSERT_EQ(t.events.count(), 8u);
  const std::array<std::optional<Category>, 8> want = {
      Category::kWeight,    Category::kOptimizerState, Category::kInput,
      Category::kTemporary, Category::kActivation,     Category::kGradient,
      Category::kTemporary,  // AUTOGRAD_DETAIL: backward scratch, activation gradients
      std::nullopt};         // None: left to attribution
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(t.events.action[i], Action::kAlloc);
    EXPECT_EQ(t.events.size[i], 512 * (i + 1));
    EXPECT_EQ(t.events.time_us[i], static_cast<int64_t>(i + 1));
    EXPECT_EQ(CategoryOf(t, i), want[i]) << "category index " << i;
  }
  EXPECT_TRUE(HasNote(t, "AUTOGRAD_DETAIL"));
}

TEST(MemoryTimelineSource, FactsSourceAndLevels) {
  const model::Trace t = LoadOk("[[5000, 2, 1000, 0], [9000, 4, -1000, 0]]");
  EXPECT_FALSE(t.facts.has_allocator_state);
  EXPECT_FALSE(t.facts.sizes_are_block_sizes);
  EXPECT_TRUE(t.facts.has_trace);
  EXPECT_TRUE(t.facts.has_times);
  EXPECT_FALSE(t.facts.has_stacks);
  EXPECT_EQ(t.source.path, "t.json");
  EXPECT_EQ(t.source.format, "PyTorch memory timeline (export_memory_timeline raw)");
  EXPECT_EQ(t.source.generation, "torch 2.1+");
  EXPECT_THAT(t.source.generation_evidence, HasSubstr("2 records: 0 PREEXISTING, 1 CREATE"));
  EXPECT_EQ(t.devices, std::vector<int32_t>{0});
  ASSERT_EQ(t.device_event_ranges.size(), 1u);
  EXPECT_EQ(t.device_event_ranges[0], std::make_pair(size_t{0}, size_t{3}));
  ASSERT_EQ(t.start_levels.size(), 1u);
  EXPECT_EQ(t.start_levels[0].device, 0);
  EXPECT_EQ(t.start_levels[0].untracked_allocated, 0);
  EXPECT_EQ(t.start_levels[0].reserved, 0);
  EXPECT_TRUE(HasNote(t, "device not recorded in the file; shown as device 0"));
  EXPECT_TRUE(HasNote(t, "reserved memory is not recorded"));
  EXPECT_TRUE(HasNote(t, "rounded up to 512 B"));
  for (const std::string& note : t.facts.notes) EXPECT_EQ(note.find('\n'), std::string::npos);
  // Sizes are requests; BuildAllocations rounds the block size.
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].requested_size, 1000u);
  EXPECT_EQ(t.allocations[0].size, 1024u);
  EXPECT_FALSE(t.allocations[0].size_exact);
}

TEST(MemoryTimelineSource, NegativeRecordsAreFreesAtTheSameTime) {
  const model::Trace t = LoadOk("[[1000, 2, 4096, 4], [2999, 4, -4096, 4]]");
  ASSERT_EQ(t.events.count(), 3u);
  EXPECT_EQ(t.events.action[1], Action::kFreeRequested);
  EXPECT_EQ(t.events.action[2], Action::kFreeCompleted);
  EXPECT_EQ(t.events.time_us[1], 2);  // ns / 1000, truncated
  EXPECT_EQ(t.events.time_us[2], 2);
  EXPECT_EQ(t.events.addr[1], t.events.addr[0]);
  EXPECT_EQ(t.events.addr[2], t.events.addr[0]);
  EXPECT_EQ(t.events.size[1], 4096u);
  EXPECT_FALSE(CategoryOf(t, 1).has_value());  // categories are on allocs only
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].alloc_event, 0);
  EXPECT_EQ(t.allocations[0].free_requested_event, 1);
  EXPECT_EQ(t.allocations[0].free_completed_event, 2);
  EXPECT_EQ(t.facts.frees_without_alloc, 0u);
}

TEST(MemoryTimelineSource, ReleasePairsWithTheLatestLiveTensorOfSameCategoryAndSize) {
  const model::Trace t = LoadOk(
      "[[1000, 2, 1024, 4],"   // e0: activation A
      " [2000, 2, 1024, 4],"   // e1: activation B
      " [3000, 2, 1024, 3],"   // e2: temporary, same size
      " [4000, 2, 2048, 4],"   // e3: activation, other size
      " [5000, 4, -1024, 4],"  // frees B (latest of (activation, 1024))
      " [6000, 4, -1024, 4]]"  // frees A
  );
  ASSERT_EQ(t.events.count(), 8u);
  std::set<uint64_t> addrs(t.events.addr.begin(), t.events.addr.begin() + 4);
  EXPECT_EQ(addrs.size(), 4u) << "each tensor has its own synthetic address";
  EXPECT_EQ(t.events.addr[4], t.events.addr[1]);
  EXPECT_EQ(t.events.addr[6], t.events.addr[0]);
  for (uint64_t a : addrs) EXPECT_EQ(a % 512, 0u);
  size_t alive = 0;
  for (const model::Allocation& a : t.allocations) alive += a.alive_at_end;
  EXPECT_EQ(alive, 2u);  // the temporary and the 2048 B activation
}

TEST(MemoryTimelineSource, IncrementVersionKeepingItsCategoryAddsNoEvent) {
  // A parameter updated in place: PyTorch writes (-bytes, old) then (+bytes, new) at one time.
  const model::Trace t =
      LoadOk("[[1000, 2, 4096, 0], [2000, 3, -4096, 0], [2000, 3, 4096, 0], [3000, 4, -4096, 0]]");
  ASSERT_EQ(t.events.count(), 3u);
  EXPECT_EQ(t.events.action[0], Action::kAlloc);
  EXPECT_EQ(t.events.action[1], Action::kFreeRequested);
  EXPECT_EQ(t.events.time_us[1], 3);
  ASSERT_EQ(t.allocations.size(), 1u);
  EXPECT_EQ(t.allocations[0].alloc_event, 0);
}

TEST(MemoryTimelineSource, IncrementVersionChangingCategoryFreesOldAndAllocsNew) {
  // An activation's next version has no category (4 -> 7), as in the real fixture.
  const model::Trace t =
      LoadOk("[[1000, 2, 2048, 4], [2000, 3, -2048, 4], [2000, 3, 2048, 7], [3000, 4, -2048, 7]]");
  ASSERT_EQ(t.events.count(), 6u);
  const std::vector<Action> want = {Action::kAlloc, Action::kFreeRequested, Action::kFreeCompleted,
                                    Action::kAlloc, Action::kFreeRequested, Action::kFreeCompleted};
  EXPECT_EQ(t.events.action, want);
  EXPECT_EQ(t.events.addr[1], t.events.addr[0]);
  EXPECT_NE(t.events.addr[3], t.events.addr[0]);
  EXPECT_EQ(t.events.addr[4], t.events.addr[3]);
  EXPECT_EQ(t.events.time_us[1], 2);
  EXPECT_EQ(t.events.time_us[3], 2);
  EXPECT_EQ(CategoryOf(t, 0), Category::kActivation);
  EXPECT_FALSE(CategoryOf(t, 3).has_value());
  ASSERT_EQ(t.allocations.size(), 2u);
  EXPECT_EQ(t.allocations[0].ReleaseEvent(), 1);
  EXPECT_EQ(t.allocations[1].alloc_event, 3);
}

TEST(MemoryTimelineSource, UnpairedIncrementVersionRecordsGoBySign) {
  // Not what PyTorch writes, but readable: a lone negative then a lone positive.
  const model::Trace t = LoadOk("[[1000, 2, 512, 1], [2000, 3, -512, 1], [3000, 3, 1024, 1]]");
  ASSERT_EQ(t.events.count(), 4u);
  EXPECT_EQ(t.events.action[1], Action::kFreeRequested);
  EXPECT_EQ(t.events.addr[1], t.events.addr[0]);
  EXPECT_EQ(t.events.action[3], Action::kAlloc);
  EXPECT_EQ(CategoryOf(t, 3), Category::kOptimizerState);
}

TEST(MemoryTimelineSource, PreexistingTensorsTakeTheFirstTimedRecordsTime) {
  const model::Trace t =
      LoadOk("[[-1, 1, 512, 0], [-1, 1, 1024, 7], [7000123, 2, 512, 3], [8000000, 4, -1024, 7]]");
  ASSERT_EQ(t.events.count(), 5u);
  EXPECT_EQ(t.events.time_us[0], 7000);
  EXPECT_EQ(t.events.time_us[1], 7000);
  EXPECT_EQ(t.events.time_us[2], 7000);
  EXPECT_EQ(CategoryOf(t, 0), Category::kWeight);
  EXPECT_EQ(t.events.addr[3], t.events.addr[1]);  // the DESTROY of the pre-existing tensor
  EXPECT_TRUE(HasNote(t, "2 tensors existed before profiling began"));
  EXPECT_EQ(t.facts.frees_without_alloc, 0u);
}

TEST(MemoryTimelineSource, OnlyPreexistingRecordsHaveNoTimes) {
  const model::Trace t = LoadOk("[[-1, 1, 512, 0]]");
  ASSERT_EQ(t.events.count(), 1u);
  EXPECT_EQ(t.events.time_us[0], kNoTime);
  EXPECT_FALSE(t.facts.has_times);
  EXPECT_TRUE(t.allocations[0].alive_at_end);
}

TEST(MemoryTimelineSource, ReleaseWithoutLiveTensorCountsFromTheStart) {
  const model::Trace t = LoadOk("[[1000, 2, 512, 4], [2000, 4, -4096, 5]]");
  ASSERT_EQ(t.events.count(), 3u);
  EXPECT_NE(t.events.addr[1], t.events.addr[0]);
  EXPECT_EQ(t.facts.frees_without_alloc, 1u);
  EXPECT_EQ(t.facts.allocations_alive_before_trace, 1u);
  EXPECT_TRUE(HasNote(t,
                      "1 releases match no live tensor of their category and size (the "
                      "first at record 1)"));
  const auto it =
      std::find_if(t.allocations.begin(), t.allocations.end(),
                   [](const model::Allocation& a) { return a.alloc_event == kNoEvent; });
  ASSERT_NE(it, t.allocations.end());
  EXPECT_EQ(it->requested_size, 4096u);
  EXPECT_EQ(it->free_requested_event, 1);
}

TEST(MemoryTimelineSource, ZeroByteRecordsAreSkipped) {
  const model::Trace t = LoadOk(
      "[[-1, 1, 0, 0], [1000, 2, 0, 3], [2000, 3, 0, 4], [2000, 3, 0, 7], [3000, 4, 0, 3],"
      " [4000, 2, 512, 3]]");
  ASSERT_EQ(t.events.count(), 1u);
  EXPECT_EQ(t.events.time_us[0], 4);
  EXPECT_TRUE(HasNote(t, "5 records of 0 bytes"));
}

TEST(MemoryTimelineSource, WhitespaceAndLargeTimesAreFine) {
  const model::Trace t =
      LoadOk(" \n[ [ 1696966047096061874 , 2 , 1 , 5 ] ,\n[1696966048083248105,4,-1,5] ]\n");
  ASSERT_EQ(t.events.count(), 3u);
  EXPECT_EQ(t.events.time_us[0], 1696966047096061);
  EXPECT_EQ(t.events.time_us[2], 1696966048083248);
  EXPECT_EQ(t.allocations[0].size, 512u);
}

// ---- bad input: one line, InvalidInput, never a crash --------------------------------------

struct BadCase {
  const char* name;
  std::string json;
  std::vector<std::string> phrases;
};

class MemoryTimelineBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(MemoryTimelineBadInput, OneClearLine) {
  const BadCase& c = GetParam();
  const auto trace = Load(c.json);
  ASSERT_FALSE(trace.ok());
  const Status& s = trace.status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_THAT(s.message(), StartsWith("t.json: "));
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  for (const std::string& p : c.phrases) EXPECT_THAT(s.message(), HasSubstr(p));
}

const BadCase kBadCases[] = {
    {"invalid_json",
     "[[1000, 2, 512, 0], [2000, 2, 51x, 0]]",
     {"invalid JSON at byte 32", "expected ',' or ']' after an array item", "damaged"}},
    {"truncated", "[[1000, 2, 512, 0], [2000, 2,", {"invalid JSON at byte 29", "truncated"}},
    {"trailing_garbage", "[[1000, 2, 512, 0]] x", {"invalid JSON at byte 20", "damaged"}},
    {"binary_garbage", std::string("[[1000, 2, \"\x01\xff\x80\", 0]]"), {"invalid JSON"}},
    {"top_object", "{\"traceEvents\": []}", {"the top level is an object, not a list"}},
    {"top_number", "42", {"the top level is a number"}},
    {"empty_list", "[]", {"holds no records", "profile_memory=True"}},
    {"record_number", "[1, 2, 3]", {"record 0 is a number, not a list", "[t_ns, action"}},
    {"record_object", "[[1000, 2, 512, 0], {\"a\": 1}]", {"record 1 is an object"}},
    {"too_few", "[[1000, 2, 512, 0], [2000, 2, 512]]", {"record 1 has 3 elements, not 4"}},
    {"too_many", "[[1000, 2, 512, 0, 1]]", {"record 0 has more than 4 elements"}},
    {"string_field", "[[1000, \"CREATE\", 512, 0]]", {"record 0: action is a string"}},
    {"null_field", "[[1000, 2, null, 0]]", {"record 0: bytes is null"}},
    {"bool_field", "[[true, 2, 512, 0]]", {"record 0: t_ns is true"}},
    {"float_bytes", "[[1000, 2, 512.5, 0]]", {"record 0: bytes is 512.5, not an integer"}},
    {"float_exponent", "[[1e3, 2, 512, 0]]", {"record 0: t_ns is 1e3, not an integer"}},
    {"nested_list", "[[1000, [2], 512, 0]]", {"record 0: action is a list"}},
    {"deep_nesting", std::string(100000, '['), {"record 0: t_ns is a list"}},
    {"action_zero", "[[1000, 0, 512, 0]]", {"record 0: action is 0", "1 PREEXISTING"}},
    {"action_five", "[[1000, 2, 512, 0], [2000, 5, 512, 0]]", {"record 1: action is 5"}},
    {"action_huge", "[[1000, 99999999999, 512, 0]]", {"record 0: action is 99999999999"}},
    {"category_eight", "[[1000, 2, 512, 8]]", {"record 0: category is 8", "7 None"}},
    {"category_negative", "[[1000, 2, 512, -1]]", {"record 0: category is -1"}},
    {"time_below_minus_one", "[[-5, 2, 512, 0]]", {"record 0: time is -5 ns"}},
    {"create_at_minus_one", "[[-1, 2, 512, 0]]", {"a CREATE record at time -1"}},
    {"preexisting_timed", "[[1000, 1, 512, 0]]", {"a PREEXISTING record at time 1000 ns"}},
    {"time_backwards",
     "[[1000, 2, 512, 0], [3000, 2, 512, 0], [2000, 4, -512, 0]]",
     {"record 2: time 2000 ns is before the previous record's 3000 ns", "sorted by time"}},
    {"preexisting_after_timed",
     "[[1000, 2, 512, 0], [-1, 1, 512, 0]]",
     {"record 1: time -1 ns is before the previous record's 1000 ns"}},
    {"absurd_bytes", "[[1000, 2, 1125899906842625, 0]]", {"more than 1 PiB for one tensor"}},
    {"absurd_negative_bytes", "[[1000, 4, -1125899906842625, 0]]", {"more than 1 PiB"}},
    {"beyond_int64", "[[18446744073709551615, 2, 512, 0]]", {"t_ns is 18446744073709551615"}},
    {"beyond_uint64",
     "[[1000, 2, 99999999999999999999999, 0]]",
     {"bytes is 99999999999999999999999"}},
    {"negative_create", "[[1000, 2, -512, 0]]", {"a CREATE record of -512 bytes"}},
    {"negative_preexisting", "[[-1, 1, -512, 0]]", {"a PREEXISTING record of -512 bytes"}},
    {"positive_destroy", "[[1000, 4, 512, 0]]", {"a DESTROY record of 512 bytes"}},
    {"too_much_live",
     "[" +
         [] {
           std::string s;
           for (int i = 0; i < 65; ++i)
             s += fmt::format("{}[{}, 2, 1125899906842624, 0]", i ? "," : "", 1000 + i);
           return s;
         }() +
         "]",
     {"record 64: more than 64 PiB would be live at once"}},
    {"plotted_form",
     "[[1696966047096061, 1696966047096070], [[0, 1, 2, 3, 4, 5, 6, 7, 8], "
     "[0, 1, 2, 3, 4, 5, 6, 7, 8]]]",
     {"plotted form", "raw.json.gz"}},
    {"plotted_form_empty", "[[], []]", {"plotted form"}},
};

INSTANTIATE_TEST_SUITE_P(All, MemoryTimelineBadInput, ::testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the real fixture (../shared/fixtures/real/README.md, section C) ------------------------

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string FixtureJson() {
  const std::string gz = ReadFile(kFixture);
  auto text = Gunzip(std::span(reinterpret_cast<const uint8_t*>(gz.data()), gz.size()), kFixture);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? std::move(text).value() : std::string();
}

// PyTorch's category index for each of our categories, the way this source maps them: TEMPORARY
// and AUTOGRAD_DETAIL are both our kTemporary, compared against their sum (kTempOrAutograd).
constexpr int kTempOrAutograd = 3;
int PyTorchIndex(std::optional<Category> c) {
  if (!c) return 7;
  switch (*c) {
    case Category::kWeight:
      return 0;
    case Category::kOptimizerState:
      return 1;
    case Category::kInput:
      return 2;
    case Category::kTemporary:
      return kTempOrAutograd;
    case Category::kActivation:
      return 4;
    case Category::kGradient:
      return 5;
    default:
      return -1;  // never set by this source
  }
}

using Row = std::array<int64_t, 8>;

// From the Trace alone: per-category live requested bytes after all events up to each distinct
// time_us, as (time_us, row) in time order.
std::vector<std::pair<int64_t, Row>> LiveByCategoryPerTime(const model::Trace& t) {
  std::vector<std::vector<std::pair<int, int64_t>>> delta(t.events.count());
  Row live{};
  for (const model::Allocation& a : t.allocations) {
    const int c = a.alloc_event == kNoEvent ? 7 : PyTorchIndex(CategoryOf(t, a.alloc_event));
    EXPECT_GE(c, 0);
    const auto bytes = static_cast<int64_t>(a.requested_size);
    if (a.alloc_event == kNoEvent) {
      live[c] += bytes;
    } else {
      delta[a.alloc_event].emplace_back(c, bytes);
    }
    if (a.ReleaseEvent() != kNoEvent) delta[a.ReleaseEvent()].emplace_back(c, -bytes);
  }
  std::vector<std::pair<int64_t, Row>> rows;
  for (size_t i = 0; i < t.events.count(); ++i) {
    for (const auto& [c, d] : delta[i]) live[c] += d;
    if (i + 1 == t.events.count() || t.events.time_us[i + 1] != t.events.time_us[i]) {
      rows.emplace_back(t.events.time_us[i], live);
    }
  }
  return rows;
}

// The row of `rows` at time `us`: the state after every event up to it.
Row At(const std::vector<std::pair<int64_t, Row>>& rows, int64_t us) {
  const auto it = std::upper_bound(rows.begin(), rows.end(), us,
                                   [](int64_t x, const auto& row) { return x < row.first; });
  return it == rows.begin() ? Row{} : std::prev(it)->second;
}

// From the raw records: PyTorch's running sums per category (index = category), one row per
// distinct timestamp, grouped by `key`.
template <typename Key>
std::vector<Row> RawRunningSums(const nlohmann::json& records, Key key) {
  std::vector<Row> rows;
  Row sums{};
  bool first = true;
  int64_t last = 0;
  for (const auto& r : records) {
    const int64_t k = key(r[0].get<int64_t>());
    if (!first && k != last) rows.push_back(sums);
    first = false;
    last = k;
    sums[r[3].get<size_t>()] += r[2].get<int64_t>();
  }
  rows.push_back(sums);
  return rows;
}

Row Merged(Row row) {  // TEMPORARY + AUTOGRAD_DETAIL, as this source maps them
  row[kTempOrAutograd] += row[6];
  row[6] = 0;
  return row;
}

TEST(MemoryTimelineFixture, ReproducesTheReadmeFigures) {
  if (!std::filesystem::exists(kFixture)) GTEST_SKIP() << kFixture << " absent";
  const std::string json = FixtureJson();
  ASSERT_FALSE(json.empty());

  // The README's record counts, from the raw JSON.
  const auto records = nlohmann::json::parse(json);
  ASSERT_EQ(records.size(), 16845u);
  std::map<int, int> by_action;
  for (const auto& r : records) ++by_action[r[1].get<int>()];
  EXPECT_EQ(by_action, (std::map<int, int>{{1, 645}, {2, 3345}, {3, 9510}, {4, 3345}}));

  // The README's cross-check row, from the raw JSON grouped by distinct t_ns.
  const Row kRow744 = {102440608, 102228128, 19395584, 0, 2618160128, 58417152, 41811968, 25494440};
  const std::vector<Row> raw = RawRunningSums(records, [](int64_t t) { return t; });
  ASSERT_EQ(raw.size(), 7721u);
  EXPECT_EQ(raw[744], kRow744);
  // TEMPORARY is 0 there, so comparing our kTemporary with TEMPORARY + AUTOGRAD_DETAIL below
  // checks AUTOGRAD_DETAIL's 41,811,968 B exactly.
  EXPECT_EQ(raw[744][3], 0);

  auto loaded = TraceFromMemoryTimeline(json, kFixture);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const model::Trace& t = *loaded;

  // Events: PREEXISTING + CREATE allocate; DESTROY frees; of the 4,755 INCREMENT_VERSION pairs,
  // the 875 that change category (795 ACTIVATION -> None, 80 AUTOGRAD_DETAIL -> None) free and
  // allocate, the other 3,880 move no memory.
  std::map<Action, int> by_event;
  for (const Action a : t.events.action) ++by_event[a];
  EXPECT_EQ(by_event[Action::kAlloc], 645 + 3345 + 875);
  EXPECT_EQ(by_event[Action::kFreeRequested], 3345 + 875);
  EXPECT_EQ(by_event[Action::kFreeCompleted], 3345 + 875);
  EXPECT_EQ(t.events.count(), 13305u);
  EXPECT_EQ(t.facts.frees_without_alloc, 0u);
  EXPECT_TRUE(t.facts.has_times);
  EXPECT_EQ(t.events.time_us.front(), 1696966047096061);  // the first timed record's
  // The file's last records (at 1696966048083248105 ns) are in-place updates that keep their
  // category: no event.
  EXPECT_EQ(t.events.time_us.back(), 1696966048080220);
  EXPECT_THAT(t.source.generation_evidence,
              HasSubstr("16,845 records: 645 PREEXISTING, 3,345 CREATE, 9,510 INCREMENT_VERSION, "
                        "3,345 DESTROY"));

  // From the Trace alone (events, Events::category, allocations' requested sizes), at the time
  // of the README's row: the end of the 745th distinct timestamp. Times are whole microseconds
  // here; the 746th timestamp falls in a later microsecond than the 745th.
  std::vector<int64_t> times_ns;
  for (const auto& r : records) {
    const auto ns = r[0].get<int64_t>();
    if (times_ns.empty() || times_ns.back() != ns) times_ns.push_back(ns);
  }
  ASSERT_EQ(times_ns.size(), 7721u);
  ASSERT_NE(times_ns[745] / 1000, times_ns[744] / 1000);
  const std::vector<std::pair<int64_t, Row>> ours = LiveByCategoryPerTime(t);
  EXPECT_EQ(At(ours, times_ns[744] / 1000), Merged(kRow744));

  // At every distinct microsecond of the file, and at the end, against the raw running sums
  // grouped the same way (PREEXISTING records at the first timed record's microsecond, as
  // PyTorch's own plot puts them). In-place updates that keep their category add no event, so
  // the trace has fewer distinct times than the file.
  const int64_t first_us = t.events.time_us.front();
  std::vector<int64_t> times_us;
  for (const int64_t ns : times_ns) {
    const int64_t us = ns == -1 ? first_us : ns / 1000;
    if (times_us.empty() || times_us.back() != us) times_us.push_back(us);
  }
  const std::vector<Row> raw_us =
      RawRunningSums(records, [&](int64_t ns) { return ns == -1 ? first_us : ns / 1000; });
  ASSERT_EQ(raw_us.size(), times_us.size());
  EXPECT_LT(ours.size(), raw_us.size());
  for (size_t i = 0; i < raw_us.size(); ++i) {
    ASSERT_EQ(At(ours, times_us[i]), Merged(raw_us[i])) << "at " << times_us[i] << " us";
  }
  const Row kEnd = {102440608, 102228128, 19395584, 0, 128000, 107868160, 0, 424};
  EXPECT_EQ(raw.back(), kEnd);
  EXPECT_EQ(ours.back().second, Merged(kEnd));
}

TEST(MemoryTimelineFixture, LoadsThroughTheDispatcherFromGzip) {
  if (!std::filesystem::exists(kFixture)) GTEST_SKIP() << kFixture << " absent";
  auto file = MappedFile::Open(kFixture);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto trace = sources::LoadTrace(**file);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->source.format, "PyTorch memory timeline (export_memory_timeline raw)");
  EXPECT_EQ(trace->source.file_bytes, std::filesystem::file_size(kFixture));
  EXPECT_EQ(trace->events.count(), 13305u);
  EXPECT_EQ(trace->allocations.size(), 4865u);
}

}  // namespace
}  // namespace vramscope::memory_timeline
