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

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from golden_capture import driver as D
from golden_capture import measure as M
from golden_capture.common import (TRAINING_DIR, fmt_bytes, iso, now_us, run_info, select_cases,
                                   stage, write_json)

SIDECAR_FORMAT = "vramscope-sidecar"
SIDECAR_VERSION = 1
METADATA_FORMAT = "vramscope-goldens-metadata"
METADATA_VERSION = 1

DEFAULT_STEPS = 3
DEFAULT_SEED = 0
DEFAULT_TIMEOUT_S = 150
DEFAULT_JOBS = 4
SIZE_BUDGET_BYTES = 6 * 1024 * 1024
# The code that makes these goldens (repo_commit says "+local-changes" when it differs).
CODE = ("examples/training", "scripts/capture_goldens.py", "scripts/golden_capture")


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


# ====================================================================== the child: one case


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
    M.add_path(TRAINING_DIR)
    import train as T  # examples/training/train.py
    from models import MODELS

    device = M.pick_device(torch, dry)
    if device is None:
        return 3
    spec = MODELS[case.model]
    hyper = T.OPTIMIZERS[case.optimizer][1]

    stage("record")
    stacks_used, stacks_note = None, None
    if not dry:
        stacks_used, stacks_note = M.start_recording(torch, args.stacks, args.max_entries)
    recording_started_us = now_us()
    hooks = M.CaptureHooks(torch, device, marks=not args.no_marks, use_cuda=not dry)

    def build():
        model = T.build_model(case.model, args.seed).to(device)
        return model, T.build_optimizer(case.optimizer, model), None

    run = M.train_and_record(
        hooks, build, lambda model: T.make_batches(case.model, args.seed),
        lambda model, opt, batches: T.train(model, opt, case.model, batches, steps=args.steps,
                                            device=device, amp=case.amp, hooks=hooks), dry=dry)
    model, optimizer = run.model, run.optimizer
    snapshot_info = None if dry else M.store_snapshot(
        torch, out, case.name, hooks.phases, device.index or 0, args.max_entries,
        memory_before_dump=run.end_memory)

    sidecar = {
        "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "case": case.name,
        "created": iso(), "dry_run_cpu": dry,
        "config": {
            "model": case.model, "model_description": spec.description,
            "model_class": type(model).__name__, "dims": spec.dims,
            "batch_size": spec.batch_size, "loss": spec.loss_name,
            "precision": "fp32" if case.amp == "none" else f"{case.amp} autocast",
            "amp": None if case.amp == "none" else {
                "api": "torch.autocast", "device_type": device.type,
                "dtype": str(T.AMP_DTYPES[case.amp]).removeprefix("torch."),
                "covers": "forward and loss"},
            "parameter_dtype": "float32",
            "optimizer": M.optimizer_info(torch, optimizer, case.optimizer, hyper),
            "steps": args.steps, "seed": args.seed, "device": str(device),
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
        "recording": None if dry else M.recording(
            args, hooks, recording_started_us, context="all", stacks=stacks_used,
            stacks_requested=args.stacks, stacks_note=stacks_note,
            symbolize_mode=os.environ.get("TORCH_SYMBOLIZE_MODE") or "PyTorch's default"),
        "clock": M.CLOCK + "; snapshot_events: trace events with begin_us <= time_us <= end_us",
        "tensor_fields": M.TENSOR_FIELDS,
        "memory_fields": None if dry else M.MEMORY_FIELDS,
        "peak": run.peak, "end_memory": run.end_memory, "phases": hooks.phases,
        "steps": hooks.step_entries(run.losses, args.steps), "tensors": hooks.inventories,
        "snapshot": snapshot_info,
        "timing": {"train_seconds": round(run.train_seconds, 3),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    stage("write")
    write_json(out / f"{case.name}.sidecar.json", sidecar)
    stage("done")
    return 0


# ==================================================================== the driver: all cases


def sidecar_entry(sidecar: dict, path: Path) -> dict:
    """A case's entry in metadata.json, from its sidecar."""
    snap, peak = sidecar.get("snapshot") or {}, sidecar.get("peak") or {}
    return {"sidecar": path.name, "sidecar_bytes": path.stat().st_size,
            "snapshot": snap.get("file"), "snapshot_bytes": snap.get("gz_bytes"),
            "stacks": (sidecar.get("recording") or {}).get("stacks"),
            "max_memory_allocated": peak.get("max_allocated"),
            "max_memory_reserved": peak.get("max_reserved"), "peak_at": peak.get("max_allocated_at"),
            "trace_events": ((snap.get("summary") or {}).get("trace_events")),
            "dump_seconds": snap.get("dump_seconds"),
            "losses": [s.get("loss") for s in sidecar.get("steps", [])]}


class Driver(D.StacksDriver):
    tool, script, metadata_format = "capture_goldens", __file__, METADATA_FORMAT
    refuse_foreign_metadata = False  # goldens/<gpu>/metadata.json is this script's
    gpu_line_torch = True
    suite = suite()  # every case, in order

    def child_args(self, case: Case) -> list[str]:
        a = self.args
        return (["--steps", str(a.steps), "--seed", str(a.seed), "--max-entries",
                 str(a.max_entries)] + (["--no-marks"] if a.no_marks else []))

    def entry(self, case: Case, attempts: list[dict]) -> dict:
        ok = attempts[-1]["rc"] == 0
        result = {"case": case.name, "model": case.model, "optimizer": case.optimizer,
                  "amp": case.amp, "status": "ok" if ok else "FAILED",
                  "attempts": [self.public(a) for a in attempts]}
        if ok:
            result.update(self.read_sidecar(case, sidecar_entry))
        return result

    def ok_text(self, r: dict, attempts: list[dict]) -> str:
        peak_at = r.get("peak_at") or {}
        where = f" (step {peak_at.get('step')} {peak_at.get('phase')})" if peak_at else ""
        events = r.get("trace_events") if r.get("trace_events") is not None else "-"
        return (f"peak alloc {fmt_bytes(r.get('max_memory_allocated')):>10}{where:<22} "
                f"reserved {fmt_bytes(r.get('max_memory_reserved')):>10}  "
                f"snapshot {fmt_bytes(r.get('snapshot_bytes')):>9}  "
                f"sidecar {fmt_bytes(r.get('sidecar_bytes')):>9}  events {events:>6}  "
                f"stacks {r.get('stacks') or '-':<6} {sum(a['seconds'] for a in attempts):5.1f} s"
                + (f" (dump {r['dump_seconds']:.1f} s)" if r.get("dump_seconds") else ""))

    def metadata(self, cases: dict) -> dict:
        a = self.args
        stacks_used = sorted({r.get("stacks") for r in cases.values() if r.get("stacks")})
        return {
            "format": METADATA_FORMAT, "version": METADATA_VERSION,
            **run_info(self.started, a.dry_run_cpu, commit_paths=CODE), **self.env_info,
            "stacks": stacks_used[0] if len(stacks_used) == 1 else stacks_used,
            "stacks_requested": a.stacks,
            "symbolize_mode": (self.symbolize_mode or os.environ.get("TORCH_SYMBOLIZE_MODE")
                               or "PyTorch's default"),
            "marks": not a.no_marks, "steps": a.steps, "seed": a.seed,
            "max_entries": a.max_entries, "jobs": a.jobs, "env": self.env_record(), "cases": cases,
        }

    def report(self, results: dict, elapsed: float) -> int:
        text, failed = self.outcome(results)
        self.write_metadata(results)
        total = sum(p.stat().st_size for p in self.out.rglob("*") if p.is_file())
        print(f"{text}; {self.out} holds {fmt_bytes(total)} ({total:,} B); {elapsed:.0f} s",
              flush=True)
        if total > SIZE_BUDGET_BYTES and not self.args.dry_run_cpu:
            print(f"warning: {self.out} is over the {fmt_bytes(SIZE_BUDGET_BYTES)} budget",
                  flush=True)
        return 1 if failed else 0


def parse_args(argv=None):
    p = D.parser(__doc__, jobs=DEFAULT_JOBS, timeout=DEFAULT_TIMEOUT_S, cases_example="mlp_*",
                 dry_help="run on the CPU without allocator history: sidecars only",
                 timeout_help="seconds allowed per case and attempt")
    D.add_stacks_flags(p)
    D.add_max_entries(p)
    return D.parse(p, argv, steps=DEFAULT_STEPS, seed=DEFAULT_SEED)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        M.add_path(TRAINING_DIR)
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
    return Driver(args, select_cases(suite(), args.cases, "capture_goldens")).main()


if __name__ == "__main__":
    sys.exit(main())
