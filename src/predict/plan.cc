#include "predict/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <future>
#include <map>
#include <thread>

#include "common/units.h"
#include "predict/build_trace.h"
#include "predict/plan_cost.h"
#include "predict/techniques.h"

namespace vramscope::predict {

namespace {

// The levers, each a ladder of levels (0: as the request has it).
enum Group : int { kAlloc, kLoss, kCkpt, kStates, kPlace, kActs, kMicro, kZero, kLora, kGroups };
using Choice = std::array<int, kGroups>;
constexpr std::array<int, kGroups> kTopLevel = {1, 2, 4, 2, 2, 1, 0, 3, 2};  // kMicro: by batch
// kCkpt's levels: every 2nd block, every block, offloaded, op-level selective.
constexpr int kCkptEvery2 = 1, kCkptFull = 2, kCkptOffload = 3, kCkptOps = 4;
// kLora's: LoRA, QLoRA (NF4 base weights; one GPU).
constexpr int kLoraPlain = 1, kQlora = 2;

bool CausalLm(Family f) { return f == Family::kGpt2 || f == Family::kLlama; }
bool Transformer(Family f) { return CausalLm(f) || f == Family::kBert || f == Family::kVit; }

// The share of a block's matmul FLOPs that op-level selective checkpointing recomputes:
// torchtitan's policy keeps every other aten::mm (a LLaMA block's q, v, gate and down; k, o and
// up are recomputed) and never an aten::addmm (a linear with a bias), so the families whose
// linears all have biases (GPT-2, BERT, ViT) recompute every matmul.
double OpLevelRecomputedShare(const ModelSpec& m) {
  if (m.family != Family::kLlama || m.heads == 0) return 1.0;
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.intermediate);
  const double kv = h / static_cast<double>(m.heads) * static_cast<double>(m.kv_heads);
  struct Matmul {
    double params;
    bool bias;
  };
  const std::array<Matmul, 7> block = {{{h * h, m.qkv_bias},
                                        {h * kv, m.qkv_bias},
                                        {h * kv, m.qkv_bias},
                                        {h * h, false},
                                        {h * f, m.mlp_bias},
                                        {h * f, m.mlp_bias},
                                        {f * h, m.mlp_bias}}};
  double all = 0, recomputed = 0;
  int mm = 0;
  for (const Matmul& x : block) {
    all += x.params;
    if (x.bias || ++mm % 2 == 0) recomputed += x.params;
  }
  return all > 0 ? recomputed / all : 1.0;
}

struct Outcome {
  uint64_t need = 0;  // peak reserved with no capacity limit
  uint64_t host = 0;
  uint64_t paged = 0;
};

class Planner {
 public:
  Planner(const LoadedModel& model, const PredictRequest& request, const PlanBudget& budget,
          const Control& control)
      : model_(model), spec_(*model.spec), request_(request), budget_(budget), control_(control) {
    speed_ = SpeedOf(budget.gpu_key);
    const TrainingSetup& s = request.setup;
    // A group the request already uses is not the plan's to change.
    enabled_[kAlloc] = request.alloc_conf.find("expandable_segments") == std::string::npos;
    enabled_[kLoss] = CausalLm(spec_.family) && s.loss_chunks <= 1 && !s.fused_linear_ce;
    enabled_[kCkpt] = Transformer(spec_.family) && !s.checkpointing;
    const bool adam =
        s.optimizer.kind == OptimizerKind::kAdam || s.optimizer.kind == OptimizerKind::kAdamW;
    enabled_[kStates] = adam && s.optimizer.states == StateFormat::kNative &&
                        !s.optimizer.master_weights && !s.optimizer.offload;
    enabled_[kPlace] = adam && !s.optimizer.offload && !s.optimizer_in_backward;
    enabled_[kActs] = !s.offload_activations;
    for (uint64_t b = s.batch; b % 2 == 0 && max_micro_ < 8; b /= 2) ++max_micro_;
    enabled_[kMicro] = max_micro_ > 0;
    enabled_[kZero] = budget.gpus > 1 && s.zero == ZeroMode::kNone;
    enabled_[kLora] = Transformer(spec_.family) && s.lora_rank == 0;
  }

  Result<PlanResult> Run();

 private:
  int TopLevel(int g) const { return g == kMicro ? max_micro_ : kTopLevel[g]; }
  bool Valid(const Choice& c) const;
  PredictRequest Apply(const Choice& c) const;
  // The prediction of a choice (thread-safe: it reads the planner only).
  Result<Outcome> Compute(const Choice& c) const;
  // Compute, memoised.
  Result<Outcome> Evaluate(const Choice& c);
  // Every choice computed, several at once, and memoised.
  Status EvaluateAll(const std::vector<Choice>& choices);
  bool Fits(const Outcome& o) const {
    return o.need <= capacity_ && (budget_.host_memory == 0 || o.host <= budget_.host_memory);
  }
  double Cost(const Choice& c, const Outcome& o) const;
  // A walk from `lora` (kLora's level: 0, LoRA or QLoRA), which it keeps.
  Result<std::optional<Choice>> Walk(const std::vector<int>& banned, int lora);
  PlanOption Describe(const Choice& c, const Outcome& o) const;

  const LoadedModel& model_;
  const ModelSpec& spec_;
  const PredictRequest& request_;
  const PlanBudget& budget_;
  const Control& control_;
  GpuSpeed speed_;
  StepWork work_;
  uint64_t capacity_ = 0;
  std::array<bool, kGroups> enabled_{};
  int max_micro_ = 0;
  std::map<Choice, Outcome> memo_;
  struct Single {
    int group = 0, level = 0;
    uint64_t saving = 0;
    double cost = 0;
  };
  std::vector<Single> singles_;
  int simulations_ = 0;
};

bool Planner::Valid(const Choice& c) const {
  for (int g = 0; g < kGroups; ++g) {
    if (c[g] != 0 && !enabled_[g]) return false;
  }
  const bool in_backward = c[kPlace] == 1, offload = c[kPlace] == 2;
  if (in_backward && (c[kMicro] > 0 || request_.setup.grad_accum > 1 || budget_.gpus > 1 ||
                      request_.setup.world_size > 1)) {
    return false;
  }
  if (offload && c[kStates] != 0) return false;
  if (c[kLora] == kQlora && (budget_.gpus > 1 || request_.setup.world_size > 1)) return false;
  return true;
}

PredictRequest Planner::Apply(const Choice& c) const {
  PredictRequest r = request_;
  TrainingSetup& s = r.setup;
  s.steps = 2;  // the second step is the steady state
  if (c[kAlloc] == 1) {
    r.alloc_conf += (r.alloc_conf.empty() ? "" : ",") + std::string("expandable_segments:True");
  }
  if (c[kLoss] == 1) s.loss_chunks = 8;
  if (c[kLoss] == 2) s.fused_linear_ce = true;
  if (c[kCkpt] > 0) {
    s.checkpointing = true;
    s.checkpoint_every = c[kCkpt] == kCkptEvery2 ? 2 : 1;
    s.offload_checkpoints = c[kCkpt] == kCkptOffload;
    s.checkpoint_ops = c[kCkpt] == kCkptOps;
  }
  if (c[kStates] == 1) s.optimizer.states = StateFormat::kBnb8bit;
  if (c[kStates] == 2) s.optimizer.states = StateFormat::kBnbPaged8bit;
  if (c[kPlace] == 1) s.optimizer_in_backward = true;
  if (c[kPlace] == 2) s.optimizer.offload = s.optimizer.offload_gradients = true;
  if (c[kActs] == 1) s.offload_activations = true;
  if (c[kMicro] > 0) {
    s.batch >>= c[kMicro];
    s.grad_accum <<= c[kMicro];
  }
  if (budget_.gpus > 1 && s.world_size < budget_.gpus) s.world_size = budget_.gpus;
  if (c[kZero] > 0) s.zero = static_cast<ZeroMode>(c[kZero]);
  if (c[kLora] != 0) s.lora_rank = 16;
  if (c[kLora] == kQlora) s.qlora = true;
  return r;
}

Result<Outcome> Planner::Compute(const Choice& c) const {
  ASSIGN_OR_RETURN(const UnlimitedPeaks p, PeaksWithoutLimit(model_, Apply(c)));
  // Out of memory even without a capacity: the set-up cannot run at all.
  return Outcome{p.oom ? UINT64_MAX : p.reserved, p.host, p.paged};
}

Result<Outcome> Planner::Evaluate(const Choice& c) {
  if (const auto it = memo_.find(c); it != memo_.end()) return it->second;
  RETURN_IF_ERROR(control_.CheckCancelled("the plan"));
  ASSIGN_OR_RETURN(const Outcome o, Compute(c));
  ++simulations_;
  memo_[c] = o;
  return o;
}

Status Planner::EvaluateAll(const std::vector<Choice>& choices) {
  // Independent predictions (each its own simulator and stream): as many at once as the CPUs.
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < choices.size(); start += threads) {
    RETURN_IF_ERROR(control_.CheckCancelled("the plan"));
    std::vector<std::future<Result<Outcome>>> running;
    const size_t end = std::min(choices.size(), start + threads);
    for (size_t i = start; i < end; ++i) {
      running.push_back(
          std::async(std::launch::async, [this, &c = choices[i]] { return Compute(c); }));
    }
    for (size_t i = start; i < end; ++i) {
      Result<Outcome> o = running[i - start].get();
      if (!o.ok()) return o.status();
      memo_[choices[i]] = *o;
      ++simulations_;
    }
  }
  return Status::Ok();
}

double Planner::Cost(const Choice& c, const Outcome& o) const {
  double t = 0;
  const double host_optimizer = c[kPlace] == 2 ? work_.trainable / budget_.gpus * 16 : 0;
  const double offloaded = std::max(0.0, static_cast<double>(o.host - o.paged) - host_optimizer);
  if (c[kCkpt] == kCkptEvery2) t += RecomputeSeconds(work_, speed_, 0.5);
  if (c[kCkpt] == kCkptFull || c[kCkpt] == kCkptOffload) {
    t += RecomputeSeconds(work_, speed_, 1.0);
  }
  if (c[kCkpt] == kCkptOps) t += RecomputeSeconds(work_, speed_, OpLevelRecomputedShare(spec_));
  if (c[kCkpt] == kCkptOffload || c[kActs] == 1)
    t += OverlappedTransferSeconds(offloaded, work_, speed_);
  // Paged states stay on the GPU while it has room, and are paged over each step when not.
  if (c[kStates] == 2 && o.need + o.paged > capacity_) {
    t += 2 * static_cast<double>(o.paged) / speed_.host_bytes;
  }
  if (c[kPlace] == 2) t += HostOptimizerSeconds(work_, speed_);
  if (c[kMicro] > 0) t += MicroBatchSeconds(work_, speed_, work_.micro_batches << c[kMicro]);
  if (c[kZero] == 3) t += ShardedWeightsSeconds(work_, speed_);
  if (c[kLora] == kQlora) {
    // Dequantised in forward and for the input's gradient, and again when recomputed.
    const int uses = c[kCkpt] == 0 ? 2 : 3;
    StepWork micro = work_;
    micro.micro_batches = work_.micro_batches << c[kMicro];
    t += DequantizeSeconds(micro, speed_, uses);
  }
  return t;
}

Result<std::optional<Choice>> Planner::Walk(const std::vector<int>& banned, int lora) {
  Choice cur{};
  cur[kLora] = lora;
  ASSIGN_OR_RETURN(Outcome now, Evaluate(cur));
  for (const Single& s : singles_) {
    if (Fits(now)) break;
    if (s.group == kLora || cur[s.group] == s.level ||
        std::find(banned.begin(), banned.end(), s.group) != banned.end()) {
      continue;
    }
    Choice next = cur;
    next[s.group] = s.level;
    if (!Valid(next)) continue;
    ASSIGN_OR_RETURN(const Outcome o, Evaluate(next));
    if (o.need < now.need) {
      cur = next;
      now = o;
    }
  }
  if (!Fits(now)) return std::optional<Choice>();
  // Drop what the fit does not need, the costliest first.
  std::vector<int> used;
  for (int g = 0; g < kGroups; ++g) {
    if (cur[g] != 0 && g != kLora) used.push_back(g);
  }
  std::sort(used.begin(), used.end(), [&](int a, int b) {
    Choice ca{}, cb{};
    ca[a] = cur[a];
    cb[b] = cur[b];
    return Cost(ca, {}) > Cost(cb, {});
  });
  for (const int g : used) {
    for (int level = cur[g] - 1; level >= 0; --level) {
      Choice less = cur;
      less[g] = level;
      if (!Valid(less)) continue;
      ASSIGN_OR_RETURN(const Outcome o, Evaluate(less));
      if (!Fits(o)) break;
      cur = less;
    }
  }
  return std::optional<Choice>(cur);
}

PlanOption Planner::Describe(const Choice& c, const Outcome& o) const {
  PlanOption out;
  const TrainingSetup& s = request_.setup;
  auto add = [&](std::string name, std::vector<std::string> flags) {
    out.techniques.push_back(std::move(name));
    for (auto& f : flags) out.flags.push_back(std::move(f));
  };
  if (c[kZero] == 1) add("ZeRO-1", {"--zero", "1"});
  if (c[kZero] == 2) add("ZeRO-2", {"--zero", "2"});
  if (c[kZero] == 3) add("ZeRO-3 (FSDP)", {"--zero", "3"});
  if (c[kLora] == kLoraPlain) add("LoRA r=16", {"--lora", "16"});
  if (c[kLora] == kQlora) add("QLoRA r=16 (NF4 base weights)", {"--qlora", "16"});
  if (c[kLoss] == 1) add("chunked cross-entropy", {"--loss-chunks", "8"});
  if (c[kLoss] == 2) add("fused linear cross-entropy", {"--fused-linear-ce"});
  if (c[kStates] == 1) add("8-bit AdamW", {"--optimizer", "adamw8bit"});
  if (c[kStates] == 2) add("paged 8-bit AdamW", {"--optimizer", "paged-adamw8bit"});
  if (c[kPlace] == 1) add("optimizer in backward", {"--optimizer-in-backward"});
  if (c[kPlace] == 2) {
    add("optimizer and gradients on the host", {"--offload-optimizer", "--offload-gradients"});
  }
  if (c[kCkpt] == kCkptEvery2) {
    add("checkpointing every 2 blocks", {"--checkpointing-every", "2"});
  }
  if (c[kCkpt] == kCkptFull) add("checkpointing", {"--checkpointing"});
  if (c[kCkpt] == kCkptOffload) add("offloaded checkpointing", {"--checkpointing-offload"});
  if (c[kCkpt] == kCkptOps) add("op-level selective checkpointing", {"--checkpointing-ops"});
  if (c[kActs] == 1) add("offloaded activations", {"--offload-activations"});
  if (c[kMicro] > 0) {
    const uint64_t b = s.batch >> c[kMicro];
    const int g = s.grad_accum << c[kMicro];
    add(fmt::format("batch {} x {} micro-batches", b, g),
        {"--batch", std::to_string(b), "--grad-accum", std::to_string(g)});
  }
  if (c[kAlloc] == 1) {
    add("expandable segments", {"--alloc-conf", "expandable_segments:True"});
  }
  if (budget_.gpus > 1 && request_.setup.world_size < budget_.gpus) {
    out.flags.push_back("--world-size");
    out.flags.push_back(std::to_string(budget_.gpus));
  }
  out.peak_reserved = o.need;
  out.host_bytes = o.host;
  out.added_seconds = Cost(c, o);
  out.changes_training = c[kLora] != 0;
  return out;
}

Result<PlanResult> Planner::Run() {
  PlanResult out;
  ASSIGN_OR_RETURN(const allocator::AllocatorSettings settings, SettingsFor(request_));
  if (settings.capacity == allocator::kUnlimited) {
    return UsageError("--plan needs a GPU or a size to fit into");
  }
  capacity_ = settings.capacity;
  out.capacity = capacity_;
  out.speed_source = speed_.source;
  // The step's work, from the set-up's own prediction.
  const PredictRequest base = Apply(Choice{});
  ASSIGN_OR_RETURN(const TensorStream stream, PredictStream(model_, base));
  const TrainingSetup& s = request_.setup;
  const uint64_t seq = s.seq ? s.seq : spec_.default_seq;
  const uint64_t image = s.image_size ? s.image_size : spec_.image_size;
  const uint64_t per_sample =
      spec_.family == Family::kVit ? (image / spec_.patch) * (image / spec_.patch) + 1 : seq;
  work_.parameters = static_cast<double>(stream.info.parameters);
  work_.trainable = static_cast<double>(stream.info.trainable_parameters);
  const double embeddings =
      static_cast<double>(spec_.vocab * spec_.hidden) * (spec_.tie_embeddings ? 1 : 2);
  work_.block_parameters = std::max(0.0, work_.parameters - embeddings);
  work_.tokens = static_cast<double>(s.batch * per_sample) * s.grad_accum;
  work_.parameter_bytes = static_cast<double>(stream.info.parameter_bytes);
  work_.micro_batches = s.grad_accum;
  work_.gpus = std::max(1, budget_.gpus);
  out.step_seconds = ComputeSeconds(work_, speed_);
  ASSIGN_OR_RETURN(const Outcome baseline, Evaluate(Choice{}));
  out.baseline_peak = baseline.need;
  out.baseline_fits = Fits(baseline);
  if (out.baseline_fits) {
    out.simulations = simulations_;
    return out;
  }
  // The weights alone, per GPU at best (sharded over every GPU by ZeRO-3; or, on one GPU,
  // QLoRA's half a byte per parameter as a bound below).
  Choice qlora{};
  qlora[kLora] = kQlora;
  uint64_t weights = stream.info.parameter_bytes / static_cast<uint64_t>(work_.gpus);
  if (enabled_[kLora] && Valid(qlora)) {
    weights = std::min(weights, static_cast<uint64_t>(work_.parameters / 2));
  }
  if (weights > capacity_) {
    out.nothing_fits = fmt::format(
        "the weights alone take {} per GPU{}{}, more than the {} the allocator may use: give "
        "more GPUs (--plan Nx{}), or a smaller model; offloading the weights themselves "
        "(ZeRO-Infinity) is not modelled",
        FormatBytes(static_cast<int64_t>(weights)), work_.gpus > 1 ? " even under ZeRO-3" : "",
        enabled_[kLora] && Valid(qlora) ? " even in QLoRA's 4 bits" : "",
        FormatBytes(static_cast<int64_t>(capacity_)),
        budget_.gpu_key.empty() ? "SIZE" : budget_.gpu_key);
    out.simulations = simulations_;
    return out;
  }
  // Every level alone.
  std::vector<Choice> alone;
  for (int g = 0; g < kGroups; ++g) {
    for (int level = 1; level <= TopLevel(g); ++level) {
      Choice c{};
      c[g] = level;
      if (Valid(c)) alone.push_back(c);
    }
  }
  RETURN_IF_ERROR(EvaluateAll(alone));
  for (int g = 0; g < kGroups; ++g) {
    for (int level = 1; level <= TopLevel(g); ++level) {
      Choice c{};
      c[g] = level;
      if (!Valid(c)) continue;
      ASSIGN_OR_RETURN(const Outcome o, Evaluate(c));
      if (o.need >= baseline.need) continue;
      singles_.push_back({g, level, baseline.need - o.need, Cost(c, o)});
    }
  }
  // Free levers first, by what they save; then the cheapest per byte saved.
  std::sort(singles_.begin(), singles_.end(), [](const Single& a, const Single& b) {
    const bool fa = a.cost < 1e-6, fb = b.cost < 1e-6;
    if (fa != fb) return fa;
    if (fa) return a.saving > b.saving;
    return a.cost / static_cast<double>(a.saving) < b.cost / static_cast<double>(b.saving);
  });
  std::vector<Choice> found;
  std::vector<int> banned;
  for (int round = 0; round < 4; ++round) {
    ASSIGN_OR_RETURN(const std::optional<Choice> c, Walk(banned, 0));
    if (!c) break;
    if (std::find(found.begin(), found.end(), *c) == found.end()) found.push_back(*c);
    // The next option does without the costliest lever of this one.
    int costliest = -1;
    double most = -1;
    for (int g = 0; g < kGroups; ++g) {
      if ((*c)[g] == 0) continue;
      Choice alone{};
      alone[g] = (*c)[g];
      const double cost = Cost(alone, memo_.count(alone) ? memo_[alone] : Outcome{});
      if (cost > most) {
        most = cost;
        costliest = g;
      }
    }
    if (costliest < 0) break;
    banned.push_back(costliest);
  }
  // Last the walks that change what is trained: from LoRA, then from QLoRA (one GPU).
  for (const int lora : {kLoraPlain, kQlora}) {
    Choice start{};
    start[kLora] = lora;
    if (!enabled_[kLora] || !Valid(start)) continue;
    ASSIGN_OR_RETURN(const std::optional<Choice> c, Walk({}, lora));
    if (c && std::find(found.begin(), found.end(), *c) == found.end()) found.push_back(*c);
  }
  // Each option once more under the budget's capacity, as the allocator would run it: only
  // those that do not run out of memory are offered.
  for (const Choice& c : found) {
    RETURN_IF_ERROR(control_.CheckCancelled("the plan"));
    const PredictRequest r = Apply(c);
    ASSIGN_OR_RETURN(const TensorStream option, PredictStream(model_, r));
    ASSIGN_OR_RETURN(const allocator::AllocatorSettings limited, SettingsFor(r));
    ASSIGN_OR_RETURN(const PeakOnly p, SimulatePeaks(option, limited));
    ++simulations_;
    if (p.oom) continue;
    PlanOption o = Describe(c, memo_[c]);
    o.peak_reserved = p.peak_reserved;
    out.options.push_back(std::move(o));
  }
  std::stable_sort(out.options.begin(), out.options.end(),
                   [](const PlanOption& a, const PlanOption& b) {
                     if (a.changes_training != b.changes_training) return !a.changes_training;
                     return a.added_seconds < b.added_seconds;
                   });
  if (out.options.empty()) {
    out.nothing_fits = fmt::format(
        "no combination of the menu makes the step fit {} per GPU (the set-up needs {}){}",
        FormatBytes(static_cast<int64_t>(capacity_)),
        FormatBytes(static_cast<int64_t>(baseline.need)),
        budget_.host_memory > 0 ? " within the host memory given" : "");
  }
  out.simulations = simulations_;
  return out;
}

}  // namespace

Result<PlanResult> Plan(const LoadedModel& model, const PredictRequest& request,
                        const PlanBudget& budget, const Control& control) {
  if (!model.spec) {
    return UsageError(
        "--plan searches the built-in families' set-ups; a traced model's "
        "techniques are in its code");
  }
  if (!Transformer(model.spec->family)) {
    return UsageError(fmt::format(
        "--plan searches the transformer families' techniques (GPT-2, LLaMA, BERT, ViT); {} is "
        "a {}: use --fit to find its largest batch",
        model.spec->label, FamilyName(model.spec->family)));
  }
  Planner planner(model, request, budget, control);
  return planner.Run();
}

}  // namespace vramscope::predict
