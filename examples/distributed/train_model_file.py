#!/usr/bin/env python3
"""Train one of this folder's model files for real, one process per rank, the way the tracer
trains it on fake tensors: what `vramscope run` captures on a GPU so that the traced rank
(`vramscope predict --model FILE.py:build --world-size N`) has a measurement to be held to.

    torchrun --nproc-per-node 2 examples/distributed/train_model_file.py \\
        examples/distributed/tp_llama.py:build --batch 4 --seq 512 --optimizer adamw --steps 3

Each rank joins the process group (``--backend``; gloo lets several ranks share one GPU), takes
GPU ``LOCAL_RANK`` modulo the GPUs it sees, seeds, and calls the file's build function with that
GPU as the default device (the tracer builds on the meta device and materialises on its fake
GPU: the same tensors). Then, per step, the tracer's loop: ``zero_grad(set_to_none=True)``, the
batch from ``vramscope_inputs(batch, seq, 224)`` moved to the GPU, ``vramscope_forward`` and
``vramscope_loss``, ``backward()``, ``optimizer.step()`` (torch.optim's default implementation),
and the release of batch, output and loss. A file that defines ``vramscope_pipeline_step(model,
batch)`` (a ``torch.distributed.pipelining`` stage, ``pp_gpt.py``) has that run the step's
micro-batches in place of forward, loss and backward.

Several ranks sharing one GPU cannot use NCCL (it refuses two ranks on one device), and gloo
cannot carry DTensor's collectives on CUDA tensors (its scatter and the functional collectives'
all-gather pass a device pointer to its TCP transport: the rank dies of SIGSEGV, torch 2.11).
``--backend gloo-staged`` is a process group of this file that runs every collective through gloo
on CPU copies and writes the result into the CUDA tensors the caller gave it: the tensors the GPU
allocates are the caller's (DTensor's, FSDP2's), as under NCCL; the copies live in host memory.
Under it ``parallelize_module`` is called with ``src_data_rank=None`` (each rank initialises its
own shard instead of receiving it from rank 0: the same tensors, no scatter at construction).

``--init meta`` builds the model as torchtitan does and as the tracer does: on the meta device
(``parallelize_module`` and ``fully_shard`` applied there), then ``model.to_empty`` makes only this
rank's shards on the GPU, which are then filled in place (normal, std 0.02, on each local shard:
no DTensor random op, so no collective). The default, ``--init device``, builds the whole model on
the GPU and shards it afterwards, which leaves the allocator's segments cut differently.

``--amp bf16`` runs each step's forward and loss (a pipeline's whole schedule step) under
``torch.autocast(dtype=torch.bfloat16)``, the weights and optimizer in fp32.

``--device cpu`` is the CPU stand-in for checking the plumbing without a GPU: device meshes the
file asks for on "cuda" are made on the CPU. Nothing it measures is ground truth.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

OPTIMIZERS = {
    "sgd": ("SGD", dict(lr=0.01)),
    "adam": ("Adam", dict(lr=1e-3)),
    "adamw": ("AdamW", dict(lr=3e-4, weight_decay=0.01)),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="FILE.py[:FUNCTION] (default function: build)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None,
                   help="default: nccl on cuda, gloo on cpu; gloo-staged: ranks sharing a GPU")
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda if available")
    p.add_argument("--amp", choices=("none", "bf16"), default="none",
                   help="bf16: forward and loss under torch.autocast (the weights stay fp32)")
    p.add_argument("--init", choices=("device", "meta"), default="device",
                   help="device: the whole model built on the device, then sharded (default); "
                        "meta: built on the meta device, only this rank's shards made")
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.seq < 1:
        p.error("--steps, --batch and --seq must be at least 1")
    return args


def load_model_file(spec: str):
    path, _, function = spec.partition(":")
    if not Path(path).is_file():
        raise SystemExit(f"train_model_file.py: error: {path}: no such file")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, str(Path(path).resolve().parent))
    module_spec.loader.exec_module(module)
    build = getattr(module, function or "build", None)
    if build is None:
        raise SystemExit(f"train_model_file.py: error: {path} has no function {function or 'build'}")
    needed = ["vramscope_inputs"]
    if not hasattr(module, "vramscope_pipeline_step"):
        needed += ["vramscope_forward", "vramscope_loss"]
    for name in needed:
        if not hasattr(module, name):
            raise SystemExit(f"train_model_file.py: error: {path} has no {name}")
    return module, build


def meshes_on_cpu() -> None:
    """The CPU stand-in: the model files ask for "cuda" meshes."""
    import torch.distributed.device_mesh as device_mesh

    original = device_mesh.init_device_mesh

    def init_device_mesh(device_type, *args, **kwargs):
        return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    device_mesh.init_device_mesh = init_device_mesh


class CpuStagedGroup(dist.ProcessGroup):
    """Every collective of a gloo group on CPU copies of its CUDA tensors, synchronously: the
    results are copied into the caller's tensors before the returned work completes. AVG is a SUM
    divided by the group's size (gloo has no AVG)."""

    def __init__(self, store, rank: int, size: int, timeout):
        super().__init__(rank, size)
        self._size = size
        self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)

    def size(self):
        return self._size

    def getBackendName(self):
        return "gloo-staged"

    def _get_backend(self, device):  # c10d asks the group's backend per device: it is itself
        return self

    @property
    def group_name(self):  # the name c10d registered this group under
        return dist.distributed_c10d._world.pg_names[self]

    @staticmethod
    def _done(result):
        from torch._C._distributed_c10d import _create_work_from_future

        future = torch.futures.Future()
        future.set_result(result)
        return _create_work_from_future(future)

    def _reduce_op(self, op):
        return (dist.ReduceOp.SUM, True) if op == dist.ReduceOp.AVG else (op, False)

    def allreduce(self, tensors, opts=None):
        op, average = self._reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        for t in tensors:
            host = t.detach().cpu()
            self._gloo.allreduce([host], _allreduce_opts(op)).wait()
            t.copy_(host / self._size if average else host)
        return self._done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def barrier(self, opts=None):
        self._gloo.barrier().wait()
        return self._done(None)

    def broadcast(self, tensors, opts=None):
        staged = dist.BroadcastOptions()
        staged.rootRank = opts.rootRank if opts is not None else 0
        for t in tensors:
            host = t.detach().cpu()
            self._gloo.broadcast([host], staged).wait()
            t.copy_(host)
        return self._done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        for outputs, t in zip(output_lists, inputs):
            hosts = [torch.empty(o.shape, dtype=o.dtype, device="cpu") for o in outputs]
            self._gloo.allgather([hosts], [t.detach().cpu()]).wait()
            for o, h in zip(outputs, hosts):
                o.copy_(h)
        return self._done(output_lists)

    def _allgather_base(self, output, input, opts=None):
        host = torch.empty(output.shape, dtype=output.dtype, device="cpu")
        self._gloo._allgather_base(host, input.detach().cpu()).wait()
        output.copy_(host)
        return self._done(output)

    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i)
        return self._done(outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def _reduce_scatter_base(self, output, input, opts=None):
        op, average = self._reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        full = input.detach().cpu()
        self._gloo.allreduce([full], _allreduce_opts(op)).wait()
        mine = full.chunk(self._size)[self.rank()]
        output.copy_(mine / self._size if average else mine)
        return self._done(output)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, outputs, input_lists, opts=None):
        for o, parts in zip(outputs, input_lists):
            self._reduce_scatter_base(o, torch.cat([p.detach().cpu().reshape(-1) for p in parts]),
                                      opts)
        return self._done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return self._done(outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # Point to point (torch.distributed.pipelining's stages): gloo's send keeps its CPU copy
    # alive until sent; a receive completes when its copy has reached the caller's tensor.
    def send(self, tensors, dst, tag=0):
        return self._gloo.send([tensors[0].detach().cpu()], dst, tag)

    def recv(self, tensors, src, tag=0):
        import threading
        from torch._C._distributed_c10d import _create_work_from_future

        target = tensors[0]
        host = torch.empty(target.shape, dtype=target.dtype, device="cpu")
        work = self._gloo.recv([host], src, tag)
        future = torch.futures.Future()

        def finish():
            try:
                work.wait()
                with torch.no_grad():
                    if target.is_cuda:
                        with torch.cuda.device(target.device):
                            target.copy_(host)
                    else:
                        target.copy_(host)
                future.set_result(tensors)
            except Exception as e:  # surfaces in the caller's wait()
                future.set_exception(e)

        threading.Thread(target=finish, daemon=True).start()
        return _create_work_from_future(future)


def _allreduce_opts(op):
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


def _create_staged_group(store, rank, size, timeout):
    return CpuStagedGroup(store, rank, size, timeout)


def shards_made_locally() -> None:
    """parallelize_module(..., src_data_rank=None) for every call the model file makes."""
    import torch.distributed.tensor.parallel as tensor_parallel

    original = tensor_parallel.parallelize_module

    def parallelize_module(*args, **kwargs):
        kwargs.setdefault("src_data_rank", None)
        return original(*args, **kwargs)

    tensor_parallel.parallelize_module = parallelize_module


def build_on_meta(build, device: torch.device, seed: int):
    """The model built on the meta device, then this rank's shards made on ``device`` and filled
    in place. ``to_empty`` is what FSDP2 needs (its sharded parameters are re-pointed by the
    module's ``_apply``); each local shard is filled, not the DTensor (whose random ops would
    broadcast an RNG state)."""
    from torch.distributed.tensor import DTensor

    with torch.device("meta"):
        model = build()
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            local = t.to_local() if isinstance(t, DTensor) else t
            if local.is_floating_point():
                local.normal_(0.0, 0.02, generator=generator)
            else:
                local.zero_()
    return model


def main(argv=None) -> int:
    args = parse_args(argv)
    device_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                              % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        meshes_on_cpu()
    backend = args.backend or ("nccl" if device_type == "cuda" else "gloo")
    if backend == "gloo-staged":
        dist.Backend.register_backend("gloo-staged", _create_staged_group,
                                      devices=["cpu", "cuda"])
        shards_made_locally()
    dist.init_process_group(backend=backend)
    module, build = load_model_file(args.model)
    torch.manual_seed(args.seed)
    if args.init == "meta":
        model = build_on_meta(build, device, args.seed)
    else:
        with torch.device(device):
            model = build()
    name, hyper = OPTIMIZERS[args.optimizer]
    optimizer = getattr(torch.optim, name)(model.parameters(), **hyper)
    pipeline = hasattr(module, "vramscope_pipeline_step")
    cpu_batch = module.vramscope_inputs(args.batch, args.seq, 224)
    model.train()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        batch = tuple(t.to(device) for t in cpu_batch)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp == "bf16")
        if pipeline:
            # The schedule runs every micro-batch's forward and backward; the last stage returns
            # the mean loss, the others None.
            # (the schedule's backward runs inside it too, as autocast leaves backward alone)
            with autocast:
                loss = module.vramscope_pipeline_step(model, batch)
            out = None
        else:
            with autocast:
                out = module.vramscope_forward(model, batch)
                loss = module.vramscope_loss(out, batch)
            loss.backward()
        optimizer.step()
        value = loss.item() if loss is not None else None
        del batch, out, loss
        if value is not None and (pipeline or dist.get_rank() == 0):
            # One write per line: under PYTHONUNBUFFERED print() writes the text and its newline
            # apart, and ranks sharing one pipe then run their lines together.
            sys.stdout.write(f"step {step}: loss {value:.6f}\n")
            sys.stdout.flush()
    if device_type == "cuda":
        sys.stdout.write(f"rank {dist.get_rank()}: max allocated"
                         f" {torch.cuda.max_memory_allocated(device):,} B,"
                         f" max reserved {torch.cuda.max_memory_reserved(device):,} B\n")
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
