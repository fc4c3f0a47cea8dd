#include "report/explain_output.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/units.h"
#include "device/non_pytorch_memory.h"

namespace vramscope::report {

namespace {

using analysis::ByteRange;
using analysis::OomMessageCause;

const char* KindText(model::OomMessageKind kind) {
  switch (kind) {
    case model::OomMessageKind::kAllocator:
      return "PyTorch 2.1+ caching allocator";
    case model::OomMessageKind::kAllocatorLegacy:
      return "PyTorch 1.x-2.0 caching allocator";
    case model::OomMessageKind::kAllocatorBare:
      return "caching allocator, message cut short";
    case model::OomMessageKind::kDriverError:
      return "driver error, outside the caching allocator";
    case model::OomMessageKind::kLibraryError:
      return "library error, outside the caching allocator";
    case model::OomMessageKind::kAsyncAllocator:
      return "cudaMallocAsync backend";
    case model::OomMessageKind::kMps:
      return "Apple MPS";
    case model::OomMessageKind::kXla:
      return "XLA runtime: JAX or another XLA client";
    case model::OomMessageKind::kTensorflow:
      return "TensorFlow runtime";
  }
  return "";
}

const char* CauseText(OomMessageCause cause) {
  switch (cause) {
    case OomMessageCause::kMemoryFractionCap:
      return "a memory-fraction cap";
    case OomMessageCause::kFragmentation:
      return "fragmentation";
    case OomMessageCause::kOtherProcesses:
      return "other processes / memory outside PyTorch";
    case OomMessageCause::kNonPyTorchMemory:
      return "this process's non-PyTorch memory";
    case OomMessageCause::kCapacity:
      return "plain capacity";
    case OomMessageCause::kOutsideAllocator:
      return "an allocation outside PyTorch's allocator";
    case OomMessageCause::kUnknown:
      return "not enough figures to tell";
  }
  return "";
}

nlohmann::json Range(ByteRange r) { return {{"lo", r.lo}, {"hi", r.hi}}; }

nlohmann::json Figure(const std::optional<model::PrintedBytes>& b) {
  if (!b) return nullptr;
  return {{"text", b->text}, {"lo", b->lo}, {"hi", b->hi}};
}

// The verdict and the holders, largest first, each with its arithmetic.
std::string VerdictText(const analysis::OomVerdict& v) {
  std::string out =
      fmt::format("Verdict ({}): {}\n", analysis::OomHolderName(v.holder), v.sentence);
  if (v.holdings.empty()) return out;
  out += "What held the GPU, largest first\n";
  size_t width = 0;
  for (const analysis::OomHolding& h : v.holdings) width = std::max(width, h.what.size());
  width = std::min<size_t>(width, 60);
  for (size_t i = 0; i < v.holdings.size(); ++i) {
    const analysis::OomHolding& h = v.holdings[i];
    out += fmt::format("  {}. {:<{}}  {:>22}  {}{}\n", i + 1, h.what, width,
                       analysis::FormatByteRange(h.bytes), h.arithmetic,
                       h.assumed ? " (assumed)" : "");
  }
  return out;
}

}  // namespace

nlohmann::json OomVerdictJson(const analysis::OomVerdict& v) {
  nlohmann::json holders = nlohmann::json::array();
  for (const analysis::OomHolding& h : v.holdings) {
    holders.push_back({{"holder", analysis::OomHolderName(h.holder)},
                       {"what", h.what},
                       {"bytes", Range(h.bytes)},
                       {"arithmetic", h.arithmetic},
                       {"assumed", h.assumed}});
  }
  return {{"holder", analysis::OomHolderName(v.holder)},
          {"sentence", v.sentence},
          {"close", v.close},
          {"holders", holders}};
}

namespace {

std::string Where(const ExplainedMessage& m) {
  std::string where = fmt::format("line {}", m.lines.front());
  if (m.lines.size() > 1) {
    where = fmt::format(
        "lines {}{}",
        fmt::join(m.lines.begin(), m.lines.begin() + std::min<size_t>(m.lines.size(), 8), ", "),
        m.lines.size() > 8 ? ", ..." : "");
  }
  if (!m.ranks.empty())
    where += fmt::format(", rank{} {}", m.ranks.size() > 1 ? "s" : "", fmt::join(m.ranks, ", "));
  return where;
}

}  // namespace

std::string RenderExplainText(const ExplainReport& report) {
  std::string out;
  out += fmt::format("vramscope explain: {} out-of-memory message{} in {}{}\n",
                     report.messages.size(), report.messages.size() == 1 ? "" : "s", report.source,
                     report.left_out > 0
                         ? fmt::format(" ({} more not read: --max-messages)",
                                       FormatCount(static_cast<int64_t>(report.left_out)))
                         : std::string());
  for (const ExplainedMessage& em : report.messages) {
    const analysis::OomMessageExplanation& e = em.explanation;
    const model::OomMessage& m = e.message;
    out += fmt::format("\n{} out of memory ({}), {}{}\n", m.backend.empty() ? "GPU" : m.backend,
                       KindText(m.kind), Where(em),
                       em.lines.size() > 1
                           ? fmt::format(": the same message {} times", em.lines.size())
                           : std::string());
    if (!m.device.empty() || !m.allocator.empty()) {
      out += fmt::format(
          "  {}{}{}\n",
          m.tensor_shape.empty()
              ? std::string()
              : fmt::format("a {} tensor of shape {} ", m.tensor_dtype, m.tensor_shape),
          m.device.empty() ? std::string() : fmt::format("on {} ", m.device),
          m.allocator.empty() ? std::string() : fmt::format("(allocator {})", m.allocator));
    }
    out += VerdictText(e.verdict);
    // The proximate cause: why this one request failed, beside what held the GPU.
    for (size_t i = 0; i < e.findings.size(); ++i) {
      const analysis::OomFinding& f = e.findings[i];
      out += fmt::format("{}: {} ({})\n", i == 0 ? "Why this request failed" : "Also",
                         CauseText(f.cause),
                         f.decisive ? "decisive: holds for every size the rounded figures allow"
                                    : "possible: holds for some of them");
      out += fmt::format("  {}\n  {}\n", f.arithmetic, f.meaning);
    }
    if (!e.advice.empty()) {
      out += "What to change\n";
      for (const std::string& a : e.advice) out += fmt::format("  - {}\n", a);
    }
    if (m.tried_to_allocate) {
      // 2.1+ prints the segment it asked CUDA for; 1.x printed the request (rounded to 512 B).
      out += fmt::format("  asked for {} ({})\n", m.tried_to_allocate->text,
                         m.kind == model::OomMessageKind::kAllocator
                             ? "the segment the allocator needed from CUDA: the request rounded "
                               "up to 2 MiB, 20 MiB or a multiple of 2 MiB"
                         : m.kind == model::OomMessageKind::kAllocatorLegacy
                             ? "the request, rounded up to 512 B"
                         : m.kind == model::OomMessageKind::kTensorflow && !m.tensor_shape.empty()
                             ? "the tensor's elements times its dtype's size"
                             : "as stated");
    }
    if (m.gpu) {
      std::string gpus;
      for (size_t i = 0; i < e.gpus.size(); ++i) gpus += (i ? " or " : "") + e.gpus[i].name;
      out += fmt::format("  on GPU {}{}\n", *m.gpu,
                         gpus.empty() ? std::string() : fmt::format(" ({} by its capacity)", gpus));
    }
    // Every figure the message states, and the bytes its two-decimal rounding allows.
    std::vector<std::pair<std::string, const model::PrintedBytes*>> figures;
    for (const model::OomMessageFigure& f : model::OomMessageFigures()) {
      if ((m.*f.field).has_value()) figures.emplace_back(f.label, &*(m.*f.field));
    }
    for (const model::OomProcess& p : m.processes) {
      figures.emplace_back(fmt::format("process {} in use", p.pid), &p.in_use);
    }
    if (!figures.empty() || !m.not_available.empty()) {
      out += "Figures read (and the bytes each can stand for)\n";
      // NVML's or the allocator's "not available" (2^64 - 1 B) is not a size: named, never
      // shown as one.
      for (const std::string& key : m.not_available) {
        out += fmt::format(
            "  {:<28} {:>14}  printed as 2^64 B: NVML or the allocator could "
            "not tell\n",
            key, "[not available]");
      }
      for (const auto& [name, b] : figures) {
        out += fmt::format("  {:<28} {:>14}  {}\n", name, b->text,
                           b->lo == b->hi
                               ? fmt::format("{} B", FormatCount(static_cast<int64_t>(b->lo)))
                               : fmt::format("{} to {} B", FormatCount(static_cast<int64_t>(b->lo)),
                                             FormatCount(static_cast<int64_t>(b->hi))));
      }
    }
    if (!e.shares.empty()) {
      out += "Derived from the figures\n";
      size_t width = 0;
      for (const analysis::GpuShare& s : e.shares) width = std::max(width, s.what.size());
      width = std::min<size_t>(width, 56);
      for (const analysis::GpuShare& s : e.shares) {
        out += fmt::format("  {:<{}}  {:>22}  {}\n", s.what, width,
                           analysis::FormatByteRange(s.bytes), s.how);
      }
    }
    // What one process holds outside PyTorch's allocator is a PyTorch reading; XLA and
    // TensorFlow allocate through their own pools.
    const bool pytorch = m.kind != model::OomMessageKind::kMps &&
                         m.kind != model::OomMessageKind::kXla &&
                         m.kind != model::OomMessageKind::kTensorflow;
    if (!e.expected_outside.figures.empty() && pytorch && e.expected_outside_range.assumed) {
      out += fmt::format(
          "Expected outside PyTorch for one process: {} (assumed: the message names no GPU the "
          "catalog has, so a range over the architectures plausible for its capacity{}; --gpu "
          "names it)\n",
          analysis::FormatByteRange(e.expected_outside_range.bytes),
          m.kind == model::OomMessageKind::kAllocatorLegacy
              ? ", with and without lazy kernel loading (the message predates PyTorch 2.1)"
              : "");
    } else if (!e.expected_outside.figures.empty() && pytorch) {
      out += fmt::format("Expected outside PyTorch for one process{}: {}\n",
                         e.gpus.empty() ? std::string() : " on " + e.gpus.front().name,
                         FormatBytes(static_cast<int64_t>(e.expected_outside.Total())));
      for (const device::OutsideFigure& f : e.expected_outside.figures) {
        out += fmt::format("  {} {} ({}: {}; {})\n", f.item,
                           FormatBytes(static_cast<int64_t>(f.bytes)),
                           device::EvidenceName(f.evidence), f.source, f.flag);
      }
    }
  }
  if (const auto& fit = report.fit) {
    out += fmt::format(
        "\nWith --model {}: the GPU leaves this process {} (the total less other processes{}); "
        "less {} outside the allocator, predict --fit finds\n",
        fit->model, FormatBytes(static_cast<int64_t>(fit->capacity)),
        fit->capped ? " and the cap" : "",
        FormatBytes(static_cast<int64_t>(fit->outside_allocator)));
    out += fit->largest_batch == 0
               ? fmt::format("  no batch fits: batch 1 needs {} reserved\n",
                             FormatBytes(static_cast<int64_t>(fit->needed_reserved)))
               : fmt::format(
                     "  largest batch that fits: {} (peak reserved {}, {} simulations){}\n",
                     fit->largest_batch, FormatBytes(static_cast<int64_t>(fit->peak_reserved)),
                     fit->simulations,
                     fit->batch_that_failed > fit->largest_batch
                         ? fmt::format("; batch {} must shrink by {:.0f}%", fit->batch_that_failed,
                                       100.0 *
                                           static_cast<double>(fit->batch_that_failed -
                                                               fit->largest_batch) /
                                           static_cast<double>(fit->batch_that_failed))
                         : std::string());
  }
  return out;
}

nlohmann::json OomFindingsJson(const std::vector<analysis::OomFinding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const analysis::OomFinding& f : findings) {
    out.push_back({{"cause", analysis::OomMessageCauseName(f.cause)},
                   {"decisive", f.decisive},
                   {"arithmetic", f.arithmetic},
                   {"meaning", f.meaning}});
  }
  return out;
}

nlohmann::json OutsideMemoryJson(const device::OutsideMemory& outside) {
  nlohmann::json out = nlohmann::json::array();
  for (const device::OutsideFigure& f : outside.figures) {
    out.push_back({{"item", f.item},
                   {"bytes", f.bytes},
                   {"evidence", device::EvidenceName(f.evidence)},
                   {"source", f.source},
                   {"flag", f.flag}});
  }
  return out;
}

nlohmann::json RenderExplainJson(const ExplainReport& report) {
  nlohmann::json messages = nlohmann::json::array();
  for (const ExplainedMessage& em : report.messages) {
    const analysis::OomMessageExplanation& e = em.explanation;
    const model::OomMessage& m = e.message;
    nlohmann::json figures = nlohmann::json::object();
    for (const model::OomMessageFigure& f : model::OomMessageFigures()) {
      figures[f.key] = Figure(m.*f.field);
    }
    nlohmann::json processes = nlohmann::json::array();
    for (const model::OomProcess& p : m.processes) {
      processes.push_back({{"pid", p.pid}, {"in_use", Figure(p.in_use)}});
    }
    nlohmann::json shares = nlohmann::json::array();
    for (const analysis::GpuShare& s : e.shares) {
      shares.push_back({{"what", s.what}, {"bytes", Range(s.bytes)}, {"how", s.how}});
    }
    nlohmann::json gpus = nlohmann::json::array();
    for (const device::GpuSpec& g : e.gpus) gpus.push_back(g.key);
    messages.push_back({
        {"lines", em.lines},
        {"ranks", em.ranks},
        {"kind", model::OomMessageKindName(m.kind)},
        {"backend", m.backend},
        {"library", m.library},
        {"text", m.text},
        {"gpu", m.gpu ? nlohmann::json(*m.gpu) : nlohmann::json()},
        {"device", m.device},
        {"allocator", m.allocator},
        {"tensor", m.tensor_shape.empty()
                       ? nlohmann::json()
                       : nlohmann::json({{"shape", m.tensor_shape}, {"dtype", m.tensor_dtype}})},
        {"figures", figures},
        {"processes", processes},
        {"what_the_gpu_held", shares},
        {"verdict", OomVerdictJson(e.verdict)},
        // The proximate cause: why this one request failed (the verdict says what held the GPU).
        {"proximate",
         {{"cause", analysis::OomMessageCauseName(e.cause)},
          {"findings", OomFindingsJson(e.findings)}}},
        {"cause", analysis::OomMessageCauseName(e.cause)},
        {"findings", OomFindingsJson(e.findings)},
        {"not_available", m.not_available},
        {"expected_outside_pytorch_range",
         {{"bytes", Range(e.expected_outside_range.bytes)},
          {"assumed", e.expected_outside_range.assumed}}},
        {"advice", e.advice},
        {"gpus", gpus},
        {"expected_outside_pytorch", OutsideMemoryJson(e.expected_outside)},
        {"available_to_pytorch",
         e.available_to_pytorch ? Range(*e.available_to_pytorch) : nlohmann::json()},
        {"shortfall", e.shortfall ? Range(*e.shortfall) : nlohmann::json()},
    });
  }
  nlohmann::json fit = nullptr;
  if (const auto& f = report.fit) {
    fit = {{"model", f->model},
           {"capacity", f->capacity},
           {"outside_allocator", f->outside_allocator},
           {"batch_that_failed", f->batch_that_failed},
           {"largest_batch", f->largest_batch},
           {"peak_reserved", f->peak_reserved},
           {"simulations", f->simulations}};
  }
  return {{"schema_version", kExplainJsonVersion},
          {"source", report.source},
          {"messages", messages},
          {"left_out", report.left_out},
          {"fit", fit}};
}

}  // namespace vramscope::report
