// Benchmark: the native recorder's hot path (`vramscope run --native`), on the CPU, through the
// fake CUPTI (src/native_capture/fake_cupti.h) that drives the recorder's real callback with the
// CUPTI-shaped data the driver passes.
//
// The workload looks like a training loop seen from the driver: `--sites` call sites, each at
// the bottom of a `--depth`-frame call chain (the Python interpreter's and PyTorch's frames in a
// real run), allocate with cuMemAlloc_v2 and free with cuMemFree_v2, `--window` allocations live
// at a time. Every driver call is one recorded event (CUPTI calls the recorder at entry and
// exit; the recorder records at exit). The stacks repeat, as in a training loop: after the first
// pass over the sites, every stack is already interned.
//
// It prints the cost of one event (ns, best of `--repeat`) for:
//   - the callback alone (the recorder silenced: CUPTI's dispatch into a recorder that is off);
//   - the whole recorder, the way `run --native` runs it (the trace file in `--dir`);
// and the whole broken into its parts, each timed alone on the same stacks:
//   - stack capture: glibc backtrace() of the same chains (libgcc's DWARF unwinder);
//   - the append: a record's bytes copied into the mapped trace file in `--dir` (and, for
//     comparison, one write(2) a record, as the recorder wrote before);
//   - interning, the clock, encoding and the lock: the rest.
// and compares the whole with the target (docs/benchmarks.md).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "native_capture/fake_cupti.h"
#include "native_capture/recorder.h"
#include "native_capture/unwinder.h"
#include "native_capture/vstrace_format.h"

namespace vramscope::bench {
namespace {

namespace fs = std::filesystem;
using capture::FakeCupti;
using capture::Recorder;
using capture::RecorderOptions;
using capture::Unwinder;
using Clock = std::chrono::steady_clock;

// The target for one recorded event with its stack, stacks already interned (a training loop's
// steady state): 1.5 us, so that a program making 1,000 driver allocations and frees a second
// (far more than PyTorch's caching allocator makes after its first step) spends under 0.15% of
// one core recording them. Before this benchmark existed it cost about 14 us (glibc's unwinder,
// a write(2) per record).
constexpr double kTargetNsPerEvent = 1500.0;

// What each call chain ends in: one driver call through the fake.
struct Leaf {
  enum class Does { kDriverCall, kCaptureOnly, kNothing };
  Does does = Does::kDriverCall;
  FakeCupti* cupti = nullptr;
  bool alloc = true;
  CUdeviceptr address = 0;
  size_t bytes = 0;
  const Unwinder* unwinder = nullptr;  // kCaptureOnly
  void* pcs[128];
  int depth = 0;
  int frames = 0;  // what the unwinder returned
};

__attribute__((noinline)) void CallDriver(Leaf* leaf) {
  if (leaf->does == Leaf::Does::kNothing) {
    leaf->frames = 0;
  } else if (leaf->does == Leaf::Does::kCaptureOnly) {
    leaf->frames = leaf->unwinder->Capture(leaf->pcs, leaf->depth);
  } else if (leaf->alloc) {
    CUdeviceptr out = leaf->address;
    cuMemAlloc_v2_params params{&out, leaf->bytes};
    leaf->cupti->Driver(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &params);
  } else {
    cuMemFree_v2_params params{leaf->address};
    leaf->cupti->Driver(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", &params);
  }
  asm volatile("" ::: "memory");  // no tail call: the frame stays on the stack
}

// A chain of `levels` frames whose return addresses spell `site` in binary: the two functions
// call each other through one of two call instructions, so each site has its own stack.
__attribute__((noinline)) void DescendA(Leaf* leaf, int levels, uint32_t site);
__attribute__((noinline)) void DescendB(Leaf* leaf, int levels, uint32_t site);

void DescendA(Leaf* leaf, int levels, uint32_t site) {
  if (levels == 0) {
    CallDriver(leaf);
  } else if ((site & 1U) != 0) {
    DescendB(leaf, levels - 1, site >> 1 | site << 31);
  } else {
    DescendA(leaf, levels - 1, site >> 1 | site << 31);
  }
  asm volatile("" ::: "memory");
}

void DescendB(Leaf* leaf, int levels, uint32_t site) {
  if (levels == 0) {
    CallDriver(leaf);
  } else if ((site & 1U) != 0) {
    DescendA(leaf, levels - 1, site >> 1 | site << 31);
  } else {
    DescendB(leaf, levels - 1, site >> 1 | site << 31);
  }
  asm volatile("" ::: "memory");
}

struct Workload {
  int events = 200000;
  int depth = 40;
  int sites = 64;
  int window = 256;
  int repeat = 5;
  fs::path dir;
};

// Runs the workload's events (alloc/free pairs in a sliding window) through `leaf`; seconds.
double RunEvents(const Workload& w, Leaf& leaf) {
  std::vector<CUdeviceptr> live;
  live.reserve(static_cast<size_t>(w.window));
  uint64_t next_address = 0x7f0000000000;
  const auto start = Clock::now();
  for (int i = 0; i < w.events; ++i) {
    const auto site = static_cast<uint32_t>(i % w.sites);
    const bool alloc = static_cast<int>(live.size()) < w.window && (i % 2 == 0 || live.empty());
    leaf.alloc = alloc;
    if (alloc) {
      leaf.address = next_address;
      leaf.bytes = (size_t{1} << 21) * (1 + site % 8);
      live.push_back(next_address);
      next_address += leaf.bytes;
    } else {
      leaf.address = live[static_cast<size_t>(i) % live.size()];
      live[static_cast<size_t>(i) % live.size()] = live.back();
      live.pop_back();
    }
    DescendA(&leaf, w.depth, site * 2654435761U);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

RecorderOptions Options(const fs::path& dir, std::string_view unwinder) {
  RecorderOptions o;
  o.unwinder = std::string(unwinder);
  o.capture_dir = dir.string();
  o.rank = 0;
  o.pid = static_cast<uint32_t>(::getpid());
  o.facts = {{"exe", "recorder_bench"}};
  o.stderr_fd = 2;
  return o;
}

// The whole recorder with the given unwinder (or, `silenced`, the callback into a recorder that
// is off): ns per event.
double RecorderNs(const Workload& w, std::string_view unwinder, bool silenced,
                  uintmax_t* trace_bytes) {
  double best = 1e300;
  for (int r = 0; r < w.repeat; ++r) {
    const fs::path dir = w.dir / fmt::format("run{}", r);
    fs::create_directories(dir);
    FakeCupti cupti;
    Recorder recorder(&cupti, Options(dir, unwinder));
    if (!recorder.Start()) std::exit(1);
    if (silenced) recorder.Silence();
    Leaf leaf;
    leaf.cupti = &cupti;
    best = std::min(best, RunEvents(w, leaf));
    recorder.Stop("exit");
    if (trace_bytes != nullptr) *trace_bytes = fs::file_size(recorder.trace_path());
    fs::remove_all(dir);
  }
  return best * 1e9 / w.events;
}

// The unwinder alone (or, without one, nothing at all), from the same chains, as deep as the
// recorder asks: ns per event.
double CaptureNs(const Workload& w, const Unwinder* unwinder) {
  double best = 1e300;
  for (int r = 0; r < w.repeat; ++r) {
    Leaf leaf;
    leaf.does = unwinder != nullptr ? Leaf::Does::kCaptureOnly : Leaf::Does::kNothing;
    leaf.unwinder = unwinder;
    leaf.depth = RecorderOptions{}.max_stack_frames;
    best = std::min(best, RunEvents(w, leaf));
  }
  return best * 1e9 / w.events;
}

// One record of `record_bytes` bytes per event appended to a trace file, as the recorder appends
// them: copied into the mapped file (vstrace::Writer), or (`with_write`) one write(2) each, as
// the recorder did before. ns per event.
double AppendNs(const Workload& w, size_t record_bytes, bool with_write) {
  const std::string record(record_bytes, 'x');
  const fs::path path = w.dir / "appends.vstrace";
  double best = 1e300;
  for (int r = 0; r < w.repeat; ++r) {
    fs::remove(path);
    std::string error;
    auto writer = vstrace::Writer::Create(path.string(), vstrace::Header{}, &error,
                                          with_write ? &::write : nullptr);
    if (writer == nullptr) {
      fmt::print(stderr, "recorder_bench: {}\n", error);
      std::exit(1);
    }
    const auto start = Clock::now();
    for (int i = 0; i < w.events; ++i) {
      if (!writer->AppendEncoded(record, &error)) {
        fmt::print(stderr, "recorder_bench: {}\n", error);
        std::exit(1);
      }
    }
    writer->Close(&error);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  fs::remove(path);
  return best * 1e9 / w.events;
}

int Main(int argc, char** argv) {
  Workload w;
  std::string dir = (fs::temp_directory_path() / "vramscope_recorder_bench").string();
  CLI::App app{"The native recorder's cost per event, through the fake CUPTI (no GPU)"};
  app.add_option("--events", w.events, "driver calls recorded per run")
      ->check(CLI::Range(1, 1 << 26));
  app.add_option("--depth", w.depth, "frames between the loop and the driver call")
      ->check(CLI::Range(1, 120));
  app.add_option("--sites", w.sites, "distinct call sites (distinct stacks)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--window", w.window, "allocations live at a time")->check(CLI::Range(1, 1 << 20));
  app.add_option("--repeat", w.repeat, "runs; the best is reported")->check(CLI::Range(1, 100));
  app.add_option("--dir", dir, "where the trace files go (a local disk, as a real run's)");
  CLI11_PARSE(app, argc, argv);
  w.dir = fs::path(dir);
  fs::create_directories(w.dir);

  const Unwinder fast = Unwinder::Load("auto");
  const Unwinder glibc = Unwinder::Load("glibc");
  uintmax_t trace_bytes = 0;
  const double chain = CaptureNs(w, nullptr);
  const double off = RecorderNs(w, "auto", true, nullptr) - chain;
  const double whole = RecorderNs(w, "auto", false, &trace_bytes) - chain;
  const double whole_glibc = RecorderNs(w, "glibc", false, nullptr) - chain;
  const double capture = CaptureNs(w, &fast) - chain;
  const double capture_glibc = CaptureNs(w, &glibc) - chain;
  // The steady state's records: an event record without definitions (the stacks are interned).
  const size_t record_bytes = std::max<size_t>(1, trace_bytes / static_cast<size_t>(w.events));
  const double write = AppendNs(w, record_bytes, false);
  const double write_before = AppendNs(w, record_bytes, true);
  const double rest = whole - off - capture - write;
  const auto share = [&](double part) { return 100.0 * part / whole; };

  fmt::print("native recorder, {} events ({} sites, {}-frame chains, {} live), best of {}\n",
             w.events, w.sites, w.depth, w.window, w.repeat);
  fmt::print("(the chain's own cost, {:.0f} ns/event, is taken out of every figure)\n", chain);
  fmt::print("  callback, recorder off          {:9.0f} ns/event\n", off);
  fmt::print("  whole recorder, glibc unwinder  {:9.0f} ns/event  ({})\n", whole_glibc,
             glibc.description());
  fmt::print("  whole recorder                  {:9.0f} ns/event  ({}; {:.1f} MB trace)\n", whole,
             fast.description(), static_cast<double>(trace_bytes) / 1e6);
  fmt::print("    callback dispatch             {:9.0f} ns/event  {:5.1f}%\n", off, share(off));
  fmt::print("    stack capture                 {:9.0f} ns/event  {:5.1f}%  (glibc: {:.0f})\n",
             capture, share(capture), capture_glibc);
  fmt::print("    {:3} B into the mapped file   {:9.0f} ns/event  {:5.1f}%  (write(2): {:.0f})\n",
             record_bytes, write, share(write), write_before);
  fmt::print("    interning, clock, encoding    {:9.0f} ns/event  {:5.1f}%\n", rest, share(rest));
  fmt::print(
      "  target                          {:9.0f} ns/event  {}  ({:.1f}x faster than glibc)\n",
      kTargetNsPerEvent, whole <= kTargetNsPerEvent ? "met" : "NOT met", whole_glibc / whole);
  fs::remove_all(w.dir);
  return 0;
}

}  // namespace
}  // namespace vramscope::bench

int main(int argc, char** argv) { return vramscope::bench::Main(argc, argv); }
