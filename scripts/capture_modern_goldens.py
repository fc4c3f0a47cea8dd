#!/usr/bin/env python3
"""Record ground truth for compiled training, CUDA graphs and memory pools on a CUDA GPU.

    python3 scripts/capture_modern_goldens.py --out goldens/h100/modern [--cases a,b] [--jobs 3]
    python3 scripts/capture_modern_goldens.py --list
    python3 scripts/capture_modern_goldens.py --out /tmp/dry --dry-run-cpu [--compile-model mlp]

The memory of the PyTorch features issue 16 models (private pools, compiled regions), each case
in a fresh Python process (the caching allocator starts empty; one failure or time-out does not
stop the others), small models from examples/training/ so that a case takes seconds:

  compile_default          GPT-style decoder (examples/training/models.py "gpt") under
                           torch.compile(model), AdamW, bf16 autocast, 3 steps
  compile_reduce_overhead  the same under mode="reduce-overhead" (CUDA-graph trees: a private
                           pool), with torch.compiler.cudagraph_mark_step_begin() at each step
  graphs_shared_pool       two MLP stages (models.py "mlp": 1024 -> 4096 -> 1024, batch 64),
                           warmed up on a side stream, the forward of each captured in its own
                           torch.cuda.CUDAGraph with pool= ONE torch.cuda.graph_pool_handle(),
                           then replayed 3 times with new inputs copied into the static input
  graphs_separate_pools    the same with a pool handle per graph
  mempool                  allocations inside `with torch.cuda.use_mem_pool(MemPool())` (large
                           and small, some freed inside the pool, some allocated outside it),
                           then, where torch has them, a MemPool(use_on_oom=True) whose cached
                           block is offered to a default-pool allocation made under a memory cap
                           (torch.cuda.set_per_process_memory_fraction) and a MemPool(no_split=
                           True); then the first pool released (tensors deleted, `del pool`,
                           empty_cache) while the use_on_oom pool is kept to the dump, so the
                           snapshot holds both a pool's release (trace) and a live pool's
                           segments (segment_pool_id != (0, 0))

Per case, into --out:

  <case>.pickle.gz     torch.cuda.memory._dump_snapshot() of the whole case, gzipped; history
                       (_record_memory_history, stacks="python", context="all") starts before the
                       model is built. Compiled cases: compile_context=True where
                       _record_memory_history takes it, augment_with_fx_traces=True where
                       _dump_snapshot (or _snapshot) takes it, with torch.fx.experimental._config.
                       enrich_profiler_metadata set before compiling where it exists. Phases are
                       marked as in scripts/capture_goldens.py: record_function
                       "vramscope::<phase>#<step>" and _set_memory_metadata.
  <case>.sidecar.json  "format": "vramscope-modern-golden". The case, the torch features found
                       (and which were used or skipped, and why), and per phase: memory_allocated/
                       reserved after it, its own max_memory_allocated/reserved, the
                       torch.cuda.memory_stats() keys of MODERN_STAT_KEYS and every key about
                       private pools (reserved_bytes_by_private_pools.<pool>.*), and "pools":
                       torch.cuda.memory_snapshot()'s segments summed per segment_pool_id
                       (segments, total/allocated/active bytes, expandable segments) with each
                       private pool's segments listed (address, size). What happened at a cap
                       (served from a pool, or an out-of-memory) is recorded, never assumed.

and metadata.json (GPU, driver, torch, the command line, per case its status, files and peaks).
A case whose torch feature is missing (no torch.cuda.MemPool before torch 2.6, no graph pools,
no torch.compile) is skipped with one line saying why: not a failure. A sub-feature that is
missing (MemPool's use_on_oom or no_split) skips only its phases, said in the sidecar.

The driver prints one line per case and a final count; it exits 0 when no case failed (skips
included), 1 when one failed, 2 on bad arguments (an unknown case), 3 when there is no GPU.

--dry-run-cpu runs every case on the CPU without allocator history or snapshot: torch.compile
really compiles (Inductor's C++ backend; reduce-overhead finds no CUDA graph to make), the graph
and pool cases run their stages eagerly where the capture or the pool would be (CUDA graphs and
MemPool need a GPU; their sidecars say so), so that every code path but the CUDA calls runs.
Compiling the GPT on the CPU takes minutes on a few cores: --compile-model mlp compiles the MLP
instead (a quick check of the same code; the goldens are the GPT's).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime as _dt
import fnmatch
import gc
import gzip
import hashlib
import inspect
import json
import os
import pickle
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import capture_goldens as CG  # noqa: E402  (stdlib only at import)

SIDECAR_FORMAT = "vramscope-modern-golden"
SIDECAR_VERSION = 1
METADATA_FORMAT = "vramscope-modern-goldens-metadata"
METADATA_VERSION = 1

DEFAULT_STEPS = 3
DEFAULT_SEED = 0
DEFAULT_JOBS = 3
DEFAULT_TIMEOUT_S = 180
STACKS = "python"  # C++ frames triple a snapshot and say nothing about pools or regions
SKIP_RC = 4        # a child's exit status for "this torch lacks the feature": not a failure
SKIP_TAG = "@@skip "
PRIVATE_SEGMENTS_LISTED = 64  # per pool and phase, so a sidecar stays small
SIZE_BUDGET_BYTES = 4 * 1024 * 1024  # what the suite's files may take in the repository

# memory_stats() keys copied after each phase (those that exist), besides every key that
# mentions a private pool (reserved_bytes_by_private_pools.<id>.*, flattened by memory_stats).
MODERN_STAT_KEYS = CG.MEMORY_STAT_KEYS + (
    "allocated_bytes.large_pool.current", "allocated_bytes.small_pool.current",
    "reserved_bytes.large_pool.current", "reserved_bytes.small_pool.current",
    "num_sync_all_streams", "num_oom_rejections",
)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str           # "compile", "graphs" or "mempool"
    description: str
    needs: tuple        # features (see features()) without which the case is skipped


CASES = [  # the slow ones first, so that --jobs overlaps them with the rest
    Case("compile_default", "compile", "GPT-style decoder, torch.compile(model), AdamW, bf16 "
         "autocast", ("compile",)),
    Case("compile_reduce_overhead", "compile", "the same, mode='reduce-overhead' (CUDA-graph "
         "trees, a private pool)", ("compile", "cudagraph_mark_step_begin")),
    Case("graphs_shared_pool", "graphs", "two MLP stages' forwards, two CUDAGraphs sharing one "
         "graph_pool_handle()", ("graph_pool_handle",)),
    Case("graphs_separate_pools", "graphs", "the same, one graph_pool_handle() per graph",
         ("graph_pool_handle",)),
    Case("mempool", "mempool", "use_mem_pool(MemPool()), then use_on_oom / no_split pools where "
         "torch has them, then the first pool released", ("mempool",)),
]
BY_NAME = {c.name: c for c in CASES}


def select_cases(spec: str | None) -> list[Case]:
    if not spec:
        return list(CASES)
    chosen: list[Case] = []
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        matched = [c for c in CASES if fnmatch.fnmatchcase(c.name, pattern)]
        if not matched:
            raise SystemExit(f"capture_modern_goldens: error: no case matches {pattern!r}; "
                             f"the cases are: {', '.join(BY_NAME)}")
        chosen.extend(c for c in matched if c not in chosen)
    return chosen


def case_files(name: str) -> list[str]:
    return [f"{name}.sidecar.json", f"{name}.pickle.gz"]


# ------------------------------------------------------------------- what this torch can do


def _takes(fn, name: str) -> bool:
    """Whether `fn` takes a parameter `name`; a builtin without a signature is asked through its
    docstring (pybind11 writes the arguments there)."""
    if fn is None:
        return False
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return f"{name}:" in (getattr(fn, "__doc__", None) or "") or \
            f"{name}=" in (getattr(fn, "__doc__", None) or "")


def features(torch) -> dict:
    """Which of the APIs the cases use this torch has (found, not assumed from its version)."""
    cuda = torch.cuda
    mem = getattr(cuda, "memory", None)
    pool_cls = getattr(cuda, "MemPool", None)
    f = {
        "compile": hasattr(torch, "compile"),
        "cudagraph_mark_step_begin": hasattr(getattr(torch, "compiler", None),
                                             "cudagraph_mark_step_begin"),
        "graph_pool_handle": hasattr(cuda, "graph_pool_handle") and hasattr(cuda, "CUDAGraph"),
        "mempool": pool_cls is not None and hasattr(cuda, "use_mem_pool"),
        "mempool_use_on_oom": pool_cls is not None and _takes(pool_cls.__init__, "use_on_oom"),
        "mempool_no_split": pool_cls is not None and _takes(pool_cls.__init__, "no_split"),
        "record_compile_context": mem is not None and _takes(
            getattr(mem, "_record_memory_history", None), "compile_context"),
        "dump_augment_fx": mem is not None and _takes(
            getattr(mem, "_dump_snapshot", None), "augment_with_fx_traces"),
        "snapshot_augment_fx": mem is not None and _takes(
            getattr(mem, "_snapshot", None), "augment_with_fx_traces"),
        "memory_snapshot_include_traces": mem is not None and _takes(
            getattr(mem, "memory_snapshot", None), "include_traces"),
        "set_memory_metadata": mem is not None and hasattr(mem, "_set_memory_metadata"),
    }
    try:
        import torch.fx.experimental._config as fx_config
        f["enrich_profiler_metadata"] = hasattr(fx_config, "enrich_profiler_metadata")
    except Exception:  # noqa: BLE001 - an older torch
        f["enrich_profiler_metadata"] = False
    return f


WHY_MISSING = {
    "compile": "torch.compile does not exist in this torch (it came in 2.0)",
    "cudagraph_mark_step_begin": "torch.compiler.cudagraph_mark_step_begin does not exist in "
                                 "this torch (reduce-overhead training needs it between steps)",
    "graph_pool_handle": "torch.cuda.graph_pool_handle / CUDAGraph do not exist in this torch",
    "mempool": "torch.cuda.MemPool / use_mem_pool do not exist in this torch (they came in 2.6)",
}


# ----------------------------------------------------------------------- the measuring hooks


def pool_key(pool_id) -> str:
    """A segment_pool_id (a tuple, or a list once pickled) as "a_b", as memory_stats() names
    pools; (0, 0) is the default pool."""
    try:
        return "_".join(str(int(x)) for x in pool_id)
    except (TypeError, ValueError):
        return str(pool_id)


def pools_from_segments(segments, device_index: int) -> dict:
    """memory_snapshot()'s segments summed per segment_pool_id, private pools' segments listed."""
    pools: dict[str, dict] = {}
    for s in segments:
        if s.get("device", device_index) != device_index:
            continue
        key = pool_key(s.get("segment_pool_id", (0, 0)))
        p = pools.setdefault(key, {"segments": 0, "total_size": 0, "allocated_size": 0,
                                   "active_size": 0, "expandable_segments": 0,
                                   "segment_types": {}})
        p["segments"] += 1
        p["total_size"] += s.get("total_size", 0)
        p["allocated_size"] += s.get("allocated_size", 0)
        p["active_size"] += s.get("active_size", 0)
        p["expandable_segments"] += 1 if s.get("is_expandable") else 0
        kind = s.get("segment_type", "?")
        p["segment_types"][kind] = p["segment_types"].get(kind, 0) + 1
        if key != "0_0":
            listed = p.setdefault("listed", [])
            if len(listed) < PRIVATE_SEGMENTS_LISTED:
                listed.append([s.get("address"), s.get("total_size"), s.get("allocated_size")])
    return dict(sorted(pools.items()))


class ModernHooks(CG.CaptureHooks):
    """capture_goldens' phase hooks (marks in the snapshot, peaks reset per phase) with more of
    memory_stats() and the per-pool sums of memory_snapshot() after each phase. `at_step_begin`,
    when given, is called before the first phase of each training step (reduce-overhead's
    cudagraph_mark_step_begin)."""

    def __init__(self, torch, device, *, use_cuda: bool, snapshot_kwargs: dict,
                 at_step_begin=None):
        super().__init__(torch, device, marks=True, use_cuda=use_cuda)
        self.snapshot_kwargs = snapshot_kwargs
        self.at_step_begin = at_step_begin
        self.notes: list[str] = []

    def phase_begin(self, step: int, phase: str) -> None:
        if phase == "zero_grad" and self.at_step_begin is not None:
            self.at_step_begin()
        super().phase_begin(step, phase)

    def _memory(self) -> dict | None:
        if not self.use_cuda:
            return None
        cuda = self.torch.cuda
        cuda.synchronize()
        stats = cuda.memory_stats()
        picked = {k: stats[k] for k in MODERN_STAT_KEYS if k in stats}
        picked.update({k: v for k, v in stats.items() if "private_pool" in k})
        segments = cuda.memory_snapshot(**self.snapshot_kwargs)
        if isinstance(segments, dict):  # a torch whose memory_snapshot() is the whole snapshot
            segments = segments.get("segments", [])
        return {
            "allocated": cuda.memory_allocated(),
            "reserved": cuda.memory_reserved(),
            "max_allocated": cuda.max_memory_allocated(),
            "max_reserved": cuda.max_memory_reserved(),
            "stats": picked,
            "pools": pools_from_segments(segments, self.device.index or 0),
        }

    @contextlib.contextmanager
    def phase(self, step: int, name: str, tensors=None):
        """A phase around a block; `tensors` (a dict filled inside the block) is described at
        its end, as train.py's phases describe theirs."""
        self.phase_begin(step, name)
        yield
        self.phase_end(step, name, tensors)


def sync(torch, dry: bool) -> None:
    if not dry:
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------- the cases


def run_compile(torch, case: Case, device, dry: bool, hooks: ModernHooks, args, feats,
                used: dict) -> dict:
    sys.path.insert(0, str(REPO / "examples" / "training"))
    import train as T  # examples/training/train.py

    if feats["enrich_profiler_metadata"]:
        # Set before anything is compiled: FX graph modules then register the metadata that
        # _snapshot(augment_with_fx_traces=True) maps their frames with.
        import torch.fx.experimental._config as fx_config
        fx_config.enrich_profiler_metadata = True
        used["enrich_profiler_metadata"] = True
    mode = "reduce-overhead" if case.name == "compile_reduce_overhead" else "default"
    name = args.compile_model
    with hooks.phase(0, "setup"):
        model = T.build_model(name, args.seed).to(device)
        optimizer = T.build_optimizer("adamw", model)
        compiled = torch.compile(model, mode=mode)
    hooks.attach(model, optimizer)
    if mode == "reduce-overhead":
        hooks.at_step_begin = torch.compiler.cudagraph_mark_step_begin
        used["cudagraph_mark_step_begin"] = "called before each step's zero_grad"
    batches = T.make_batches(name, args.seed)
    t0 = time.perf_counter()
    losses = T.train(compiled, optimizer, name, batches, steps=args.steps, device=device,
                     amp="bf16", hooks=hooks)
    train_s = time.perf_counter() - t0
    hooks.inventories["end"] = CG.inventory(model, optimizer)
    config = {
        "model": name, "model_class": type(model).__name__, "optimizer": "adamw",
        "precision": "bf16 autocast (forward and loss)", "torch_compile": {"mode": mode},
        "loop": "examples/training/train.py train_step on the compiled module; the first "
                "step's forward and backward include compilation",
        "equivalent_command": f"python3 examples/training/train.py --model {name} --optimizer adamw "
                              f"--steps {args.steps} --amp bf16 (with torch.compile(model, "
                              f"mode={mode!r}))",
    }
    try:
        import torch._dynamo.utils as du
        config["dynamo_counters"] = {k: dict(v) for k, v in du.counters.items()
                                     if k in ("stats", "graph_break", "inductor", "aot_autograd")}
    except Exception as e:  # noqa: BLE001 - informative only
        config["dynamo_counters"] = f"unavailable: {type(e).__name__}"
    if mode == "reduce-overhead" and dry:
        hooks.notes.append("reduce-overhead on the CPU: Inductor makes no CUDA graph (it "
                           "needs CUDA tensors), so there is no private pool here")
    return {"config": config, "losses": losses, "train_seconds": round(train_s, 3),
            "keep": (model, optimizer, compiled)}


def run_graphs(torch, case: Case, device, dry: bool, hooks: ModernHooks, args, feats,
               used: dict) -> dict:
    sys.path.insert(0, str(REPO / "examples" / "training"))
    from models import MODELS

    shared = case.name == "graphs_shared_pool"
    spec = MODELS["mlp"]
    with hooks.phase(0, "setup"):
        torch.manual_seed(args.seed)
        stage1 = spec.build().to(device).eval()
        stage2 = spec.build().to(device).eval()
        static_x = torch.zeros(spec.batch_size, spec.dims["d_in"], device=device)
    g = torch.Generator().manual_seed(args.seed + 1)
    inputs = [torch.randn(spec.batch_size, spec.dims["d_in"], generator=g)
              for _ in range(args.steps)]
    if dry:
        hooks.notes.append("CUDA graphs need a GPU: on the CPU each capture phase runs its "
                           "stage eagerly and each replay runs both stages eagerly")
    with torch.no_grad():
        with hooks.phase(0, "warmup"):
            # The documented recipe: warm up on a side stream before capturing.
            side = None if dry else torch.cuda.Stream()
            if side is not None:
                side.wait_stream(torch.cuda.current_stream())
            with (contextlib.nullcontext() if dry else torch.cuda.stream(side)):
                for _ in range(3):
                    stage2(stage1(static_x))
            if side is not None:
                torch.cuda.current_stream().wait_stream(side)
            sync(torch, dry)
        pools = None
        graphs = [None, None]
        if not dry:
            first = torch.cuda.graph_pool_handle()
            pools = [first, first if shared else torch.cuda.graph_pool_handle()]
            graphs = [torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()]
            used["graph_pools"] = [pool_key(p) for p in pools]
        out = {}
        with hooks.phase(0, "capture_1", out):
            with (contextlib.nullcontext() if dry else torch.cuda.graph(graphs[0], pool=pools[0])):
                out["y1"] = y1 = stage1(static_x)
        with hooks.phase(0, "capture_2", out):
            with (contextlib.nullcontext() if dry else torch.cuda.graph(graphs[1], pool=pools[1])):
                out["y2"] = y2 = stage2(y1)
        losses = []
        for step in range(1, args.steps + 1):
            with hooks.phase(step, "inputs"):
                static_x.copy_(inputs[step - 1])
            with hooks.phase(step, "replay"):
                if dry:
                    y1.copy_(stage1(static_x))
                    y2.copy_(stage2(y1))
                else:
                    graphs[0].replay()
                    graphs[1].replay()
            with hooks.phase(step, "step_end"):
                losses.append(float(y2.float().pow(2).mean().item()))
    config = {
        "model": "two stages of models.py 'mlp' (Linear 1024->4096, GELU, Linear 4096->1024), "
                 "eval mode, no_grad, fp32, batch 64",
        "graphs": 2, "pool": "one graph_pool_handle() shared by both graphs" if shared
        else "one graph_pool_handle() per graph",
        "graph_pool_ids": used.get("graph_pools"),
        "recipe": "static input allocated in setup; 3 warm-up iterations on a side stream; "
                  "capture_1: torch.cuda.graph(g1, pool=p1): y1 = stage1(x); capture_2: "
                  "torch.cuda.graph(g2, pool=p2): y2 = stage2(y1); per step: x.copy_(batch), "
                  "g1.replay(), g2.replay(), mean(y2^2).item(); graphs kept alive to the dump",
        "expectation": "stage1's 4096-wide activation is freed inside the first capture; with a "
                       "shared pool the second capture can reuse that memory, with separate "
                       "pools it cannot (lightning-thunder#1792, vllm#45178)",
    }
    return {"config": config, "losses": losses,
            "keep": (stage1, stage2, static_x, y1, y2, graphs, pools)}


MiB = 1 << 20


def run_mempool(torch, case: Case, device, dry: bool, hooks: ModernHooks, args, feats,
                used: dict) -> dict:
    cuda = torch.cuda
    sizes = {"large_a": 24 * MiB, "large_b": 8 * MiB, "small_a": 256 * 1024, "small_b": 4096}
    if dry:
        hooks.notes.append("MemPool needs a GPU: on the CPU the allocations run in a plain "
                           "context, with no pool and no memory cap")

    def in_pool(pool):
        return contextlib.nullcontext() if pool is None else cuda.use_mem_pool(pool)

    def empty(nbytes):
        return torch.empty(nbytes, dtype=torch.uint8, device=device)

    keep: dict = {}
    with hooks.phase(0, "setup"):
        pool = None if dry else cuda.MemPool()
        used["mempool_id"] = None if pool is None else pool_key(pool.id)
    live = {}
    with hooks.phase(0, "pool_alloc", live):
        with in_pool(pool):
            for k, n in sizes.items():
                live[k] = empty(n)
    with hooks.phase(0, "pool_free_some"):
        del live["large_b"], live["small_b"]  # cached in the pool, not given back
    outside = {}
    with hooks.phase(0, "default_alloc", outside):
        # Same sizes outside the pool: the default pool must not be served from the pool's
        # free blocks.
        outside["large_b"] = empty(sizes["large_b"])
        outside["small_b"] = empty(sizes["small_b"])
    with hooks.phase(0, "pool_realloc", live):
        with in_pool(pool):  # back inside: the pool's own free blocks serve these
            live["large_b2"] = empty(sizes["large_b"])
            live["small_b2"] = empty(sizes["small_b"])

    oom_result: dict = {}
    if not feats["mempool_use_on_oom"]:
        why = "MemPool(use_on_oom=...) does not exist in this torch: its phases are skipped"
        print(f"note: {why}", flush=True)
        hooks.notes.append(why)
    else:
        with hooks.phase(0, "oom_pool_alloc"):
            oom_pool = None if dry else cuda.MemPool(use_on_oom=True)
            used["use_on_oom_pool_id"] = None if oom_pool is None else pool_key(oom_pool.id)
            with in_pool(oom_pool):
                block = empty(32 * MiB)
            del block  # its segment stays cached in oom_pool
        keep["oom_pool"] = oom_pool
        with hooks.phase(0, "capped_default_alloc"):
            # Cap the process so that a new 32 MiB segment does not fit: the default pool then
            # either takes oom_pool's cached block (use_on_oom) or raises an out-of-memory.
            # What happened is recorded.
            if dry:
                oom_result = {"outcome": "not run (no GPU)"}
            else:
                total = cuda.get_device_properties(device).total_memory
                cap = cuda.memory_reserved() + 16 * MiB
                cuda.set_per_process_memory_fraction(cap / total, device)
                oom_result = {"cap_bytes": cap, "request_bytes": 32 * MiB}
                try:
                    t = empty(32 * MiB)
                    seg = next((s for s in cuda.memory_snapshot(**hooks.snapshot_kwargs)
                                if s["address"] <= t.data_ptr() < s["address"] + s["total_size"]),
                               None)
                    oom_result.update(outcome="allocated", data_ptr=t.data_ptr(),
                                      segment_pool_id=None if seg is None else
                                      pool_key(seg.get("segment_pool_id")))
                    del t
                except torch.cuda.OutOfMemoryError as e:
                    oom_result.update(outcome="out of memory", message=str(e).splitlines()[0])
                finally:
                    cuda.set_per_process_memory_fraction(1.0, device)
        used["use_on_oom"] = oom_result
    if not feats["mempool_no_split"]:
        why = "MemPool(no_split=...) does not exist in this torch: its phase is skipped"
        print(f"note: {why}", flush=True)
        hooks.notes.append(why)
    else:
        ns = {}
        with hooks.phase(0, "no_split_pool_alloc", ns):
            ns_pool = None if dry else cuda.MemPool(no_split=True)
            used["no_split_pool_id"] = None if ns_pool is None else pool_key(ns_pool.id)
            with in_pool(ns_pool):
                ns["a"] = empty(3 * MiB)
                ns["b"] = empty(5 * MiB)
        with hooks.phase(0, "no_split_pool_release"):
            ns.clear()
            del ns_pool
            gc.collect()
            if not dry:
                cuda.empty_cache()
    with hooks.phase(0, "release"):
        live.clear()
        if pool is not None:
            use_count = pool.use_count() if hasattr(pool, "use_count") else None
            used["mempool_use_count_before_del"] = use_count
        del pool
        gc.collect()
        if not dry:
            cuda.empty_cache()
    outside.clear()
    config = {
        "sizes": sizes,
        "recipe": "setup: MemPool(); pool_alloc: the four sizes inside use_mem_pool; "
                  "pool_free_some: large_b and small_b deleted (cached in the pool); "
                  "default_alloc: large_b and small_b sizes outside the pool; pool_realloc: "
                  "the same sizes inside the pool again; oom_pool_alloc: MemPool(use_on_oom="
                  "True), 32 MiB allocated in it and freed; capped_default_alloc: memory "
                  "fraction capped at reserved + 16 MiB, 32 MiB allocated in the default pool, "
                  "cap removed; no_split_pool_alloc/release: MemPool(no_split=True), 3 and 5 "
                  "MiB, then released; release: the first pool's tensors deleted, del pool, "
                  "empty_cache. The use_on_oom pool is kept to the dump.",
    }
    return {"config": config, "losses": [], "keep": keep}


RUNNERS = {"compile": run_compile, "graphs": run_graphs, "mempool": run_mempool}


# ------------------------------------------------------------------------- the child process


def dump_snapshot(torch, raw: Path, want_fx: bool, feats: dict) -> tuple[str | None, str]:
    """Write the snapshot to `raw`; returns (how it was augmented or None, the API used)."""
    mem = torch.cuda.memory
    if want_fx and feats["dump_augment_fx"]:
        mem._dump_snapshot(str(raw), augment_with_fx_traces=True)
        return "augment_with_fx_traces=True", "_dump_snapshot"
    if want_fx and feats["snapshot_augment_fx"]:
        with open(raw, "wb") as f:
            pickle.dump(mem._snapshot(augment_with_fx_traces=True), f)
        return "augment_with_fx_traces=True", "_snapshot + pickle.dump"
    mem._dump_snapshot(str(raw))
    return None, "_dump_snapshot"


def snapshot_extras(snap) -> dict:
    """What the modern cases add to a snapshot: private-pool segments, compile context, FX
    frames, annotations."""
    if not isinstance(snap, dict):
        return {}
    segs = snap.get("segments") or []
    private = [s for s in segs if pool_key(s.get("segment_pool_id", (0, 0))) != "0_0"]
    trace = [e for t in snap.get("device_traces") or [] for e in t]
    frames = [f for e in trace for f in e.get("frames") or ()]
    names = {}
    for a in snap.get("external_annotations") or []:
        n = str(a.get("name", ""))
        if not n.startswith(CG.MARK_PREFIX):
            names[n] = names.get(n, 0) + 1
    return {
        "private_pool_segments_at_dump": len(private),
        "private_pools_at_dump": sorted({pool_key(s.get("segment_pool_id")) for s in private}),
        "segment_free_events": sum(1 for e in trace if e.get("action") == "segment_free"),
        "events_with_compile_context": sum(1 for e in trace if e.get("compile_context")),
        "frames_with_fx_node": sum(1 for f in frames if f.get("fx_node_name")),
        "other_external_annotations": dict(sorted(names.items())[:50]),
    }


def run_child(args) -> int:
    case = BY_NAME.get(args.child)
    if case is None:
        print(f"capture_modern_goldens: error: unknown case {args.child!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    dry = args.dry_run_cpu
    started = time.perf_counter()
    CG.stage("import")
    import torch

    feats = features(torch)
    missing = [f for f in case.needs if not feats.get(f)]
    if missing:
        print(f"{SKIP_TAG}{case.name}: {WHY_MISSING.get(missing[0], missing[0] + ' is missing')} "
              f"(torch {torch.__version__})", flush=True)
        return SKIP_RC
    device = CG.pick_device(torch, dry, tool="capture_modern_goldens")
    if device is None:
        return 3
    torch.manual_seed(args.seed)
    used: dict = {}

    CG.stage("record")
    recording = None
    if not dry:
        kwargs = dict(enabled="all", context="all", stacks=STACKS, max_entries=args.max_entries)
        if case.kind == "compile" and feats["record_compile_context"]:
            kwargs["compile_context"] = True
        torch.cuda.memory._record_memory_history(**kwargs)
        recording = {"api": "torch.cuda.memory._record_memory_history",
                     **{k: v for k, v in kwargs.items()}, "started_us": CG.now_us(),
                     "started_before": "the case's first allocation"}
    snapshot_kwargs = {"include_traces": False} if feats["memory_snapshot_include_traces"] else {}
    hooks = ModernHooks(torch, device, use_cuda=not dry, snapshot_kwargs=snapshot_kwargs)

    CG.stage("run")
    result = RUNNERS[case.kind](torch, case, device, dry, hooks, args, feats, used)
    end_memory = hooks._memory()
    phases = hooks.phases
    peak = None if dry else CG.peak_over_phases(phases)

    snapshot_info = None
    if not dry:
        CG.stage("dump")
        raw = out / f".{case.name}.pickle.tmp"
        t0 = time.perf_counter()
        augmented, api = dump_snapshot(torch, raw, case.kind == "compile", feats)
        dump_s = time.perf_counter() - t0
        torch.cuda.memory._record_memory_history(enabled=None)
        CG.stage("summarize")
        try:  # informative only: a snapshot this code does not understand is still kept
            with open(raw, "rb") as f:
                snap = CG._NoGlobalsUnpickler(f).load()
            summary = CG.summarize_snapshot(snap, phases, device.index or 0, args.max_entries)
            summary.update(snapshot_extras(snap))
            del snap
        except Exception as e:  # noqa: BLE001
            summary = {"error": f"{type(e).__name__}: {e}"}
            print(f"warning: could not summarize the snapshot: {summary['error']}", flush=True)
        CG.stage("gzip")
        gz_name = f"{case.name}.pickle.gz"
        gz_tmp = out / f".{gz_name}.tmp"
        with open(raw, "rb") as src, open(gz_tmp, "wb") as dst_file:
            with gzip.GzipFile(filename=f"{case.name}.pickle", mode="wb", compresslevel=9,
                               fileobj=dst_file, mtime=0) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        pickle_bytes = raw.stat().st_size
        raw.unlink()
        os.replace(gz_tmp, out / gz_name)
        snapshot_info = {
            "file": gz_name, "pickle_bytes": pickle_bytes,
            "gz_bytes": (out / gz_name).stat().st_size,
            "sha256_gz": hashlib.sha256((out / gz_name).read_bytes()).hexdigest(),
            "api": api, "augmented": augmented, "dump_seconds": round(dump_s, 3),
            "summary": summary,
        }
    del result["keep"]  # what the case kept alive for the dump

    sidecar = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "case": case.name,
        "kind": case.kind,
        "description": case.description,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "dry_run_cpu": dry,
        "torch": torch.__version__,
        "device": str(device),
        "steps": args.steps,
        "seed": args.seed,
        "features": feats,
        "used": CG.jsonable(used),
        "notes": hooks.notes,
        "config": CG.jsonable(result["config"]),
        "recording": None if recording is None else {
            **recording, "marks": hooks.mark_methods,
            "mark_name_format": f"{CG.MARK_PREFIX}<phase>#<step>"},
        "memory_fields": None if dry else CG.MEMORY_FIELDS + (
            "; stats also holds every memory_stats() key about private pools; pools: "
            "memory_snapshot()'s segments summed per segment_pool_id ('0_0' the default pool), "
            f"a private pool's segments listed as [address, total_size, allocated_size] "
            f"(at most {PRIVATE_SEGMENTS_LISTED})"),
        "peak": peak,
        "end_memory": end_memory,
        "phases": phases,
        "losses": result["losses"],
        "tensors": hooks.inventories,
        "snapshot": snapshot_info,
        "timing": {"train_seconds": result.get("train_seconds"),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    CG.stage("write")
    CG.write_json(out / f"{case.name}.sidecar.json", sidecar)
    CG.stage("done")
    return 0


# ------------------------------------------------------------------------------- the driver


def repo_commit() -> str | None:
    return CG.repo_commit(("examples/training", "scripts/capture_goldens.py",
                           "scripts/capture_modern_goldens.py"))


class Driver:
    def __init__(self, args, cases: list[Case]):
        self.args = args
        self.cases = cases
        self.out = Path(args.out)
        self.lock = threading.Lock()
        self.done = 0
        self.results: dict[str, dict] = {}

    def run_case(self, case: Case) -> dict:
        for stale in case_files(case.name) + [f"logs/{case.name}.log"]:
            (self.out / stale).unlink(missing_ok=True)  # nothing old may pass for this run's
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name, "--out",
               str(self.out), "--steps", str(self.args.steps), "--seed", str(self.args.seed),
               "--max-entries", str(self.args.max_entries), "--compile-model",
               self.args.compile_model]
        if self.args.dry_run_cpu:
            cmd.append("--dry-run-cpu")
        # A cold Inductor cache of the case's own: compilation (and what it allocates) is the
        # same in every run, and parallel cases do not share a cache being written.
        cache = tempfile.mkdtemp(prefix=f"vramscope-inductor-{case.name}-")
        env = dict(os.environ, PYTHONUNBUFFERED="1", TORCHINDUCTOR_CACHE_DIR=cache)
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True,
                               timeout=self.args.timeout)
            output, rc, timed_out = (r.stdout or "") + (r.stderr or ""), r.returncode, False
        except subprocess.TimeoutExpired as e:
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            output, rc, timed_out = text(e.stdout) + text(e.stderr), None, True
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        stages = [ln[len(CG.STAGE_TAG):].strip() for ln in output.splitlines()
                  if ln.startswith(CG.STAGE_TAG)]
        attempt = {"rc": rc, "timed_out": timed_out, "seconds": round(time.perf_counter() - t0, 1),
                   "last_stage": stages[-1] if stages else None}
        return self._finish(case, attempt, output)

    def _finish(self, case: Case, attempt: dict, output: str) -> dict:
        result = {"case": case.name, "kind": case.kind, "attempt": attempt}
        skip = [ln[len(SKIP_TAG):] for ln in output.splitlines() if ln.startswith(SKIP_TAG)]
        if attempt["rc"] == SKIP_RC and skip:
            result.update(status="skipped", why=skip[0])
        elif attempt["rc"] == 0:
            path = self.out / f"{case.name}.sidecar.json"
            try:
                sc = json.loads(path.read_text())
                snap = sc.get("snapshot") or {}
                result.update(status="ok", sidecar=path.name, sidecar_bytes=path.stat().st_size,
                              snapshot=snap.get("file"), snapshot_bytes=snap.get("gz_bytes"),
                              max_memory_allocated=(sc.get("peak") or {}).get("max_allocated"),
                              max_memory_reserved=(sc.get("peak") or {}).get("max_reserved"),
                              private_pools_at_dump=(snap.get("summary") or {}).get(
                                  "private_pools_at_dump"),
                              notes=sc.get("notes"))
            except (OSError, ValueError) as e:
                result.update(status="FAILED", error=f"no readable sidecar: {e}")
        else:
            result["status"] = "FAILED"
        if result["status"] == "FAILED":
            log = self.out / "logs" / f"{case.name}.log"
            log.parent.mkdir(exist_ok=True)
            log.write_text(f"### rc={attempt['rc']} timed_out={attempt['timed_out']} "
                           f"last_stage={attempt['last_stage']}\n{output}")
            result["log"] = str(log.relative_to(self.out))
        with self.lock:
            self.done += 1
            self.results[case.name] = result
            self._print_line(result, output)
        return result

    def _print_line(self, r: dict, output: str) -> None:
        a = r["attempt"]
        head = f"[{self.done}/{len(self.cases)}] {r['case']:<24} {r['status']:<7}"
        if r["status"] == "skipped":
            print(f"{head} {r['why']}", flush=True)
        elif r["status"] == "ok":
            pools = r.get("private_pools_at_dump")
            print(f"{head} peak alloc {CG.fmt_bytes(r.get('max_memory_allocated')):>10}  "
                  f"reserved {CG.fmt_bytes(r.get('max_memory_reserved')):>10}  "
                  f"snapshot {CG.fmt_bytes(r.get('snapshot_bytes')):>9}  private pools at dump "
                  f"{pools if pools is not None else '-'}  {a['seconds']:.1f} s", flush=True)
            for note in r.get("notes") or ():
                print(f"        note: {note}", flush=True)
        else:
            why = "timed out" if a["timed_out"] else f"exit code {a['rc']}"
            print(f"{head} {why} in stage {a['last_stage']!r} after {a['seconds']:.1f} s; "
                  f"log: {r.get('log')}", flush=True)
            for ln in [ln for ln in output.splitlines()
                       if ln.strip() and not ln.startswith(CG.STAGE_TAG)][-6:]:
                print(f"        | {ln}", flush=True)


def run_driver(args) -> int:
    cases = select_cases(args.cases)
    out = Path(args.out)
    meta_path = out / "metadata.json"
    previous: dict = {}
    if meta_path.exists():  # never overwrite another script's metadata (e.g. goldens/h200/)
        try:
            old = json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:
            print(f"capture_modern_goldens: error: {meta_path} is unreadable ({e}); use another "
                  "--out", file=sys.stderr)
            return 2
        if old.get("format") != METADATA_FORMAT:
            print(f"capture_modern_goldens: error: {meta_path} is {old.get('format')!r}, not this "
                  "script's; use another --out (e.g. goldens/h100/modern)", file=sys.stderr)
            return 2
        if old.get("dry_run_cpu") == args.dry_run_cpu:
            previous = old.get("cases", {})
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    env_info = CG.gpu_metadata(args.dry_run_cpu)
    if "error" in env_info and "torch" not in env_info:
        print(f"capture_modern_goldens: error: {env_info['error']}", file=sys.stderr)
        return 3
    if not args.dry_run_cpu and not env_info.get("gpu"):
        print("capture_modern_goldens: error: no CUDA GPU ("
              f"{env_info.get('error', 'unknown reason')}); use --dry-run-cpu to test without one",
              file=sys.stderr, flush=True)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        print(f"warning: PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']!r} is set; "
              "the goldens are meant to use the default allocator settings", flush=True)
    print(f"capture_modern_goldens: {len(cases)} case(s) -> {out} "
          f"({'dry run on the CPU, no snapshots' if args.dry_run_cpu else 'CUDA'}, "
          f"{args.jobs} at a time, timeout {args.timeout} s each); torch {env_info.get('torch')}",
          flush=True)
    gpu = env_info.get("gpu") or {}
    if gpu:
        print(f"GPU: {gpu['name']}, {CG.fmt_bytes(gpu['total_memory'])}, sm "
              f"{gpu['compute_capability']}, driver {gpu.get('driver_version')}", flush=True)

    driver = Driver(args, cases)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(driver.run_case, c) for c in cases]
        for f in futures:
            try:
                f.result()
            except Exception:  # noqa: BLE001 - a driver bug: report it, keep the rest
                traceback.print_exc()
    results = {c.name: driver.results.get(c.name, {"case": c.name, "status": "FAILED",
                                                   "error": "driver error"}) for c in cases}
    merged = dict(previous)
    merged.update(results)
    merged = {c.name: merged[c.name] for c in CASES if c.name in merged}
    failed = [n for n, r in results.items() if r["status"] == "FAILED"]
    skipped = [n for n, r in results.items() if r["status"] == "skipped"]
    metadata = {
        "format": METADATA_FORMAT,
        "version": METADATA_VERSION,
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name] + sys.argv),
        "repo_commit": repo_commit(),
        "dry_run_cpu": args.dry_run_cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        **env_info,
        "stacks": STACKS,
        "steps": args.steps,
        "seed": args.seed,
        "max_entries": args.max_entries,
        "jobs": args.jobs,
        "compile_model": args.compile_model,
        "inductor_cache": "a fresh TORCHINDUCTOR_CACHE_DIR per case (cold compilation)",
        "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
                                               "CUDA_MODULE_LOADING")},
        "cases": merged,
    }
    CG.write_json(meta_path, metadata)
    total = sum(p.stat().st_size for c in CASES for f in case_files(c.name)
                for p in [out / f] if p.is_file()) + meta_path.stat().st_size
    print(f"{len(cases) - len(failed) - len(skipped)}/{len(cases)} ok, {len(skipped)} skipped"
          f"{': ' + ', '.join(skipped) if skipped else ''}, {len(failed)} failed"
          f"{': ' + ', '.join(failed) if failed else ''}; {out}: {CG.fmt_bytes(total)} "
          f"({total:,} B); {time.perf_counter() - t0:.0f} s", flush=True)
    if total > SIZE_BUDGET_BYTES and not args.dry_run_cpu:
        print(f"warning: the suite's files are over the {CG.fmt_bytes(SIZE_BUDGET_BYTES)} meant for "
              "the repository: look at the largest snapshot before committing", flush=True)
    return 1 if failed else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", help="output folder (created if needed)")
    p.add_argument("--cases", help="comma-separated case names or shell patterns ('graphs_*'); "
                                   "default: all")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="run on the CPU without allocator history: sidecars only")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                   help=f"cases run at the same time, each its own process (default {DEFAULT_JOBS})")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds allowed per case (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--max-entries", type=int, default=CG.DEFAULT_MAX_ENTRIES,
                   help=f"max_entries of the allocator history (default {CG.DEFAULT_MAX_ENTRIES:,})")
    p.add_argument("--compile-model", choices=("gpt", "mlp"), default="gpt",
                   help="the model of the compile_* cases (default gpt, what the goldens are); "
                        "mlp compiles in a fraction of the time, for a quick --dry-run-cpu")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("--out is required")
    if args.steps < 1:
        p.error("--steps must be at least 1")
    if args.jobs < 1 or args.timeout < 1:
        p.error("--jobs and --timeout must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name:<24} {c.description}")
        return 0
    if args.child:
        return run_child(args)
    if args.cases:
        try:
            select_cases(args.cases)
        except SystemExit as e:  # one line, exit 2 (bad arguments)
            print(e, file=sys.stderr)
            return 2
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())
