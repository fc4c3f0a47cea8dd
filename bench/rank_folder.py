#!/usr/bin/env python3
"""`vramscope report FOLDER` on many ranks: time and peak memory as the folder grows.

    python3 bench/rank_folder.py [--vramscope build/vramscope] [--ranks 32 256]

Each folder holds N copies of a real rank (goldens/h100/run/ranks2_ddp_gpt_adamw_fp32.rank0:
vramscope run's snapshot and sidecar of one DDP rank on an H100, 2,615 trace events), each
relabelled as its own rank. The peer is reading one rank alone (`vramscope report RANK.pickle`):
reading N ranks costs at most N of those divided by the workers, and memory stays that of a few
ranks whatever N (the workers hold one rank's trace each; the rows kept are a few KiB per rank).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RANK = REPO / "goldens" / "h100" / "run" / "ranks2_ddp_gpt_adamw_fp32.rank0"


def measure(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run, from GNU time."""
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"rank_folder: {' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return wall, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build" / "vramscope"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[32, 256])
    args = ap.parse_args()
    if not shutil.which("/usr/bin/time"):
        sys.exit("rank_folder: needs GNU time (/usr/bin/time; apt-get install time)")
    sidecar = json.loads(Path(f"{RANK}.sidecar.json").read_text())
    with tempfile.TemporaryDirectory(prefix="vramscope-ranks-") as tmp:
        tmp = Path(tmp)
        single = tmp / "one.pickle"
        with gzip.open(f"{RANK}.pickle.gz") as f:
            single.write_bytes(f.read())
        one_s, one_rss = min(measure([args.vramscope, "report", "-q", "--json", "--summary-only",
                                      str(single)]) for _ in range(3))
        print(f"one rank alone: {one_s:.3f} s, peak RSS {one_rss / 1024:.1f} MiB")
        for n in args.ranks:
            folder = tmp / f"ranks{n}"
            folder.mkdir()
            for rank in range(n):
                label = f"rank{rank}"
                os.link(single, folder / f"{label}.pickle")
                s = dict(sidecar, snapshot=f"{label}.pickle")
                s["process"] = dict(sidecar["process"], rank=rank, local_rank=rank % 8,
                                    world_size=n)
                (folder / f"{label}.sidecar.json").write_text(json.dumps(s))
            wall, rss = measure([args.vramscope, "report", "-q", "--json", "--summary-only",
                                 str(folder)])
            print(f"{n:5d} ranks: {wall:.3f} s ({wall / n * 1000:.1f} ms per rank, "
                  f"{wall / (one_s * n):.2f}x the single rank's time each), "
                  f"peak RSS {rss / 1024:.1f} MiB ({rss / one_rss:.2f}x one rank's), "
                  f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
