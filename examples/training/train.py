#!/usr/bin/env python3
"""Train one of the small example models for a few steps on synthetic data.

    python3 examples/training/train.py --model mlp --optimizer adam --steps 3 [--amp bf16] [--device cuda]

A plain training script: fixed seeds, random weights, synthetic batches made on the CPU, and per
step ``zero_grad(set_to_none=True)``, the batch ``.to(device)``, forward and loss (under
``torch.autocast`` with ``--amp bf16``), ``backward()``, ``optimizer.step()``. It is what
``scripts/capture_goldens.py`` records on a GPU, and what ``vramscope run -- python3
examples/training/train.py ...`` is meant to capture.

Under ``torchrun`` (``WORLD_SIZE`` > 1) each rank joins the process group (``--backend``; default
NCCL on CUDA, gloo on the CPU), takes GPU ``LOCAL_RANK`` modulo the GPUs it sees, and wraps the
model in ``DistributedDataParallel`` (``--parallel ddp``, the default) or FSDP2's ``fully_shard``
per block of its layer lists and then the root (``--parallel fsdp2``). Every rank trains on the same batches:
the memory of a rank does not depend on which data it sees. Several ranks on one GPU need gloo.

The step is a function (``train_step``) whose batch, output and loss are released at its end, as
in most training loops; the harness passes ``hooks`` to see each phase (``PHASES``) begin and end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import MODELS  # noqa: E402

# name -> (class name in torch.optim, hyperparameters). foreach/fused are left to PyTorch's default
# (on CUDA that is the foreach implementation; on the CPU the per-parameter loop).
OPTIMIZERS: dict[str, tuple[str, dict]] = {
    "sgd": ("SGD", dict(lr=0.01)),
    "sgdm": ("SGD", dict(lr=0.01, momentum=0.9, weight_decay=5e-4)),
    "adam": ("Adam", dict(lr=1e-3)),
    "adamw": ("AdamW", dict(lr=3e-4, weight_decay=0.01)),
}

AMP_DTYPES = {"none": None, "bf16": torch.bfloat16}

# The phases of one step, in order. "step_end" reads the loss and releases the batch, the output
# and the loss (what returning from train_step would do anyway).
PHASES = ("zero_grad", "inputs", "forward", "backward", "optimizer", "step_end")

DEFAULT_SEED = 0
NUM_BATCHES = 3  # distinct synthetic batches, reused cyclically when --steps is larger


class Hooks:
    """Called around each phase; the default does nothing. ``tensors`` must not be kept: holding a
    reference would keep GPU memory alive and change what is measured."""

    def phase_begin(self, step: int, phase: str) -> None:
        pass

    def phase_end(self, step: int, phase: str, tensors: dict | None = None) -> None:
        pass


def build_model(model_name: str, seed: int = DEFAULT_SEED) -> torch.nn.Module:
    """The model on the CPU, with weights from ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return MODELS[model_name].build()


def build_optimizer(optimizer_name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    cls_name, hyper = OPTIMIZERS[optimizer_name]
    return getattr(torch.optim, cls_name)(model.parameters(), **hyper)


def make_batches(model_name: str, seed: int = DEFAULT_SEED, count: int = NUM_BATCHES) -> list:
    """``count`` synthetic (input, target) pairs on the CPU, from their own generator so that they
    do not depend on how much randomness the model's initialisation used."""
    g = torch.Generator().manual_seed(seed + 1)
    return [MODELS[model_name].make_batch(g) for _ in range(count)]


def autocast_context(device: torch.device, amp: str):
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def train_step(model, optimizer, loss_fn, cpu_batch, device, amp, step, hooks) -> float:
    hooks.phase_begin(step, "zero_grad")
    optimizer.zero_grad(set_to_none=True)
    hooks.phase_end(step, "zero_grad")

    hooks.phase_begin(step, "inputs")
    x = cpu_batch[0].to(device)
    y = cpu_batch[1].to(device)
    hooks.phase_end(step, "inputs", {"input": x, "target": y})

    hooks.phase_begin(step, "forward")
    with autocast_context(device, amp):
        out = model(x)
        loss = loss_fn(out, y)
    hooks.phase_end(step, "forward", {"output": out, "loss": loss})

    hooks.phase_begin(step, "backward")
    loss.backward()
    hooks.phase_end(step, "backward")

    hooks.phase_begin(step, "optimizer")
    optimizer.step()
    hooks.phase_end(step, "optimizer")

    hooks.phase_begin(step, "step_end")
    value = loss.item()
    del x, y, out, loss  # released here rather than at the return, inside the phase
    hooks.phase_end(step, "step_end")
    return value


def train(model, optimizer, model_name: str, batches, *, steps: int, device, amp: str = "none",
          hooks: Hooks | None = None) -> list[float]:
    """Run ``steps`` training steps; returns the losses."""
    hooks = hooks or Hooks()
    loss_fn = MODELS[model_name].loss
    model.train()
    losses = []
    for step in range(1, steps + 1):
        losses.append(train_step(model, optimizer, loss_fn, batches[(step - 1) % len(batches)],
                                 device, amp, step, hooks))
    return losses


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODELS), default="mlp")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--amp", choices=sorted(AMP_DTYPES), default="none",
                   help="mixed precision: bf16 runs forward and loss under torch.autocast")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--memory-cap-mib", type=float, default=None,
                   help="cap this process's CUDA memory (torch.cuda.set_per_process_memory_fraction)"
                        ": how the goldens provoke a real out-of-memory")
    p.add_argument("--parallel", choices=("ddp", "fsdp2"), default="ddp",
                   help="under torchrun (WORLD_SIZE > 1): how the model is wrapped (default ddp)")
    p.add_argument("--backend", default=None,
                   help="torch.distributed backend under torchrun (default: nccl on cuda, gloo on "
                        "cpu; gloo lets several ranks share one GPU)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print("train.py: error: --device cuda, but torch.cuda.is_available() is False "
              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})", file=sys.stderr)
        return 2
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if device.type == "cuda":
        # An explicit index: set_per_process_memory_fraction refuses a bare "cuda" (torch 2.11).
        index = device.index if device.index is not None else torch.cuda.current_device()
        if distributed:
            index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    if args.memory_cap_mib is not None and device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(args.memory_cap_mib * 2**20 / total,
                                                   device.index)
    model = build_model(args.model, args.seed).to(device)
    if distributed:
        model = wrap_for_ranks(model, device, args.parallel, args.backend)
    optimizer = build_optimizer(args.optimizer, model)
    batches = make_batches(args.model, args.seed)
    started = time.perf_counter()
    losses = train(model, optimizer, args.model, batches, steps=args.steps, device=device,
                   amp=args.amp)
    elapsed = time.perf_counter() - started
    for i, loss in enumerate(losses, 1):
        print(f"step {i}: loss {loss:.6f}", flush=True)
    line = (f"{args.model} / {args.optimizer} / amp {args.amp} on {device}: "
            f"{args.steps} steps in {elapsed:.2f} s")
    if device.type == "cuda":
        line += (f"; max allocated {torch.cuda.max_memory_allocated(device):,} B, "
                 f"max reserved {torch.cuda.max_memory_reserved(device):,} B")
    print(line, flush=True)
    if distributed:
        torch.distributed.destroy_process_group()
    return 0


def wrap_for_ranks(model: torch.nn.Module, device: torch.device, parallel: str,
                   backend: str | None) -> torch.nn.Module:
    """Joins the process group torchrun set up and wraps ``model`` for data parallelism."""
    import torch.distributed as dist

    dist.init_process_group(backend=backend or ("nccl" if device.type == "cuda" else "gloo"))
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                       else None)
    from torch.distributed.fsdp import fully_shard

    # As torchtitan does: each block of a ModuleList (GPT's and BERT's layers) its own unit, then
    # the root holding the rest (embeddings, norms, head).
    blocks = [b for m in model.modules() if isinstance(m, torch.nn.ModuleList) for b in m]
    for block in blocks:
        fully_shard(block)
    return fully_shard(model)


if __name__ == "__main__":
    sys.exit(main())
