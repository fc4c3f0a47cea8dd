"""The child side of the torch suites: PyTorch's own counters per phase, the marks in the
snapshot, the tensor inventory, the allocator history and the snapshot's dump, summary and gzip.
torch is passed in or imported inside the functions: importing this module needs the stdlib only."""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from .common import MARK_PREFIX, gzip_file, jsonable, now_us, stage

# Statistics copied from torch.cuda.memory_stats() after each phase (those that exist).
MEMORY_STAT_KEYS = (
    "allocated_bytes.all.current", "allocated_bytes.all.peak",
    "reserved_bytes.all.current", "reserved_bytes.all.peak",
    "active_bytes.all.current", "active_bytes.all.peak",
    "requested_bytes.all.current", "requested_bytes.all.peak",
    "inactive_split_bytes.all.current",
    "allocation.all.current", "allocation.all.peak", "allocation.all.allocated",
    "segment.all.current", "segment.all.peak",
    "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
)

# What the per-phase memory fields of a sidecar mean.
MEMORY_FIELDS = (
    "allocated/reserved: torch.cuda.memory_allocated()/memory_reserved() after the phase; "
    "max_allocated/max_reserved: max_memory_allocated()/max_memory_reserved() with the "
    "peak statistics reset when the phase began, i.e. the phase's own peak; stats: "
    "selected torch.cuda.memory_stats() keys")

# The sidecars' "clock" (capture_goldens.py adds what snapshot_events means).
CLOCK = ("begin_us/end_us/synced_us: time.time_ns() // 1000, µs since the Unix epoch "
         "(the snapshot's time_us); begin_us just before the phase's code, end_us just "
         "after it, synced_us after torch.cuda.synchronize() and reading the counters")
TENSOR_FIELDS = ("shape, dtype, device, numel, nbytes (numel * element size), data_ptr; "
                 "storage_data_ptr/storage_nbytes only when the tensor is a view that "
                 "does not start at, or does not cover, its storage")
USER_METADATA_FORMAT = "vramscope step=<step> phase=<phase> (cleared between phases)"


class NoGlobalsUnpickler(pickle.Unpickler):
    """Reads back the snapshot this process just wrote; refuses anything but plain data."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot pickle refers to {module}.{name}; refused")


class CaptureHooks:
    """train.Hooks that measure each phase with PyTorch's own counters, mark it in the snapshot,
    and take the tensor inventory after the first optimizer step. Holds no reference to any tensor
    it is shown."""

    def __init__(self, torch, device, *, marks: bool, use_cuda: bool):
        self.torch = torch
        self.device = device
        self.marks = marks
        self.use_cuda = use_cuda
        self.phases: list[dict] = []
        self.steps: dict[int, dict] = {}
        self.inventories: dict[str, dict] = {}
        self.model = None
        self.optimizer = None
        self._open: dict | None = None
        self._record_function = None
        self.mark_methods: dict[str, bool | str] = {"record_function": False, "user_metadata": False}
        self._set_metadata = None
        if marks:
            mem = getattr(getattr(torch, "cuda", None), "memory", None)
            if use_cuda and mem is not None and hasattr(mem, "_set_memory_metadata"):
                self._set_metadata = mem._set_memory_metadata
                self.mark_methods["user_metadata"] = "torch.cuda.memory._set_memory_metadata"
            if hasattr(torch, "profiler") and hasattr(torch.profiler, "record_function"):
                self.mark_methods["record_function"] = "torch.profiler.record_function"

    def attach(self, model, optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    # -- the memory counters
    def _memory(self) -> dict | None:
        if not self.use_cuda:
            return None
        cuda = self.torch.cuda
        cuda.synchronize()
        stats = cuda.memory_stats()
        return {
            "allocated": cuda.memory_allocated(),
            "reserved": cuda.memory_reserved(),
            "max_allocated": cuda.max_memory_allocated(),
            "max_reserved": cuda.max_memory_reserved(),
            "stats": {k: stats[k] for k in MEMORY_STAT_KEYS if k in stats},
        }

    def phase_begin(self, step: int, phase: str) -> None:
        if self._open is not None:
            raise RuntimeError(f"phase {phase} of step {step} begins inside another phase")
        if self.use_cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        if self._set_metadata is not None:
            try:
                self._set_metadata(f"vramscope step={step} phase={phase}")
            except Exception as e:  # noqa: BLE001 - a mark must never stop the run
                self.mark_methods["user_metadata"] = f"failed: {e}"
                self._set_metadata = None
        if self.mark_methods["record_function"] is not False:
            try:
                self._record_function = self.torch.profiler.record_function(
                    f"{MARK_PREFIX}{phase}#{step}")
                self._record_function.__enter__()
            except Exception as e:  # noqa: BLE001
                self.mark_methods["record_function"] = f"failed: {e}"
                self._record_function = None
        self._open = {"step": step, "phase": phase, "begin_us": now_us()}

    def phase_end(self, step: int, phase: str, tensors: dict | None = None) -> None:
        end_us = now_us()
        entry = self._open
        if entry is None or entry["step"] != step or entry["phase"] != phase:
            raise RuntimeError(f"phase {phase} of step {step} ends but was not begun")
        self._open = None
        if self._record_function is not None:
            try:
                self._record_function.__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001
                self.mark_methods["record_function"] = f"failed: {e}"
            self._record_function = None
        if self._set_metadata is not None:
            try:
                self._set_metadata("")
            except Exception:  # noqa: BLE001
                self._set_metadata = None
        entry["end_us"] = end_us
        entry["memory"] = self._memory()
        entry["synced_us"] = now_us()
        if tensors:
            entry["tensors"] = {k: describe_tensor(v) for k, v in tensors.items()}
            self.steps.setdefault(step, {"step": step, "tensors": {}})["tensors"].update(
                entry["tensors"])
        self.phases.append(entry)
        if step == 1 and phase == "optimizer":
            self.inventories["after_first_step"] = inventory(self.model, self.optimizer)

    def step_entries(self, losses: list, steps: int) -> list[dict]:
        """The sidecar's "steps": each step's batch tensors and its loss."""
        return [dict(self.steps.get(i, {"step": i, "tensors": {}}), loss=losses[i - 1])
                for i in range(1, steps + 1)]


def describe_tensor(t) -> dict:
    d = {
        "shape": list(t.shape),
        "dtype": str(t.dtype).removeprefix("torch."),
        "device": str(t.device),
        "numel": t.numel(),
        "nbytes": t.numel() * t.element_size(),
        "data_ptr": t.data_ptr(),
    }
    try:  # only when the tensor is a view into a larger or shifted storage
        storage = t.untyped_storage()
        if storage.data_ptr() != d["data_ptr"] or storage.nbytes() != d["nbytes"]:
            d["storage_data_ptr"] = storage.data_ptr()
            d["storage_nbytes"] = storage.nbytes()
    except Exception:  # noqa: BLE001 - e.g. a tensor without storage
        pass
    return d


def inventory(model, optimizer) -> dict:
    """Every parameter, buffer, gradient and optimizer-state tensor that exists now."""
    import torch

    aliases: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    params, grads, names = [], [], {}
    for name, p in model.named_parameters():
        names[id(p)] = name
        d = {"name": name, **describe_tensor(p), "requires_grad": p.requires_grad}
        others = [a for a in aliases.get(id(p), []) if a != name]
        if others:
            d["aliases"] = others
        params.append(d)
        if p.grad is not None:
            grads.append({"param": name, **describe_tensor(p.grad)})
    buffers = [{"name": name, **describe_tensor(b)} for name, b in model.named_buffers()]
    state = []
    for group_index, group in enumerate(optimizer.param_groups):
        for p in group["params"]:
            for key, value in optimizer.state.get(p, {}).items():
                entry = {"param": names.get(id(p), f"<unnamed {id(p)}>"), "key": key,
                         "group": group_index}
                if isinstance(value, torch.Tensor):
                    entry.update(describe_tensor(value))
                else:
                    entry["value"] = jsonable(value)
                state.append(entry)

    def total(items) -> int:
        """Bytes of the distinct storages behind these tensors (a tied weight counts once)."""
        seen, n = set(), 0
        for it in items:
            if "nbytes" not in it:
                continue
            key = (it.get("storage_data_ptr", it["data_ptr"]), it["device"])
            if key not in seen:
                seen.add(key)
                n += it.get("storage_nbytes", it["nbytes"])
        return n

    # Adam's "step" is a scalar kept on the CPU unless capturable/fused: counted apart.
    state_tensors = [s for s in state if "nbytes" in s and s["key"] != "step"]
    return {
        "parameters": params,
        "buffers": buffers,
        "gradients": grads,
        "optimizer_state": state,
        "totals": {
            "parameter_tensors": len(params),
            "parameter_numel": sum(p["numel"] for p in params),
            "parameter_bytes": total(params),
            "trainable_parameter_numel": sum(p["numel"] for p in params if p["requires_grad"]),
            "buffer_tensors": len(buffers),
            "buffer_bytes": total(buffers),
            "gradient_tensors": len(grads),
            "gradient_bytes": total(grads),
            "optimizer_state_entries": len(state),
            "optimizer_state_tensors": len(state_tensors),
            "optimizer_state_bytes": total(state_tensors),
            "optimizer_state_per_key": dict(sorted(Counter(s["key"] for s in state).items())),
            "optimizer_state_devices": sorted({s["device"] for s in state if "device" in s}),
            "params_with_state": len({s["param"] for s in state}),
        },
    }


def optimizer_info(torch, optimizer, optimizer_key: str, hyper: dict) -> dict:
    info = {
        "name": optimizer_key,
        "class": f"torch.optim.{type(optimizer).__name__}",
        "hyperparameters": jsonable(hyper),
        "defaults": jsonable(optimizer.defaults),
    }
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
        params = [p for g in optimizer.param_groups for p in g["params"]]
        d = optimizer.defaults
        if d.get("fused"):
            impl = "fused"
        elif d.get("foreach") is not None:
            impl = "foreach" if d["foreach"] else "for-loop"
        else:
            fused, foreach = _default_to_fused_or_foreach(params, False, False)
            impl = "fused" if fused else "foreach" if foreach else "for-loop"
        info["implementation"] = impl
    except Exception as e:  # noqa: BLE001 - private API; informative only
        info["implementation"] = f"unknown ({type(e).__name__}: {e})"
    return info


def start_recording(torch, stacks: str, max_entries: int) -> tuple[str, str | None]:
    """Start the allocator history; returns (stacks used, why "all" was not used or None)."""
    record = torch.cuda.memory._record_memory_history
    if stacks == "all":
        try:
            record(max_entries=max_entries, stacks="all")
            return "all", None
        except Exception as e:  # noqa: BLE001 - e.g. no C++ unwinder on this platform
            reason = f"stacks='all' failed: {type(e).__name__}: {e}"
            print(f"warning: {reason}; recording Python stacks", flush=True)
            record(max_entries=max_entries, stacks="python")
            return "python", reason
    record(max_entries=max_entries, stacks="python")
    return "python", "stacks='python' requested"


def summarize_snapshot(snap, phases: list[dict], device_index: int, max_entries: int) -> dict:
    if isinstance(snap, list):  # a bare segment list (old PyTorch): nothing else to say
        return {"layout": "segments only"}
    traces = snap.get("device_traces") or []
    trace = traces[device_index] if device_index < len(traces) else []
    actions = Counter(e.get("action") for e in trace)
    times = sorted(e["time_us"] for e in trace if isinstance(e.get("time_us"), int))
    with_frames = sum(1 for e in trace if e.get("frames"))
    cpp = py = 0
    for e in trace[:2000]:
        for f in e.get("frames") or ():
            if str(f.get("filename", "")).endswith(".py"):
                py += 1
            else:
                cpp += 1
    annotations = snap.get("external_annotations") or []
    ours = [a for a in annotations if str(a.get("name", "")).startswith(MARK_PREFIX)]
    metadata = Counter(e.get("user_metadata") for e in trace if e.get("user_metadata"))
    segments = [s for s in snap.get("segments") or [] if s.get("device", device_index) == device_index]
    covered = 0
    for p in phases:  # each phase gets the number of trace events inside its window
        p["snapshot_events"] = bisect_right(times, p["end_us"]) - bisect_left(times, p["begin_us"])
        covered += p["snapshot_events"]
    return {
        "top_level_keys": sorted(snap.keys()),
        "trace_events": len(trace),
        "actions": dict(sorted(actions.items())),
        "events_with_frames": with_frames,
        "frames_in_first_2000_events": {"python": py, "other (C++)": cpp},
        "trace_may_be_truncated": len(trace) >= max_entries,
        "first_event_us": times[0] if times else None,
        "last_event_us": times[-1] if times else None,
        "events_inside_phase_windows": covered,
        "events_outside_phase_windows": len(times) - covered,
        "external_annotations": len(annotations),
        "vramscope_marks": len(ours),
        "annotation_keys": sorted({k for a in annotations for k in a}),
        "user_metadata_values": len(metadata),
        "events_with_user_metadata": sum(metadata.values()),
        "segments": len(segments),
        "reserved_at_dump": sum(s.get("total_size", 0) for s in segments),
        "allocated_at_dump": sum(s.get("allocated_size", 0) for s in segments),
        "allocator_settings": jsonable(snap.get("allocator_settings")),
    }


def pick_device(torch, dry: bool, tool: str = "capture_goldens"):
    """The device to train on, or None (with the reason on stderr, as `tool`) when there is no
    GPU."""
    if dry:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        print(f"{tool}: error: no CUDA GPU: torch.cuda.is_available() is False "
              f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); "
              "use --dry-run-cpu to test without one", file=sys.stderr)
        return None
    return torch.device("cuda", torch.cuda.current_device())


def peak_over_phases(phases: list[dict]) -> dict:
    """The run's peaks: the highest per-phase peak of allocated and of reserved, and where."""
    best = max(phases, key=lambda p: p["memory"]["max_allocated"])
    best_r = max(phases, key=lambda p: p["memory"]["max_reserved"])
    return {
        "max_allocated": best["memory"]["max_allocated"],
        "max_allocated_at": {"step": best["step"], "phase": best["phase"]},
        "max_reserved": best_r["memory"]["max_reserved"],
        "max_reserved_at": {"step": best_r["step"], "phase": best_r["phase"]},
        "how": "the maximum over phases of max_memory_allocated()/max_memory_reserved(), "
               "whose peaks are reset when each phase begins",
    }


_ABSENT = object()


def store_snapshot(torch, out: Path, name: str, phases: list[dict], device_index: int,
                   max_entries: int, *, memory_before_dump=_ABSENT, cap: int | None = None,
                   dump=None, extras=None) -> dict:
    """Dump the allocator history to <name>.pickle, stop recording, summarize it (phases get
    their snapshot_events; `extras(snap)` adds to the summary), gzip it into <name>.pickle.gz with
    a fixed mtime. `dump(raw)`, when given, writes the pickle itself and returns what the sidecar
    says of it ({"api": ..., ...}). With `cap`, the gz is kept only when at most cap bytes.
    Returns the sidecar's "snapshot" entry."""
    stage("dump")
    raw = out / f".{name}.pickle.tmp"
    t0 = time.perf_counter()
    how = dump(raw) if dump is not None else {}
    if dump is None:
        torch.cuda.memory._dump_snapshot(str(raw))
    dump_s = time.perf_counter() - t0
    torch.cuda.memory._record_memory_history(enabled=None)
    stage("summarize")
    try:  # informative only: a snapshot this code does not understand is still kept
        with open(raw, "rb") as f:
            snap = NoGlobalsUnpickler(f).load()
        summary = summarize_snapshot(snap, phases, device_index, max_entries)
        if extras is not None:
            summary.update(extras(snap))
        del snap
    except Exception as e:  # noqa: BLE001
        summary = {"error": f"{type(e).__name__}: {e}"}
        print(f"warning: could not summarize the snapshot: {summary['error']}", flush=True)
    stage("gzip")
    gz_name = f"{name}.pickle.gz"
    gz_tmp = out / f".{gz_name}.tmp"
    gzip_file(raw, gz_tmp, name=f"{name}.pickle")
    pickle_bytes = raw.stat().st_size
    raw.unlink()
    gz_bytes = gz_tmp.stat().st_size
    kept = cap is None or gz_bytes <= cap
    sha = hashlib.sha256(gz_tmp.read_bytes()).hexdigest() if kept else None
    if kept:
        os.replace(gz_tmp, out / gz_name)
    else:
        gz_tmp.unlink()
    info = {} if cap is None else {"kept": kept}
    info.update(file=gz_name if kept else None, pickle_bytes=pickle_bytes, gz_bytes=gz_bytes)
    if cap is not None:
        info["cap_bytes"] = cap
    info["sha256_gz"] = sha
    if cap is not None:
        info["note"] = None if kept else (
            f"not kept: the gzipped snapshot was {gz_bytes:,} B, over the cap of {cap:,} B "
            "(--snapshot-cap); the counters in 'phases' are PyTorch's own and do not depend on it")
    info.update(how)
    info["dump_seconds"] = round(dump_s, 3)
    if memory_before_dump is not _ABSENT:
        info["memory_before_dump"] = memory_before_dump
    info["summary"] = summary
    return info


def recording(args, hooks: CaptureHooks, started_us: int, **fields) -> dict:
    """The sidecar's "recording" of _record_memory_history with "all" events: `fields` (context,
    stacks, ...) between "enabled" and "max_entries", as capture_goldens and capture_hf_goldens
    write it; `symbolize_mode` after "started_before" when given."""
    symbolize = fields.pop("symbolize_mode", None)
    rec = {"api": "torch.cuda.memory._record_memory_history", "enabled": "all", **fields,
           "max_entries": args.max_entries, "started_us": started_us,
           "started_before": "model construction and .to(device)"}
    if symbolize is not None:
        rec["symbolize_mode"] = symbolize
    rec.update(marks=hooks.mark_methods, mark_name_format=f"{MARK_PREFIX}<phase>#<step>",
               user_metadata_format=USER_METADATA_FORMAT)
    return rec


def train_and_record(hooks: CaptureHooks, build, make_batches, train, *, dry: bool):
    """The measured part of a child: build() inside the "setup" phase (returns the model, moved,
    its optimizer and what else the sidecar needs), make_batches(model) after it, then
    train(model, optimizer, batches) (the steps, measured through `hooks`), the inventory at the
    end and the counters. Returns them as attributes: model, optimizer, extra, batches, losses,
    train_seconds, end_memory, peak."""
    stage("setup")
    hooks.phase_begin(0, "setup")
    model, optimizer, extra = build()
    hooks.phase_end(0, "setup")
    hooks.attach(model, optimizer)
    batches = make_batches(model)
    stage("train")
    t0 = time.perf_counter()
    losses = train(model, optimizer, batches)
    train_s = time.perf_counter() - t0
    hooks.inventories["end"] = inventory(model, optimizer)
    end_memory = hooks._memory()
    return SimpleNamespace(model=model, optimizer=optimizer, extra=extra, batches=batches,
                           losses=losses, train_seconds=train_s, end_memory=end_memory,
                           peak=None if dry else peak_over_phases(hooks.phases))


def add_path(path: Path) -> None:
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
