#include "predict/fit_advice.h"

#include <fmt/format.h>

#include "common/units.h"

namespace vramscope::predict {

namespace {

bool IsTransformer(Family f) {
  return f == Family::kGpt2 || f == Family::kLlama || f == Family::kBert || f == Family::kVit;
}

std::string Bytes(uint64_t b) { return FormatBytes(static_cast<int64_t>(b)); }

// "a, b, c or d"
std::string JoinOr(const std::vector<std::string>& items) {
  if (items.empty()) return "";
  if (items.size() == 1) return items[0];
  std::string out;
  for (size_t i = 0; i + 1 < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + " or " + items.back();
}

}  // namespace

std::vector<std::string> RemainingLevers(const ModelSpec& model, const PredictRequest& request,
                                         FitDimension dimension) {
  const TrainingSetup& s = request.setup;
  std::vector<std::string> levers;
  // Precision: only a run entirely in fp32 has mixed precision left to try.
  if (s.precision.param == DType::kF32 && !s.precision.autocast) {
    levers.emplace_back("--dtype bf16-amp");
  }
  if (s.optimizer.master_weights) levers.emplace_back("no --master-weights");
  // Checkpointing and LoRA: what the transformer families model.
  if (IsTransformer(model.family)) {
    if (!s.checkpointing) levers.emplace_back("--checkpointing");
    if (s.lora_rank == 0) levers.emplace_back("--lora R");
  }
  switch (s.zero) {
    case ZeroMode::kNone:
      levers.emplace_back("--zero/--fsdp with --world-size N");
      break;
    case ZeroMode::kZero1:
    case ZeroMode::kZero2:
      levers.emplace_back("--zero 3");
      [[fallthrough]];
    case ZeroMode::kZero3:
    case ZeroMode::kFsdp:
      levers.emplace_back(fmt::format("a --world-size above {}", s.world_size));
      break;
  }
  // The dimension --fit does not grow.
  if (dimension == FitDimension::kBatch) {
    if (model.family == Family::kGpt2 || model.family == Family::kLlama ||
        model.family == Family::kBert) {
      levers.emplace_back("a shorter --seq");
    } else if (model.family == Family::kVit || model.family == Family::kResnet) {
      levers.emplace_back("a smaller --image-size");
    }
  } else if (s.batch > 1) {
    levers.emplace_back("a smaller --batch");
  }
  levers.emplace_back("a larger GPU");
  return levers;
}

NoFitAdvice ExplainNoFit(const ModelSpec& model, const PredictRequest& request,
                         const FitResult& fit, const PlanResult* plan,
                         const std::string& plan_budget) {
  NoFitAdvice out;
  const char* what = fit.dimension == FitDimension::kBatch ? "batch" : "sequence length";
  out.needed_reserved = fit.needed_reserved;
  out.capacity = fit.capacity;
  out.shortfall = fit.needed_reserved > fit.capacity ? fit.needed_reserved - fit.capacity : 0;
  out.levers = RemainingLevers(model, request, fit.dimension);
  out.message = fmt::format(
      "not even {0} 1 fits: {0} 1 needs {1} peak reserved, {2} more than the {3} the allocator "
      "can have; ",
      what, Bytes(out.needed_reserved), Bytes(out.shortfall), Bytes(out.capacity));
  if (plan == nullptr) {
    out.message += "try " + JoinOr(out.levers);
    return out;
  }
  out.options = plan->options;
  out.nothing_fits = plan->nothing_fits;
  out.plan_command = "--plan " + plan_budget;
  if (!plan->options.empty()) {
    const PlanOption& best = plan->options.front();
    std::string flags;
    for (const std::string& f : best.flags) flags += (flags.empty() ? "" : " ") + f;
    std::string techniques;
    for (const std::string& t : best.techniques)
      techniques += (techniques.empty() ? "" : " + ") + t;
    out.message += fmt::format("the cheapest set-up where {} 1 fits is {} ({}: peak reserved {}",
                               what, flags, techniques, Bytes(best.peak_reserved));
    if (best.host_bytes > 0) out.message += fmt::format(", host {}", Bytes(best.host_bytes));
    out.message += "); add it and --fit again";
    if (plan->options.size() > 1) {
      out.message +=
          fmt::format(", or see the {} others with {}", plan->options.size() - 1, out.plan_command);
    }
    return out;
  }
  // Nothing on the plan's menu makes it fit: the levers it did not search.
  std::erase_if(out.levers,
                [](const std::string& l) { return l == "--checkpointing" || l == "--lora R"; });
  out.message += fmt::format("no memory-saving technique makes it fit ({}: {}); try {}",
                             out.plan_command, plan->nothing_fits, JoinOr(out.levers));
  return out;
}

}  // namespace vramscope::predict
