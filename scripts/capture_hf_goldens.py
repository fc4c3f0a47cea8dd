#!/usr/bin/env python3
"""Record the memory of real Hugging Face training steps on a CUDA GPU: ground truth for
predicting a step's memory from a model config.

    python3 scripts/capture_hf_goldens.py --out goldens/h200/hf [--cases 'gpt2_*,vit_*'] [--jobs 3]
    python3 scripts/capture_hf_goldens.py --list
    python3 scripts/capture_hf_goldens.py --out /tmp/hf-dry --dry-run-cpu   # no GPU: test the logic

Runs the suite of examples/training/hf_models.py (GPT-2 small, a LLaMA- and a Qwen2-style decoder,
BERT-base MLM, ViT-B/16; fp32, bf16 autocast and pure bf16; gradient checkpointing; LoRA), three
AdamW steps each, every case in a fresh Python process (the caching allocator starts empty; one
failure or time-out does not stop the others), a few at a time. Nothing is downloaded: the models
are built from configs in code with random weights, and HF_HUB_OFFLINE=1 is set. Per case it writes:

  <case>.sidecar.json  always. "format": "vramscope-hf-golden", "version": 1. The case (model,
                       batch, seq, precision, gradient checkpointing and LoRA settings, attention
                       implementation and the SDPA kernels that ran, optimizer), the model's
                       config.to_dict(), the parameter table, the counts PyTorch's tensors give
                       (parameters total and trainable; bytes of parameters, gradients and
                       optimizer state, after the first optimizer step and at the end) with sanity
                       checks, and per phase (setup = model built, moved and optimizer made; then
                       per step zero_grad, inputs, forward (+ loss), backward, optimizer, step_end)
                       memory_allocated/reserved after it and its own max_memory_allocated/
                       reserved (the peak statistics are reset when each phase begins).
  <case>.pickle.gz     the allocator history (torch.cuda.memory._record_memory_history,
                       stacks="python", started before the model is created), gzipped, with the
                       phases marked as in scripts/capture_goldens.py; kept only when it is at
                       most --snapshot-cap bytes (the sidecar's "snapshot" says what was measured
                       and why a snapshot is missing). Should the run's files exceed
                       --size-budget, the driver drops the largest snapshots until they fit.

and metadata.json (GPU, driver from nvidia-smi, torch/transformers/peft versions, date, command
line, per case its files, peaks and counts). Running with --cases into an existing folder keeps the
other cases' entries; a metadata.json written by another script is never overwritten.

The driver prints one line per case and a final count, and exits non-zero when any case failed.
--dry-run-cpu runs every case on the CPU at batch 1, seq 32 (ViT: 32x32 images, its config to
match), without allocator history or snapshots: all code paths but the CUDA calls.

The measuring code (phase hooks, tensor inventory, snapshot summary, GPU metadata) is
scripts/capture_goldens.py's, imported; the training step is hf_models.train_step, with the phases
of examples/training/train.py.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import fnmatch
import gzip
import hashlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "examples" / "training"))
import capture_goldens as CG  # noqa: E402  (stdlib only at import)
import hf_models as H  # noqa: E402  (the suite is plain data; torch is imported where needed)

SIDECAR_FORMAT = "vramscope-hf-golden"
SIDECAR_VERSION = 1
METADATA_FORMAT = "vramscope-hf-goldens-metadata"
METADATA_VERSION = 1

DEFAULT_JOBS = 3
DEFAULT_TIMEOUT_S = 300
DEFAULT_SNAPSHOT_CAP = 400_000       # bytes of one gzipped snapshot
DEFAULT_SIZE_BUDGET = 5_000_000      # bytes of all the run's files
METADATA_RESERVE = 64_000            # room left in the budget for metadata.json
STACKS = "python"                    # C++ frames would make the snapshots several times larger

PARAMETER_FIELDS = ["name", "shape", "dtype", "requires_grad"]

# SDPA kernels as the ATen ops a TorchDispatchMode sees (the math fallback is decomposed into
# matmul/softmax, so it shows as none of these).
ATTENTION_OP_NAMES = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "_scaled_dot_product_efficient_attention": "mem-efficient",
    "_scaled_dot_product_cudnn_attention": "cuDNN",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "_flash_attention_forward": "flash",
    "_efficient_attention_forward": "mem-efficient",
}


def select_cases(spec: str | None) -> list[H.HFCase]:
    if not spec:
        return list(H.SUITE)
    chosen: list[H.HFCase] = []
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        matched = [c for c in H.SUITE if fnmatch.fnmatchcase(c.name, pattern)]
        if not matched:
            raise SystemExit(f"capture_hf_goldens: error: no case matches {pattern!r}; "
                             f"the cases are: {', '.join(H.CASES)}")
        chosen.extend(c for c in matched if c not in chosen)
    return chosen


def case_files(name: str) -> list[str]:
    """Every file a case may leave in the output folder (relative paths)."""
    return [f"{name}.sidecar.json", f"{name}.pickle.gz", f"logs/{name}.log"]


def stale_files(name: str) -> list[str]:
    return case_files(name) + [f".{name}.pickle.tmp", f".{name}.pickle.gz.tmp",
                               f"{name}.sidecar.json.tmp"]


# ====================================================================== the child: one case


def sdpa_flags(torch) -> dict:
    """Which scaled_dot_product_attention backends PyTorch may choose (torch.backends.cuda)."""
    b = torch.backends.cuda
    names = {"flash": "flash_sdp_enabled", "mem_efficient": "mem_efficient_sdp_enabled",
             "math": "math_sdp_enabled", "cudnn": "cudnn_sdp_enabled"}
    return {k: bool(getattr(b, fn)()) for k, fn in names.items() if hasattr(b, fn)}


def probe_attention_ops(torch, model, cpu_batch: dict, case: H.HFCase, device) -> dict:
    """The attention kernels one forward of the case runs, as ATen op names seen by a
    TorchDispatchMode (below autocast, so with the dtypes autocast chose). Runs after the measured
    steps and after the snapshot is taken, so it changes nothing recorded; grad mode, autocast,
    train mode and shapes are the measured steps', which is what SDPA's choice depends on."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError as e:
        return {"error": f"no TorchDispatchMode: {e}"}
    seen: Counter = Counter()

    class AttentionOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func)  # e.g. "aten._scaled_dot_product_flash_attention.default"
            if "attention" in name or "scaled_dot_product" in name:
                seen[name] += 1
            return func(*args, **(kwargs or {}))

    try:
        batch = {k: v.to(device) for k, v in cpu_batch.items()}
        with AttentionOps():
            out, loss = H.forward(model, batch, case, device)
        del out, loss, batch
    except Exception as e:  # noqa: BLE001 - informative only
        return {"error": f"{type(e).__name__}: {e}", "ops": dict(seen)}
    # "aten.<op>.<overload>" -> <op>
    kernels = sorted({ATTENTION_OP_NAMES[n.split(".")[1]] for n in seen
                      if n.count(".") >= 2 and n.split(".")[1] in ATTENTION_OP_NAMES})
    return {
        "ops": dict(sorted(seen.items())),
        "kernels": kernels or ["none seen (math fallback or eager attention)"],
        "how": "ATen ops whose name contains 'attention' or 'scaled_dot_product' during one more "
               "forward (same batch, autocast, grad and train mode), run after the measured steps",
    }


def compact_inventory(inv: dict, expected: dict | None) -> dict:
    """What prediction needs from CG.inventory(): counts and bytes, with sanity checks."""
    t = inv["totals"]
    params = inv["parameters"]
    trainable = [p for p in params if p["requires_grad"]]
    trainable_bytes = sum(p["nbytes"] for p in trainable)
    by_dtype: Counter = Counter()
    for p in params:
        by_dtype[p["dtype"]] += p["nbytes"]
    grads_by_dtype: Counter = Counter()
    for g in inv["gradients"]:
        grads_by_dtype[g["dtype"]] += g["nbytes"]
    state_by_dtype: Counter = Counter()
    steps = []
    for s in inv["optimizer_state"]:
        if "nbytes" not in s:
            continue
        if s["key"] == "step":
            steps.append(s)
        else:
            state_by_dtype[s["dtype"]] += s["nbytes"]
    gradient_tensor_bytes = sum(grads_by_dtype.values())
    state_tensor_bytes = sum(state_by_dtype.values())
    # The checks compare the tensors' own bytes (numel x element size). The storage totals may be
    # larger: a gradient can be a view that keeps a bigger buffer alive (seen on the CPU at batch
    # 1: ViT's cls_token gradient is a slice of the embeddings' gradient, AccumulateGrad keeps
    # it as is), which is memory held, hence reported as gradient_bytes.
    checks = {
        "parameters_match_expected": (None if expected is None
                                      else t["parameter_numel"] == expected["total"]),
        "trainable_parameters_match_expected": (
            None if expected is None else t["trainable_parameter_numel"] == expected["trainable"]),
        "one_gradient_per_trainable_parameter": t["gradient_tensors"] == len(trainable),
        "gradient_tensor_bytes_equal_trainable_bytes": gradient_tensor_bytes == trainable_bytes,
        "optimizer_state_only_for_trainable": t["params_with_state"] == len(trainable),
        "optimizer_state_tensor_bytes_twice_trainable_bytes": (
            state_tensor_bytes == 2 * trainable_bytes),
    }
    return {
        "parameters": t["parameter_numel"],
        "trainable_parameters": t["trainable_parameter_numel"],
        "frozen_parameters": t["parameter_numel"] - t["trainable_parameter_numel"],
        "parameter_tensors": t["parameter_tensors"],
        "trainable_parameter_tensors": len(trainable),
        "parameter_bytes": t["parameter_bytes"],
        "trainable_parameter_bytes": trainable_bytes,
        "parameter_bytes_by_dtype": dict(sorted(by_dtype.items())),
        "buffer_tensors": t["buffer_tensors"],
        "buffer_bytes": t["buffer_bytes"],
        "gradient_tensors": t["gradient_tensors"],
        "gradient_bytes": t["gradient_bytes"],
        "gradient_tensor_bytes": gradient_tensor_bytes,
        "gradient_tensor_bytes_by_dtype": dict(sorted(grads_by_dtype.items())),
        "optimizer_state_tensors": t["optimizer_state_tensors"],
        "optimizer_state_bytes": t["optimizer_state_bytes"],
        "optimizer_state_tensor_bytes": state_tensor_bytes,
        "optimizer_state_tensor_bytes_by_dtype": dict(sorted(state_by_dtype.items())),
        "optimizer_state_per_key": t["optimizer_state_per_key"],
        "optimizer_step_tensors": {"count": len(steps),
                                   "bytes": sum(s["nbytes"] for s in steps),
                                   "devices": sorted({s["device"] for s in steps})},
        "expected_parameters": expected,
        "checks": checks,
        "checks_passed": all(v is not False for v in checks.values()),
    }


def parameter_table(inv: dict) -> dict:
    rows = [[p["name"], p["shape"], p["dtype"], p["requires_grad"]] for p in inv["parameters"]]
    tied = {a: p["name"] for p in inv["parameters"] for a in p.get("aliases", [])}
    return {"fields": PARAMETER_FIELDS, "rows": rows, "tied": tied}


def store_snapshot(torch, out: Path, name: str, phases: list[dict], device_index: int,
                   args, end_memory) -> dict:
    """Dump the allocator history, stop recording, summarize, gzip; keep the gz only when it is
    at most args.snapshot_cap bytes. Returns the sidecar's "snapshot" entry."""
    raw = out / f".{name}.pickle.tmp"
    t0 = time.perf_counter()
    torch.cuda.memory._dump_snapshot(str(raw))
    dump_s = time.perf_counter() - t0
    torch.cuda.memory._record_memory_history(enabled=None)
    CG.stage("summarize")
    try:  # informative only
        with open(raw, "rb") as f:
            snap = CG._NoGlobalsUnpickler(f).load()
        summary = CG.summarize_snapshot(snap, phases, device_index, args.max_entries)
        del snap
    except Exception as e:  # noqa: BLE001
        summary = {"error": f"{type(e).__name__}: {e}"}
        print(f"warning: could not summarize the snapshot: {summary['error']}", flush=True)
    CG.stage("gzip")
    gz_name = f"{name}.pickle.gz"
    gz_tmp = out / f".{gz_name}.tmp"
    with open(raw, "rb") as src, open(gz_tmp, "wb") as dst_file:
        with gzip.GzipFile(filename=f"{name}.pickle", mode="wb", compresslevel=9,
                           fileobj=dst_file, mtime=0) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    pickle_bytes = raw.stat().st_size
    raw.unlink()
    gz_bytes = gz_tmp.stat().st_size
    info = {"kept": gz_bytes <= args.snapshot_cap, "file": None, "pickle_bytes": pickle_bytes,
            "gz_bytes": gz_bytes, "cap_bytes": args.snapshot_cap, "sha256_gz": None, "note": None,
            "dump_seconds": round(dump_s, 3), "memory_before_dump": end_memory,
            "summary": summary}
    if info["kept"]:
        info["sha256_gz"] = hashlib.sha256(gz_tmp.read_bytes()).hexdigest()
        os.replace(gz_tmp, out / gz_name)
        info["file"] = gz_name
    else:
        gz_tmp.unlink()
        info["note"] = (f"not kept: the gzipped snapshot was {gz_bytes:,} B, over the cap of "
                        f"{args.snapshot_cap:,} B (--snapshot-cap); the counters in 'phases' are "
                        "PyTorch's own and do not depend on it")
    return info


def run_child(args) -> int:
    case = H.CASES.get(args.child)
    if case is None:
        print(f"capture_hf_goldens: error: unknown case {args.child!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    dry = args.dry_run_cpu
    started = time.perf_counter()
    H.set_offline()  # before transformers is imported
    CG.stage("import")
    import torch
    import transformers
    plain = H.plain_training()  # examples/training/train.py: PHASES
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "peft": package_version("peft")}

    device = CG.pick_device(torch, dry, tool="capture_hf_goldens")
    if device is None:
        return 3
    if args.threads:
        torch.set_num_threads(args.threads)  # the cases run side by side: share the CPU
    spec = H.MODELS[case.model]

    CG.stage("record")
    if not dry:
        torch.cuda.memory._record_memory_history(enabled="all", context=args.context,
                                                 stacks=STACKS, max_entries=args.max_entries)
    recording_started_us = CG.now_us()
    hooks = CG.CaptureHooks(torch, device, marks=True, use_cuda=not dry)

    CG.stage("setup")
    hooks.phase_begin(0, "setup")
    model, build_info = H.build_model(case, args.seed, tiny=dry)
    model = model.to(device)
    optimizer, hyper = H.build_optimizer(model)
    hooks.phase_end(0, "setup")
    hooks.attach(model, optimizer)
    batches = H.make_batches(case, model.config, args.seed, tiny=dry)

    CG.stage("train")
    t0 = time.perf_counter()
    losses = H.train(model, optimizer, case, batches, steps=args.steps, device=device, hooks=hooks)
    train_s = time.perf_counter() - t0
    hooks.inventories["end"] = CG.inventory(model, optimizer)
    end_memory = hooks._memory()

    phases = hooks.phases
    peak = None if dry else CG.peak_over_phases(phases)

    snapshot_info = None
    if not dry:
        CG.stage("dump")
        snapshot_info = store_snapshot(torch, out, case.name, phases, device.index or 0, args,
                                       end_memory)

    CG.stage("probe")
    attention = probe_attention_ops(torch, model, batches[0], case, device)

    overrides = H.config_overrides(case, dry)
    expected = H.expected_parameters(case, dry)
    inv_first = hooks.inventories.get("after_first_step") or hooks.inventories["end"]
    sizes = H.input_sizes(case, dry)
    first_inputs = (hooks.steps.get(1) or {}).get("tensors", {})
    precision_label, precision_meaning = H.PRECISIONS[case.precision]
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
            **CG.jsonable(build_info),
            "hf_config_class": f"transformers.{spec.config_class}",
            "hf_config_kwargs": spec.config_kwargs,
            "config_overrides": overrides or None,
            "task": spec.kind,
            "batch_size": sizes["batch"],
            "seq_len": sizes.get("seq"),
            "image_size": model.config.image_size if spec.kind == "image_classification" else None,
            "inputs": {k: {"shape": v["shape"], "dtype": v["dtype"]}
                       for k, v in first_inputs.items() if k in batches[0]},
            "inputs_note": ("synthetic, made on the CPU and moved in the 'inputs' phase; token ids "
                            "uniform over the vocabulary, labels a copy of them (causal LMs shift "
                            "them inside the loss); no attention mask"
                            if spec.kind != "image_classification" else
                            "synthetic, made on the CPU and moved in the 'inputs' phase; pixel "
                            "values standard normal, labels uniform over num_labels"),
            "forward_kwargs": spec.forward_kwargs,
            "loss": "the model's own: output.loss",
            "precision": precision_label,
            "precision_meaning": precision_meaning,
            "amp": {"api": "torch.autocast", "device_type": device.type, "dtype": "bfloat16",
                    "covers": "forward and loss"} if case.precision == "bf16amp" else None,
            "parameter_dtype": H.parameter_dtype(model),
            "attention_kernels": attention,
            "sdpa_backends_enabled": sdpa_flags(torch),
            "optimizer": CG.optimizer_info(torch, optimizer, "adamw", hyper),
            "steps": args.steps,
            "seed": args.seed,
            "device": str(device),
            "cpu_threads": torch.get_num_threads(),
            "loop": "per step: optimizer.zero_grad(set_to_none=True); batch .to(device); "
                    "out = model(**batch, **forward_kwargs), loss = out.loss (under autocast "
                    "when bf16 autocast); loss.backward(); optimizer.step(); loss.item() and the "
                    "release of batch, output and loss (examples/training/hf_models.py "
                    "train_step)",
            "setup": "model built on the CPU from the config (random weights, torch.manual_seed"
                     "(seed)), gradient checkpointing / LoRA / bf16 applied there, then "
                     ".to(device); AdamW constructed (its state is created by the first step)",
            "phases": ["setup"] + list(plain.PHASES),
            "training_script": "examples/training/hf_models.py",
            "equivalent_command": (
                f"python3 examples/training/hf_models.py --case {case.name} --steps {args.steps} "
                f"--device {device.type} --seed {args.seed}" + (" --tiny" if dry else "")),
        },
        "hf_config": CG.jsonable(H.hf_config_dict(model)),
        "hf_config_note": H.HF_CONFIG_NOTE,
        "versions": versions,
        "counts": {
            "at": "after_first_step: after step 1's optimizer.step() (gradients and AdamW state "
                  "exist); end: after the last step. *_bytes: of the distinct storages behind the "
                  "tensors (a tied weight counts once; a view counts its whole storage), i.e. "
                  "memory held; *_tensor_bytes: numel x element size of the tensors themselves; "
                  "optimizer_state excludes AdamW's scalar 'step' tensors, counted apart",
            "after_first_step": compact_inventory(inv_first, expected),
            "end": compact_inventory(hooks.inventories["end"], expected),
        },
        "parameters": parameter_table(inv_first),
        "recording": None if dry else {
            "api": "torch.cuda.memory._record_memory_history",
            "enabled": "all",
            "context": args.context,
            "stacks": STACKS,
            "max_entries": args.max_entries,
            "started_us": recording_started_us,
            "started_before": "model construction and .to(device)",
            "marks": hooks.mark_methods,
            "mark_name_format": f"{CG.MARK_PREFIX}<phase>#<step>",
            "user_metadata_format": "vramscope step=<step> phase=<phase> (cleared between phases)",
        },
        "clock": "begin_us/end_us/synced_us: time.time_ns() // 1000, µs since the Unix epoch "
                 "(the snapshot's time_us); begin_us just before the phase's code, end_us just "
                 "after it, synced_us after torch.cuda.synchronize() and reading the counters",
        "memory_fields": None if dry else CG.MEMORY_FIELDS,
        "peak": peak,
        "end_memory": end_memory,
        "phases": phases,
        "steps": [dict(hooks.steps.get(i, {"step": i, "tensors": {}}), loss=losses[i - 1])
                  for i in range(1, args.steps + 1)],
        "snapshot": snapshot_info,
        "timing": {"train_seconds": round(train_s, 3),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    CG.stage("write")
    CG.write_json(out / f"{case.name}.sidecar.json", sidecar)
    CG.stage("done")
    return 0


# ==================================================================== the driver: all cases


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def repo_commit() -> str | None:
    return CG.repo_commit(("examples/training", "scripts/capture_goldens.py",
                           "scripts/capture_hf_goldens.py"))


class Driver:
    def __init__(self, args, cases: list[H.HFCase]):
        self.args = args
        self.cases = cases
        self.out = Path(args.out)
        self.lock = threading.Lock()
        self.done = 0
        self.results: dict[str, dict] = {}
        self.threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))

    def _command(self, case: H.HFCase) -> list[str]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", case.name,
               "--out", str(self.out), "--steps", str(self.args.steps), "--seed",
               str(self.args.seed), "--max-entries", str(self.args.max_entries),
               "--snapshot-cap", str(self.args.snapshot_cap), "--context", self.args.context,
               "--threads", str(self.threads)]
        if self.args.dry_run_cpu:
            cmd.append("--dry-run-cpu")
        return cmd

    def run_case(self, case: H.HFCase) -> dict:
        for stale in stale_files(case.name):  # nothing of an earlier run may pass for this one's
            (self.out / stale).unlink(missing_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   HF_DATASETS_OFFLINE="1")
        t0 = time.perf_counter()
        try:
            r = subprocess.run(self._command(case), cwd=str(REPO), env=env, capture_output=True,
                               text=True, timeout=self.args.timeout)
            output, rc, timed_out = (r.stdout or "") + (r.stderr or ""), r.returncode, False
        except subprocess.TimeoutExpired as e:
            def text(b):
                return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
            output, rc, timed_out = text(e.stdout) + text(e.stderr), None, True
        stages = [ln[len(CG.STAGE_TAG):].strip() for ln in output.splitlines()
                  if ln.startswith(CG.STAGE_TAG)]
        attempt = {"rc": rc, "timed_out": timed_out, "seconds": round(time.perf_counter() - t0, 1),
                   "last_stage": stages[-1] if stages else None}
        return self._finish(case, attempt, output)

    def _finish(self, case: H.HFCase, attempt: dict, output: str) -> dict:
        sidecar_path = self.out / f"{case.name}.sidecar.json"
        result = {"case": case.name, "model": case.model, "precision": case.precision,
                  "gradient_checkpointing": case.gradient_checkpointing, "lora": case.lora,
                  "status": "ok" if attempt["rc"] == 0 else "FAILED", "attempt": attempt}
        if result["status"] == "ok":
            try:
                sidecar = json.loads(sidecar_path.read_text())
                result.update(metadata_entry(sidecar, sidecar_path))
            except (OSError, ValueError, KeyError) as e:
                result["status"] = "FAILED"
                result["error"] = f"no readable sidecar: {type(e).__name__}: {e}"
        if result["status"] != "ok":
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
        head = f"[{self.done:>2}/{len(self.cases)}] {r['case']:<27} {r['status']:<6}"
        if r["status"] != "ok":
            why = "timed out" if a["timed_out"] else f"exit code {a['rc']}"
            print(f"{head} {why} in stage {a['last_stage']!r} after {a['seconds']:.1f} s; "
                  f"log: {r.get('log')}", flush=True)
            tail = [ln for ln in output.splitlines()
                    if ln.strip() and not ln.startswith(CG.STAGE_TAG)][-6:]
            for ln in tail:
                print(f"        | {ln}", flush=True)
            return
        peak_at = r.get("peak_at") or {}
        where = f" ({peak_at.get('step')} {peak_at.get('phase')})" if peak_at else ""
        if r.get("snapshot"):
            snap = f"snapshot {CG.fmt_bytes(r['snapshot_bytes'])}"
        elif r.get("snapshot_gz_bytes") is not None:
            snap = f"no snapshot ({CG.fmt_bytes(r['snapshot_gz_bytes'])} > cap)"
        else:
            snap = "no snapshot"
        checks = "checks ok" if r.get("checks_passed") else "CHECKS FAILED: " + ", ".join(
            r.get("checks_failed") or ["?"])
        print(f"{head} peak alloc {CG.fmt_bytes(r.get('max_memory_allocated')):>10}{where:<16} "
              f"reserved {CG.fmt_bytes(r.get('max_memory_reserved')):>10}  "
              f"params {r['parameters'] / 1e6:.2f}M "
              f"(trainable {r['trainable_parameters'] / 1e6:.2f}M)  "
              f"attn {'+'.join(r.get('attention_kernels') or ['?'])}  {snap}  "
              f"sidecar {CG.fmt_bytes(r.get('sidecar_bytes'))}  {checks}  {a['seconds']:.1f} s",
              flush=True)


def metadata_entry(sidecar: dict, sidecar_path: Path) -> dict:
    """The case's line in metadata.json, from its sidecar."""
    snap = sidecar.get("snapshot") or {}
    peak = sidecar.get("peak") or {}
    counts = sidecar["counts"]["after_first_step"]
    return {
        "sidecar": sidecar_path.name,
        "sidecar_bytes": sidecar_path.stat().st_size,
        "snapshot": snap.get("file"),
        "snapshot_bytes": snap.get("gz_bytes") if snap.get("file") else None,
        "snapshot_gz_bytes": snap.get("gz_bytes"),
        "snapshot_note": snap.get("note"),
        "trace_events": (snap.get("summary") or {}).get("trace_events"),
        "max_memory_allocated": peak.get("max_allocated"),
        "max_memory_reserved": peak.get("max_reserved"),
        "peak_at": peak.get("max_allocated_at"),
        "attn_implementation": sidecar["config"].get("attn_implementation"),
        "attention_kernels": (sidecar["config"].get("attention_kernels") or {}).get("kernels"),
        "parameters": counts["parameters"],
        "trainable_parameters": counts["trainable_parameters"],
        "parameter_bytes": counts["parameter_bytes"],
        "gradient_bytes": counts["gradient_bytes"],
        "optimizer_state_bytes": counts["optimizer_state_bytes"],
        "checks_passed": counts["checks_passed"],
        "checks_failed": [k for k, v in counts["checks"].items() if v is False],
        "losses": [s.get("loss") for s in sidecar.get("steps", [])],
    }


def enforce_budget(out: Path, results: dict[str, dict], budget: int) -> list[str]:
    """Drop the largest kept snapshots until the suite's files fit in ``budget`` bytes (with room
    for metadata.json); rewrites those cases' sidecars and entries. Returns the cases dropped."""
    def total() -> int:
        return sum((out / f).stat().st_size for c in H.SUITE for f in case_files(c.name)
                   if (out / f).is_file()) + METADATA_RESERVE

    dropped = []
    while total() > budget:
        candidates = sorted((p for p in (out / f"{c.name}.pickle.gz" for c in H.SUITE)
                             if p.is_file()), key=lambda p: p.stat().st_size, reverse=True)
        if not candidates:
            break
        gz = candidates[0]
        name = gz.name.removesuffix(".pickle.gz")
        note = (f"not kept: dropped by the driver, the run's files were {total():,} B with it, "
                f"over the budget of {budget:,} B (--size-budget)")
        gz.unlink()
        sidecar_path = out / f"{name}.sidecar.json"
        try:
            sidecar = json.loads(sidecar_path.read_text())
            snap = sidecar.get("snapshot") or {}
            snap.update({"kept": False, "file": None, "sha256_gz": None, "note": note})
            sidecar["snapshot"] = snap
            CG.write_json(sidecar_path, sidecar)
            if name in results and results[name].get("status") == "ok":
                results[name].update(metadata_entry(sidecar, sidecar_path))
        except (OSError, ValueError) as e:
            print(f"warning: could not note the dropped snapshot in {sidecar_path}: {e}",
                  flush=True)
        dropped.append(name)
        print(f"!! {name}: snapshot dropped to keep {out} under {CG.fmt_bytes(budget)}",
              flush=True)
    return dropped


def run_driver(args) -> int:
    cases = select_cases(args.cases)
    out = Path(args.out)
    meta_path = out / "metadata.json"
    previous: dict = {}
    if meta_path.exists():  # never overwrite another script's metadata (e.g. goldens/h200/)
        try:
            old = json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:
            print(f"capture_hf_goldens: error: {meta_path} is unreadable ({e}); "
                  "use another --out", file=sys.stderr)
            return 2
        if old.get("format") != METADATA_FORMAT:
            print(f"capture_hf_goldens: error: {meta_path} is {old.get('format')!r}, not this "
                  "script's; use another --out (e.g. goldens/h200/hf)", file=sys.stderr)
            return 2
        if old.get("dry_run_cpu") == args.dry_run_cpu:
            previous = old.get("cases", {})

    started = _dt.datetime.now(_dt.timezone.utc)
    t0 = time.perf_counter()
    env_info = CG.gpu_metadata(args.dry_run_cpu)
    if not args.dry_run_cpu and not env_info.get("gpu"):
        print("capture_hf_goldens: error: no CUDA GPU ("
              f"{env_info.get('error', 'unknown reason')}); use --dry-run-cpu to test without one",
              file=sys.stderr, flush=True)
        return 3
    missing = [p for p in ("torch", "transformers") if package_version(p) is None]
    if missing:
        print(f"capture_hf_goldens: error: not installed: {', '.join(missing)}", file=sys.stderr)
        return 3
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        print(f"warning: PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']!r} is set; "
              "the goldens are meant to use the default allocator settings", flush=True)
    print(f"capture_hf_goldens: {len(cases)} case(s) -> {out} "
          f"({'dry run on the CPU, tiny inputs, no snapshots' if args.dry_run_cpu else 'CUDA'}, "
          f"{args.jobs} at a time, timeout {args.timeout} s each)", flush=True)
    print(f"torch {env_info.get('torch')}, transformers {package_version('transformers')}, "
          f"peft {package_version('peft')}", flush=True)
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
    merged = {c.name: merged[c.name] for c in H.SUITE if c.name in merged}
    dropped = [] if args.dry_run_cpu else enforce_budget(out, merged, args.size_budget)
    failed = [n for n, r in results.items() if r["status"] != "ok"]
    bad_checks = [n for n, r in results.items() if r["status"] == "ok" and not r["checks_passed"]]

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
        "transformers": package_version("transformers"),
        "peft": package_version("peft"),
        "huggingface_hub": package_version("huggingface_hub"),
        "sdpa_backends_enabled": driver_sdpa_flags(),
        "stacks": STACKS,
        "context": args.context,
        "steps": args.steps,
        "seed": args.seed,
        "max_entries": args.max_entries,
        "jobs": args.jobs,
        "cpu_threads_per_case": driver.threads,
        "snapshot_cap_bytes": args.snapshot_cap,
        "size_budget_bytes": args.size_budget,
        "snapshots_dropped_for_budget": dropped,
        "env": {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG",
                                               "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING")},
        "hf_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        "cases": merged,
    }
    CG.write_json(meta_path, metadata)

    total = sum(p.stat().st_size for c in H.SUITE for f in case_files(c.name)
                for p in [out / f] if p.is_file()) + meta_path.stat().st_size
    elapsed = time.perf_counter() - t0
    print(f"{len(cases) - len(failed)}/{len(cases)} ok, {len(failed)} failed"
          f"{': ' + ', '.join(failed) if failed else ''}"
          f"{'; checks failed: ' + ', '.join(bad_checks) if bad_checks else ''}; "
          f"{sum(1 for r in merged.values() if r.get('snapshot'))} snapshot(s) kept; the suite's "
          f"files in {out}: {CG.fmt_bytes(total)} ({total:,} B); {elapsed:.0f} s", flush=True)
    return 1 if failed else 0


def driver_sdpa_flags() -> dict | None:
    try:
        import torch
        return sdpa_flags(torch)
    except Exception:  # noqa: BLE001 - informative only
        return None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", help="output folder (created if needed)")
    p.add_argument("--cases", help="comma-separated case names or shell patterns ('gpt2_*'); "
                                   "default: all")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="run on the CPU with tiny inputs and no allocator history: sidecars only")
    p.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                   help="cases run at the same time, each its own process "
                        f"(default {DEFAULT_JOBS})")
    p.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds allowed per case (default {DEFAULT_TIMEOUT_S})")
    p.add_argument("--snapshot-cap", type=int, default=DEFAULT_SNAPSHOT_CAP,
                   help="keep a case's gzipped snapshot only up to this many bytes "
                        f"(default {DEFAULT_SNAPSHOT_CAP:,})")
    p.add_argument("--size-budget", type=int, default=DEFAULT_SIZE_BUDGET,
                   help="bytes the suite's files may take in all; the largest snapshots are "
                        f"dropped beyond it (default {DEFAULT_SIZE_BUDGET:,})")
    p.add_argument("--context", choices=("all", "alloc", "state"), default="all",
                   help="context= of _record_memory_history: 'all' (default, as capture_goldens) "
                        "records a stack with every allocation and free, 'alloc' with allocations "
                        "only (smaller snapshots), 'state' only for blocks live at the dump")
    p.add_argument("--max-entries", type=int, default=CG.DEFAULT_MAX_ENTRIES,
                   help="max_entries of the allocator history "
                        f"(default {CG.DEFAULT_MAX_ENTRIES:,})")
    p.add_argument("--steps", type=int, default=H.DEFAULT_STEPS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=H.DEFAULT_SEED, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
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
        for c in H.SUITE:
            print(f"{c.name:<28} {H.describe_case(c)}")
        return 0
    if args.child:
        return run_child(args)
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())
