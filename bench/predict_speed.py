#!/usr/bin/env python3
"""Benchmark: `vramscope predict` on a 70B-parameter decoder, and `--fit`.

Goals (issue 6): a 70B decoder step predicts in under a second; --fit in a few seconds.

1. `vramscope predict --model llama2-70b` (bf16 weights, fp32 master weights, AdamW, activation
   checkpointing, ZeRO-3 over 64 GPUs, batch 1, seq 4096, 3 steps, --gpu h100-80gb): the whole
   command, report summary included, --runs times; the best and the median are printed.
2. The same with `--fit h100-80gb`: the largest batch, every candidate simulated in full.
3. The peer: predicting the same kind of model by running it on fake tensors, as fake-tensor
   memory trackers do, with vramscope's own tracer (python -m vramscope.tracer) on a LLaMA-2
   7B config (torch and transformers needed; skipped otherwise), against `vramscope predict
   --model llama2-7b` on the same set-up. The ratio is printed.

Usage:
    python3 bench/predict_speed.py [--vramscope build-release/vramscope] [--runs 5]
                                   [--python PYTHON_WITH_TORCH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SEVENTY_B = ["--model", "llama2-70b", "--batch", "1", "--seq", "4096", "--dtype", "bf16",
             "--master-weights", "--optimizer", "adamw", "--checkpointing", "--zero", "3",
             "--world-size", "64"]

LLAMA7B_CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                  "vocab_size": 32000, "max_position_embeddings": 4096,
                  "tie_word_embeddings": False}


def timed(cmd: list[str], runs: int, env=None) -> tuple[list[float], str]:
    times, out = [], ""
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
        out = p.stdout
    return times, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramscope", default=str(ROOT / "build-release" / "vramscope"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=sys.executable,
                    help="a Python with torch and transformers, for the tracer peer")
    args = ap.parse_args()
    v = args.vramscope

    step, out = timed([v, "predict", *SEVENTY_B, "--gpu", "h100-80gb", "--json", "-q"], args.runs)
    j = json.loads(out)
    peak = j["devices"][0]["peak_allocated"]["bytes"]
    params = j["prediction"]["parameters"]
    print(f"70B step (llama2-70b, {params:,} parameters, 3 steps, ZeRO-3 x 64, checkpointing): "
          f"best {min(step):.3f} s, median {statistics.median(step):.3f} s over {args.runs} runs "
          f"(goal < 1 s); predicted peak allocated {peak / 2**30:.2f} GiB")

    fit, out = timed([v, "predict", *SEVENTY_B, "--fit", "h100-80gb"], args.runs)
    first = out.splitlines()[0] if out else ""
    print(f"--fit h100-80gb: best {min(fit):.3f} s, median {statistics.median(fit):.3f} s "
          f"(goal: a few seconds); {first}")

    # The peer: fake-tensor tracing of a 7B model.
    probe = subprocess.run([args.python, "-c", "import torch, transformers"], capture_output=True)
    if probe.returncode != 0:
        print("peer skipped: no torch/transformers in", args.python)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(LLAMA7B_CONFIG))
        stream = Path(tmp) / "llama7b.jsonl"
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        t0 = time.perf_counter()
        p = subprocess.run([args.python, "-m", "vramscope.tracer", "--model", f"hf:{config}",
                            "--batch", "1", "--seq", "512", "--dtype", "bf16", "--optimizer",
                            "adamw", "--steps", "1", "-o", str(stream)],
                           capture_output=True, text=True, env=env, cwd=ROOT)
        tracer_s = time.perf_counter() - t0
        if p.returncode != 0:
            print("peer failed:", p.stderr.strip().splitlines()[-1:] or p.returncode)
            return 1
        ours, _ = timed([v, "predict", "--model", str(config), "--batch", "1", "--seq", "512",
                         "--dtype", "bf16", "--optimizer", "adamw", "--steps", "1", "--json",
                         "-q"], args.runs)
    print(f"peer, LLaMA-2 7B config, batch 1, seq 512, 1 step: fake-tensor tracer "
          f"{tracer_s:.2f} s, vramscope predict {min(ours):.3f} s: "
          f"{tracer_s / min(ours):.0f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
