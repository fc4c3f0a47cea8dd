#!/usr/bin/env python3
"""Ground truth from a real GPU, captured the way users capture: every case of the fixed suite runs
under `vramscope run` (no change to the training script), and the captures become compact goldens.

    python3 scripts/capture_run_goldens.py --out goldens/h200/run [--vramscope build/vramscope]

Suite: examples/training/train.py's linear and mlp models with SGD and Adam, resnet18 with SGD +
momentum, bert and gpt with AdamW (random weights), each in fp32 and bf16 autocast, 3 steps; then a
deliberate out-of-memory (gpt under a 64 MiB cap), gpt with AdamW on two ranks sharing the GPU
(torchrun, gloo) under DDP and under FSDP2 (issue 18's ground truth per rank), examples/distributed's
tensor-parallel LLaMA on two ranks and its FSDP2 x TP version on four (train_model_file.py: what the
tracer traces, trained for real), and, when JAX with CUDA is installed, a JAX program captured
natively (--native) with its device memory profile, which the bootstrap writes beside the native
trace (`<case>.jax.prof`: the live buffers inside XLA's reservation).

Per case the folder gets `<case>.pickle.gz` (the snapshot the bootstrap wrote, gzipped with a fixed
mtime), `<case>.sidecar.json` (the capture sidecar; `--phase-memory` makes it hold PyTorch's own
memory_allocated/reserved and max_memory_allocated/reserved for every phase) and, for native cases,
`<case>.vstrace`. `metadata.json` names the GPU, driver, PyTorch and CUDA versions, the commit and
each case's outcome with PyTorch's peaks.

--dry-run-cpu runs the same plumbing on a machine without a GPU (the bootstrap's CPU test mode:
sidecars with phases and names, no snapshots); nothing it writes is ground truth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from golden_capture.common import (REPO, gpu_facts, gzip_file, repo_commit, run_info, utc_now,
                                   write_json)
from golden_capture.driver import WrittenCases, run_process

TRAIN = REPO / "examples" / "training" / "train.py"
TRAIN_MODEL_FILE = REPO / "examples" / "distributed" / "train_model_file.py"

# examples/distributed's model files trained for real, one process per rank sharing the GPU (gloo):
# the measurements the tracer's one traced rank (predict --model FILE:build --world-size N) is held
# to. (case, file, ranks, batch and sequence); AdamW, 3 steps. The ranks share the GPU through
# train_model_file.py's gloo-staged group (NCCL refuses two ranks on one GPU; plain gloo cannot
# carry DTensor's collectives on CUDA tensors; its send/recv carry the pipeline's stages too).
MODEL_FILE_CASES = [("ranks2_tp_llama_adamw_fp32", "tp_llama.py", 2, ["--batch", "4", "--seq", "512"]),
                    ("ranks4_fsdp2_tp_llama_adamw_fp32", "fsdp2_tp_llama.py", 4,
                     ["--batch", "4", "--seq", "512"]),
                    # 1F1B over two stages, 4 micro-batches of 2 (pp_gpt.py)
                    ("ranks2_pp_gpt_adamw_fp32", "pp_gpt.py", 2, ["--batch", "8", "--seq", "256"]),
                    # interleaved 1F1B, two stages per rank (pp_interleaved_gpt.py)
                    ("ranks2_pp_interleaved_gpt_adamw_fp32", "pp_interleaved_gpt.py", 2,
                     ["--batch", "8", "--seq", "256"]),
                    # the 1F1B pipeline under ScheduleGPipe, and stepped with return_outputs=False
                    ("ranks2_pp_gpipe_gpt_adamw_fp32", "pp_gpipe_gpt.py", 2,
                     ["--batch", "8", "--seq", "256"]),
                    ("ranks2_pp_gpt_no_outputs_adamw_fp32", "pp_gpt_no_outputs.py", 2,
                     ["--batch", "8", "--seq", "256"]),
                    # the zero-bubble V: four stages, rank 0 holding the first and the last
                    ("ranks2_pp_zbv_gpt_adamw_fp32", "pp_zbv_gpt.py", 2,
                     ["--batch", "8", "--seq", "256"]),
                    # PP 2 x FSDP2 2 (torchtitan's combination), four ranks
                    ("ranks4_pp_fsdp2_gpt_adamw_fp32", "pp_fsdp2_gpt.py", 4,
                     ["--batch", "8", "--seq", "256"]),
                    # PP 2 x TP 2 (tp_llama.py's decoder, each stage tensor- and
                    # sequence-parallel), four ranks
                    ("ranks4_pp_tp_llama_adamw_fp32", "pp_tp_llama.py", 4,
                     ["--batch", "8", "--seq", "512"]),
                    # PP 2 x DDP 2 (each stage under DistributedDataParallel), four ranks
                    ("ranks4_pp_ddp_gpt_adamw_fp32", "pp_ddp_gpt.py", 4,
                     ["--batch", "8", "--seq", "256"]),
                    # the same pipeline under bf16 autocast, 4 micro-batches of 4
                    ("ranks2_pp_gpt_adamw_bf16", "pp_gpt.py", 2,
                     ["--batch", "16", "--seq", "256", "--amp", "bf16"]),
                    ("ranks2_pp_interleaved_gpt_adamw_bf16", "pp_interleaved_gpt.py", 2,
                     ["--batch", "16", "--seq", "256", "--amp", "bf16"]),
                    # the same models built on the meta device, each rank making only its shards
                    # (torchtitan's way, and the tracer's): the allocator's segments as traced
                    ("ranks2_tp_llama_meta_adamw_fp32", "tp_llama.py", 2,
                     ["--batch", "4", "--seq", "512", "--init", "meta"]),
                    ("ranks4_fsdp2_tp_llama_meta_adamw_fp32", "fsdp2_tp_llama.py", 4,
                     ["--batch", "4", "--seq", "512", "--init", "meta"])]

SUITE = [(model, opt, amp)
         for model, opts in (("linear", ("sgd", "adam")), ("mlp", ("sgd", "adam")),
                             ("resnet18", ("sgdm",)), ("bert", ("adamw",)), ("gpt", ("adamw",)))
         for opt in opts for amp in ("none", "bf16")]

JAX_PROGRAM = """
import jax, jax.numpy as jnp
try:
    import optax  # the bootstrap names Adam's state and, from it, the weights
except ImportError:
    optax = None
key = jax.random.PRNGKey(0)
params = {"w": jax.random.normal(key, (4096, 4096)), "b": jnp.zeros((4096,))}
x = jax.random.normal(key, (512, 4096))
def loss(p, x): return jnp.mean((x @ p["w"] + p["b"]) ** 2)
if optax is not None:
    opt = optax.adam(1e-3)
    state = opt.init(params)
    @jax.jit
    def step(p, s, x):
        u, s = opt.update(jax.grad(loss)(p, x), s, p)
        return optax.apply_updates(p, u), s
    for _ in range(3):
        params, state = step(params, state, x)
else:
    step = jax.jit(lambda p, x: jax.tree.map(lambda a, g: a - 1e-3 * g, p, jax.grad(loss)(p, x)))
    for _ in range(3):
        params = step(params, x)
print(float(loss(params, x)))
"""


def run_command(cmd: list[str], env: dict, timeout: float | None) -> tuple[int, str]:
    """Runs cmd in its own session; past timeout the whole session (torchrun's ranks too) is
    killed, so a hung collective costs the case, not the GPU session."""
    p = run_process(cmd, env=env, timeout=timeout, new_session=True)
    if p["timed_out"]:
        return 124, p["stderr"] + f"\n(killed after {timeout:.0f} s)"
    return p["rc"], p["stderr"]


def run_case(vramscope: str, python: str, name: str, program: list[str], out: Path,
             work: Path, extra: list[str], env: dict, timeout: float | None = None) -> dict:
    capture = work / name
    cmd = [vramscope, "run", "--steps", "3", "--stacks", "all", "--phase-memory", "--no-report",
           "--force", "-o", str(capture), *extra, "--", python, *program]
    returncode, stderr = run_command(cmd, env, timeout)
    case = {"command": " ".join(cmd[cmd.index("--") + 1:]), "exit_code": returncode,
            "stderr_tail": stderr[-2000:]}
    if returncode != 0 and name != "oom_gpt_fp32":
        # The whole of a failure's stderr (torchrun's summary hides the ranks' own messages).
        (out / "logs").mkdir(exist_ok=True)
        (out / "logs" / f"{name}.stderr.txt").write_text(stderr[-200_000:])
    sidecars = sorted(capture.glob("*.sidecar.json"))
    for src in sidecars:
        # One process: <case>.*; several (torchrun's ranks): <case>.<rank0|pid..>.*, one entry each.
        stem = src.name.removesuffix(".sidecar.json")
        prefix = name if len(sidecars) == 1 else f"{name}.{stem}"
        entry = case if len(sidecars) == 1 else case.setdefault("ranks", {}).setdefault(stem, {})
        sidecar = json.loads(src.read_text())
        shutil.copy(src, out / f"{prefix}.sidecar.json")
        entry["sidecar"] = f"{prefix}.sidecar.json"
        entry["end_reason"] = sidecar["end"]["reason"]
        phases = [p for p in sidecar["phases"] if (p.get("memory") or {}).get("max_allocated")]
        if phases:
            entry["max_memory_allocated"] = max(p["memory"]["max_allocated"] for p in phases)
            entry["max_memory_reserved"] = max(p["memory"]["max_reserved"] for p in phases)
        if sidecar.get("snapshot"):
            gzip_file(capture / sidecar["snapshot"], out / f"{prefix}.pickle.gz")
            entry["snapshot"] = f"{prefix}.pickle.gz"
    if len(sidecars) > 1:
        ends = {r["end_reason"] for r in case["ranks"].values()}
        case["end_reason"] = ends.pop() if len(ends) == 1 else "mixed"
        if all("snapshot" in r for r in case["ranks"].values()):
            case["snapshot"] = sorted(r["snapshot"] for r in case["ranks"].values())
    for src in sorted(capture.glob("*.vstrace")):
        shutil.copy(src, out / f"{name}.vstrace")
        case["native"] = f"{name}.vstrace"
    # A JAX or TensorFlow program's own recording, which the bootstrap wrote beside the native
    # trace: the live buffers that split XLA's reservation (issue 42).
    for suffix in (".jax.prof", ".xplane.pb"):
        for src in sorted(capture.glob(f"*{suffix}")):
            shutil.copy(src, out / f"{name}{suffix}")
            case["profile"] = f"{name}{suffix}"
    captured = "snapshot" in case or "native" in case or "profile" in case
    if env.get("VRAMSCOPE_CAPTURE_CPU") == "1":  # the dry run writes sidecars only
        captured = "sidecar" in case or bool(case.get("ranks"))
    case["status"] = "ok" if captured else "failed"
    print(f"{name}: {case['status']} (exit {returncode})", flush=True)
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the goldens")
    ap.add_argument("--vramscope", default=str(REPO / "build" / "vramscope"))
    ap.add_argument("--python", default=sys.executable, help="Python with PyTorch (CUDA)")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    ap.add_argument("--dry-run-cpu", action="store_true",
                    help="no GPU: check the plumbing with the bootstrap's CPU test mode")
    args = ap.parse_args()
    env = dict(os.environ)
    device = ["--device", "cuda"]
    if args.dry_run_cpu:
        env["VRAMSCOPE_CAPTURE_CPU"] = "1"
        device = ["--device", "cpu"]
        facts = {"name": "none (dry run on the CPU)", "driver_version": None}
    else:
        facts = gpu_facts(args.python)
    args.out.mkdir(parents=True, exist_ok=True)
    commit = repo_commit() or ""

    def write_metadata() -> None:
        # After every case, so a session step cut short by its time-out keeps what finished.
        meta = {"format": "vramscope-run-goldens-metadata", "version": 1,
                **run_info(utc_now(), args.dry_run_cpu, quote_command=False, commit=commit),
                "gpu": facts, "torch": facts.get("torch"), "steps": 3, "stacks": "all",
                "cases": cases}
        write_json(args.out / "metadata.json", meta, indent=1)

    cases = WrittenCases(write_metadata)
    with tempfile.TemporaryDirectory(prefix="vramscope-goldens-") as tmp:
        work = Path(tmp)
        for model, opt, amp in SUITE:
            name = f"{model}_{opt}_{'bf16' if amp == 'bf16' else 'fp32'}"
            if args.only and name not in args.only:
                continue
            program = [str(TRAIN), "--model", model, "--optimizer", opt, "--amp", amp,
                       "--steps", "3", "--seed", "0", *device]
            cases[name] = run_case(args.vramscope, args.python, name, program, args.out, work,
                                   [], env)
        if not args.only or "oom_gpt_fp32" in args.only:
            program = [str(TRAIN), "--model", "gpt", "--optimizer", "adamw", "--steps", "3",
                       "--memory-cap-mib", "64", *device]
            case = run_case(args.vramscope, args.python, "oom_gpt_fp32", program, args.out, work,
                            [], env)
            if not args.dry_run_cpu and case.get("end_reason") != "oom":
                case["status"] = "failed: no out-of-memory happened"
            cases["oom_gpt_fp32"] = case
        for parallel in ("ddp", "fsdp2"):
            name = f"ranks2_{parallel}_gpt_adamw_fp32"
            if args.only and name not in args.only:
                continue
            # Two ranks on the one GPU: NCCL refuses that, gloo does not.
            program = ["-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone",
                       str(TRAIN), "--model", "gpt", "--optimizer", "adamw", "--steps", "3",
                       "--seed", "0", "--parallel", parallel, "--backend", "gloo", *device]
            case = run_case(args.vramscope, args.python, name, program, args.out, work, [], env)
            if case["status"] == "ok" and len(case.get("ranks", {})) != 2:
                case["status"] = f"failed: {len(case.get('ranks', {}))} rank(s) captured, not 2"
            cases[name] = case
        for name, model_file, ranks, shape in MODEL_FILE_CASES:
            if args.only and name not in args.only:
                continue
            program = ["-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
                       "--standalone", str(TRAIN_MODEL_FILE),
                       f"{REPO / 'examples' / 'distributed' / model_file}:build", *shape,
                       "--optimizer", "adamw", "--steps", "3", "--backend", "gloo-staged",
                       *device]
            # PYTHONFAULTHANDLER: a rank that dies of a signal leaves its Python stack in the log.
            case = run_case(args.vramscope, args.python, name, program, args.out, work, [],
                            dict(env, PYTHONFAULTHANDLER="1"), timeout=150)
            if case["status"] == "ok" and case["exit_code"] != 0:
                # a snapshot is written even when a rank dies: it is not a training's ground truth
                case["status"] = f"failed: exit {case['exit_code']}, end {case.get('end_reason')}"
            elif case["status"] == "ok" and len(case.get("ranks", {})) != ranks:
                case["status"] = (f"failed: {len(case.get('ranks', {}))} rank(s) captured, "
                                  f"not {ranks}")
            cases[name] = case
        has_jax = subprocess.run([args.python, "-c", "import jax"], capture_output=True)
        if (not args.only or "jax_native" in args.only) and has_jax.returncode == 0 \
                and not args.dry_run_cpu:
            cases["jax_native"] = run_case(args.vramscope, args.python, "jax_native",
                                           ["-c", JAX_PROGRAM], args.out, work,
                                           ["--native"], env)
    write_metadata()
    failed = [n for n, c in cases.items() if not c["status"].startswith("ok")]
    print(f"{len(cases) - len(failed)} of {len(cases)} cases captured into {args.out}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
