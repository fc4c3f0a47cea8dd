#include "report/parallel_roles_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/units.h"

namespace vramscope::report {

namespace {

std::string LayoutText(const model::ParallelPrediction& p) {
  const model::ParallelLayout& l = p.layout;
  std::string text = fmt::format("TP {} x PP {} x CP {} x DP {} = {} ranks", l.tp, l.pp, l.cp, l.dp,
                                 FormatCount(static_cast<int64_t>(p.world)));
  if (l.dp_shard > 0 && l.dp_shard < l.dp) {
    text +=
        fmt::format("; HSDP: sharded over {} DP ranks, {} replicas", l.dp_shard, l.dp / l.dp_shard);
  }
  if (l.data_parallel_impl == model::DataParallelImpl::kTorch) {
    text += "; data parallel: PyTorch DDP";
  } else if (l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed) {
    text += fmt::format("; data parallel: DeepSpeed, reduce_bucket_size {}{}",
                        l.reduce_bucket_elements, l.overlap_comm ? ", overlap_comm" : "");
  }
  if (l.fsdp_mixed_precision) text += "; FSDP2 mixed precision (16-bit gathers, fp32 reduce)";
  if (l.TorchPipeline()) {
    text += "; pipeline: torch.distributed.pipelining";
    if (!l.pipeline_return_outputs) text += " (return_outputs=False)";
  }
  if (l.ep > 1 || l.etp > 0) text += fmt::format("; experts: EP {}, ETP {}", l.ep, l.Etp());
  if (l.sequence_parallel) text += "; sequence parallel";
  if (l.selective_recompute) text += "; selective recomputation";
  if (l.pp > 1) {
    text += l.schedule == model::PipelineSchedule::kInterleaved
                ? fmt::format("; interleaved 1F1B, {} virtual stages", l.virtual_stages)
            : l.schedule == model::PipelineSchedule::kGPipe ? std::string("; GPipe")
                                                            : std::string("; 1F1B");
    text += fmt::format(", {} micro-batch{}", l.micro_batches, l.micro_batches == 1 ? "" : "es");
  }
  return text;
}

// What must fit: the reserved peak once the allocator model placed the role, else the sum.
bool RoleFits(const model::RankRole& r, const ParallelCapacity& capacity) {
  return (r.placed ? r.peak_reserved : r.total_bytes) <= capacity.allocator_bytes;
}

// The share of the reserved peak no tensor uses, as the two peaks give it: (reserved -
// allocated) / reserved. A lower bound of the fragmentation at the reserved peak (what is
// allocated then is at most the allocated peak).
std::string Fragmentation(const model::RankRole& r) {
  if (r.peak_reserved == 0 || r.peak_allocated >= r.peak_reserved) return "0%";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(r.peak_reserved - r.peak_allocated) /
                                    static_cast<double>(r.peak_reserved));
}

std::string StagesText(const model::RankRole& r) {
  if (r.stages.size() <= 4) return fmt::format("{}", fmt::join(r.stages, ","));
  return fmt::format("{}..{} ({})", r.stages.front(), r.stages.back(), r.stages.size());
}

}  // namespace

std::string RenderParallelRoles(const model::ParallelPrediction& p, const std::string& model,
                                const std::string& setup, const ParallelCapacity& capacity) {
  const bool placed = !p.roles.empty() && p.roles.front().placed;
  // torch.distributed.pipelining's receive buffers: a column of their own when modelled.
  const bool p2p = p.layout.TorchPipeline();
  // Pinned host memory (the optimizer on the host): a column after the GPU's, when any.
  const bool host = std::any_of(p.roles.begin(), p.roles.end(),
                                [](const model::RankRole& r) { return r.host_bytes > 0; });
  std::string out = placed
                        ? "PREDICTED PER RANK (vramscope predict: model states counted tensor by "
                          "tensor, activations by formula, each role's step placed by the "
                          "allocator model)\n"
                        : "PREDICTED PER RANK (vramscope predict: model states counted tensor by "
                          "tensor, activations by formula)\n";
  out += fmt::format("  {:<10} {}, {} parameters\n", "model", model,
                     FormatCount(static_cast<int64_t>(p.parameters)));
  out += fmt::format("  {:<10} {}\n", "layout", LayoutText(p));
  out += fmt::format("  {:<10} {}\n", "setup", setup);
  if (capacity.allocator_bytes > 0) {
    out += fmt::format("  {:<10} {}, {} for the allocator\n", "GPU", capacity.gpu,
                       FormatBytes(static_cast<int64_t>(capacity.allocator_bytes)));
  }
  out += "\n";
  out += fmt::format(
      "  {:<16} {:>10} {:>7} {:>6} {:>14} {:>11} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} "
      "{:>11}{} {:>11}{}{}{}\n",
      "role", "stages", "ranks", "layers", "parameters", "weights", "gradients", "optimizer",
      "activations", "in flight", "logits", "comm", "dp buffers",
      p2p ? fmt::format(" {:>11}", "p2p buffers") : "", "total",
      placed ? fmt::format(" {:>11} {:>11} {:>6}", "peak alloc", "reserved", "frag") : "",
      host ? fmt::format(" {:>11}", "host") : "", capacity.allocator_bytes > 0 ? "  fits" : "");
  for (size_t i = 0; i < p.roles.size(); ++i) {
    const model::RankRole& r = p.roles[i];
    std::string fits;
    if (capacity.allocator_bytes > 0) fits = RoleFits(r, capacity) ? "  yes" : "  NO";
    std::string peaks;
    if (placed) {
      peaks =
          fmt::format(" {:>11} {:>11} {:>6}", FormatBytes(static_cast<int64_t>(r.peak_allocated)),
                      FormatBytes(static_cast<int64_t>(r.peak_reserved)), Fragmentation(r));
    }
    out += fmt::format(
        "  {:<16} {:>10} {:>7} {:>6} {:>14} {:>11} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11} "
        "{:>11}{} {:>11}{}{}{}{}\n",
        r.name, StagesText(r), FormatCount(static_cast<int64_t>(r.ranks)), r.layers,
        FormatCount(static_cast<int64_t>(r.parameters)),
        FormatBytes(static_cast<int64_t>(r.weight_bytes)),
        FormatBytes(static_cast<int64_t>(r.gradient_bytes)),
        FormatBytes(static_cast<int64_t>(r.optimizer_bytes)),
        FormatBytes(static_cast<int64_t>(r.activation_bytes)), r.in_flight,
        FormatBytes(static_cast<int64_t>(r.logits_bytes)),
        FormatBytes(static_cast<int64_t>(r.communication_bytes)),
        FormatBytes(static_cast<int64_t>(r.data_parallel_bytes)),
        p2p ? fmt::format(" {:>11}", FormatBytes(static_cast<int64_t>(r.pipeline_buffer_bytes)))
            : "",
        FormatBytes(static_cast<int64_t>(r.total_bytes)), peaks,
        host ? fmt::format(" {:>11}", FormatBytes(static_cast<int64_t>(r.host_bytes))) : "", fits,
        i == p.bounding && p.roles.size() > 1 ? "  <- bounds the job" : "");
  }
  if (placed) {
    out +=
        "  total: every term at once; peak alloc and reserved: the role's step placed by the "
        "allocator model, with cuBLAS's workspaces; frag: (reserved - allocated) / reserved of "
        "the two peaks; fits compares reserved\n";
  }
  if (host) {
    out += "  host: pinned host memory per rank (the optimizer on the host), not in the total\n";
  }
  out += "  assumptions:\n";
  for (const std::string& a : p.assumptions) out += fmt::format("    - {}\n", a);
  return out;
}

nlohmann::json ParallelRolesJson(const model::ParallelPrediction& p, const std::string& model,
                                 const std::string& setup, const ParallelCapacity& capacity) {
  const model::ParallelLayout& l = p.layout;
  nlohmann::json roles = nlohmann::json::array();
  for (const model::RankRole& r : p.roles) {
    nlohmann::json role = {{"name", r.name},
                           {"stages", r.stages},
                           {"ranks", r.ranks},
                           {"layers", r.layers},
                           {"embedding", r.embedding},
                           {"head", r.head},
                           {"parameters", r.parameters},
                           {"expert_parameters", r.expert_parameters},
                           {"weight_bytes", r.weight_bytes},
                           {"gradient_bytes", r.gradient_bytes},
                           {"optimizer_bytes", r.optimizer_bytes},
                           {"activation_bytes_per_micro_batch", r.activation_bytes_per_micro_batch},
                           {"in_flight", r.in_flight},
                           {"activation_bytes", r.activation_bytes},
                           {"logits_bytes", r.logits_bytes},
                           {"communication_bytes", r.communication_bytes},
                           {"communication", r.communication},
                           {"data_parallel_bytes", r.data_parallel_bytes},
                           {"data_parallel", r.data_parallel},
                           {"pipeline_buffer_bytes", r.pipeline_buffer_bytes},
                           {"total_bytes", r.total_bytes},
                           {"host_bytes", r.host_bytes}};
    if (r.placed) {
      role["peak_allocated_bytes"] = r.peak_allocated;
      role["peak_reserved_bytes"] = r.peak_reserved;
    }
    if (capacity.allocator_bytes > 0) role["fits"] = RoleFits(r, capacity);
    roles.push_back(std::move(role));
  }
  return {
      {"predicted", true},
      {"parallel",
       {{"model", model},
        {"setup", setup},
        {"parameters", p.parameters},
        {"world", p.world},
        {"layout",
         {{"tp", l.tp},
          {"pp", l.pp},
          {"cp", l.cp},
          {"dp", l.dp},
          {"dp_shard", l.DpShard()},
          {"ep", l.ep},
          {"etp", l.Etp()},
          {"sequence_parallel", l.sequence_parallel},
          {"selective_recompute", l.selective_recompute},
          {"micro_batches", l.micro_batches},
          {"schedule", l.schedule == model::PipelineSchedule::kInterleaved ? "interleaved"
                       : l.schedule == model::PipelineSchedule::kGPipe     ? "gpipe"
                                                                           : "1f1b"},
          {"pipeline_return_outputs", l.pipeline_return_outputs},
          {"virtual_stages", l.virtual_stages},
          {"capacity_factor", l.capacity_factor},
          {"reshard_after_forward", l.ReshardAfterForward()},
          {"dp_impl", l.data_parallel_impl == model::DataParallelImpl::kTorch       ? "torch"
                      : l.data_parallel_impl == model::DataParallelImpl::kDeepSpeed ? "deepspeed"
                                                                                    : "megatron"},
          {"reduce_bucket_size", l.reduce_bucket_elements},
          {"overlap_comm", l.overlap_comm},
          {"fsdp_mixed_precision", l.fsdp_mixed_precision},
          {"pp_impl", l.pipeline_impl == model::PipelineImpl::kTorch ? "torch" : "megatron"},
          {"tp_impl",
           l.tensor_parallel_impl == model::TensorParallelImpl::kTorch ? "torch" : "megatron"},
          {"loss_parallel",
           l.tensor_parallel_impl != model::TensorParallelImpl::kTorch || l.loss_parallel}}},
        {"capacity_bytes", capacity.allocator_bytes},
        {"gpu", capacity.gpu},
        {"roles", std::move(roles)},
        {"bounding_role", p.roles[p.bounding].name},
        {"assumptions", p.assumptions}}}};
}

}  // namespace vramscope::report
