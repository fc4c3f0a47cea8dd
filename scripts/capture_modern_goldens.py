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

import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from golden_capture import driver as D
from golden_capture import measure as M
from golden_capture import modern as MC
from golden_capture.common import (fmt_bytes, iso, jsonable, now_us, run_info, select_cases, stage,
                                   write_json)
from golden_capture.modern import (PRIVATE_SEGMENTS_LISTED, _takes, features,  # noqa: F401 (tests)
                                   pools_from_segments, snapshot_extras)

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
SIZE_BUDGET_BYTES = 4 * 1024 * 1024  # what the suite's files may take in the repository
CODE = ("examples/training", "scripts/capture_goldens.py", "scripts/capture_modern_goldens.py",
        "scripts/golden_capture")


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


# ------------------------------------------------------------------------- the child process


def run_child(args) -> int:
    case = BY_NAME.get(args.child)
    if case is None:
        print(f"capture_modern_goldens: error: unknown case {args.child!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    dry = args.dry_run_cpu
    started = time.perf_counter()
    stage("import")
    import torch

    feats = features(torch)
    missing = [f for f in case.needs if not feats.get(f)]
    if missing:
        print(f"{SKIP_TAG}{case.name}: {MC.WHY_MISSING.get(missing[0], missing[0] + ' is missing')}"
              f" (torch {torch.__version__})", flush=True)
        return SKIP_RC
    device = M.pick_device(torch, dry, tool="capture_modern_goldens")
    if device is None:
        return 3
    torch.manual_seed(args.seed)
    used: dict = {}

    stage("record")
    recording = None
    if not dry:
        kwargs = dict(enabled="all", context="all", stacks=STACKS, max_entries=args.max_entries)
        if case.kind == "compile" and feats["record_compile_context"]:
            kwargs["compile_context"] = True
        torch.cuda.memory._record_memory_history(**kwargs)
        recording = {"api": "torch.cuda.memory._record_memory_history", **kwargs,
                     "started_us": now_us(), "started_before": "the case's first allocation"}
    snapshot_kwargs = {"include_traces": False} if feats["memory_snapshot_include_traces"] else {}
    hooks = MC.ModernHooks(torch, device, use_cuda=not dry, snapshot_kwargs=snapshot_kwargs)

    stage("run")
    result = MC.RUNNERS[case.kind](torch, case, device, dry, hooks, args, feats, used)
    end_memory = hooks._memory()
    phases = hooks.phases
    peak = None if dry else M.peak_over_phases(phases)
    snapshot_info = None if dry else M.store_snapshot(
        torch, out, case.name, phases, device.index or 0, args.max_entries,
        dump=MC.snapshot_dumper(torch, case.kind == "compile", feats), extras=snapshot_extras)
    del result["keep"]  # what the case kept alive for the dump

    sidecar = {
        "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "case": case.name,
        "kind": case.kind, "description": case.description, "created": iso(),
        "dry_run_cpu": dry, "torch": torch.__version__, "device": str(device),
        "steps": args.steps, "seed": args.seed, "features": feats, "used": jsonable(used),
        "notes": hooks.notes, "config": jsonable(result["config"]),
        "recording": None if recording is None else {
            **recording, "marks": hooks.mark_methods,
            "mark_name_format": f"{M.MARK_PREFIX}<phase>#<step>"},
        "memory_fields": None if dry else MC.MEMORY_FIELDS,
        "peak": peak, "end_memory": end_memory, "phases": phases, "losses": result["losses"],
        "tensors": hooks.inventories, "snapshot": snapshot_info,
        "timing": {"train_seconds": result.get("train_seconds"),
                   "case_seconds": round(time.perf_counter() - started, 3)},
    }
    stage("write")
    write_json(out / f"{case.name}.sidecar.json", sidecar)
    stage("done")
    return 0


# ------------------------------------------------------------------------------- the driver


class Driver(D.Driver):
    tool, script, metadata_format = "capture_modern_goldens", __file__, METADATA_FORMAT
    out_hint = "goldens/h100/modern"
    head_format = "[{done}/{n}] {case:<24} {status:<7}"
    suite = CASES

    def child_args(self, case: Case) -> list[str]:
        a = self.args
        return ["--steps", str(a.steps), "--seed", str(a.seed), "--max-entries",
                str(a.max_entries), "--compile-model", a.compile_model]

    def header_suffix(self) -> str:
        return f"; torch {self.env_info.get('torch')}"

    def run_case(self, case: Case) -> dict:
        for stale in self.stale_files(case):  # nothing old may pass for this run's
            (self.out / stale).unlink(missing_ok=True)
        # A cold Inductor cache of the case's own: compilation (and what it allocates) is the
        # same in every run, and parallel cases do not share a cache being written.
        cache = tempfile.mkdtemp(prefix=f"vramscope-inductor-{case.name}-")
        try:
            a = self.attempt(case, env=dict(self.child_env(case), TORCHINDUCTOR_CACHE_DIR=cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        return self.finish(case, [a])

    def entry(self, case: Case, attempts: list[dict]) -> dict:
        a = attempts[-1]
        result = {"case": case.name, "kind": case.kind, "attempt": self.public(a)}
        skip = [ln[len(SKIP_TAG):] for ln in a["output"].splitlines() if ln.startswith(SKIP_TAG)]
        if a["rc"] == SKIP_RC and skip:
            result.update(status="skipped", why=skip[0])
        elif a["rc"] == 0:
            result["status"] = "ok"
            result.update(self.read_sidecar(case, MC.metadata_entry))
        else:
            result["status"] = "FAILED"
        return result

    def ok_text(self, r: dict, attempts: list[dict]) -> str:
        if r["status"] == "skipped":
            return r["why"]
        pools = r.get("private_pools_at_dump")
        return (f"peak alloc {fmt_bytes(r.get('max_memory_allocated')):>10}  "
                f"reserved {fmt_bytes(r.get('max_memory_reserved')):>10}  "
                f"snapshot {fmt_bytes(r.get('snapshot_bytes')):>9}  private pools at dump "
                f"{pools if pools is not None else '-'}  {attempts[-1]['seconds']:.1f} s"
                + "".join(f"\n        note: {note}" for note in r.get("notes") or ()))

    def metadata(self, cases: dict) -> dict:
        a = self.args
        return {
            "format": METADATA_FORMAT, "version": METADATA_VERSION,
            **run_info(self.started, a.dry_run_cpu, commit_paths=CODE), **self.env_info,
            "stacks": STACKS, "steps": a.steps, "seed": a.seed, "max_entries": a.max_entries,
            "jobs": a.jobs, "compile_model": a.compile_model,
            "inductor_cache": "a fresh TORCHINDUCTOR_CACHE_DIR per case (cold compilation)",
            "env": self.env_record(("PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
                                    "CUDA_MODULE_LOADING")),
            "cases": cases,
        }

    def report(self, results: dict, elapsed: float) -> int:
        meta_path = self.write_metadata(results)
        text, failed = self.outcome(results, skips=True)
        total = D.suite_bytes(self.out, [c.name for c in CASES],
                              lambda n: D.case_files(n, logs=False)) + meta_path.stat().st_size
        print(f"{text}; {self.out}: {fmt_bytes(total)} ({total:,} B); {elapsed:.0f} s", flush=True)
        if total > SIZE_BUDGET_BYTES and not self.args.dry_run_cpu:
            print(f"warning: the suite's files are over the {fmt_bytes(SIZE_BUDGET_BYTES)} meant "
                  "for the repository: look at the largest snapshot before committing", flush=True)
        return 1 if failed else 0


def parse_args(argv=None):
    p = D.parser(__doc__, jobs=DEFAULT_JOBS, timeout=DEFAULT_TIMEOUT_S, cases_example="'graphs_*'",
                 dry_help="run on the CPU without allocator history: sidecars only")
    D.add_max_entries(p)
    p.add_argument("--compile-model", choices=("gpt", "mlp"), default="gpt",
                   help="the model of the compile_* cases (default gpt, what the goldens are); "
                        "mlp compiles in a fraction of the time, for a quick --dry-run-cpu")
    return D.parse(p, argv, steps=DEFAULT_STEPS, seed=DEFAULT_SEED, check_jobs=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name:<24} {c.description}")
        return 0
    if args.child:
        return run_child(args)
    try:
        cases = select_cases(CASES, args.cases, "capture_modern_goldens")
    except SystemExit as e:  # one line, exit 2 (bad arguments)
        print(e, file=sys.stderr)
        return 2
    return Driver(args, cases).main()


if __name__ == "__main__":
    sys.exit(main())
