#include "predict/tracer_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "common/atomic_output.h"
#include "common/units.h"
#include "model/vocabulary.h"

namespace vramscope::predict {

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "vramscope-tensor-stream";
// Version 2 adds, on allocs made by compiled graphs (the tracer's --compile/--cuda-graphs),
// "graph" and "node" (informative) and "pool" (a CUDA graph pool id). Version 3 adds "stream"
// (the CUDA stream an alloc was made on, when not the default one; the tracer's --world-size).
constexpr int64_t kNewestVersion = 3;

// The tracer's spellings (model/vocabulary.h), and the report's, which streams written by hand
// or by older tools use.
std::optional<model::Phase> PhaseOf(std::string_view name) {
  if (auto phase = model::PhaseSpelledBy(model::PhaseProducer::kTracer, name)) return phase;
  const auto phase = model::PhaseSpelledBy(model::PhaseProducer::kReport, name);
  if (phase == model::Phase::kUnknown) return std::nullopt;
  return phase;
}

std::string HeaderText(const json& h, const char* key) {
  const auto it = h.find(key);
  return it != h.end() && it->is_string() ? it->get<std::string>() : std::string();
}

uint64_t HeaderCount(const json& h, const char* outer, const char* key) {
  const auto o = h.find(outer);
  if (o == h.end() || !o->is_object()) return 0;
  const auto it = o->find(key);
  return it != o->end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

}  // namespace

bool IsTracerStreamFile(std::string_view path) {
  std::ifstream in{std::string(path)};
  if (!in) return false;
  std::string line;
  line.resize(256);
  in.read(line.data(), static_cast<std::streamsize>(line.size()));
  line.resize(static_cast<size_t>(in.gcount()));
  return line.find(kFormat) != std::string::npos;
}

Result<TensorStream> ParseTracerStream(std::string_view text, std::string_view where) {
  TensorStream out;
  std::unordered_map<uint64_t, size_t> alloc_index;  // id -> index of its kAlloc event
  size_t line_no = 0;
  size_t pos = 0;
  bool header = false, ended = false;
  auto fail = [&](std::string_view what) {
    return InvalidInput(fmt::format("{}:{}: {}", where, line_no, what));
  };
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    if (ended) return fail("content after the \"end\" line");
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
    if (!header) {
      if (HeaderText(j, "format") != kFormat) {
        return fail("the first line is not a vramscope-tensor-stream header");
      }
      const auto v = j.find("version");
      if (v == j.end() || !v->is_number_integer() || v->get<int64_t>() < 1 ||
          v->get<int64_t>() > kNewestVersion) {
        return fail("unsupported version; this vramscope reads versions 1 to 3 (update vramscope)");
      }
      header = true;
      model::PredictionInfo& info = out.info;
      info.model = HeaderText(j, "model");
      if (const std::string cls = HeaderText(j, "model_class"); !cls.empty()) {
        info.model += fmt::format(" ({}, traced)", cls);
      }
      info.parameters = HeaderCount(j, "parameters", "total");
      info.trainable_parameters = HeaderCount(j, "parameters", "trainable");
      info.parameter_bytes = HeaderCount(j, "parameters", "bytes");
      info.buffer_bytes = HeaderCount(j, "parameters", "buffers_bytes");
      if (j.contains("setup") && j["setup"].is_object()) {
        const json& setup = j["setup"];
        info.setup = setup.dump();
        // One rank of a job traced on a fake process group (tracer --world-size).
        const auto world = setup.find("world_size");
        const auto rank = setup.find("rank");
        if (world != setup.end() && world->is_number_unsigned() && world->get<uint64_t>() > 1 &&
            rank != setup.end() && rank->is_number_unsigned()) {
          info.facts.emplace_back("process group",
                                  fmt::format("rank {} of {} (traced on a fake process group)",
                                              rank->get<uint64_t>(), world->get<uint64_t>()));
        }
      }
      info.facts.emplace_back("producer", HeaderText(j, "producer"));
      info.facts.emplace_back("device_emulation", HeaderText(j, "device_emulation"));
      if (j.contains("notes") && j["notes"].is_array()) {
        for (const json& n : j["notes"]) {
          if (n.is_string()) info.assumptions.push_back(n.get<std::string>());
        }
      }
      continue;
    }
    const std::string ev = HeaderText(j, "ev");
    auto count = [&](const char* key, uint64_t& value) {
      const auto it = j.find(key);
      if (it == j.end() || !it->is_number_unsigned()) return false;
      value = it->get<uint64_t>();
      return true;
    };
    StreamEvent e;
    if (ev == "alloc") {
      e.kind = StreamEvent::Kind::kAlloc;
      if (!count("id", e.id) || !count("bytes", e.bytes)) {
        return fail("an alloc needs a non-negative integer \"id\" and \"bytes\"");
      }
      if (e.bytes > model::kMaxPlausibleBytes) return fail("an allocation over 1 PiB");
      const auto c = model::ParseCategory(HeaderText(j, "category"));
      if (!c)
        return fail(fmt::format("unknown category \"{}\"", ForMessage(HeaderText(j, "category"))));
      e.category = *c;
      std::string name = HeaderText(j, "name");
      if (name.empty()) name = HeaderText(j, "module");
      if (!name.empty()) e.name = out.strings.Intern(name);
      if (const std::string op = HeaderText(j, "op"); !op.empty()) e.op = out.strings.Intern(op);
      if (j.contains("pool")) {
        uint64_t pool = 0;
        if (!count("pool", pool) || pool == 0 || pool > 1000000) {
          return fail("\"pool\" must be a positive integer (a CUDA graph pool)");
        }
        e.pool = static_cast<uint32_t>(pool);
      }
      if (j.contains("stream")) {
        uint64_t cuda_stream = 0;
        if (!count("stream", cuda_stream) || cuda_stream > 1000000) {
          return fail("\"stream\" must be a non-negative integer (a CUDA stream's number)");
        }
        e.cuda_stream = static_cast<uint32_t>(cuda_stream);
      }
      if (!alloc_index.emplace(e.id, out.events.size()).second) {
        return fail(fmt::format("id {} allocated twice", e.id));
      }
    } else if (ev == "free") {
      e.kind = StreamEvent::Kind::kFree;
      if (!count("id", e.id)) return fail("a free needs an integer \"id\"");
      if (alloc_index.count(e.id) == 0) {
        return fail(fmt::format("id {} freed but never allocated", e.id));
      }
    } else if (ev == "set") {
      uint64_t id = 0;
      if (!count("id", id)) return fail("a set needs an integer \"id\"");
      const auto it = alloc_index.find(id);
      if (it == alloc_index.end()) return fail(fmt::format("set of unknown id {}", id));
      StreamEvent& target = out.events[it->second];
      if (j.contains("category")) {
        const auto c = model::ParseCategory(HeaderText(j, "category"));
        if (!c)
          return fail(
              fmt::format("unknown category \"{}\"", ForMessage(HeaderText(j, "category"))));
        target.category = *c;
      }
      if (const std::string name = HeaderText(j, "name"); !name.empty()) {
        target.name = out.strings.Intern(name);
      }
      continue;
    } else if (ev == "phase") {
      e.kind = StreamEvent::Kind::kPhase;
      const auto p = PhaseOf(HeaderText(j, "phase"));
      if (!p) return fail(fmt::format("unknown phase \"{}\"", ForMessage(HeaderText(j, "phase"))));
      e.phase = *p;
      e.name = out.strings.Intern(HeaderText(j, "phase"));
      uint64_t step = 0;
      if (!count("step", step) || step > 1000000) return fail("a phase needs an integer \"step\"");
      e.step = static_cast<int32_t>(step);
    } else if (ev == "matmul" || ev == "conv") {
      e.kind = ev == "matmul" ? StreamEvent::Kind::kMatmul : StreamEvent::Kind::kConv;
      e.thread = HeaderText(j, "thread") == "backward" ? Thread::kBackward : Thread::kMain;
      std::string op = HeaderText(j, "op");
      if (op.empty()) op = ev == "matmul" ? "aten::mm" : "aten::convolution";
      e.op = out.strings.Intern(op);
      uint64_t bytes = 0;
      if (count("bytes", bytes)) e.bytes = bytes;
    } else if (ev == "empty_cache") {
      e.kind = StreamEvent::Kind::kEmptyCache;
    } else if (ev == "end") {
      ended = true;
      continue;
    } else {
      return fail(
          fmt::format("unknown event \"{}\"; this vramscope reads alloc, free, set, phase, matmul, "
                      "conv, empty_cache and end",
                      ForMessage(ev)));
    }
    out.events.push_back(e);
  }
  if (!header) return InvalidInput(fmt::format("{}: empty; not a tracer stream", where));
  if (!ended) {
    return InvalidInput(fmt::format(
        "{}: truncated after line {} (no \"end\" line): the tracer did not finish; run it again",
        where, line_no));
  }
  return out;
}

Result<TensorStream> ReadTracerStream(std::string_view path) {
  std::ifstream in{std::string(path), std::ios::binary};
  if (!in) return UsageError(fmt::format("{}: cannot be read", path));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseTracerStream(text.str(), path);
}

namespace {

// The tracer stream's spelling of a phase (its format says "inputs" where reports say
// "before_forward"; model/vocabulary.h).
const char* StreamPhaseName(model::Phase p) {
  const std::string_view name = model::PhaseNameFor(model::PhaseProducer::kTracer, p);
  return name.empty() ? "setup" : name.data();
}

}  // namespace

Status WriteTensorStream(const TensorStream& stream, const std::string& path, bool overwrite) {
  ASSIGN_OR_RETURN(AtomicOutput output, AtomicOutput::Prepare(path, overwrite));
  {
    std::ofstream out(output.temp_path(), std::ios::binary);
    if (!out) return InvalidInput(fmt::format("{}: cannot be written", path));
    const model::PredictionInfo& info = stream.info;
    // Version 2 only when an allocation is in a CUDA graph pool (the field version 1 lacks),
    // 3 when one is on a stream other than the default one.
    const bool pools = std::any_of(stream.events.begin(), stream.events.end(),
                                   [](const StreamEvent& e) { return e.pool != 0; });
    const bool streams = std::any_of(stream.events.begin(), stream.events.end(),
                                     [](const StreamEvent& e) { return e.cuda_stream != 0; });
    json header = {{"format", kFormat},
                   {"version", streams ? 3
                               : pools ? 2
                                       : 1},
                   {"producer", "vramscope predict"},
                   {"model", info.model},
                   {"setup", info.setup},
                   {"device_emulation", "none (the step simulator)"},
                   {"parameters",
                    {{"total", info.parameters},
                     {"trainable", info.trainable_parameters},
                     {"bytes", info.parameter_bytes},
                     {"buffers_bytes", info.buffer_bytes}}},
                   {"notes", info.assumptions}};
    out << header.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    uint64_t allocs = 0, frees = 0;
    for (const StreamEvent& e : stream.events) {
      if (e.derived) continue;
      json j;
      switch (e.kind) {
        case StreamEvent::Kind::kAlloc:
          j = {{"ev", "alloc"},
               {"id", e.id},
               {"bytes", e.bytes},
               {"category", model::CategoryName(e.category)},
               {"name", std::string(stream.strings.Get(e.name))},
               {"op", std::string(stream.strings.Get(e.op))}};
          if (e.pool != 0) j["pool"] = e.pool;
          if (e.cuda_stream != 0) j["stream"] = e.cuda_stream;
          ++allocs;
          break;
        case StreamEvent::Kind::kFree:
          j = {{"ev", "free"}, {"id", e.id}};
          ++frees;
          break;
        case StreamEvent::Kind::kPhase: {
          const std::string_view label = stream.strings.Get(e.name);
          j = {{"ev", "phase"},
               {"step", e.step},
               {"phase",
                label.empty() ? std::string(StreamPhaseName(e.phase)) : std::string(label)}};
          break;
        }
        case StreamEvent::Kind::kEmptyCache:
          j = {{"ev", "empty_cache"}};
          break;
        case StreamEvent::Kind::kMatmul:
        case StreamEvent::Kind::kConv:
          j = {{"ev", e.kind == StreamEvent::Kind::kMatmul ? "matmul" : "conv"},
               {"thread", e.thread == Thread::kMain ? "forward" : "backward"},
               {"op", std::string(stream.strings.Get(e.op))}};
          if (e.bytes > 0) j["bytes"] = e.bytes;
          break;
      }
      out << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    }
    out << json{{"ev", "end"},
                {"allocs", allocs},
                {"frees", frees},
                {"live_at_end", allocs - frees}}
               .dump()
        << '\n';
    if (!out.flush()) return InvalidInput(fmt::format("{}: write failed (disk full?)", path));
  }
  return output.Commit();
}

}  // namespace vramscope::predict
