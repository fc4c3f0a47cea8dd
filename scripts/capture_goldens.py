#!/usr/bin/env python3
"""Record the ground-truth captures ("goldens") of vramscope on a CUDA GPU.

    python3 scripts/capture_goldens.py --out goldens/h200 [--cases a,b] [--jobs 4] [--list]
    python3 scripts/capture_goldens.py --out /tmp/dry --dry-run-cpu     # no GPU: test the logic

Runs a fixed suite of small training runs (examples/training/: linear, MLP, ResNet-18, BERT- and
GPT-style transformers; SGD, SGD with momentum, Adam, AdamW; fp32 and bf16 autocast), three steps
each, every case in a fresh Python process so that the caching allocator starts empty and one
failure does not stop the others. For each case it writes into the output folder:

  <case>.pickle.gz     torch.cuda.memory._dump_snapshot() of the whole run, gzipped. Memory history
                       (_record_memory_history(stacks="all"), or "python" when "all" fails) starts
                       before the model is built and moved to the GPU, so every allocation is in it.
                       Each phase is marked in the snapshot: a torch.profiler.record_function named
                       "vramscope::<phase>#<step>" (START/END in "external_annotations") and, where
                       torch has it, _set_memory_metadata("vramscope step=<n> phase=<phase>")
                       (the trace entries' "user_metadata"). --no-marks leaves both out.
  <case>.sidecar.json  what PyTorch itself says: the case's configuration; every parameter, buffer,
                       gradient and optimizer-state tensor with its data_ptr and size (after the first
                       optimizer step and at the end); the batch tensors of every step; and per step
                       and phase (setup, then zero_grad, inputs, forward, backward, optimizer and
                       step_end: loss.item() and the release of batch and output) the wall
                       clock (µs since the epoch, the clock of the snapshot's time_us),
                       memory_allocated/reserved after it and its own max_memory_allocated/reserved
                       (the peak statistics are reset when each phase begins).

and metadata.json (GPU, driver, CUDA, PyTorch, Python, date, command line, stack mode, and per case
its files and PyTorch's overall peaks). Running with --cases into an existing folder keeps the other
cases' entries in metadata.json.

The driver prints one line per case and a final count; it exits non-zero when any case failed.
--dry-run-cpu runs the same code on the CPU with no allocator history and no snapshot, so that every
code path except the CUDA calls runs where there is no GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import fnmatch
import gzip
import hashlib
import json
import os
import pickle
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINING_DIR = REPO / "examples" / "training"

SIDECAR_FORMAT = "vramscope-sidecar"
SIDECAR_VERSION = 1
METADATA_FORMAT = "vramscope-goldens-metadata"
METADATA_VERSION = 1

MARK_PREFIX = "vramscope::"
DEFAULT_STEPS = 3
DEFAULT_SEED = 0
DEFAULT_MAX_ENTRIES = 1_000_000
DEFAULT_TIMEOUT_S = 150
DEFAULT_JOBS = 4
SIZE_BUDGET_BYTES = 6 * 1024 * 1024
STAGE_TAG = "@@stage "  # a child prints "@@stage <name>" as it goes; the driver reports the last one

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


# ------------------------------------------------------------------------------------ the suite


@dataclass(frozen=True)
class Case:
    model: str      # key of examples/training/models.py MODELS
    optimizer: str  # key of examples/training/train.py OPTIMIZERS
    amp: str        # "none" (fp32) or "bf16" (autocast)

    @property
    def name(self) -> str:
        return f"{self.model}_{self.optimizer}_{'fp32' if self.amp == 'none' else self.amp}"


def suite() -> list[Case]:
    combos = [("linear", "sgd"), ("linear", "adam"), ("mlp", "sgd"), ("mlp", "adam"),
              ("resnet18", "sgdm"), ("bert", "adamw"), ("gpt", "adamw")]
    return [Case(m, o, amp) for m, o in combos for amp in ("none", "bf16")]


def select_cases(spec: str | None) -> list[Case]:
    cases = suite()
    if not spec:
        return cases
    by_name = {c.name: c for c in cases}
    chosen: list[Case] = []
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        matched = [c for c in cases if fnmatch.fnmatchcase(c.name, pattern)]
        if not matched:
            raise SystemExit(f"capture_goldens: error: no case matches {pattern!r}; "
                             f"the cases are: {', '.join(by_name)}")
        chosen.extend(c for c in matched if c not in chosen)
    return chosen


# ------------------------------------------------------------------------------ small helpers


def now_us() -> int:
    """Microseconds since the Unix epoch: the clock of the snapshot's ``time_us`` (PyTorch converts
    its TSC timestamps to Unix time with ApproximateClockToUnixTimeConverter, then divides by 1000)."""
    return time.time_ns() // 1000


def stage(name: str) -> None:
    print(f"{STAGE_TAG}{name}", flush=True)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def dumps_json(obj, indent: int = 0, width: int = 200) -> str:
    """JSON with one line per small object or list (a tensor, a phase's counters) and nesting
    indented one space: readable, diffable, and about half the size of ``indent=1``."""
    flat = json.dumps(obj, separators=(", ", ": "), ensure_ascii=False)
    if len(flat) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: "
                 f"{dumps_json(v, indent + 1, width).lstrip()}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps_json(v, indent + 1, width).lstrip() for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_json(path: Path, obj) -> None:
    write_atomic(path, (dumps_json(obj) + "\n").encode())


def jsonable(value):
    """Hyperparameters and the like as JSON (tuples become lists, anything odd its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    try:
        import torch
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return value.item()
    except Exception:  # noqa: BLE001 - best effort only
        pass
    return repr(value)


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Reads back the snapshot this process just wrote; refuses anything but plain data."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot pickle refers to {module}.{name}; refused")


# ====================================================================== the child: one case


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


def run_child(args) -> int:
    case = next((c for c in suite() if c.name == args.child), None)
    if case is None:
        print(f"capture_goldens: error: unknown case {args.child!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    dry = args.dry_run_cpu
    started = time.perf_counter()
    stage("import")
    import torch
    sys.path.insert(0, str(TRAINING_DIR))
    import train as T  # examples/training/train.py
    from models import MODELS

    device = pick_device(torch, dry)
    if device is None:
        return 3
    spec = MODELS[case.model]
    hyper = T.OPTIMIZERS[case.optimizer][1]

    stage("record")
    stacks_used, stacks_note = None, None
    if not dry:
        stacks_used, stacks_note = start_recording(torch, args.stacks, args.max_entries)
    recording_started_us = now_us()
    hooks = CaptureHooks(torch, device, marks=not args.no_marks, use_cuda=not dry)

    stage("setup")
    hooks.phase_begin(0, "setup")
    model = T.build_model(case.model, args.seed).to(device)
    optimizer = T.build_optimizer(case.optimizer, model)
    hooks.phase_end(0, "setup")
    hooks.attach(model, optimizer)
    batches = T.make_batches(case.model, args.seed)

    stage("train")
    t0 = time.perf_counter()
    losses = T.train(model, optimizer, case.model, batches, steps=args.steps, device=device,
                     amp=case.amp, hooks=hooks)
    train_s = time.perf_counter() - t0
    hooks.inventories["end"] = inventory(model, optimizer)
    end_memory = hooks._memory()

    phases = hooks.phases
    peak = None if dry else peak_over_phases(phases)

    snapshot_info = None
    if not dry:
        stage("dump")
        t0 = time.perf_counter()
        raw = out / f".{case.name}.pickle.tmp"
        torch.cuda.memory._dump_snapshot(str(raw))
        dump_s = time.perf_counter() - t0
        torch.cuda.memory._record_memory_history(enabled=None)
        stage("summarize")
        try:  # informative only: a snapshot this code does not understand is still kept
            with open(raw, "rb") as f:
                snap = _NoGlobalsUnpickler(f).load()
            summary = summarize_snapshot(snap, phases, device.index or 0, args.max_entries)
            del snap
        except Exception as e:  # noqa: BLE001
            summary = {"error": f"{type(e).__name__}: {e}"}
            print(f"warning: could not summarize the snapshot: {summary['error']}", flush=True)
        stage("gzip")
        gz_name = f"{case.name}.pickle.gz"
        gz_tmp = out / f".{gz_name}.tmp"
        with open(raw, "rb") as src, open(gz_tmp, "wb") as dst_file:
            with gzip.GzipFile(filename=f"{case.name}.pickle", mode="wb", compresslevel=9,
                               fileobj=dst_file, mtime=0) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        pickle_bytes = raw.stat().st_size
        raw.unlink()
        os.replace(gz_tmp, out / gz_name)
        gz_bytes = (out / gz_name).stat().st_size
        snapshot_info = {
            "file": gz_name,
            "pickle_bytes": pickle_bytes,
            "gz_bytes": gz_bytes,
            "sha256_gz": hashlib.sha256((out / gz_name).read_bytes()).hexdigest(),
            "dump_seconds": round(dump_s, 3),
            "memory_before_dump": end_memory,
            "summary": summary,
        }

    sidecar = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        "case": case.name,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "dry_run_cpu": dry,
        "config": {
            "model": case.model,
            "model_description": spec.description,
            "model_class": type(model).__name__,
            "dims": spec.dims,
            "batch_size": spec.batch_size,
            "loss": spec.loss_name,
            "precision": "fp32" if case.amp == "none" else f"{case.amp} autocast",
            "amp": None if case.amp == "none" else {
                "api": "torch.autocast", "device_type": device.type,
                "dtype": str(T.AMP_DTYPES[case.amp]).removeprefix("torch."),
                "covers": "forward and loss"},
            "parameter_dtype": "float32",
            "optimizer": optimizer_info(torch, optimizer, case.optimizer, hyper),
            "steps": args.steps,
            "seed": args.seed,
            "device": str(device),
            "loop": "per step: optimizer.zero_grad(set_to_none=True); batch .to(device); "
                    "forward + loss; loss.backward(); optimizer.step(); loss.item() and the "
                    "release of batch, output and loss (examples/training/train.py train_step)",
            "phases": ["setup"] + list(T.PHASES),
            "training_script": "examples/training/train.py",
            "equivalent_command": (
                f"python3 examples/training/train.py --model {case.model} "
                f"--optimizer {case.optimizer} --steps {args.steps} --amp {case.amp} "
                f"--device {device.type} --seed {args.seed}"),
        },
        "recording": None if dry else {
            "api": "torch.cuda.memory._record_memory_history",
            "enabled": "all",
            "context": "all",
            "stacks": stacks_used,
            "stacks_requested": args.stacks,
            "stacks_note": stacks_note,
            "max_entries": args.max_entries,
            "started_us": recording_started_us,
            "started_before": "model construction and .to(device)",
            "symbolize_mode": os.environ.get("TORCH_SYMBOLIZE_MODE") or "PyTorch's default",
            "marks": hooks.mark_methods,
            "mark_name_format": f"{MARK_PREFIX}<phase>#<step>",
            "user_metadata_format": "vramscope step=<step> phase=<phase> (cleared between phases)",
        },
        "clock": "begin_us/end_us/synced_us: time.time_ns() // 1000, µs since the Unix epoch "
                 "(the snapshot's time_us); begin_us just before the phase's code, end_us just "
                 "after it, synced_us after torch.cuda.synchronize() and reading the counters; "
                 "snapshot_events: trace events with begin_us <= time_us <= end_us",
        "tensor_fields": "shape, dtype, device, numel, nbytes (numel * element size), data_ptr; "
                         "storage_data_ptr/storage_nbytes only when the tensor is a view that "
                         "does not start at, or does not cover, its storage",
        "memory_fields": None if dry else MEMORY_FIELDS,
        "peak": peak,
        "end_memory": end_memory,
        "phases": phases,
        "steps": [dict(hooks.steps.get(i, {"step": i, "tensors": {}}), loss=losses[i - 1])
                  for i in range(1, args.steps + 1)],
        "tensors": hooks.inventories,
        "snapshot": snapshot_info,
        "timing": {"train_seconds": round(train_s, 3),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    stage("write")
    write_json(out / f"{case.name}.sidecar.json", sidecar)
    stage("done")
    return 0


# ==================================================================== the driver: all cases


def gpu_metadata(dry: bool) -> dict:
    info: dict = {}
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return {"error": f"cannot import torch: {e}"}
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["torch_git"] = getattr(torch.version, "git_version", None)
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        info["cudnn"] = None
    info["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    info["cuda_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    info["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    info["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    if dry:
        info["gpu"] = None
        return info
    if not torch.cuda.is_available():
        info["gpu"] = None
        info["error"] = "torch.cuda.is_available() is False"
        return info
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    gpu = {
        "index": idx,
        "count": torch.cuda.device_count(),
        "name": props.name,
        "total_memory": props.total_memory,
        "compute_capability": f"{props.major}.{props.minor}",
        "multi_processor_count": getattr(props, "multi_processor_count", None),
        "uuid": str(getattr(props, "uuid", "")) or None,
    }
    driver = None
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                            "-i", str(idx)], capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            driver = r.stdout.strip().splitlines()[0].strip()
            gpu["driver_source"] = "nvidia-smi"
    except (OSError, subprocess.SubprocessError):
        pass
    if driver is None:
        try:
            text = Path("/proc/driver/nvidia/version").read_text()
            driver = text.splitlines()[0].strip()
            gpu["driver_source"] = "/proc/driver/nvidia/version"
        except OSError:
            pass
    gpu["driver_version"] = driver
    info["gpu"] = gpu
    return info


def symbolize_mode(args) -> str | None:
    """TORCH_SYMBOLIZE_MODE for the children (None: leave the environment as it is)."""
    if args.symbolize_mode != "default":
        return args.symbolize_mode
    if os.environ.get("TORCH_SYMBOLIZE_MODE"):
        return None
    if args.stacks == "all" and not args.dry_run_cpu and not shutil.which(
            os.environ.get("TORCH_ADDR2LINE_BINARY") or "addr2line"):
        print("warning: no addr2line program (binutils) on PATH: C++ frames will be symbolized "
              "with TORCH_SYMBOLIZE_MODE=fast", flush=True)
        return "fast"
    return None


def repo_commit(paths=("examples/training", "scripts/capture_goldens.py")) -> str | None:
    """HEAD, with "+local-changes" when any of `paths` (the code that made the goldens) differs."""
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", *paths],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return r.stdout.strip() + ("+local-changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


# What the per-phase memory fields of a sidecar mean (shared with capture_hf_goldens.py).
MEMORY_FIELDS = (
    "allocated/reserved: torch.cuda.memory_allocated()/memory_reserved() after the phase; "
    "max_allocated/max_reserved: max_memory_allocated()/max_memory_reserved() with the "
    "peak statistics reset when the phase began, i.e. the phase's own peak; stats: "
    "selected torch.cuda.memory_stats() keys")


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


class Driver:
    def __init__(self, args, cases: list[Case]):
        self.args = args
        self.cases = cases
        self.out = Path(args.out)
        self.lock = threading.Lock()
        self.done = 0
        self.python_stacks_only = args.stacks == "python"  # set when "all" timed out once
        self.symbolize_mode = symbolize_mode(args)
        self.results: dict[str, dict] = {}

    def _command(self, case: Case, stacks: str) -> list[str]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name,
               "--out", str(self.out), "--stacks", stacks, "--steps", str(self.args.steps),
               "--seed", str(self.args.seed), "--max-entries", str(self.args.max_entries)]
        if self.args.dry_run_cpu:
            cmd.append("--dry-run-cpu")
        if self.args.no_marks:
            cmd.append("--no-marks")
        return cmd

    def _attempt(self, case: Case, stacks: str) -> dict:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.symbolize_mode:
            env["TORCH_SYMBOLIZE_MODE"] = self.symbolize_mode
        t0 = time.perf_counter()
        try:
            r = subprocess.run(self._command(case, stacks), cwd=str(REPO), env=env,
                               capture_output=True, text=True, timeout=self.args.timeout)
            output, rc, timed_out = (r.stdout or "") + (r.stderr or ""), r.returncode, False
        except subprocess.TimeoutExpired as e:
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            output, rc, timed_out = text(e.stdout) + text(e.stderr), None, True
        stages = [ln[len(STAGE_TAG):].strip() for ln in output.splitlines()
                  if ln.startswith(STAGE_TAG)]
        return {"stacks": None if self.args.dry_run_cpu else stacks, "rc": rc,
                "timed_out": timed_out,
                "seconds": round(time.perf_counter() - t0, 1),
                "last_stage": stages[-1] if stages else None, "output": output}

    def run_case(self, case: Case) -> dict:
        # Nothing of an earlier run of this case may survive to be mistaken for this one's.
        for stale in (f"{case.name}.sidecar.json", f"{case.name}.pickle.gz",
                      f"logs/{case.name}.log", f".{case.name}.pickle.tmp",
                      f".{case.name}.pickle.gz.tmp", f"{case.name}.sidecar.json.tmp"):
            (self.out / stale).unlink(missing_ok=True)
        attempts = []
        stacks = "python" if self.python_stacks_only else self.args.stacks
        a = self._attempt(case, stacks)
        attempts.append(a)
        ok = a["rc"] == 0
        retry = (not ok and stacks == "all" and not self.args.dry_run_cpu
                 and not self.args.no_fallback and a["last_stage"] not in ("import", None))
        if retry:
            if a["timed_out"]:
                with self.lock:
                    if not self.python_stacks_only:
                        self.python_stacks_only = True
                        print(f"!! {case.name}: stacks='all' timed out in stage "
                              f"{a['last_stage']!r}; this and the remaining cases record "
                              "Python stacks only", flush=True)
            else:
                print(f"!! {case.name}: failed with stacks='all' in stage {a['last_stage']!r}; "
                      "retrying with stacks='python'", flush=True)
            a = self._attempt(case, "python")
            attempts.append(a)
            ok = a["rc"] == 0
        return self._finish(case, ok, attempts)

    def _finish(self, case: Case, ok: bool, attempts: list[dict]) -> dict:
        sidecar_path = self.out / f"{case.name}.sidecar.json"
        result = {"case": case.name, "model": case.model, "optimizer": case.optimizer,
                  "amp": case.amp, "status": "ok" if ok else "FAILED",
                  "attempts": [{k: v for k, v in a.items() if k != "output"} for a in attempts]}
        sidecar = None
        if ok:
            try:
                sidecar = json.loads(sidecar_path.read_text())
            except (OSError, ValueError) as e:
                ok = False
                result["status"] = "FAILED"
                result["error"] = f"no readable sidecar: {e}"
        if ok:
            snap = sidecar.get("snapshot") or {}
            rec = sidecar.get("recording") or {}
            result.update({
                "sidecar": sidecar_path.name,
                "sidecar_bytes": sidecar_path.stat().st_size,
                "snapshot": snap.get("file"),
                "snapshot_bytes": snap.get("gz_bytes"),
                "stacks": rec.get("stacks"),
                "max_memory_allocated": (sidecar.get("peak") or {}).get("max_allocated"),
                "max_memory_reserved": (sidecar.get("peak") or {}).get("max_reserved"),
                "peak_at": (sidecar.get("peak") or {}).get("max_allocated_at"),
                "trace_events": ((snap.get("summary") or {}).get("trace_events")),
                "dump_seconds": snap.get("dump_seconds"),
                "losses": [s.get("loss") for s in sidecar.get("steps", [])],
            })
        else:
            log_dir = self.out / "logs"
            log_dir.mkdir(exist_ok=True)
            log = log_dir / f"{case.name}.log"
            log.write_text("\n\n".join(
                f"### attempt {i + 1}: stacks={a['stacks']} rc={a['rc']} "
                f"timed_out={a['timed_out']} last_stage={a['last_stage']}\n{a['output']}"
                for i, a in enumerate(attempts)))
            result["log"] = str(log.relative_to(self.out))
        with self.lock:
            self.done += 1
            self.results[case.name] = result
            self._print_line(result, attempts)
        return result

    def _print_line(self, r: dict, attempts: list[dict]) -> None:
        n = len(self.cases)
        head = f"[{self.done:>2}/{n}] {r['case']:<22} {r['status']:<6}"
        secs = sum(a["seconds"] for a in attempts)
        if r["status"] == "ok":
            peak_at = r.get("peak_at") or {}
            where = f" (step {peak_at.get('step')} {peak_at.get('phase')})" if peak_at else ""
            print(f"{head} peak alloc {fmt_bytes(r.get('max_memory_allocated')):>10}{where:<22} "
                  f"reserved {fmt_bytes(r.get('max_memory_reserved')):>10}  "
                  f"snapshot {fmt_bytes(r.get('snapshot_bytes')):>9}  "
                  f"sidecar {fmt_bytes(r.get('sidecar_bytes')):>9}  "
                  f"events {r.get('trace_events') if r.get('trace_events') is not None else '-':>6}  "
                  f"stacks {r.get('stacks') or '-':<6} {secs:5.1f} s"
                  + (f" (dump {r['dump_seconds']:.1f} s)" if r.get("dump_seconds") else ""),
                  flush=True)
        else:
            a = attempts[-1]
            why = "timed out" if a["timed_out"] else f"exit code {a['rc']}"
            tail = [ln for ln in a["output"].splitlines()
                    if ln.strip() and not ln.startswith(STAGE_TAG)][-6:]
            print(f"{head} {why} in stage {a['last_stage']!r} after {secs:.1f} s; "
                  f"log: {r.get('log')}", flush=True)
            for ln in tail:
                print(f"        | {ln}", flush=True)


def run_driver(args) -> int:
    cases = select_cases(args.cases)
    out = Path(args.out)
    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    env_info = gpu_metadata(args.dry_run_cpu)
    if not args.dry_run_cpu and not env_info.get("gpu"):
        print("capture_goldens: error: no CUDA GPU ("
              f"{env_info.get('error', 'unknown reason')}); use --dry-run-cpu to test without one",
              file=sys.stderr, flush=True)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        print(f"warning: PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']!r} is set; "
              "the goldens are meant to use the default allocator settings", flush=True)
    print(f"capture_goldens: {len(cases)} case(s) -> {out} "
          f"({'dry run on the CPU, no snapshots' if args.dry_run_cpu else 'CUDA'}, "
          f"{args.jobs} at a time, timeout {args.timeout} s each)", flush=True)
    gpu = env_info.get("gpu") or {}
    if gpu:
        print(f"GPU: {gpu['name']}, {fmt_bytes(gpu['total_memory'])}, sm {gpu['compute_capability']},"
              f" driver {gpu.get('driver_version')}; torch {env_info['torch']} (CUDA "
              f"{env_info['torch_cuda']})", flush=True)

    driver = Driver(args, cases)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(driver.run_case, c) for c in cases]
        for f in futures:
            try:
                f.result()
            except Exception:  # noqa: BLE001 - a driver bug: report it, keep the rest
                traceback.print_exc()

    results = [driver.results.get(c.name, {"case": c.name, "status": "FAILED",
                                           "error": "driver error"}) for c in cases]
    failed = [r["case"] for r in results if r["status"] != "ok"]

    meta_path = out / "metadata.json"
    previous: dict = {}
    if meta_path.exists():
        try:
            old = json.loads(meta_path.read_text())
            if old.get("format") == METADATA_FORMAT and old.get("dry_run_cpu") == args.dry_run_cpu:
                previous = old.get("cases", {})
        except (OSError, ValueError):
            pass
    merged = dict(previous)
    merged.update({r["case"]: r for r in results})
    merged = {c.name: merged[c.name] for c in suite() if c.name in merged}
    stacks_used = sorted({r.get("stacks") for r in merged.values() if r.get("stacks")})
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
        "stacks": stacks_used[0] if len(stacks_used) == 1 else stacks_used,
        "stacks_requested": args.stacks,
        "symbolize_mode": (driver.symbolize_mode or os.environ.get("TORCH_SYMBOLIZE_MODE")
                           or "PyTorch's default"),
        "marks": not args.no_marks,
        "steps": args.steps,
        "seed": args.seed,
        "max_entries": args.max_entries,
        "jobs": args.jobs,
        "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                                               "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING")},
        "cases": merged,
    }
    write_json(meta_path, metadata)

    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    elapsed = time.perf_counter() - t0
    print(f"{len(cases) - len(failed)}/{len(cases)} ok, {len(failed)} failed"
          f"{': ' + ', '.join(failed) if failed else ''}; {out} holds {fmt_bytes(total)} "
          f"({total:,} B); {elapsed:.0f} s", flush=True)
    if total > SIZE_BUDGET_BYTES and not args.dry_run_cpu:
        print(f"warning: {out} is over the {fmt_bytes(SIZE_BUDGET_BYTES)} budget", flush=True)
    return 1 if failed else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", help="output folder (created if needed)")
    p.add_argument("--cases", help="comma-separated case names or shell patterns (mlp_*); "
                                   "default: all")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="run on the CPU without allocator history: sidecars only")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                   help=f"cases run at the same time, each its own process (default {DEFAULT_JOBS})")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds allowed per case and attempt (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--stacks", choices=("all", "python"), default="all",
                   help="stacks= of _record_memory_history (default all: Python and C++ frames)")
    p.add_argument("--no-fallback", action="store_true",
                   help="do not retry a case that failed with stacks='all' with Python stacks")
    p.add_argument("--symbolize-mode", choices=("default", "addr2line", "fast", "dladdr"),
                   default="default",
                   help="TORCH_SYMBOLIZE_MODE for the C++ frames. 'default' leaves it to PyTorch "
                        "(addr2line in 2.11, as most users' snapshots have; falls back to 'fast' "
                        "when there is no addr2line program); 'fast' is PyTorch's in-process "
                        "symbolizer, 'dladdr' names from the dynamic symbol table only")
    p.add_argument("--no-marks", action="store_true",
                   help="no record_function / user_metadata phase marks in the snapshots")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help=argparse.SUPPRESS)
    p.add_argument("--max-entries", type=int, default=DEFAULT_MAX_ENTRIES,
                   help=f"max_entries of the allocator history (default {DEFAULT_MAX_ENTRIES:,})")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.list and not args.out:
        p.error("--out is required")
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        sys.path.insert(0, str(TRAINING_DIR))
        try:
            from models import MODELS
            desc = {k: v.description for k, v in MODELS.items()}
        except Exception:  # noqa: BLE001 - listing must work without torch
            desc = {}
        for c in suite():
            print(f"{c.name:<22} {c.optimizer:<6} {'fp32' if c.amp == 'none' else c.amp + ' autocast':<14}"
                  f" {desc.get(c.model, c.model)}")
        return 0
    if args.child:
        return run_child(args)
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())
