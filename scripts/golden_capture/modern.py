"""capture_modern_goldens.py's cases: compiled training, CUDA graphs with shared or separate
pools, memory pools; what this torch has of the features they use; the per-pool bookkeeping of
memory_snapshot()'s segments; the snapshot's dump with FX frames and what it holds of pools and
compiled regions. torch is passed in: importing this module needs the stdlib only."""

from __future__ import annotations

import contextlib
import gc
import inspect
import pickle
import time
from pathlib import Path

from .common import MARK_PREFIX, TRAINING_DIR
from .measure import MEMORY_FIELDS, MEMORY_STAT_KEYS, CaptureHooks, add_path, inventory

PRIVATE_SEGMENTS_LISTED = 64  # per pool and phase, so a sidecar stays small
MEMORY_FIELDS = MEMORY_FIELDS + (
    "; stats also holds every memory_stats() key about private pools; pools: "
    "memory_snapshot()'s segments summed per segment_pool_id ('0_0' the default pool), "
    f"a private pool's segments listed as [address, total_size, allocated_size] "
    f"(at most {PRIVATE_SEGMENTS_LISTED})")

# memory_stats() keys copied after each phase (those that exist), besides every key that
# mentions a private pool (reserved_bytes_by_private_pools.<id>.*, flattened by memory_stats).
MODERN_STAT_KEYS = MEMORY_STAT_KEYS + (
    "allocated_bytes.large_pool.current", "allocated_bytes.small_pool.current",
    "reserved_bytes.large_pool.current", "reserved_bytes.small_pool.current",
    "num_sync_all_streams", "num_oom_rejections",
)


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


class ModernHooks(CaptureHooks):
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


def run_compile(torch, case, device, dry: bool, hooks: ModernHooks, args, feats,
                used: dict) -> dict:
    add_path(TRAINING_DIR)
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
    hooks.inventories["end"] = inventory(model, optimizer)
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


def run_graphs(torch, case, device, dry: bool, hooks: ModernHooks, args, feats,
               used: dict) -> dict:
    add_path(TRAINING_DIR)
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


def run_mempool(torch, case, device, dry: bool, hooks: ModernHooks, args, feats,
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


def snapshot_dumper(torch, want_fx: bool, feats: dict):
    """measure.store_snapshot's `dump`: dump_snapshot, said as {"api", "augmented"}."""
    def dump(raw: Path) -> dict:
        augmented, api = dump_snapshot(torch, raw, want_fx, feats)
        return {"api": api, "augmented": augmented}
    return dump


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
        if not n.startswith(MARK_PREFIX):
            names[n] = names.get(n, 0) + 1
    return {
        "private_pool_segments_at_dump": len(private),
        "private_pools_at_dump": sorted({pool_key(s.get("segment_pool_id")) for s in private}),
        "segment_free_events": sum(1 for e in trace if e.get("action") == "segment_free"),
        "events_with_compile_context": sum(1 for e in trace if e.get("compile_context")),
        "frames_with_fx_node": sum(1 for f in frames if f.get("fx_node_name")),
        "other_external_annotations": dict(sorted(names.items())[:50]),
    }


def metadata_entry(sc: dict, path: Path) -> dict:
    """A case's entry in the modern suite's metadata.json (after its status), from its sidecar."""
    snap = sc.get("snapshot") or {}
    return dict(sidecar=path.name, sidecar_bytes=path.stat().st_size, snapshot=snap.get("file"),
                snapshot_bytes=snap.get("gz_bytes"),
                max_memory_allocated=(sc.get("peak") or {}).get("max_allocated"),
                max_memory_reserved=(sc.get("peak") or {}).get("max_reserved"),
                private_pools_at_dump=(snap.get("summary") or {}).get("private_pools_at_dump"),
                notes=sc.get("notes"))
