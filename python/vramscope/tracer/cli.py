"""The command line: ``python -m vramscope.tracer ...`` parses its arguments, traces, and writes
the stream (header first) atomically to ``-o``; every error is one line and exit status 1."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import warnings

from .common import DTYPES, DataDependentError, OPTIMIZERS, PROG, SDPA_CHOICES, TracerError, torch
from .setup import Setup
from .step import trace


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit status is 2 and a usage block; ours is one line
        raise TracerError(f"bad arguments: {message}", "the command line",
                          "see `python3 -m vramscope.tracer --help`")


def parse_args(argv=None) -> Setup:
    p = _ArgumentParser(prog="python3 -m vramscope.tracer",
                        description="Trace one training step's GPU allocations on fake CUDA "
                                    "tensors (no GPU needed) for `vramscope predict`.")
    p.add_argument("--model", required=True,
                   help="FILE.py:FUNCTION (returns an nn.Module) or hf:CONFIG.json (transformers)")
    p.add_argument("--inputs", metavar="FUNCTION",
                   help="function in the model file returning one CPU batch "
                        "(default: vramscope_inputs(batch_size, seq_len, image_size))")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=512, help="tokens per sample")
    p.add_argument("--image-size", type=int, default=None,
                   help="image side for vision models (default: the config's, else 224)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="parameter dtype")
    p.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none",
                   help="torch.autocast on CUDA for forward and loss (fp16 adds a GradScaler)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS) + ["none"], default="adamw")
    impl = p.add_mutually_exclusive_group()
    impl.add_argument("--foreach", dest="optimizer_impl", action="store_const", const="foreach",
                      help="foreach optimizer kernels (PyTorch's default on CUDA; the default)")
    impl.add_argument("--fused", dest="optimizer_impl", action="store_const", const="fused")
    impl.add_argument("--for-loop", dest="optimizer_impl", action="store_const", const="for-loop")
    p.set_defaults(optimizer_impl="foreach")
    p.add_argument("--zero-grad", choices=("none", "set-to-none", "zero"), default="set-to-none")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--grad-accum", type=int, default=1, metavar="N",
                   help="micro-batches per optimizer step (forward+backward each)")
    p.add_argument("--checkpointing", action="store_true",
                   help="gradient checkpointing (transformers models: "
                        "gradient_checkpointing_enable())")
    p.add_argument("--lora", type=int, metavar="R", help="peft LoRA adapters of rank R")
    p.add_argument("--lora-dropout", type=float, default=0.0, metavar="P",
                   help="dropout on the adapters' input (peft's lora_dropout; default 0)")
    p.add_argument("--freeze", action="append", default=[], metavar="PATTERN",
                   help="requires_grad=False for parameters whose name matches this glob "
                        "(repeatable)")
    p.add_argument("--sdpa", choices=SDPA_CHOICES, default="auto",
                   help="scaled_dot_product_attention kernel (auto: what PyTorch picks on sm90)")
    p.add_argument("--compile", action="store_true",
                   help="trace the step as torch.compile(model) (Inductor) runs it: AOTAutograd's "
                        "partitioner decides what is saved for backward, Inductor's lowering "
                        "which intermediates are allocated")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="torch.compile(model, mode=\"reduce-overhead\"): --compile, with the "
                        "compiled graphs' memory in a CUDA graph pool held for their lifetime")
    p.add_argument("--world-size", type=int, default=1, metavar="N",
                   help="trace one rank of a torch.distributed job of N ranks, on a fake process "
                        "group: the model function sets up its parallelism itself "
                        "(init_device_mesh, parallelize_module, fully_shard), or the file's "
                        "vramscope_pipeline_step runs the rank's pipeline stage")
    p.add_argument("--rank", type=int, default=0, help="the rank traced (default: 0)")
    p.add_argument("--fsdp", action="store_true",
                   help="with --world-size: shard a model that does not shard itself with FSDP2, "
                        "fully_shard on each block of its layer lists, then the root (as "
                        "torchtitan does)")
    p.add_argument("--fsdp-mp", choices=("bf16", "fp16"),
                   help="with --fsdp: FSDP2's MixedPrecisionPolicy as torchtitan sets it, "
                        "parameters gathered and computed in this dtype, gradients reduced in "
                        "fp32 (the parameters stay in --dtype)")
    p.add_argument("--pack", metavar="L1,L2,...", type=_lengths, default=None,
                   help="transformers causal LMs: the batch is samples of these lengths packed "
                        "into one row as DataCollatorWithFlattening makes it (position ids "
                        "restarting at each sample, labels -100 at each sample's first token); "
                        "replaces --batch and --seq")
    p.add_argument("-o", "--output", required=True, help="the stream to write (JSON Lines)")
    a = p.parse_args(argv)
    for name in ("batch", "seq", "steps", "grad_accum"):
        if getattr(a, name) < 1:
            raise TracerError(f"--{name.replace('_', '-')} must be at least 1",
                              "the command line", "pass a positive number")
    if a.world_size < 1:
        raise TracerError("--world-size must be at least 1", "the command line",
                          "pass the number of ranks of the job")
    if not 0 <= a.rank < a.world_size:
        raise TracerError(f"--rank {a.rank} is not a rank of --world-size {a.world_size}",
                          "the command line", f"pass a rank from 0 to {a.world_size - 1}")
    if a.fsdp and a.world_size < 2:
        raise TracerError("--fsdp shards over the ranks of a job", "the command line",
                          "give --world-size N (2 or more)")
    if a.fsdp_mp is not None and not a.fsdp:
        raise TracerError("--fsdp-mp is FSDP2's mixed precision", "the command line",
                          "add --fsdp (or use --amp for torch.autocast)")
    if a.image_size is not None and a.image_size < 1:
        raise TracerError("--image-size must be at least 1", "the command line",
                          "pass a positive number")
    if a.lora is not None and a.lora < 1:
        raise TracerError("--lora must be at least 1", "the command line", "pass the LoRA rank")
    if not 0.0 <= a.lora_dropout < 1.0:
        raise TracerError(f"--lora-dropout {a.lora_dropout} is not a probability below 1",
                          "the command line", "pass a value in [0, 1), e.g. 0.05")
    if a.lora_dropout > 0 and a.lora is None:
        raise TracerError("--lora-dropout without --lora", "the command line",
                          "add --lora R (the dropout is the adapters')")
    if a.pack is not None:
        if not a.model.startswith("hf:"):
            raise TracerError("--pack packs a transformers causal LM's batch", "the command line",
                              "give --model hf:config.json (or drop --pack)")
        a.batch, a.seq = 1, sum(a.pack)
    return Setup(model=a.model, output=a.output, inputs=a.inputs, batch=a.batch, seq=a.seq,
                 image_size=a.image_size, dtype=a.dtype, amp=a.amp, optimizer=a.optimizer,
                 optimizer_impl=a.optimizer_impl, zero_grad=a.zero_grad, steps=a.steps,
                 grad_accum=a.grad_accum, checkpointing=a.checkpointing, lora=a.lora,
                 lora_dropout=a.lora_dropout,
                 freeze=list(a.freeze), sdpa=a.sdpa, compile=a.compile or a.cuda_graphs,
                 cuda_graphs=a.cuda_graphs, world_size=a.world_size, rank=a.rank,
                 fsdp=a.fsdp, fsdp_mp=a.fsdp_mp, pack=a.pack)


def _lengths(text: str) -> list:
    """--pack's value: comma-separated positive sample lengths."""
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of sample lengths: give positive token counts such as "
            "1024,800,2272")
    return lengths


def _check_output(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise TracerError(f"the output directory {directory!r} does not exist", "-o",
                          "create it or write elsewhere")
    if os.path.isdir(path):
        raise TracerError(f"{path!r} is a directory", "-o", "give a file name")
    return directory


def run(argv=None) -> int:
    setup = parse_args(argv)
    if torch is None:
        raise TracerError("PyTorch is not installed", f"python {sys.executable}",
                          "install it with `pip install torch` (a CPU build is enough: the tracer "
                          "needs no GPU)")
    directory = _check_output(setup.output)
    base = os.path.basename(setup.output)
    events_fd, events_path = tempfile.mkstemp(prefix=f".{base}.", suffix=".events", dir=directory)
    os.close(events_fd)
    out_fd, out_path = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    os.close(out_fd)
    try:
        try:
            header = trace(setup, events_path)
        except DataDependentError:
            if not setup.model.startswith("hf:"):
                raise
            header = trace(setup, events_path, hf_sees_fakes=True)
        with open(out_path, "w", encoding="utf-8") as out, \
                open(events_path, encoding="utf-8") as events:
            out.write(json.dumps(header) + "\n")
            shutil.copyfileobj(events, out)
        os.replace(out_path, setup.output)
    finally:
        for path in (events_path, out_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    s = header["summary"]
    at = s["peak_at"]
    print(f"{setup.output}: {s['allocs']:,} allocations, {s['frees']:,} frees; traced peak "
          f"{s['peak_bytes']:,} B" + (f" at step {at['step']} {at['phase']}" if at else ""))
    return 0


def main(argv=None) -> int:
    try:
        with warnings.catch_warnings():
            # libraries' deprecation notices are not the tracer's output (stderr is for errors)
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return run(argv)
    except TracerError as e:
        print(e.line(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted, while tracing, run it again", file=sys.stderr)
        return 1
