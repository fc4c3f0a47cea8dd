#!/usr/bin/env python3
"""Benchmark (issue 19): a gzipped snapshot against the plain one, in one run on the same input.

The goal: a gzipped input costs what the plain file costs (it is inflated as a stream into a
mapped temporary file, never whole into memory), so `vramscope report BIG.pickle.gz` peaks no
higher than `vramscope report BIG.pickle`. Also times the issue's hostile files (a 13 MB gzip of
zeros, the 40 KB shared-reference pickle, 1,000 segments at one address), which must be refused
within seconds and well under 1 GiB.

Standard library only; the big snapshot is the one bench/report_vs_pickle.py builds (a real
trace's pattern repeated to >= --entries entries).

Usage:
    python3 bench/gzip_vs_plain.py [--vramscope build-release/vramscope] [--entries N] [--repeat K]
"""

from __future__ import annotations

import argparse
import gzip
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "bombs"))
import bombs  # noqa: E402
import report_vs_pickle as big_maker  # noqa: E402

MIB = 1 << 20


def best(binary: str, args: list[str], repeat: int) -> tuple[float, float, int]:
    """(best wall s, peak RSS MiB of that run, exit status) over `repeat` runs."""
    runs = []
    for _ in range(repeat):
        r = big_maker.run_vramscope([binary, *args], timeout=600)
        runs.append((r["wall_s"], r["peak_rss_kib"] / 1024, r["rc"]))
    return min(runs)


def make_inputs(folder: Path, entries: int) -> None:
    """Writes big.pickle and big.pickle.gz (run in a child process: a process's peak RSS counts
    what it inherited at fork, so the measuring process must stay small)."""
    src = big_maker.load_restricted(big_maker.find_source(None))
    big, _, _ = big_maker.build_big(src, entries, copy_segments=True)
    plain = folder / "big.pickle"
    plain.write_bytes(pickle.dumps(big, protocol=4))
    (folder / "big.pickle.gz").write_bytes(gzip.compress(plain.read_bytes(), compresslevel=6,
                                                         mtime=0))
    print(sum(len(t) for t in big["device_traces"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramscope", default=str(HERE.parent / "build-release" / "vramscope"))
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--make", help=argparse.SUPPRESS)  # internal: the child that writes inputs
    a = ap.parse_args()
    if a.make:
        make_inputs(Path(a.make), a.entries)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        made = subprocess.run([sys.executable, __file__, "--make", tmp, "--entries",
                               str(a.entries)], check=True, capture_output=True, text=True)
        entries = int(made.stdout.split()[-1])
        plain, packed = t / "big.pickle", t / "big.pickle.gz"
        out = str(t / "out.sqlite")
        rows = []
        for label, path in (("plain", plain), ("gzipped", packed)):
            wall, rss, rc = best(a.vramscope, ["report", str(path), "-o", out, "--force", "-q",
                                               "--json"], a.repeat)
            if rc != 0:
                sys.exit(f"error: report {path.name} exited {rc}")
            rows.append((label, path.stat().st_size, wall, rss))
        print(f"snapshot: {entries:,} trace entries; plain {plain.stat().st_size / MIB:.1f} MiB, "
              f"gzipped {packed.stat().st_size / MIB:.1f} MiB")
        print(f"{'input':<10} {'file MiB':>9} {'wall s':>8} {'peak RSS MiB':>13}")
        for label, size, wall, rss in rows:
            print(f"{label:<10} {size / MIB:>9.1f} {wall:>8.2f} {rss:>13.1f}")
        print(f"gzipped / plain: wall {rows[1][2] / rows[0][2]:.2f}x, peak RSS "
              f"{rows[1][3] / rows[0][3]:.3f}x (goal: <= 1.00x, within noise)")
        print()
        print(f"{'hostile file':<34} {'file':>9} {'wall s':>8} {'peak RSS MiB':>13} {'exit':>5}")
        for name, make in (("13 MB gzip of zeros", bombs.zeros_gzip),
                           ("40 KB shared-reference pickle", bombs.shared_segments),
                           ("1,000 segments at one address", bombs.stacked_segments)):
            path = make(t)
            wall, rss, rc = best(a.vramscope, ["report", str(path), "-o", out, "-q"], a.repeat)
            print(f"{name:<34} {path.stat().st_size / 1024:>7.0f} K {wall:>8.2f} {rss:>13.1f} "
                  f"{rc:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
