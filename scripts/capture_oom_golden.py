#!/usr/bin/env python3
"""Captures a real CUDA out-of-memory: the GPT-style decoder of examples/training with a batch too
big for a capped GPU, under the allocator history (stacks="all"), dumped when
torch.OutOfMemoryError is raised. Writes <out>/oom_gpt_fp32.pickle.gz and a sidecar
(oom_gpt_fp32.json) with PyTorch's own account: the exception message, memory_stats() at the
failure, the cap.

    python3 scripts/capture_oom_golden.py --out goldens/h200 [--cap-gib 3] [--batch 256]

The cap is torch.cuda.set_per_process_memory_fraction, so the failure is the allocator's own
(the same path as a full GPU) and quick on any card."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from golden_capture.common import TRAINING_DIR, driver_version, gzip_file, write_json

sys.path.insert(0, str(TRAINING_DIR))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cap-gib", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()
    import torch
    from models import GPT

    if not torch.cuda.is_available():
        print("capture_oom_golden: no CUDA GPU here", file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = args.cap_gib * 2**30 / total
    torch.cuda.set_per_process_memory_fraction(fraction, 0)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="all")
    torch.manual_seed(0)
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 8192, (args.batch, 256))
    failure = None
    phase = "setup"
    try:
        for step in range(1, 4):
            opt.zero_grad(set_to_none=True)
            phase = "forward"
            x = ids.to(dev)
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), x.view(-1))
            phase = "backward"
            loss.backward()
            phase = "optimizer"
            opt.step()
    except torch.OutOfMemoryError as e:
        failure = {"message": str(e), "step": step, "phase": phase}
    raw = out / "oom_gpt_fp32.pickle"
    torch.cuda.memory._dump_snapshot(str(raw))
    stats = {k: v for k, v in torch.cuda.memory_stats().items()
             if k.startswith(("allocated_bytes.all", "reserved_bytes.all", "active_bytes.all",
                              "requested_bytes.all", "num_", "inactive_split_bytes.all"))}
    torch.cuda.memory._record_memory_history(enabled=None)
    gzip_file(raw, out / "oom_gpt_fp32.pickle.gz")
    raw.unlink()
    driver = driver_version()[0] or ""
    sidecar = {
        "format": "vramscope-oom-golden", "version": 1,
        "model": "gpt (examples/training/models.py GPT defaults)", "batch": args.batch,
        "seq": 256, "dtype": "fp32", "optimizer": "adamw",
        "cap_bytes": int(fraction * total), "memory_fraction": fraction,
        "gpu": torch.cuda.get_device_name(0), "total_memory": total, "driver_version": driver,
        "torch": torch.__version__, "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "failure": failure, "memory_stats_after": stats,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
    }
    write_json(out / "oom_gpt_fp32.json", sidecar, indent=1)
    print(json.dumps({k: sidecar[k] for k in ("failure", "cap_bytes", "max_memory_allocated",
                                              "max_memory_reserved")}, indent=1))
    print(f"{out / 'oom_gpt_fp32.pickle.gz'}: {(out / 'oom_gpt_fp32.pickle.gz').stat().st_size} B")
    return 0 if failure else 1


if __name__ == "__main__":
    sys.exit(main())
