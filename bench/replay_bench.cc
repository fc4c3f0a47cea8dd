// Benchmark: the allocator model's replay (allocator::Replay) on a large synthetic training trace.
//
// The trace is built in memory and looks like what torch.cuda.memory._record_memory_history
// records for a training loop on one device, stream 0:
// - weights (12 per layer: 4 matrices, 8 small vectors; fp32, sizes not multiples of 512) are
//   allocated at the start and stay alive, like the embedding and the two cuBLAS workspaces
//   (forward and backward handles, 8,519,680 B each);
// - every iteration has its own sequence length (dynamic padding), so activation sizes change
//   from one iteration to the next;
// - forward: per layer, the bf16 casts of its matrices (autocast cache), layer norm outputs and
//   statistics, qkv, attention output and logsumexp, dropout masks, MLP activations; a few
//   temporaries are freed at once, the rest are saved for backward;
// - loss: fp32 logits, log-softmax, a scalar loss;
// - backward, layers in reverse: gradients of the inputs, bf16 weight gradients cast to fp32
//   .grad tensors (alive until zero_grad), and the saved activations freed in reverse order;
// - clip_grad_norm_ (foreach): one 4-byte norm per parameter, a stack, the total norm;
// - AdamW (foreach): the exp_avg / exp_avg_sq state of every parameter is created in the first
//   step and stays alive; each step allocates one sqrt temporary per parameter and frees them;
// - zero_grad(set_to_none=True) frees the .grad tensors.
// Each tensor's events are alloc, free_requested, free_completed (no record_stream). The
// addresses are the ones the allocator model hands out, so the trace is consistent; there are no
// segment events: the replay decides. `--live K` sets the number of long-lived tensors (weights
// and optimizer state, about K), which scales the number of live and cached blocks; `--events N`
// cuts the trace at N events (the last iteration may be partial).
//
// The replay runs in what-if mode (follow_recording = false, record_curves = false), best of
// `--repeat`. `--dump FILE` writes the request stream for bench/allocator_model_reference.py
// (format in WriteDump); bench/replay_vs_python.py runs both on the same input.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/replay.h"
#include "model/trace.h"

namespace vramscope::bench {
namespace {

using allocator::BlockId;
using allocator::CachingAllocator;
using allocator::kNoBlock;
using model::Action;

// splitmix64: deterministic on every platform (std distributions are not).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t Uniform(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }

 private:
  uint64_t state_;
};

struct Tensor {
  BlockId block = kNoBlock;
  uint64_t addr = 0;
  uint64_t bytes = 0;
  bool live = false;
};

// What the generator saw while building the trace (the allocator model ran alongside it to give
// the addresses, so these are the replay's own block counts).
struct TraceStats {
  uint64_t iterations = 0;  // started (the last one may be cut)
  uint64_t long_lived = 0;
  uint64_t tensors = 0;  // allocations
  uint64_t small_tensors = 0;
  uint64_t peak_live_tensors = 0;  // allocated blocks
  uint64_t peak_free_blocks = 0;   // cached (free) blocks in both pools
  double mean_free_blocks = 0;
  double mean_live_tensors = 0;
  uint64_t end_free_blocks = 0;
  uint64_t segments = 0;
  uint64_t peak_reserved = 0;
  uint64_t peak_allocated = 0;
};

// Appends tensor events to a trace, asking the allocator model for each tensor's address.
class TraceBuilder {
 public:
  TraceBuilder(model::Trace& trace, uint64_t max_events)
      : trace_(trace),
        max_events_(max_events),
        addresses_(kAddressBase),
        model_(allocator::AllocatorSettings{}, &addresses_) {
    trace_.events.Reserve(max_events);
  }

  bool Full() const { return trace_.events.count() >= max_events_; }

  Tensor Alloc(uint64_t bytes) {
    Tensor t;
    if (Full()) return t;
    const allocator::MallocResult m = model_.Malloc(bytes, 0);
    model_.segment_events().clear();
    t.block = m.block;
    t.addr = m.addr;
    t.bytes = bytes;
    t.live = true;
    ++stats_.tensors;
    if (bytes <= allocator::kSmallSize) ++stats_.small_tensors;
    ++live_;
    Push(Action::kAlloc, t);
    return t;
  }

  void Free(Tensor& t) {
    if (!t.live) return;
    t.live = false;
    if (Full()) return;
    model_.FreeRequested(t.block);
    --live_;
    Push(Action::kFreeRequested, t);
    if (Full()) return;
    model_.FreeCompleted(t.block);
    Push(Action::kFreeCompleted, t);
  }

  TraceStats Finish() {
    const double n = static_cast<double>(std::max<size_t>(1, trace_.events.count()));
    stats_.mean_free_blocks = static_cast<double>(free_sum_) / n;
    stats_.mean_live_tensors = static_cast<double>(live_sum_) / n;
    stats_.end_free_blocks = model_.FreeBlockCount();
    stats_.segments = model_.stats().segments;
    stats_.peak_reserved = model_.stats().peak_reserved;
    stats_.peak_allocated = model_.stats().peak_allocated;
    return stats_;
  }
  TraceStats& stats() { return stats_; }

 private:
  // Far above anything the replay compares with; like the user-space pointers CUDA hands out.
  static constexpr uint64_t kAddressBase = 0x7f0000000000ULL;

  void Push(Action a, const Tensor& t) {
    time_us_ += 1 + (time_us_ & 3);
    trace_.events.Push(a, 0, t.addr, t.bytes, 0, time_us_, model::kEmptyStack);
    const uint64_t free_blocks = model_.FreeBlockCount();
    stats_.peak_free_blocks = std::max(stats_.peak_free_blocks, free_blocks);
    stats_.peak_live_tensors = std::max(stats_.peak_live_tensors, live_);
    free_sum_ += free_blocks;
    live_sum_ += live_;
  }

  model::Trace& trace_;
  uint64_t max_events_;
  allocator::SyntheticAddresses addresses_;
  CachingAllocator model_;
  TraceStats stats_;
  uint64_t live_ = 0;
  uint64_t free_sum_ = 0;
  uint64_t live_sum_ = 0;
  int64_t time_us_ = 1'700'000'000'000'000;
};

struct Layer {
  uint64_t h = 0;       // width
  uint64_t heads = 0;   // attention heads
  uint64_t w[12] = {};  // weight bytes, fp32
};
// Weight order in a layer.
enum : int { kLn1W, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2W, kLn2B, kFc1W, kFc1B, kFc2W, kFc2B };
constexpr uint64_t kBatch = 4;
constexpr uint64_t kVocab = 50257;
constexpr uint64_t kEmbedWidth = 1024;
constexpr uint64_t kCublasWorkspace = 8'519'680;  // ":4096:2:16:8"

// Builds the trace: about `long_lived` weights and optimizer-state tensors, cut at `events`.
TraceStats BuildTrainingTrace(model::Trace& trace, uint64_t long_lived, uint64_t events,
                              uint64_t seed) {
  Rng rng(seed);
  // 12 weights per layer, each with exp_avg and exp_avg_sq: 36 long-lived tensors per layer.
  const uint64_t layer_count = std::max<uint64_t>(1, (long_lived + 35) / 36);
  std::vector<Layer> layers(layer_count);
  for (Layer& l : layers) {
    l.h = rng.Uniform(256, 2047);
    l.heads = std::max<uint64_t>(1, l.h / 64);
    const uint64_t h = l.h;
    l.w[kLn1W] = l.w[kLn1B] = l.w[kLn2W] = l.w[kLn2B] = l.w[kProjB] = l.w[kFc2B] = 4 * h;
    l.w[kQkvW] = 12 * h * h;  // fp32 [3h, h]
    l.w[kQkvB] = 12 * h;
    l.w[kProjW] = 4 * h * h;
    l.w[kFc1W] = 16 * h * h;  // fp32 [4h, h]
    l.w[kFc1B] = 16 * h;
    l.w[kFc2W] = 16 * h * h;
  }

  TraceBuilder b(trace, events);
  // Parameters in registration order: the embedding, then each layer's weights.
  std::vector<uint64_t> param_bytes;
  param_bytes.push_back(4 * kVocab * kEmbedWidth);
  for (const Layer& l : layers) param_bytes.insert(param_bytes.end(), l.w, l.w + 12);
  std::vector<Tensor> params;
  params.reserve(param_bytes.size());
  for (uint64_t bytes : param_bytes) params.push_back(b.Alloc(bytes));
  std::vector<Tensor> exp_avg(params.size());
  std::vector<Tensor> exp_avg_sq(params.size());
  std::vector<Tensor> grads(params.size());
  Tensor cublas_forward;
  Tensor cublas_backward;
  b.stats().long_lived = 3 * params.size() + 2;

  std::vector<std::vector<Tensor>> saved(layer_count);
  std::vector<Tensor> sqrt_tmp(params.size());
  std::vector<Tensor> norms(params.size());
  for (uint64_t it = 0; !b.Full(); ++it) {
    ++b.stats().iterations;
    const uint64_t seq = rng.Uniform(384, 1024);
    const uint64_t tokens = kBatch * seq;
    Tensor ids = b.Alloc(8 * tokens);
    Tensor labels = b.Alloc(8 * tokens);
    Tensor x = b.Alloc(2 * tokens * kEmbedWidth);  // embedding output, bf16
    Tensor loss;
    {
      // forward
      for (uint64_t li = 0; li < layer_count && !b.Full(); ++li) {
        const Layer& l = layers[li];
        const uint64_t h = l.h;
        const uint64_t act = 2 * tokens * h;
        std::vector<Tensor>& s = saved[li];
        s.clear();
        auto keep = [&](uint64_t bytes) { s.push_back(b.Alloc(bytes)); };
        if (!cublas_forward.live && it == 0) cublas_forward = b.Alloc(kCublasWorkspace);
        keep(act);                         // ln1 output
        keep(4 * tokens);                  // mean
        keep(4 * tokens);                  // rstd
        keep(l.w[kQkvW] / 2);              // bf16 weight cast (autocast cache)
        keep(3 * act);                     // qkv
        keep(4 * kBatch * l.heads * seq);  // logsumexp
        keep(act);                         // attention output
        keep(l.w[kProjW] / 2);
        Tensor proj = b.Alloc(act);
        keep(tokens * h);  // dropout mask
        keep(act);         // residual
        b.Free(proj);
        keep(act);  // ln2 output
        keep(4 * tokens);
        keep(4 * tokens);
        keep(l.w[kFc1W] / 2);
        keep(4 * act);  // fc1 output
        keep(4 * act);  // gelu output
        keep(l.w[kFc2W] / 2);
        Tensor fc2 = b.Alloc(act);
        keep(tokens * h);  // dropout mask
        keep(act);         // layer output
        b.Free(fc2);
      }
      // loss
      Tensor logits = b.Alloc(4 * tokens * kVocab);
      Tensor logp = b.Alloc(4 * tokens * kVocab);
      b.Free(logits);
      loss = b.Alloc(4);
      // backward
      if (!cublas_backward.live && it == 0) cublas_backward = b.Alloc(kCublasWorkspace);
      Tensor grad_logits = b.Alloc(4 * tokens * kVocab);
      b.Free(logp);
      Tensor g = b.Alloc(2 * tokens * layers.back().h);
      b.Free(grad_logits);
      auto step_grad = [&](uint64_t bytes) {
        Tensor next = b.Alloc(bytes);
        b.Free(g);
        g = next;
      };
      for (uint64_t li = layer_count; li-- > 0 && !b.Full();) {
        const Layer& l = layers[li];
        const uint64_t h = l.h;
        const uint64_t act = 2 * tokens * h;
        std::vector<Tensor>& s = saved[li];
        const size_t p0 = 1 + 12 * li;  // this layer's first parameter
        auto weight_grad = [&](int w, bool via_bf16) {
          Tensor tmp;
          if (via_bf16) tmp = b.Alloc(l.w[w] / 2);
          grads[p0 + w] = b.Alloc(l.w[w]);  // first accumulation into .grad
          b.Free(tmp);
        };
        // Frees saved activations from the back down to index `down_to`.
        auto release = [&](size_t down_to) {
          while (s.size() > down_to) {
            b.Free(s.back());
            s.pop_back();
          }
        };
        // Saved (forward order): 0 ln1 out, 1-2 ln1 stats, 3 qkv weight cast, 4 qkv, 5 logsumexp,
        // 6 attention out, 7 proj weight cast, 8 dropout mask, 9 residual, 10 ln2 out, 11-12 ln2
        // stats, 13 fc1 weight cast, 14 fc1 out, 15 gelu out, 16 fc2 weight cast, 17 dropout
        // mask, 18 layer output.
        step_grad(act);  // dropout
        release(17);
        weight_grad(kFc2W, true);  // fc2
        weight_grad(kFc2B, false);
        step_grad(4 * act);
        release(15);
        step_grad(4 * act);  // gelu
        release(14);
        weight_grad(kFc1W, true);  // fc1
        weight_grad(kFc1B, false);
        step_grad(act);
        release(13);
        weight_grad(kLn2W, false);  // ln2
        weight_grad(kLn2B, false);
        step_grad(act);
        release(10);
        step_grad(act);  // residual, dropout
        release(8);
        weight_grad(kProjW, true);  // proj
        weight_grad(kProjB, false);
        step_grad(act);
        release(6);
        step_grad(3 * act);  // attention
        release(4);
        weight_grad(kQkvW, true);  // qkv
        weight_grad(kQkvB, false);
        step_grad(act);
        release(3);
        weight_grad(kLn1W, false);  // ln1
        weight_grad(kLn1B, false);
        step_grad(li > 0 ? 2 * tokens * layers[li - 1].h : 2 * tokens * kEmbedWidth);
        release(0);
      }
      grads[0] = b.Alloc(param_bytes[0]);  // embedding
      b.Free(g);
      b.Free(x);
      b.Free(ids);
    }
    // clip_grad_norm_ (foreach): a norm per parameter, stacked, one total.
    for (size_t p = 0; p < params.size(); ++p) norms[p] = b.Alloc(4);
    Tensor stacked = b.Alloc(4 * params.size());
    Tensor total = b.Alloc(4);
    for (Tensor& n : norms) b.Free(n);
    b.Free(stacked);
    Tensor coef = b.Alloc(4);
    b.Free(total);
    // AdamW (foreach): state on the first step, one sqrt temporary per parameter.
    if (it == 0) {
      for (size_t p = 0; p < params.size(); ++p) {
        exp_avg[p] = b.Alloc(param_bytes[p]);
        exp_avg_sq[p] = b.Alloc(param_bytes[p]);
      }
    }
    for (size_t p = 0; p < params.size(); ++p) sqrt_tmp[p] = b.Alloc(param_bytes[p]);
    for (Tensor& t : sqrt_tmp) b.Free(t);
    b.Free(coef);
    // zero_grad(set_to_none=True)
    for (Tensor& t : grads) b.Free(t);
    b.Free(loss);
    b.Free(labels);
  }
  return b.Finish();
}

// The trace as the replay sees it: one device, events in order, lifetimes derived.
struct Workload {
  model::Trace trace;
  TraceStats stats;
  double build_s = 0;
};

void MakeWorkload(Workload& w, uint64_t long_lived, uint64_t events, uint64_t seed) {
  const auto t0 = std::chrono::steady_clock::now();
  w.stats = BuildTrainingTrace(w.trace, long_lived, events, seed);
  w.trace.devices = {0};
  w.trace.device_event_ranges = {{0, w.trace.events.count()}};
  w.trace.facts.has_trace = true;
  model::StableSortEventsByDevice(w.trace.events);  // one device: keeps the order
  model::BuildAllocations(w.trace);
  w.build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Per event: the allocation it belongs to (as Replay pairs them), -1 for none.
std::vector<int32_t> AllocationOfEvents(const model::Trace& trace) {
  std::vector<int32_t> of(trace.events.count(), -1);
  for (size_t a = 0; a < trace.allocations.size(); ++a) {
    const model::Allocation& al = trace.allocations[a];
    for (const int32_t e : {al.alloc_event, al.free_requested_event, al.free_completed_event}) {
      if (e >= 0) of[static_cast<size_t>(e)] = static_cast<int32_t>(a);
    }
  }
  return of;
}

// Dump format (the host byte order: little-endian on x86-64 and arm64), read by
// bench/allocator_model_reference.py:
//   8 bytes  "VSREPLY1"
//   u64      n (events), u64 allocations
//   n x u8   action (0 alloc, 1 free_requested, 2 free_completed)
//   n x u64  size (requested bytes)
//   n x u64  stream
//   n x i32  allocation index (which tensor the event belongs to)
bool WriteDump(const std::string& path, const model::Trace& trace) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const model::Events& ev = trace.events;
  const uint64_t n = ev.count();
  const uint64_t allocations = trace.allocations.size();
  const std::vector<int32_t> of = AllocationOfEvents(trace);
  std::vector<uint8_t> action(n);
  std::vector<uint64_t> stream(n);
  for (size_t i = 0; i < n; ++i) {
    action[i] = static_cast<uint8_t>(ev.action[i]);
    stream[i] = ev.stream[i];
  }
  bool ok = std::fwrite("VSREPLY1", 1, 8, f) == 8;
  ok = ok && std::fwrite(&n, sizeof n, 1, f) == 1;
  ok = ok && std::fwrite(&allocations, sizeof allocations, 1, f) == 1;
  ok = ok && std::fwrite(action.data(), 1, n, f) == n;
  ok = ok && std::fwrite(ev.size.data(), sizeof(uint64_t), n, f) == n;
  ok = ok && std::fwrite(stream.data(), sizeof(uint64_t), n, f) == n;
  ok = ok && std::fwrite(of.data(), sizeof(int32_t), n, f) == n;
  return std::fclose(f) == 0 && ok;
}

struct Timing {
  double replay_s = std::numeric_limits<double>::infinity();  // best
  double core_s = std::numeric_limits<double>::infinity();    // best
  allocator::ReplayResult result;
  uint64_t core_peak_reserved = 0;
  uint64_t core_peak_allocated = 0;
};

// The allocator model alone on the same requests, without Replay's bookkeeping: where the time
// of a replay goes.
double TimeCore(const model::Trace& trace, const std::vector<int32_t>& of, uint64_t* peak_reserved,
                uint64_t* peak_allocated) {
  allocator::SyntheticAddresses addresses(uint64_t{1} << 44);
  CachingAllocator m(allocator::AllocatorSettings{}, &addresses);
  std::vector<BlockId> block(trace.allocations.size(), kNoBlock);
  const model::Events& ev = trace.events;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ev.count(); ++i) {
    const int32_t a = of[i];
    if (a < 0) continue;
    switch (ev.action[i]) {
      case Action::kAlloc:
        block[a] = m.Malloc(ev.size[i], ev.stream[i]).block;
        m.segment_events().clear();
        break;
      case Action::kFreeRequested:
        m.FreeRequested(block[a]);
        break;
      case Action::kFreeCompleted:
        if (m.IsPendingFree(block[a])) m.FreeCompleted(block[a]);
        break;
      default:
        break;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *peak_reserved = m.stats().peak_reserved;
  *peak_allocated = m.stats().peak_allocated;
  return s;
}

Timing TimeReplay(const Workload& w, int repeat) {
  allocator::ReplayOptions options;
  options.follow_recording = false;
  options.record_curves = false;
  Timing t;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto result = allocator::Replay(w.trace, 0, options);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!result.ok()) {
      fmt::print(stderr, "replay failed: {}\n", result.status().message());
      std::exit(1);
    }
    if (s < t.replay_s) t.replay_s = s;
    if (r == 0) t.result = std::move(*result);
  }
  const std::vector<int32_t> of = AllocationOfEvents(w.trace);
  for (int r = 0; r < repeat; ++r) {
    t.core_s =
        std::min(t.core_s, TimeCore(w.trace, of, &t.core_peak_reserved, &t.core_peak_allocated));
  }
  return t;
}

struct FinalCounts {
  uint64_t allocated_blocks = 0;
  uint64_t free_blocks = 0;
};
FinalCounts CountFinal(const allocator::ReplayResult& r) {
  FinalCounts c;
  for (const auto& s : r.final_state) {
    for (const auto& b : s.blocks) {
      if (b.state == allocator::BlockView::State::kFree) ++c.free_blocks;
      if (b.state == allocator::BlockView::State::kAllocated) ++c.allocated_blocks;
    }
  }
  return c;
}

std::string Thousands(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

int RunOne(uint64_t live, uint64_t events, uint64_t seed, int repeat, const std::string& dump,
           bool json) {
  Workload w;
  MakeWorkload(w, live, events, seed);
  const uint64_t n = w.trace.events.count();
  if (!dump.empty() && !WriteDump(dump, w.trace)) {
    fmt::print(stderr, "cannot write {}\n", dump);
    return 1;
  }
  const Timing t = TimeReplay(w, repeat);
  const allocator::ReplayResult& r = t.result;
  const FinalCounts fc = CountFinal(r);
  const TraceStats& s = w.stats;
  const double eps = static_cast<double>(n) / t.replay_s;
  const double ns = t.replay_s * 1e9 / static_cast<double>(n);
  const double core_ns = t.core_s * 1e9 / static_cast<double>(n);
  const bool consistent =
      r.stats.peak_reserved == s.peak_reserved && r.stats.peak_allocated == s.peak_allocated &&
      t.core_peak_reserved == s.peak_reserved && fc.free_blocks == s.end_free_blocks &&
      r.events_replayed == static_cast<int64_t>(n);
  fmt::print(
      "synthetic training trace: --live {} (long-lived tensors {}), {} events, {} tensors ({:.0f}% "
      "<= 1 MiB), {} iterations, built in {:.2f} s\n",
      live, Thousands(s.long_lived), Thousands(n), Thousands(s.tensors),
      100.0 * static_cast<double>(s.small_tensors) /
          static_cast<double>(std::max<uint64_t>(1, s.tensors)),
      s.iterations, w.build_s);
  fmt::print(
      "  blocks: allocated peak {} mean {}; free (cached) peak {} mean {} end {}; segments {}\n",
      Thousands(s.peak_live_tensors),
      Thousands(static_cast<uint64_t>(std::llround(s.mean_live_tensors))),
      Thousands(s.peak_free_blocks),
      Thousands(static_cast<uint64_t>(std::llround(s.mean_free_blocks))), Thousands(fc.free_blocks),
      Thousands(r.stats.segments));
  fmt::print("  peak reserved {} B, peak allocated {} B\n", r.stats.peak_reserved,
             r.stats.peak_allocated);
  fmt::print("  Replay (best of {}): {:.3f} s, {:.2f} M events/s, {:.1f} ns/event\n", repeat,
             t.replay_s, eps / 1e6, ns);
  fmt::print("  CachingAllocator alone, same requests (best of {}): {:.3f} s, {:.1f} ns/event\n",
             repeat, t.core_s, core_ns);
  fmt::print("  check: replay, model alone and the generator's model agree: {}\n",
             consistent ? "yes" : "NO");
  if (json) {
    fmt::print(
        "{{\"live\": {}, \"long_lived\": {}, \"events\": {}, \"tensors\": {}, \"iterations\": {}, "
        "\"replay_s\": {:.6f}, \"events_per_s\": {:.0f}, \"ns_per_event\": {:.3f}, "
        "\"core_s\": {:.6f}, \"core_ns_per_event\": {:.3f}, \"peak_reserved\": {}, "
        "\"peak_allocated\": {}, \"segments\": {}, \"cuda_mallocs\": {}, \"peak_live_blocks\": {}, "
        "\"mean_live_blocks\": {:.1f}, \"peak_free_blocks\": {}, \"mean_free_blocks\": {:.1f}, "
        "\"end_free_blocks\": {}, \"end_allocated_blocks\": {}, \"consistent\": {}}}\n",
        live, s.long_lived, n, s.tensors, s.iterations, t.replay_s, eps, ns, t.core_s, core_ns,
        r.stats.peak_reserved, r.stats.peak_allocated, r.stats.segments, r.stats.cuda_mallocs,
        s.peak_live_tensors, s.mean_live_tensors, s.peak_free_blocks, s.mean_free_blocks,
        fc.free_blocks, fc.allocated_blocks, consistent ? "true" : "false");
  }
  return consistent ? 0 : 1;
}

int RunSweep(const std::vector<uint64_t>& ks, uint64_t events, uint64_t seed, int repeat) {
  struct Row {
    uint64_t k, long_lived, n, peak_live, peak_free;
    double mean_live, mean_free, ns, core_ns;
  };
  std::vector<Row> rows;
  int rc = 0;
  for (const uint64_t k : ks) {
    Workload w;
    MakeWorkload(w, k, events, seed);
    const Timing t = TimeReplay(w, repeat);
    const TraceStats& s = w.stats;
    const uint64_t n = w.trace.events.count();
    if (t.result.stats.peak_reserved != s.peak_reserved) rc = 1;
    rows.push_back({k, s.long_lived, n, s.peak_live_tensors, s.peak_free_blocks,
                    s.mean_live_tensors, s.mean_free_blocks,
                    t.replay_s * 1e9 / static_cast<double>(n),
                    t.core_s * 1e9 / static_cast<double>(n)});
    fmt::print(stderr, "  --live {}: {:.1f} ns/event\n", k, rows.back().ns);
  }
  fmt::print(
      "| --live K | long-lived | events | allocated blocks (peak / mean) | free blocks "
      "(peak / mean) | Replay ns/event | Replay M events/s | model alone ns/event |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {} | {} / {} | {} / {} | {:.1f} | {:.1f} | {:.1f} |\n", Thousands(r.k),
               Thousands(r.long_lived), Thousands(r.n), Thousands(r.peak_live),
               Thousands(static_cast<uint64_t>(std::llround(r.mean_live))), Thousands(r.peak_free),
               Thousands(static_cast<uint64_t>(std::llround(r.mean_free))), r.ns, 1e3 / r.ns,
               r.core_ns);
  }
  return rc;
}

}  // namespace
}  // namespace vramscope::bench

int main(int argc, char** argv) {
  CLI::App app{"Times allocator::Replay on a synthetic training trace"};
  uint64_t events = 10'000'000;
  uint64_t live = 1000;
  uint64_t seed = 1;
  int repeat = 3;
  std::string dump;
  bool sweep = false;
  bool json = false;
  std::vector<uint64_t> sweep_ks = {100, 1000, 10000, 100000};
  app.add_option("--events", events, "trace events (default 10,000,000)");
  app.add_option("--live", live,
                 "long-lived tensors (weights + optimizer state), about; scales the live and "
                 "cached blocks (default 1000)");
  app.add_option("--seed", seed, "random seed of the generator");
  app.add_option("--repeat", repeat, "timed runs, the best counts (default 3)");
  app.add_option("--dump", dump, "write the request stream here (for the Python reference model)");
  app.add_flag("--sweep", sweep, "time several --live values and print ns/event per value");
  app.add_option("--sweep-live", sweep_ks, "the --live values of --sweep");
  app.add_flag("--json", json, "also print the results as one JSON line");
  CLI11_PARSE(app, argc, argv);
  if (events < 1 || repeat < 1) {
    fmt::print(stderr, "--events and --repeat must be >= 1\n");
    return 2;
  }
  if (events > vramscope::model::kMaxEvents) {
    fmt::print(stderr, "--events: at most {}\n", vramscope::model::kMaxEvents);
    return 2;
  }
  try {
    if (sweep) return vramscope::bench::RunSweep(sweep_ks, events, seed, repeat);
    return vramscope::bench::RunOne(live, events, seed, repeat, dump, json);
  } catch (const std::exception& e) {
    fmt::print(stderr, "replay_bench: {}\n", e.what());
    return 1;
  }
}
