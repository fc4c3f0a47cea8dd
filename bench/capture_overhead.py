#!/usr/bin/env python3
"""What capture costs a training step: the same run of examples/training/train.py with and
without `vramscope run`, in one invocation, best of --runs each.

    python3 bench/capture_overhead.py [--model gpt --steps 50 --runs 3] [--vramscope build/vramscope]

Modes: plain (no vramscope), `--stacks python`, `--stacks all`, `--on-oom` (the flight recorder:
no stacks, nothing written unless memory runs out) and `--native --no-python` (the CUPTI library
alone) when the binary has them. Goals (issue 7): native capture under 3%, Python stacks under
10%; (issue 41) --on-oom under 2%. Time is train.py's own "N steps in X s" (the training loop only: start-up, model
construction and the capture's writing at exit are not in it).

--cpu measures on the CPU with the bootstrap's test mode (VRAMSCOPE_CAPTURE_CPU=1): the cost of its
hooks (phase marks, tensor names) without any CUDA work; it is not the GPU figure.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "examples" / "training" / "train.py"
STEPS_LINE = re.compile(r": (\d+) steps in ([0-9.]+) s")


def timed(cmd: list[str], env: dict, cpu: bool) -> float:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    match = STEPS_LINE.search(proc.stdout)
    # On the CPU `vramscope run` exits 1 by design: the test mode writes no snapshot.
    if (proc.returncode != 0 and not cpu) or not match:
        sys.exit(f"capture_overhead: {' '.join(cmd)} failed (exit {proc.returncode}):\n"
                 f"{proc.stderr[-1500:]}")
    return float(match.group(2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build-release" / "vramscope"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--model", default="gpt")
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="no GPU: the bootstrap's hooks only")
    args = ap.parse_args()
    env = dict(os.environ)
    device = "cuda"
    if args.cpu:
        env["VRAMSCOPE_CAPTURE_CPU"] = "1"
        device = "cpu"
    program = [args.python, str(TRAIN), "--model", args.model, "--optimizer", args.optimizer,
               "--steps", str(args.steps), "--device", device]
    help_text = subprocess.run([args.vramscope, "run", "--help"], capture_output=True,
                               text=True).stdout
    with tempfile.TemporaryDirectory(prefix="vramscope-overhead-") as tmp:
        def under(*flags):
            return [args.vramscope, "run", "--no-report", "--force", "-q", "-o", tmp, *flags,
                    "--"] + program
        modes = {"plain": program, "stacks python": under("--stacks", "python"),
                 "stacks all": under("--stacks", "all")}
        if "--on-oom" in help_text:
            modes["on-oom"] = under("--on-oom")  # the flight recorder: no stacks, nothing written
        if "--native" in help_text and not args.cpu:
            modes["native only"] = under("--native", "--no-python")
        best = {}
        for _ in range(args.runs):  # interleaved, so drift hits every mode alike
            for mode, cmd in modes.items():
                t = timed(cmd, env, args.cpu)
                best[mode] = min(best.get(mode, t), t)
    base = best["plain"]
    print(f"{args.model} / {args.optimizer}, {args.steps} steps on {device}, best of {args.runs}:")
    for mode, t in best.items():
        print(f"  {mode:<14} {t:8.3f} s  {1000 * t / args.steps:8.2f} ms/step  "
              f"overhead {100 * (t / base - 1):+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
