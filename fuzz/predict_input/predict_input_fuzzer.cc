// libFuzzer target for what `vramscope predict` reads: model descriptions (Hugging Face
// config.json files and layer lists, ParseModelJson) and the Python tracer's tensor streams
// (ParseTracerStream). The same bytes go to both readers.
//
// A rejected input must give one InvalidInput line naming the source. A model description that
// parses, and is small enough to simulate quickly, is trained for one step at batch 1 under a
// set-up picked from a hash of the input (dtype, autocast, checkpointing, LoRA, optimizer,
// accumulation, ZeRO), and the stream must be well formed: every id allocated once, every free
// of a live id, and nothing but weights, gradients and optimizer state live when the step ends.
// Simulated and traced streams then go through the GPU's workspace rules and the allocator
// model: BuildPredictedTrace must accept them, agree with SimulatePeaks on the peaks, and end
// the trace with an OOM event exactly when a small capacity is exceeded.
//
// Build: cmake -DVRAMSCOPE_BUILD_FUZZERS=ON with clang (target predict_input_fuzzer).
// Run:   predict_input_fuzzer -max_len=4096 -dict=src/predict/predict_input_fuzzer.dict
//                             fuzz/predict_input/corpus
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "predict/build_trace.h"
#include "predict/device_rules.h"
#include "predict/model_description.h"
#include "predict/model_spec.h"
#include "predict/parallel_layout.h"
#include "predict/role_stream.h"
#include "predict/tracer_stream.h"

namespace {

using vramscope::StatusCode;
using vramscope::model::Category;
using namespace vramscope::predict;  // NOLINT(google-build-using-namespace)

// Aborts (a finding for libFuzzer) when an invariant does not hold.
void Check(bool condition) {
  if (!condition) __builtin_trap();
}

const std::string kModelPath = "fuzz.json";
const std::string kTracePath = "fuzz.jsonl";

// A rejected input: one line, InvalidInput, naming the source first.
void CheckError(const vramscope::Status& status, const std::string& prefix) {
  Check(status.IsInputError());
  Check(status.message().rfind(prefix, 0) == 0);
  Check(status.message().find('\n') == std::string::npos);
}

// Bounds that keep one simulated step small (the simulation's cost grows with the layers; the
// sizes only enter the byte counts, which must not overflow).
constexpr uint64_t kMaxDim = 4096;
constexpr uint64_t kMaxVocab = uint64_t{1} << 18;
constexpr uint64_t kMaxLayers = 8;
constexpr size_t kMaxListLayers = 32;

bool SmallEnough(const ModelSpec& m) {
  if (m.family == Family::kLayerList) {
    if (m.layer_list.size() > kMaxListLayers) return false;
    for (const uint64_t d : m.input_shape) {
      if (d > kMaxDim) return false;
    }
    for (const LayerSpec& l : m.layer_list) {
      if (l.in > kMaxDim || l.out > kMaxDim || l.kernel > kMaxDim || l.stride > kMaxDim ||
          l.padding > kMaxDim || l.heads > kMaxDim) {
        return false;
      }
    }
    return true;
  }
  return m.layers <= kMaxLayers && m.hidden <= kMaxDim && m.intermediate <= kMaxDim &&
         m.heads <= kMaxDim && m.kv_heads <= kMaxDim && m.vocab <= kMaxVocab &&
         m.max_positions <= kMaxVocab && m.default_seq <= kMaxDim && m.type_vocab <= kMaxDim &&
         m.image_size <= kMaxDim && m.patch <= kMaxDim && m.channels <= kMaxDim &&
         m.num_labels <= kMaxVocab;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// A training set-up picked by the hash's bits: batch 1, one step.
TrainingSetup SetupFor(uint64_t h) {
  TrainingSetup s;
  s.batch = 1;
  s.steps = 1;
  if (h & 1) s.precision.autocast = DType::kBF16;
  if (h & 2) s.checkpointing = true;
  if (h & 4) s.lora_rank = 4;
  static constexpr OptimizerKind kKinds[] = {OptimizerKind::kAdamW, OptimizerKind::kAdam,
                                             OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                             OptimizerKind::kNone};
  s.optimizer.kind = kKinds[(h >> 3) % 5];
  static constexpr OptimizerImpl kImpls[] = {OptimizerImpl::kForeach, OptimizerImpl::kFused,
                                             OptimizerImpl::kForLoop};
  s.optimizer.impl = kImpls[(h >> 6) % 3];
  if (h & (1 << 8)) s.optimizer.weight_decay = 0.01;
  if (h & (1 << 9)) s.grad_accum = 2;
  if (h & (1 << 10)) s.set_to_none = false;
  if (h & (1 << 11)) s.zero_grad = false;
  if (!s.precision.autocast && (h & (1 << 12))) {
    s.precision.param = DType::kBF16;
    s.optimizer.master_weights = (h & (1 << 13)) != 0;
  }
  static constexpr ZeroMode kZero[] = {ZeroMode::kNone, ZeroMode::kZero1, ZeroMode::kZero2,
                                       ZeroMode::kZero3, ZeroMode::kFsdp};
  s.zero = kZero[(h >> 14) % 5];
  if (s.zero != ZeroMode::kNone) s.world_size = 2 + static_cast<int>((h >> 17) % 7);
  // Plain data parallel: DDP's buckets (broadcast, initial bucket, rebuild in step 2).
  if (s.zero == ZeroMode::kNone && ((h >> 23) & 1) != 0) {
    s.world_size = 2;
    s.ddp_bucket_cap_bytes = uint64_t{1} << (10 + (h >> 24) % 20);
  }
  return s;
}

// Every id allocated once and freed at most once while live. Returns the live ids' categories.
std::unordered_map<uint64_t, Category> LiveAtEnd(const TensorStream& s, bool strict) {
  std::unordered_map<uint64_t, Category> live;
  std::unordered_map<uint64_t, bool> seen;
  for (const StreamEvent& e : s.events) {
    if (e.kind == StreamEvent::Kind::kAlloc) {
      Check(seen.emplace(e.id, true).second);
      live.emplace(e.id, e.category);
    } else if (e.kind == StreamEvent::Kind::kFree) {
      Check(seen.count(e.id) > 0);
      const bool was_live = live.erase(e.id) > 0;
      if (strict) Check(was_live);
    } else if (e.kind == StreamEvent::Kind::kPhase) {
      Check(e.name < s.strings.size());
    }
    Check(e.name < s.strings.size() && e.op < s.strings.size());
  }
  return live;
}

uint64_t BytesOf(const TensorStream& s, uint64_t id) {
  for (const StreamEvent& e : s.events) {
    if (e.kind == StreamEvent::Kind::kAlloc && e.id == id) return e.bytes;
  }
  return 0;
}

// The allocator model over a stream (workspaces added): the trace must build, SimulatePeaks must
// agree with it, and a capacity below the largest request must end the trace with an OOM event
// at that request or before. A simulated step of a small model fits an unlimited device; a
// traced one may ask for more than any device has (2^50 bytes and up), and then both must say
// so.
void Allocate(TensorStream stream, bool must_fit) {
  const auto rules = RulesFor(90, "2.11");
  Check(rules.ok());
  AddWorkspaces(stream, *rules);
  LiveAtEnd(stream, /*strict=*/false);
  BuildOptions options;
  const auto peaks = SimulatePeaks(stream, options.settings);
  Check(peaks.ok());
  if (must_fit) Check(!peaks->oom);
  // The largest request, and where it first comes.
  uint64_t largest = 0;
  size_t largest_at = 0;
  for (size_t i = 0; i < stream.events.size(); ++i) {
    const StreamEvent& e = stream.events[i];
    if (e.kind == StreamEvent::Kind::kAlloc && e.bytes > largest) {
      largest = e.bytes;
      largest_at = i;
    }
  }
  // The same stream, to build twice (the trace takes the string table).
  TensorStream copy;
  copy.events = stream.events;
  for (size_t i = 1; i < stream.strings.size(); ++i) {
    copy.strings.Intern(stream.strings.Get(static_cast<vramscope::model::StringId>(i)));
  }
  const auto built = BuildPredictedTrace(std::move(stream), options);
  Check(built.ok());
  Check(built->oom_at.has_value() == peaks->oom);
  Check(built->peak_allocated == peaks->peak_allocated);
  Check(built->peak_reserved == peaks->peak_reserved);
  Check(built->peak_allocated <= built->peak_reserved);
  if (peaks->oom || largest < (uint64_t{1} << 20)) return;
  // No segment can hold the largest request: the run dies there at the latest.
  options.settings.capacity = largest - 1;
  const auto small_peaks = SimulatePeaks(copy, options.settings);
  Check(small_peaks.ok() && small_peaks->oom);
  const auto small = BuildPredictedTrace(std::move(copy), options);
  Check(small.ok());
  Check(small->oom_at.has_value() && *small->oom_at <= largest_at);
  Check(small->trace.events.count() > 0);
  Check(small->trace.events.action.back() == vramscope::model::Action::kOom);
  Check(small->peak_reserved <= options.settings.capacity);
  Check(small->peak_allocated == small_peaks->peak_allocated);
}

// The per-rank estimate on a layout drawn from the input's hash: refused with a usage error, or
// roles whose stages cover the model's layers once and whose totals add up.
void FuzzParallel(const ModelSpec& spec, const TrainingSetup& setup, uint64_t h) {
  ParallelLayout l;
  l.tp = uint64_t{1} << ((h >> 30) % 3);
  l.pp = 1 + (h >> 32) % 4;
  l.cp = 1 + (h >> 34) % 2;
  l.dp = 1 + (h >> 35) % 3;
  l.ep = 1 + (h >> 37) % 2;
  l.sequence_parallel = l.tp > 1 && ((h >> 38) & 1) != 0;
  l.micro_batches = 1 + (h >> 39) % 8;
  if (((h >> 42) & 1) != 0) {
    l.schedule = PipelineSchedule::kInterleaved;
    l.virtual_stages = 1 + (h >> 43) % 3;
  }
  // HSDP: a shard group of 1 .. 3 DP ranks (one that does not divide DP must be refused).
  if (((h >> 45) & 1) != 0) l.dp_shard = 1 + (h >> 46) % 3;
  // MoE: a capacity factor of 0 (dropless), 1.0 or 1.5; a dense model must refuse one.
  l.capacity_factor = static_cast<double>((h >> 48) % 3) * 0.5 + ((h >> 48) % 3 > 0 ? 0.5 : 0);
  // FSDP2's reshard_after_forward: as torchtitan sets it (unset), or forced either way.
  if (((h >> 50) & 1) != 0) l.reshard_after_forward = ((h >> 51) & 1) != 0;
  // Data parallelism as Megatron, PyTorch's DDP or DeepSpeed reduces (the last two refuse the
  // ZeRO stages they do not do); DeepSpeed's bucket of its default size or a small one.
  l.data_parallel_impl = static_cast<vramscope::model::DataParallelImpl>((h >> 52) % 3);
  l.overlap_comm = ((h >> 54) & 1) != 0;
  if (((h >> 55) & 1) != 0) l.reduce_bucket_elements = 1 + (h >> 56) % 4096;
  l.fsdp_mixed_precision = ((h >> 60) & 1) != 0;  // refused but under ZeRO-3
  // The pipeline as Megatron or torch.distributed.pipelining holds it (the latter refuses an
  // interleaved schedule's micro-batches that its rounds do not divide).
  if (((h >> 61) & 1) != 0) l.pipeline_impl = vramscope::model::PipelineImpl::kTorch;
  // Tensor parallelism as DTensor's plans hold it, the logits gathered or (loss_parallel) not.
  if (((h >> 62) & 1) != 0) {
    l.tensor_parallel_impl = vramscope::model::TensorParallelImpl::kTorch;
    l.loss_parallel = ((h >> 63) & 1) != 0;
  }
  TrainingSetup s = setup;
  if (s.zero != ZeroMode::kNone && l.dp * l.cp < 2) l.dp = 2;
  auto p = PredictParallel(spec, s, l);
  if (p.ok() && l.dp_shard > 0) Check(l.dp % l.dp_shard == 0);
  if (!p.ok()) {
    Check(p.status().code() == StatusCode::kUsage);
    return;
  }
  uint64_t layers = 0;
  for (const RankRole& r : p->roles) {
    Check(!r.stages.empty());
    layers += r.layers * r.stages.size();
    Check(r.total_bytes == r.weight_bytes + r.gradient_bytes + r.optimizer_bytes +
                               r.activation_bytes + r.logits_bytes + r.communication_bytes +
                               r.data_parallel_bytes + r.pipeline_buffer_bytes);
    Check(l.pipeline_impl == vramscope::model::PipelineImpl::kTorch ||
          r.pipeline_buffer_bytes == 0);
    Check((r.communication_bytes == 0) == r.communication.empty());
    Check((r.data_parallel_bytes == 0) == r.data_parallel.empty());
  }
  // Each role's step is a valid stream the allocator model places, whose second step holds the
  // model states the row counts all at once.
  for (size_t i = 0; i < p->roles.size(); ++i) {
    auto stream = RoleStream(spec, s, *p, i);
    Check(stream.ok());
    auto peaks = SimulatePeaks(*stream, vramscope::allocator::AllocatorSettings{});
    Check(peaks.ok());
    const RankRole& r = p->roles[i];
    Check(peaks->peak_allocated >= r.weight_bytes + r.gradient_bytes + r.optimizer_bytes);
    Check(peaks->peak_reserved >= peaks->peak_allocated);
  }
  Check(layers == spec.layers);
  Check(p->bounding < p->roles.size());
}

void FuzzModel(const std::string& input) {
  auto spec = ParseModelJson(input, kModelPath);
  if (!spec.ok()) {
    CheckError(spec.status(), kModelPath + ": ");
    return;
  }
  if (!SmallEnough(*spec)) return;
  const uint64_t h = Fnv1a(input);
  if (h & (uint64_t{1} << 20)) spec->attention = "eager";
  TrainingSetup setup = SetupFor(h);
  FuzzParallel(*spec, setup, h);
  auto stream = SimulateTraining(*spec, setup);
  if (spec->experts > 0) {  // refused: only the per-rank estimate models experts
    Check(!stream.ok());
    return;
  }
  if (setup.checkpointing &&
      (spec->family == Family::kResnet || spec->family == Family::kLayerList)) {
    // Refused in one line: checkpointing wraps transformer blocks, which these have none of.
    Check(!stream.ok() && stream.status().code() == StatusCode::kUsage);
    setup.checkpointing = false;
    stream = SimulateTraining(*spec, setup);
  }
  Check(stream.ok());
  Check(stream->info.trainable_parameters <= stream->info.parameters);
  // Nothing but the model's state outlives the step (the loop dropped batch, output and loss;
  // backward released the graph, checkpointing's recomputed casts included), and nothing is
  // allocated empty.
  const auto live = LiveAtEnd(*stream, /*strict=*/true);
  for (const auto& [id, category] : live) {
    Check(category == Category::kWeight || category == Category::kGradient ||
          category == Category::kOptimizerState);
  }
  for (const StreamEvent& e : stream->events) {
    Check(e.kind != StreamEvent::Kind::kAlloc || e.bytes > 0 || e.category == Category::kInput);
  }
  Allocate(std::move(*stream), /*must_fit=*/true);
}

void FuzzTracerStream(const std::string& input) {
  auto stream = ParseTracerStream(input, kTracePath);
  if (!stream.ok()) {
    CheckError(stream.status(), kTracePath + ":");
    return;
  }
  LiveAtEnd(*stream, /*strict=*/false);
  Allocate(std::move(*stream), /*must_fit=*/false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that any read past the end is caught by ASan.
  const std::string input(reinterpret_cast<const char*>(data), size);
  FuzzModel(input);
  FuzzTracerStream(input);
  return 0;
}
