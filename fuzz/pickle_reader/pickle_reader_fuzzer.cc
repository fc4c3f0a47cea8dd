// libFuzzer target for the pickle reader.
//
// Parses the input; on failure checks that the message has the promised "byte N: " prefix, on
// success walks the whole graph without recursion and touches every accessor, checking the
// invariants callers rely on. The graph may be cyclic (a list that contains itself through the
// memo) and heavily shared, so the walk visits each container once and stops at a budget.
// Differential: parsing with the memo pre-scan (ParseOptions::drop_unread_memo) and without it
// gives the same verdict, the same items to a sink and the same document; the pre-scan over two
// threads reads the same memo slots as one pass.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target pickle_reader_fuzzer).
// Run:   pickle_reader_fuzzer -max_len=4096 fuzz/pickle_reader/corpus
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sources/pickle/memo_references.h"
#include "sources/pickle/pickle_reader.h"
#include "sources/snapshot/snapshot_source.h"
#include "support/through_pipeline.h"

namespace {

using vramscope::pickle::Document;
using vramscope::pickle::Kind;
using vramscope::pickle::KindName;
using vramscope::pickle::Value;

constexpr size_t kMaxVisits = 1 << 16;
constexpr int kMaxDepth = 256;
constexpr size_t kMaxCheckedKeys = 64;

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

// Keeps the optimizer from dropping reads whose result is otherwise unused.
volatile uint64_t g_sink;

uint64_t TouchString(std::string_view s) {
  uint64_t h = s.size();
  for (char c : s) h = h * 31 + static_cast<unsigned char>(c);
  return h;
}

uint64_t TouchScalar(const Document& doc, Value v) {
  uint64_t h = v.bits();
  const Kind kind = doc.kind(v);
  h += TouchString(KindName(kind));
  const std::optional<int64_t> i64 = doc.AsInt64(v);
  const std::optional<uint64_t> u64 = doc.AsUint64(v);
  const std::optional<double> f64 = doc.AsDouble(v);
  const std::optional<bool> b = doc.AsBool(v);
  const std::optional<std::string_view> s = doc.AsString(v);

  Check(doc.IsNone(v) == (kind == Kind::kNone));
  Check(doc.IsMissing(v) == (kind == Kind::kMissing));
  Check(s.has_value() == (kind == Kind::kString));
  if (i64) Check(kind == Kind::kInt || kind == Kind::kBool);
  if (u64) Check(kind == Kind::kInt || kind == Kind::kBool);
  if (i64 && *i64 >= 0) Check(u64 && *u64 == static_cast<uint64_t>(*i64));
  if (i64 && *i64 < 0) Check(!u64);
  if (u64 && *u64 <= static_cast<uint64_t>(INT64_MAX)) Check(i64 && *i64 >= 0);
  if (f64) Check(kind == Kind::kFloat || i64.has_value());
  if (kind == Kind::kFloat) Check(f64.has_value());
  if (kind == Kind::kBool) Check(b.has_value() && i64.has_value());
  const bool container =
      kind == Kind::kList || kind == Kind::kTuple || kind == Kind::kDict || kind == Kind::kSet;
  Check(doc.ContainerId(v).has_value() == container);
  if (!container) {
    Check(doc.Items(v).empty());
    Check(doc.DictItems(v).empty());
    Check(doc.DictSize(v) == 0);
    Check(doc.IsMissing(doc.Get(v, "segments")));
  }

  if (i64) h += static_cast<uint64_t>(*i64);
  if (u64) h += *u64;
  if (f64 && !std::isnan(*f64)) h += static_cast<uint64_t>(*f64 != 0.0);
  if (b) h += *b;
  if (s) h += TouchString(*s);
  return h;
}

void Walk(const Document& doc) {
  struct Pending {
    Value value;
    int depth;
  };
  std::vector<Pending> todo = {{doc.root(), 0}};
  std::unordered_set<uint64_t> seen_containers;
  size_t visits = 0;
  uint64_t h = doc.container_count() + doc.MemoryUsage();
  while (!todo.empty() && visits < kMaxVisits) {
    const Pending p = todo.back();
    todo.pop_back();
    ++visits;
    h += TouchScalar(doc, p.value);
    const std::optional<uint64_t> id = doc.ContainerId(p.value);
    if (!id) continue;
    Check(*id < doc.container_count());
    if (!seen_containers.insert(*id).second) continue;  // shared or cyclic: walked already
    if (p.depth >= kMaxDepth) continue;

    const Kind kind = doc.kind(p.value);
    const std::span<const Value> items = doc.Items(p.value);
    const std::span<const Value> pairs = doc.DictItems(p.value);
    if (kind == Kind::kDict) {
      Check(items.empty());
      Check(pairs.size() % 2 == 0);
      Check(doc.DictSize(p.value) == pairs.size() / 2);
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        const std::optional<std::string_view> key = doc.AsString(pairs[i]);
        if (key && i < 2 * kMaxCheckedKeys) {  // bounded: each check scans the whole dict
          // Get returns the last value stored under the key.
          Value expected = pairs[i + 1];
          for (size_t j = i + 2; j + 1 < pairs.size(); j += 2) {
            if (doc.AsString(pairs[j]) == key) expected = pairs[j + 1];
          }
          Check(doc.Get(p.value, *key) == expected);
        }
        todo.push_back({pairs[i], p.depth + 1});
        todo.push_back({pairs[i + 1], p.depth + 1});
      }
      h += doc.Get(p.value, "segments").bits() + doc.Get(p.value, "device_traces").bits();
    } else {
      Check(pairs.empty());
      Check(doc.DictSize(p.value) == 0);
      Check(doc.IsMissing(doc.Get(p.value, "segments")));
      for (const Value item : items) todo.push_back({item, p.depth + 1});
    }
  }
  g_sink = h;
}

// A canonical text of what `v` holds, up to a budget: containers are named by the order they
// are first met (two documents that number their containers differently render the same), a
// container met again is "#k".
std::string Render(const Document& doc, Value v) {
  std::string out;
  std::vector<Value> todo = {v};
  std::unordered_map<uint64_t, size_t> names;
  for (size_t budget = 4096; !todo.empty() && budget > 0; --budget) {
    const Value x = todo.back();
    todo.pop_back();
    const Kind kind = doc.kind(x);
    out += KindName(kind);
    if (const auto id = doc.ContainerId(x)) {
      const auto [it, fresh] = names.try_emplace(*id, names.size());
      out += "#" + std::to_string(it->second);
      if (!fresh) continue;
      const std::span<const Value> items = kind == Kind::kDict ? doc.DictItems(x) : doc.Items(x);
      out += "(" + std::to_string(items.size()) + ")";
      for (size_t i = items.size(); i > 0; --i) todo.push_back(items[i - 1]);
    } else if (const auto text = doc.AsString(x)) {
      out += "'" + std::string(*text) + "'";
    } else if (const auto i = doc.AsInt64(x)) {
      out += std::to_string(*i);
    } else if (const auto d = doc.AsDouble(x)) {
      uint64_t bits = 0;
      std::memcpy(&bits, &*d, sizeof(bits));
      out += std::to_string(bits);
    }
    out += ' ';
  }
  return out;
}

// Streams the items of every list, writing down what it was given.
class EveryListSink : public vramscope::pickle::ListSink {
 public:
  bool Wants(const Document&, std::span<const Value>, Value) override { return true; }
  vramscope::Status Consume(const Document& doc, std::span<const Value>, Value,
                            std::span<const Value> items) override {
    for (const Value item : items) log += Render(doc, item) + "|";
    return vramscope::Status::Ok();
  }
  void Reclaimed(uint64_t, std::span<const std::pair<uint64_t, uint64_t>>) override {}
  std::string log;
};

// Differential: the memo pre-scan (ParseOptions::drop_unread_memo) changes what the reader
// keeps, never what it reads. With a sink that streams every list, a parse with it and one
// without give the same verdict, hand the sink the same items and build the same document.
void MemoTrimmingChangesNothing(const std::vector<uint8_t>& input) {
  for (const bool recover : {false, true}) {
    EveryListSink trimmed_sink, reference_sink;
    vramscope::pickle::ParseOptions options;
    options.recover_truncated = recover;
    options.sink = &trimmed_sink;
    const auto trimmed = vramscope::pickle::Parse(input, options);
    options.sink = &reference_sink;
    options.drop_unread_memo = false;
    const auto reference = vramscope::pickle::Parse(input, options);
    Check(trimmed.ok() == reference.ok());
    Check(trimmed_sink.log == reference_sink.log);
    if (!trimmed.ok()) {
      Check(trimmed.status().message() == reference.status().message());
      continue;
    }
    Check(Render(*trimmed, trimmed->root()) == Render(*reference, reference->root()));
  }
}

// Differential: the pre-scan over two threads (from a FRAME past the middle) reads the same
// memo slots as one pass, wherever the split falls: on an opcode's start, inside one, or after
// a STOP.
void TwoHalvesScanAsOnePass(const std::vector<uint8_t>& input) {
  using vramscope::pickle::MemoReferences;
  if (MemoReferences::SplitPoint(input) == 0) return;
  Check(MemoReferences::Scan(input, {}, 0).Indices() ==
        MemoReferences::Scan(input, {}, UINT64_MAX).Indices());
}

}  // namespace

// A pickle the strict reader refuses, read as a cut-off file is (recover_truncated, and the
// snapshot source's partial reading): the recovered graph keeps the reader's invariants, the
// streamed and whole-document conversions agree, and a partial trace goes the whole way.
void ReadAsFarAsItGoes(const std::vector<uint8_t>& input) {
  vramscope::pickle::ParseOptions options;
  options.recover_truncated = true;
  vramscope::pickle::ParseInfo info;
  const vramscope::Result<Document> recovered = vramscope::pickle::Parse(input, options, &info);
  if (!recovered.ok()) {
    Check(recovered.status().message().rfind("byte ", 0) == 0);
    Check(recovered.status().IsInputError());
    return;
  }
  // Not always truncated: a FRAME that claims more bytes than remain, with a whole pickle inside
  // what does, reads to its STOP.
  if (info.truncated) Check(info.cut_at == input.size());
  Walk(*recovered);
  const auto file = vramscope::MappedFile::FromBytes("fuzz", input);
  vramscope::snapshot::LoadOptions whole_document;
  whole_document.stream_trace = false;
  auto streamed = vramscope::snapshot::LoadSnapshot(*file);
  auto whole = vramscope::snapshot::LoadSnapshot(*file, whole_document);
  if (streamed.ok() && whole.ok()) {
    Check(streamed->facts.partial == whole->facts.partial);
    Check(streamed->events.count() == whole->events.count());
    Check(streamed->events.action == whole->events.action);
    Check(streamed->segments.size() == whole->segments.size());
  }
  if (!streamed.ok()) {
    Check(streamed.status().IsInputError());
    return;
  }
  (void)vramscope::model::CheckStateInvariants(*streamed);  // as for whole files: not all hold
  // for files that lack fields (the source checks what a file has)
  vramscope::testing::ThroughPipeline(std::move(*streamed));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that any read past the end is caught by ASan.
  const std::vector<uint8_t> input(data, data + size);
  MemoTrimmingChangesNothing(input);
  TwoHalvesScanAsOnePass(input);
  vramscope::pickle::ParseInfo info;
  const vramscope::Result<Document> result = vramscope::pickle::Parse(input, {}, &info);
  if (!result.ok()) {
    const std::string& message = result.status().message();
    Check(message.rfind("byte ", 0) == 0);
    Check(result.status().IsInputError());
    ReadAsFarAsItGoes(input);
    return 0;
  }
  Check(info.protocol >= 0 && info.protocol <= 5);
  Check(info.opcodes >= 2 && info.opcodes <= size);  // at least a value and STOP, one byte each
  Walk(*result);

  // The rest of the path from bytes to a report: the snapshot source, then every analysis. A
  // conversion error is a value (with the path to the bad field), never a crash.
  auto trace = vramscope::snapshot::TraceFromPickle(*result);
  // Differential: converting while parsing (and reclaiming entries) must agree with converting
  // the whole document, except where a pickle refers back to a consumed trace entry.
  const auto file = vramscope::MappedFile::FromBytes("fuzz", input);
  auto streamed = vramscope::snapshot::LoadSnapshot(*file);
  if (streamed.ok()) {
    Check(trace.ok());
    Check(streamed->events.count() == trace->events.count());
    Check(streamed->events.addr == trace->events.addr);
    Check(streamed->events.action == trace->events.action);
    Check(streamed->allocations.size() == trace->allocations.size());
  }
  if (!trace.ok()) {
    Check(trace.status().IsInputError());
    return 0;
  }
  (void)vramscope::model::CheckStateInvariants(*trace);
  // The rest of the pipeline a user's input takes, and what holds for every input.
  vramscope::testing::ThroughPipeline(std::move(*trace));
  return 0;
}
