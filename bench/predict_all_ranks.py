#!/usr/bin/env python3
"""`predict --all-ranks` on a model of your own: every rank traced, one tracer process at a time
(`--jobs 1`) against as many at once as the CPUs (the default), on the same model in one run,
with the ratio and each tracer process's peak memory (what --jobs multiplies).

    python3 bench/predict_all_ranks.py [--vramscope build/vramscope] [--python PYTHON_WITH_TORCH]
        [--model examples/distributed/pp_gpt.py:build] [--world-size 2] [--runs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build" / "vramscope"))
    ap.add_argument("--python", default=str(Path.home() / ".cache" / "vramscope" / "torch-venv" /
                                            "bin" / "python"))
    ap.add_argument("--model", default=str(REPO / "examples" / "distributed" / "pp_gpt.py") +
                    ":build")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    base = [args.vramscope, "predict", "--model", args.model, "--world-size",
            str(args.world_size), "--all-ranks", "--batch", "8", "--seq", "256", "--python",
            args.python, "--quiet"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the embedded tracer
    results = {}
    for name, extra in (("--jobs 1", ["--jobs", "1"]), ("default", [])):
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            proc = subprocess.run(base + extra, capture_output=True, text=True, env=env)
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                sys.exit(f"predict_all_ranks: {proc.stderr.strip()}")
        results[name] = statistics.median(times)
        print(f"{name:>9}: median {results[name]:.1f} s over {args.runs} runs "
              f"({', '.join(f'{t:.1f}' for t in times)})")
    # The largest child (a tracer process, or vramscope itself) of all the runs above.
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"{args.world_size} ranks of {args.model} on {os.cpu_count()} CPUs: the default is "
          f"{results['--jobs 1'] / results['default']:.2f}x as fast as --jobs 1; the largest "
          f"process's peak RSS {peak_kib / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
