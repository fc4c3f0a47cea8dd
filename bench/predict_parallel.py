#!/usr/bin/env python3
"""The per-rank estimate on the largest layout we name: Llama 3.1 405B on 16,384 ranks
(TP 8 x PP 16 x DP 128, sequence parallel, 32 micro-batches, ZeRO-1, bf16 with fp32 master
weights, sequence 8192), every rank role. Goal (issue 18): under 2 s.

    python3 bench/predict_parallel.py [--vramscope build/vramscope] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["predict", "--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--sp",
        "--micro-batches", "32", "--zero", "1", "--dtype", "bf16", "--master-weights", "--seq",
        "8192", "--gpu", "h100-80gb", "--json"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build" / "vramscope"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.run([args.vramscope, *ARGS], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            sys.exit(f"predict_parallel: {proc.stderr.strip()}")
    doc = json.loads(proc.stdout)["parallel"]
    print(f"llama3-405b on {doc['world']:,} ranks, {len(doc['roles'])} roles: best "
          f"{min(times):.4f} s, median {statistics.median(times):.4f} s over {args.runs} runs "
          f"(goal < 2 s: {'met' if max(times) < 2 else 'NOT met'}); bounded by "
          f"{doc['bounding_role']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
