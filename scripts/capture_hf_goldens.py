#!/usr/bin/env python3
"""Record the memory of real Hugging Face training steps on a CUDA GPU: ground truth for
predicting a step's memory from a model config.

    python3 scripts/capture_hf_goldens.py --out goldens/h200/hf [--cases 'gpt2_*,vit_*'] [--jobs 3]
    python3 scripts/capture_hf_goldens.py --list
    python3 scripts/capture_hf_goldens.py --out /tmp/hf-dry --dry-run-cpu   # no GPU: test the logic
    python3 scripts/capture_hf_goldens.py --suite techniques --out goldens/h200/techniques

--suite techniques runs hf_models.py's TECHNIQUE_SUITE instead: the memory-saving techniques
`vramscope predict` models (checkpointing every 2nd block, op-level selective checkpointing,
chunked cross-entropy) on a LLaMA-style decoder in pure bf16 and GPT-2 under bf16 autocast, whose
baselines are the default suite's; scripts/accuracy.py compares them with `predict`'s flags.

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

The measuring code (phase hooks, tensor inventory, snapshot summary, GPU metadata) and the
driver are scripts/golden_capture/'s, shared with scripts/capture_goldens.py; the training step is
hf_models.train_step, with the phases of examples/training/train.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from golden_capture import driver as D
from golden_capture import hf as HC
from golden_capture import measure as M
from golden_capture.common import (TRAINING_DIR, fmt_bytes, iso, jsonable, now_us,
                                   package_version, run_info, select_cases, stage, write_json)

M.add_path(TRAINING_DIR)
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
CODE = ("examples/training", "scripts/capture_goldens.py", "scripts/capture_hf_goldens.py",
        "scripts/golden_capture")


# ====================================================================== the child: one case


def run_child(args) -> int:
    case = H.CASES.get(args.child)
    if case is None:
        print(f"capture_hf_goldens: error: unknown case {args.child!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    dry = args.dry_run_cpu
    started = time.perf_counter()
    H.set_offline()  # before transformers is imported
    stage("import")
    import torch
    import transformers
    plain = H.plain_training()  # examples/training/train.py: PHASES
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "peft": package_version("peft")}

    device = M.pick_device(torch, dry, tool="capture_hf_goldens")
    if device is None:
        return 3
    if args.threads:
        torch.set_num_threads(args.threads)  # the cases run side by side: share the CPU
    spec = H.MODELS[case.model]

    stage("record")
    if not dry:
        torch.cuda.memory._record_memory_history(enabled="all", context=args.context,
                                                 stacks=STACKS, max_entries=args.max_entries)
    recording_started_us = now_us()
    hooks = M.CaptureHooks(torch, device, marks=True, use_cuda=not dry)

    def build():
        model, build_info = H.build_model(case, args.seed, tiny=dry)
        model = model.to(device)
        optimizer, hyper = H.build_optimizer(model)
        return model, optimizer, (build_info, hyper)

    run = M.train_and_record(
        hooks, build, lambda model: H.make_batches(case, model.config, args.seed, tiny=dry),
        lambda model, opt, batches: H.train(model, opt, case, batches, steps=args.steps,
                                            device=device, hooks=hooks), dry=dry)
    model, optimizer, (build_info, hyper), batches = run.model, run.optimizer, run.extra, run.batches
    snapshot_info = None if dry else M.store_snapshot(
        torch, out, case.name, hooks.phases, device.index or 0, args.max_entries,
        memory_before_dump=run.end_memory, cap=args.snapshot_cap)

    stage("probe")
    attention = HC.probe_attention_ops(torch, H.forward, model, batches[0], case, device)

    expected = H.expected_parameters(case, dry)
    inv_first = hooks.inventories.get("after_first_step") or hooks.inventories["end"]
    sizes = H.input_sizes(case, dry)
    first_inputs = (hooks.steps.get(1) or {}).get("tensors", {})
    precision_label, precision_meaning = H.PRECISIONS[case.precision]
    image = spec.kind == "image_classification"
    sidecar = {
        "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "case": case.name,
        "created": iso(), "dry_run_cpu": dry,
        "config": {
            "model": case.model, "model_description": spec.description,
            "model_class": type(model).__name__, **jsonable(build_info),
            "hf_config_class": f"transformers.{spec.config_class}",
            "hf_config_kwargs": spec.config_kwargs,
            "config_overrides": H.config_overrides(case, dry) or None,
            "task": spec.kind, "batch_size": sizes["batch"], "seq_len": sizes.get("seq"),
            "image_size": model.config.image_size if image else None,
            "inputs": {k: {"shape": v["shape"], "dtype": v["dtype"]}
                       for k, v in first_inputs.items() if k in batches[0]},
            "inputs_note": HC.INPUTS_NOTE_IMAGE if image else HC.INPUTS_NOTE_TOKENS,
            "forward_kwargs": spec.forward_kwargs, "loss": "the model's own: output.loss",
            "precision": precision_label, "precision_meaning": precision_meaning,
            "amp": {"api": "torch.autocast", "device_type": device.type, "dtype": "bfloat16",
                    "covers": "forward and loss"} if case.precision == "bf16amp" else None,
            "parameter_dtype": H.parameter_dtype(model),
            "attention_kernels": attention, "sdpa_backends_enabled": HC.sdpa_flags(torch),
            "optimizer": M.optimizer_info(torch, optimizer, "adamw", hyper),
            "steps": args.steps, "seed": args.seed, "device": str(device),
            "cpu_threads": torch.get_num_threads(),
            "loop": HC.LOOP, "setup": HC.SETUP,
            "phases": ["setup"] + list(plain.PHASES),
            "training_script": "examples/training/hf_models.py",
            "equivalent_command": (
                f"python3 examples/training/hf_models.py --case {case.name} --steps {args.steps} "
                f"--device {device.type} --seed {args.seed}" + (" --tiny" if dry else "")),
        },
        "hf_config": jsonable(H.hf_config_dict(model)), "hf_config_note": H.HF_CONFIG_NOTE,
        "versions": versions,
        "counts": {
            "at": HC.COUNTS_AT,
            "after_first_step": HC.compact_inventory(inv_first, expected),
            "end": HC.compact_inventory(hooks.inventories["end"], expected),
        },
        "parameters": HC.parameter_table(inv_first),
        "recording": None if dry else M.recording(args, hooks, recording_started_us,
                                                  context=args.context, stacks=STACKS),
        "clock": M.CLOCK, "memory_fields": None if dry else M.MEMORY_FIELDS,
        "peak": run.peak, "end_memory": run.end_memory, "phases": hooks.phases,
        "steps": hooks.step_entries(run.losses, args.steps), "snapshot": snapshot_info,
        "timing": {"train_seconds": round(run.train_seconds, 3),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    stage("write")
    write_json(out / f"{case.name}.sidecar.json", sidecar)
    stage("done")
    return 0


# ==================================================================== the driver: all cases


class Driver(D.Driver):
    tool, script, metadata_format = "capture_hf_goldens", __file__, METADATA_FORMAT
    out_hint = "goldens/h200/hf"
    dry_desc = "dry run on the CPU, tiny inputs, no snapshots"
    head_format = "[{done:>2}/{n}] {case:<27} {status:<6}"

    def __init__(self, args, cases: list):
        super().__init__(args, cases, suite_of(args))
        self.threads = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
        self.dropped: list[str] = []
        self.sdpa = None

    def child_args(self, case) -> list[str]:
        a = self.args
        return ["--steps", str(a.steps), "--seed", str(a.seed), "--max-entries",
                str(a.max_entries), "--snapshot-cap", str(a.snapshot_cap), "--context", a.context,
                "--threads", str(self.threads)]

    def child_env(self, case) -> dict:
        return dict(super().child_env(case), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    HF_DATASETS_OFFLINE="1")

    def check(self) -> int:
        missing = [p for p in ("torch", "transformers") if package_version(p) is None]
        if missing:
            print(f"capture_hf_goldens: error: not installed: {', '.join(missing)}", file=sys.stderr)
            return 3
        self.sdpa = HC.driver_sdpa_flags()
        return 0

    def more_header(self) -> list[str]:
        return [f"torch {self.env_info.get('torch')}, transformers "
                f"{package_version('transformers')}, peft {package_version('peft')}"]

    def entry(self, case, attempts: list[dict]) -> dict:
        a = attempts[-1]
        result = {"case": case.name, "model": case.model, "precision": case.precision,
                  "gradient_checkpointing": case.gradient_checkpointing, "lora": case.lora,
                  "technique": case.technique or None,
                  "status": "ok" if a["rc"] == 0 else "FAILED", "attempt": self.public(a)}
        if result["status"] == "ok":
            result.update(self.read_sidecar(case, HC.metadata_entry))
        return result

    def ok_text(self, r: dict, attempts: list[dict]) -> str:
        return HC.case_line(r, attempts[-1]["seconds"])

    def metadata(self, cases: dict) -> dict:
        a = self.args
        return {
            "format": METADATA_FORMAT, "version": METADATA_VERSION,
            **run_info(self.started, a.dry_run_cpu, commit_paths=CODE), **self.env_info,
            "transformers": package_version("transformers"), "peft": package_version("peft"),
            "huggingface_hub": package_version("huggingface_hub"),
            "sdpa_backends_enabled": self.sdpa, "stacks": STACKS, "context": a.context,
            "steps": a.steps, "seed": a.seed, "max_entries": a.max_entries, "jobs": a.jobs,
            "cpu_threads_per_case": self.threads, "snapshot_cap_bytes": a.snapshot_cap,
            "size_budget_bytes": a.size_budget, "snapshots_dropped_for_budget": self.dropped,
            "env": self.env_record(), "hf_env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            "cases": cases,
        }

    def report(self, results: dict, elapsed: float) -> int:
        names = [c.name for c in suite_of(self.args)]
        merged = self.merged(results)
        if not self.args.dry_run_cpu:
            self.dropped = D.drop_snapshots(self.out, names, merged, self.args.size_budget,
                                            METADATA_RESERVE, D.case_files, HC.metadata_entry)
        meta_path = self.write_metadata(results)
        text, failed = self.outcome(results)
        bad = [n for n, r in results.items() if r["status"] == "ok" and not r["checks_passed"]]
        total = D.suite_bytes(self.out, names, D.case_files) + meta_path.stat().st_size
        print(f"{text}{'; checks failed: ' + ', '.join(bad) if bad else ''}; "
              f"{sum(1 for r in merged.values() if r.get('snapshot'))} snapshot(s) kept; the suite's "
              f"files in {self.out}: {fmt_bytes(total)} ({total:,} B); {elapsed:.0f} s", flush=True)
        return 1 if failed else 0


def parse_args(argv=None):
    p = D.parser(__doc__, jobs=DEFAULT_JOBS, timeout=DEFAULT_TIMEOUT_S, cases_example="'gpt2_*'",
                 dry_help="run on the CPU with tiny inputs and no allocator history: sidecars only")
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
    D.add_max_entries(p)
    p.add_argument("--suite", choices=("families", "techniques"), default="families",
                   help="the model families (default) or the memory-saving techniques "
                        "(hf_models.py's TECHNIQUE_SUITE)")
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    return D.parse(p, argv, steps=H.DEFAULT_STEPS, seed=H.DEFAULT_SEED)


def suite_of(args) -> list:
    return H.TECHNIQUE_SUITE if args.suite == "techniques" else H.SUITE


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in suite_of(args):
            print(f"{c.name:<28} {H.describe_case(c)}")
        return 0
    if args.child:
        return run_child(args)
    return Driver(args, select_cases(suite_of(args), args.cases, "capture_hf_goldens")).main()


if __name__ == "__main__":
    sys.exit(main())
