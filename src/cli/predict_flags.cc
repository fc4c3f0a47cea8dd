// The flags of `vramscope predict`, bound to pipeline::PredictRequest's fields (and to the outputs'
// flags): registering them is all this file does.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/outside_allocator_flags.h"
#include "cli/predict_command.h"
#include "common/units.h"

namespace vramscope::cli {

void RegisterPredictCommand(CLI::App& app, PredictFlags& o) {
  CLI::App* cmd = app.add_subcommand(
      "predict",
      "Predict the GPU memory of training steps without a GPU: a built-in model family (a "
      "preset or a Hugging Face config.json), a layer list, or your own PyTorch model traced on "
      "fake tensors, with a batch, dtype and optimizer. Prints the same summary as 'report' "
      "(marked "
      "predicted); -o writes the report database, --html the viewer, --fit finds the largest "
      "batch that fits a GPU.");
  cmd->add_option("--model", o.request.model,
                  fmt::format("a preset ({}), a Hugging Face config.json (gpt2, llama, mistral, "
                              "qwen2, mixtral, qwen2_moe, deepseek_v2/v3, bert, roberta, vit, "
                              "resnet), a layer list .json "
                              "(docs/predict-models.md), your own model as FILE.py:FUNCTION or "
                              "hf:config.json (run by the tracer on fake tensors with --python), "
                              "a tracer .jsonl, or a Hugging Face Hub id, org/name[@revision], "
                              "whose config.json is read from the local Hugging Face cache "
                              "(HF_HUB_CACHE) or, when not there, downloaded into it by "
                              "huggingface_hub run with --python (HF_TOKEN, HF_ENDPOINT, "
                              "HF_HUB_OFFLINE apply); a name that exists on disk or ends in "
                              ".json, .jsonl or .py is a file",
                              fmt::join(pipeline::PresetNames(), ", ")))
      ->required();
  cmd->add_option("--batch", o.request.batch, "samples per micro-batch (default: 1)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_option("--seq", o.request.seq, "tokens per sample (default: the model's context length)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24));
  cmd->add_option("--image-size", o.request.image_size,
                  "image side in pixels (default: the model's)")
      ->check(CLI::Range(uint64_t{8}, uint64_t{1} << 16));
  cmd->add_option("--dtype", o.request.dtype,
                  "fp32 (default), bf16, fp16 (weights in that dtype), bf16-amp, fp16-amp (fp32 "
                  "weights, torch.autocast)");
  cmd->add_flag("--master-weights", o.request.master_weights,
                "keep fp32 master weights in the optimizer (bf16/fp16 weights; 16 B/param Adam)");
  cmd->add_option("--optimizer", o.request.optimizer,
                  "sgd, momentum, adam, adamw (default), none; or a quantised AdamW: adamw8bit, "
                  "paged-adamw8bit (bitsandbytes; paged states in unified memory), "
                  "adamw8bit-ao, adamw4bit, adamw-fp8 (torchao)");
  cmd->add_option("--optimizer-impl", o.request.optimizer_impl,
                  "foreach (PyTorch's default on CUDA), fused or for-loop");
  cmd->add_option("--weight-decay", o.request.weight_decay, "Adam's L2 weight decay (default: 0)");
  cmd->add_option("--zero-grad", o.request.zero_grad,
                  "set-to-none (default, frees gradients), zero (keeps them), none");
  cmd->add_option("--grad-accum", o.request.grad_accum,
                  "micro-batches per optimizer step (default: 1)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--steps", o.request.steps, "training steps to simulate (default: 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option(
         "--max-events", o.request.max_events,
         fmt::format("the most tensor events the simulated steps may hold (default "
                     "{}; steps x micro-batches x layers decide it)",
                     FormatCount(static_cast<int64_t>(pipeline::kDefaultMaxPredictedEvents))))
      ->check(CLI::Range(uint64_t{1000}, uint64_t{1} << 31))
      ->option_text("N");
  cmd->add_flag("--checkpointing", o.request.checkpointing,
                "activation checkpointing of every transformer block");
  cmd->add_option("--checkpointing-every", o.request.checkpointing_every,
                  "checkpoint only every K-th block (torchtitan's selective_ac_option K: "
                  "blocks K, 2K, ...); implies --checkpointing")
      ->check(CLI::Range(1, 10000))
      ->option_text("K");
  cmd->add_flag("--checkpointing-offload", o.request.checkpointing_offload,
                "keep checkpointed blocks' inputs in host memory (Unsloth's offloaded "
                "checkpointing); implies --checkpointing");
  cmd->add_flag("--checkpointing-ops", o.request.checkpointing_ops,
                "op-level selective checkpointing (torchtitan's selective_ac_option op): each "
                "block keeps its attention's and every other matmul's outputs, recomputes the "
                "rest; implies --checkpointing");
  cmd->add_option("--loss-chunks", o.request.loss_chunks,
                  "causal LMs: the head and the cross-entropy in N chunks along the sequence, "
                  "each upcast to fp32 alone (torchtune's CEWithChunkedOutputLoss; its recipes "
                  "use 8), the logits dropped before backward")
      ->check(CLI::Range(2, 4096))
      ->option_text("N");
  cmd->add_flag("--fused-linear-ce", o.request.fused_linear_ce,
                "causal LMs: Liger's fused linear cross-entropy (the head and the loss in "
                "chunks inside one function; no logits are kept)");
  cmd->add_flag("--fp8", o.request.fp8,
                "torchao's float8 training (convert_to_float8_training, tensorwise scaling) of "
                "the blocks' linears, eager: each product's input and weight cast to float8 "
                "and dropped after it, the bf16 input and weight kept for backward (LLaMA, "
                "BERT and ViT families; --dtype bf16 or bf16-amp)");
  cmd->add_option("--pack", o.request.pack,
                  "causal LMs of the LLaMA family: the batch is samples of these lengths packed "
                  "into one row, as transformers' DataCollatorWithFlattening makes it (position "
                  "ids restart per sample); under sdpa each layer attends through a "
                  "block-diagonal mask [1, 1, T, T] in the compute dtype with the "
                  "memory-efficient kernel, K and V repeated to every head. Sets --batch 1 and "
                  "--seq to the sum")
      ->delimiter(',')
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24))
      ->option_text("L1,L2,...");
  cmd->add_flag("--optimizer-in-backward", o.request.optimizer_in_backward,
                "step each weight inside backward as soon as its gradient is made, then drop "
                "the gradient (torchtune's optimizer_in_bwd; one GPU, no --grad-accum)");
  cmd->add_flag("--offload-activations", o.request.offload_activations,
                "saved tensors of 1 KiB or more to pinned host memory in forward, back just "
                "before their backward (torchtune's OffloadActivations with streams)");
  cmd->add_flag("--offload-optimizer", o.request.offload_optimizer,
                "the optimizer on the host: its states and an fp32 copy of the weights in "
                "pinned memory (torchao's CPUOffloadOptimizer, DeepSpeed's ZeRO-Offload)");
  cmd->add_flag("--offload-gradients", o.request.offload_gradients,
                "with --offload-optimizer: each gradient copied to the host and dropped as "
                "soon as it is accumulated (CPUOffloadOptimizer(offload_gradients=True))");
  cmd->add_option("--lora", o.request.lora, "LoRA rank: freeze the base weights, train adapters")
      ->check(CLI::Range(0, 65536));
  cmd->add_option("--qlora", o.request.qlora,
                  "QLoRA rank: LoRA adapters over the blocks' linears frozen in bitsandbytes' "
                  "NF4 (Linear4bit, double quantisation), dequantised around each use; one GPU")
      ->check(CLI::Range(1, 65536))
      ->option_text("R");
  cmd->add_option("--lora-dropout", o.request.lora_dropout,
                  "dropout on the LoRA adapters' input, as peft's lora_dropout (default 0, "
                  "peft's; LitGPT's finetune/lora.py uses 0.05): its output and mask are kept "
                  "for backward")
      ->check(CLI::Range(0.0, 0.999999))
      ->option_text("P");
  cmd->add_option("--freeze", o.request.freeze,
                  "freeze the parameters whose name matches this shell pattern (repeatable), "
                  "e.g. 'model.embed_tokens.*' or 'transformer.h.[0-5].*'");
  cmd->add_option("--zero", o.request.zero,
                  "ZeRO stage 1, 2 or 3 over --world-size GPUs (per-GPU memory)")
      ->check(CLI::Range(0, 3));
  cmd->add_flag("--fsdp", o.request.fsdp,
                "FSDP full sharding over --world-size GPUs; your own model (FILE.py:FUNCTION, "
                "hf:config.json): FSDP2's fully_shard on each block, then the root, run by the "
                "tracer");
  cmd->add_option("--world-size", o.request.world_size,
                  "data-parallel GPUs (default: 1); 2 or more without --zero/--fsdp is "
                  "DistributedDataParallel, whose gradient buckets are predicted. Your own model "
                  "(FILE.py:FUNCTION): the ranks of the job, one of which the tracer runs on a "
                  "fake process group (the function wraps or shards the model itself: "
                  "DistributedDataParallel, fully_shard, parallelize_module; or the file's "
                  "vramscope_pipeline_step runs the rank's torch.distributed.pipelining stage)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--fsdp-mp", o.request.fsdp_mp,
                  "FSDP2's MixedPrecisionPolicy as torchtitan sets it, parameters gathered and "
                  "computed in bf16 or fp16, gradients reduced in fp32: your own model with "
                  "--fsdp, or a parallel layout with --zero 3")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_option("--rank", o.request.rank,
                  "your own model under --world-size: the rank the tracer runs (default: 0)")
      ->check(CLI::Range(0, (1 << 20) - 1));
  cmd->add_flag("--all-ranks", o.request.all_ranks,
                fmt::format("your own model under --world-size: the tracer runs every rank (at "
                            "most {}; as many at once as the CPUs, at most {}), a table of their "
                            "peaks says which rank bounds the job and what it holds that the "
                            "others do not, and the report is that rank's",
                            pipeline::kMaxTracedRanks, pipeline::kTracerJobs));
  cmd->add_option("--jobs", o.request.jobs,
                  fmt::format("--all-ranks: tracer processes at once, each a Python with torch "
                              "(0.8 GiB at its peak for examples/distributed/pp_gpt.py; default: "
                              "as many as the CPUs, at most {})",
                              pipeline::kTracerJobs))
      ->check(CLI::Range(1, 64));
  cmd->add_option("--tp", o.request.tp,
                  "tensor parallelism: memory per rank role of the layout (GPT-2 and LLaMA "
                  "families, MoE included; model states counted per tensor, activations by "
                  "formula; -o and --html report the role --role picks)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--pp", o.request.pp,
                  "pipeline stages (the layers split as evenly as they go, the first and last "
                  "stages taking fewer, as Llama 3's 126 layers on 16; the interleaved "
                  "schedule needs an even split)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--cp", o.request.cp,
                  "context parallelism: the sequence split over this many ranks")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--dp", o.request.dp,
                  "data-parallel ranks of the layout (default: --world-size / (TP x PP x CP))")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--dp-shard", o.request.dp_shard,
                  "HSDP: --zero shards over groups of this many data-parallel ranks (times "
                  "--cp), replicated --dp / --dp-shard times (default: all of --dp)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--ep", o.request.ep,
                  "expert parallelism: the experts split over this many ranks")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--etp", o.request.etp, "tensor parallelism inside each expert (default: --tp)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_flag("--sp", o.request.sequence_parallel, "sequence parallelism (with --tp 2 or more)");
  cmd->add_option("--capacity-factor", o.request.capacity_factor,
                  "mixtures of experts: each expert's capacity as a multiple of its average "
                  "load (Megatron's --moe-expert-capacity-factor; default: dropless, the "
                  "average)")
      ->check(CLI::Range(0.01, 64.0));
  cmd->add_flag("--selective-recompute", o.request.selective_recompute,
                "recompute the attention core in backward (Megatron's selective recomputation)");
  cmd->add_option("--micro-batches", o.request.micro_batches,
                  "micro-batches per step and data-parallel rank (the pipeline's in-flight "
                  "bound; default 1)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  cmd->add_option("--schedule", o.request.schedule,
                  "pipeline schedule: 1f1b (default), interleaved, or gpipe (every forward, then "
                  "every backward; --pp-impl torch's ScheduleGPipe); zero-bubble schedules "
                  "through the tracer only (a model file)");
  cmd->add_option("--reshard-after-forward", o.request.reshard_after_forward,
                  "with a parallel layout and --zero 3: whether FSDP2 frees a unit's gathered "
                  "weights after its forward (true) or keeps them to the step's last backward "
                  "(false); auto (default): false under --pp, as torchtitan sets it");
  cmd->add_option("--dp-impl", o.request.dp_impl,
                  "with a parallel layout: how data parallelism holds and reduces gradients: "
                  "megatron (default: in the gradients' own contiguous buffer, ZeRO-2/3 as "
                  "FSDP2), torch (PyTorch's DistributedDataParallel, --zero 0: the .grad tensors "
                  "and a second copy in its buckets) or deepspeed (DeepSpeed's ZeRO-1/2: a "
                  "reduce bucket of --reduce-bucket-size elements in each backward; ZeRO-3: one "
                  "kept, each module gathered with a prefetch bucket of the next)")
      ->check(CLI::IsMember({"megatron", "torch", "deepspeed"}));
  cmd->add_option("--pp-impl", o.request.pp_impl,
                  "with --pp: how the pipeline's stages hold their tensors: megatron (default: "
                  "Megatron-Core's schedules) or torch (torch.distributed.pipelining's "
                  "Schedule1F1B, or ScheduleInterleaved1F1B under --schedule interleaved, "
                  "torchtitan's: a receive buffer per micro-batch, direction and stage kept for "
                  "the run, each stage output kept to its backward, the last stage's outputs to "
                  "the step's end)")
      ->check(CLI::IsMember({"megatron", "torch"}));
  cmd->add_option("--tp-impl", o.request.tp_impl,
                  "with --tp: how tensor parallelism holds its activations: megatron (default: "
                  "Megatron-Core's, Korthikanti et al.'s count: under --sp the projections save "
                  "their input sequence-sharded, the loss vocabulary-parallel) or torch "
                  "(DTensor's plans as torchtitan applies them with parallelize_module: under "
                  "--sp the projections save the all-gathered input, and the head's logits are "
                  "gathered to every rank, output_layouts=Replicate(), unless --loss-parallel)")
      ->check(CLI::IsMember({"megatron", "torch"}));
  cmd->add_flag("--loss-parallel", o.request.loss_parallel,
                "--tp-impl torch: the head's logits kept sharded by vocabulary (Shard(-1)) and "
                "the loss computed under torch's loss_parallel(), torchtitan's default");
  cmd->add_flag("--pp-no-outputs", o.request.pp_no_outputs,
                "--pp-impl torch: the schedule stepped with return_outputs=False (the last "
                "stage keeps each micro-batch's output only to its backward and merges none)");
  cmd->add_option("--reduce-bucket-size", o.request.reduce_bucket_size,
                  "--dp-impl deepspeed: DeepSpeed's reduce_bucket_size, in elements (default "
                  "500000000, DeepSpeed's)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  cmd->add_flag("--overlap-comm", o.request.overlap_comm,
                "--dp-impl deepspeed: DeepSpeed's overlap_comm (two reduce buckets; off by "
                "default for ZeRO-1/2, as DeepSpeed's)");
  cmd->add_option("--role", o.request.role,
                  "with a parallel layout: the rank role -o, --html and --emit-stream report, by "
                  "name ('last stage') or a stage's number (default: the role that bounds the "
                  "job)");
  cmd->add_option("--virtual-stages", o.request.virtual_stages,
                  "model chunks per stage under --schedule interleaved")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 10));
  cmd->add_option("--ddp-bucket-mb", o.request.ddp_bucket_mb,
                  "DistributedDataParallel's bucket_cap_mb, in MiB (default: 25)")
      ->check(CLI::Range(0.001, 1048576.0));
  const auto non_empty = CLI::Validator(
      [](const std::string& v) {
        return v.empty() ? std::string("give a GPU name or a size such as 80GiB") : std::string();
      },
      "GPU|SIZE");
  cmd->add_option("--gpu", o.request.gpu,
                  "the GPU (capacity, workspace sizes): h200, h100-80gb, a100-80gb, a100-40gb, "
                  "l40s, a10g, l4, rtx4090, rtx3090, v100-32gb, t4, or a size such as 80GiB")
      ->check(non_empty);
  cmd->add_option("--capacity", o.request.capacity, "GPU memory, e.g. 80GiB (overrides --gpu's)")
      ->check(non_empty);
  cmd->add_option("--fit", o.request.fit,
                  "find the largest batch (or --fit-dim seq) that fits this GPU or capacity, and "
                  "report that size")
      ->check(non_empty);
  cmd->add_option("--plan", o.request.plan,
                  "the cheapest set-ups that fit this budget: a GPU or a size, or N of them "
                  "(8xh100-80gb: ZeRO/FSDP over 8 GPUs); searches the techniques, the micro-batch "
                  "split with --grad-accum, expandable segments, and LoRA, ranked by their cost "
                  "to the step's time")
      ->check(non_empty)
      ->option_text("[Nx]GPU|SIZE");
  cmd->add_option("--host-memory", o.request.host_memory,
                  "--plan: the host memory offloading may use, e.g. 128GiB (default: not "
                  "limited)")
      ->check(non_empty)
      ->option_text("SIZE");
  cmd->add_option("--fit-dim", o.request.fit_dim,
                  "what --fit grows: batch (default) or seq; layout: the smallest TP x PP "
                  "whose every rank fits (the per-rank estimate)");
  cmd->add_option("--fit-max", o.request.fit_max, "the largest size --fit tries (default: 1048576)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  cmd->add_option("--torch", o.request.torch_version,
                  "the PyTorch version (workspace rules; default: 2.11)");
  cmd->add_option("--alloc-conf", o.request.alloc_conf,
                  "PYTORCH_CUDA_ALLOC_CONF of the predicted run");
  AddOutsideAllocatorFlags(*cmd, o.request.outside,
                           "with --world-size 2 or more, NCCL's 564 MiB per process + one "
                           "communicator: 16 channels x (ring + tree) x 12 MiB = 948 MiB");
  cmd->add_option("--cuda-module-loading", o.request.module_loading,
                  "lazy (default, as PyTorch sets CUDA_MODULE_LOADING) or eager (adds 640 MiB "
                  "to the context on sm_90, 362 MiB elsewhere)");
  cmd->add_option("--python", o.request.python,
                  "the Python (with PyTorch) that runs the tracer for --model FILE.py:FUNCTION "
                  "or hf:config.json, and (with huggingface_hub) downloads a Hub id's "
                  "config.json (default: python3)");
  cmd->add_flag("--compile", o.request.compile,
                "the step as torch.compile(model) runs it: traced models (AOTAutograd's "
                "partitioner decides what is saved for backward, Inductor's lowering which "
                "intermediates are allocated), and the LLaMA family in bf16/bf16-amp from "
                "templates the tracer made (docs/guide/predict.md)");
  cmd->add_flag("--cuda-graphs", o.request.cuda_graphs,
                "traced models: torch.compile(model, mode=\"reduce-overhead\"): --compile, with "
                "the compiled graphs' memory in a CUDA graph pool held for their lifetime");
  cmd->add_option("--emit-stream", o.request.emit_stream,
                  "also write the predicted tensor stream (every allocation and free, with "
                  "category, name and operation) as JSON Lines, the tracer's format");
  cmd->add_option("-o,--output", o.output, "write the report database here (default: none)");
  cmd->add_option("--html", o.html, "write the interactive HTML viewer here");
  cmd->add_flag("--force", o.force, "overwrite outputs that exist");
  cmd->add_flag("--json", o.json, "print the summary as JSON");
  cmd->add_flag("-q,--quiet", o.quiet, "print nothing but errors (and JSON with --json)");
  cmd->add_option("--top", o.top, "owners and sites to list (default: 10)")
      ->check(CLI::Range(0, 1000000));
}

}  // namespace vramscope::cli
