#!/usr/bin/env python3
"""Benchmark: `vramscope predict --plan` on the cases of issue 40, each answer timed.

Goal (issue 40): each answer in under 2 s. The cases:
1. LLaMA-2 7B, seq 2048, bf16, on one RTX 4090 (24 GiB): 8-bit states, offloads, LoRA;
2. LLaMA-2 70B on one RTX 4090: nothing fits (the weights alone), said at once;
3. LLaMA-2 70B, seq 4096, bf16, on 8 x H100 80GB: ZeRO-3 with checkpointing and 8-bit states;
4. GPT-2 small, batch 32 x 1024 tokens, fp32, in 24 GiB.
No peer plans a step without the model's code and a run (PyTorch's auto_sac and fsdp_ilp need
both), so the goal is absolute; the simulations each answer took are printed beside its time.

Usage:
    python3 bench/plan_speed.py [--vramscope build-release/vramscope] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "7B on rtx4090": ["--model", "llama2-7b", "--seq", "2048", "--dtype", "bf16",
                      "--plan", "rtx4090"],
    "70B on rtx4090": ["--model", "llama2-70b", "--seq", "2048", "--dtype", "bf16",
                       "--plan", "rtx4090"],
    "70B on 8xh100-80gb": ["--model", "llama2-70b", "--seq", "4096", "--dtype", "bf16",
                           "--plan", "8xh100-80gb"],
    "gpt2 in 24GiB": ["--model", "gpt2", "--batch", "32", "--seq", "1024", "--plan", "24GiB"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramscope", default=str(ROOT / "build-release" / "vramscope"))
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    print(f"{'case':<22} {'best':>8} {'median':>8} {'sims':>5}  first option")
    for name, args in CASES.items():
        times, doc = [], {}
        for _ in range(a.runs):
            t0 = time.perf_counter()
            p = subprocess.run([a.vramscope, "predict", *args, "--json", "-q"],
                               capture_output=True, text=True, cwd=ROOT)
            times.append(time.perf_counter() - t0)
            if p.returncode not in (0, 1):
                raise SystemExit(f"{name}: {p.stderr.strip()}")
            doc = json.loads(p.stdout)["plan"]
        first = (" + ".join(doc["options"][0]["techniques"]) if doc["options"]
                 else "fits as asked" if doc["baseline_fits"] else "nothing fits")
        print(f"{name:<22} {min(times):7.2f}s {statistics.median(times):7.2f}s "
              f"{doc['simulations']:>5}  {first}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
