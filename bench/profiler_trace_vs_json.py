#!/usr/bin/env python3
"""Benchmark: ``vramscope report`` on a PyTorch profiler trace against Python's ``json.load``.

Every Python tool that reads Kineto traces (TensorBoard's profiler plugin, HTA, TraceLens) starts
by inflating the gzip and building the whole JSON document in memory; this script measures that
floor, ``gzip`` + ``json.load``, on the same file against vramscope's whole report (parse, event
model, attribution, analyses, SQLite database). Standard library only.

Usage:
    python3 bench/profiler_trace_vs_json.py [--vramscope build/vramscope] [--repeat K] [TRACE...]

Without TRACE, the profiler traces of ../shared/fixtures/real are used (the script says so and
exits 2 when there are none). ``--scaled N`` also writes a big plain-JSON trace, the DDP fixture's
events repeated N times (each repetition later in time and at higher addresses, so the memory
events stay one consistent history), and the same gzipped (level 6, as torch.profiler's
``export_chrome_trace(...json.gz)``), and measures both too; ``--scaled-only`` measures only
those. ``--timeline N`` also writes a raw memory timeline
(``export_memory_timeline_raw``'s ``[t_ns, action, bytes, category]`` records) of N synthetic
records (tensors made and freed at random, seed 1) and measures it the same way.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("VRAMSCOPE_SHARED_DIR", REPO.parent / "shared")) / "fixtures" / "real"


DDP_FIXTURE = "kineto_nov2022_v100_ddp_rank1_profile_memory.json.gz"


def scaled_trace(source: Path, times: int, out: Path) -> Path:
    """`source`'s traceEvents repeated `times` times into `out` (plain JSON)."""
    with gzip.open(source, "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span_ts = (max(stamps) - min(stamps)) + 1000 if stamps else 0
    addrs = [e["args"]["Addr"] for e in events
             if e.get("name") == "[memory]" and isinstance(e.get("args", {}).get("Addr"), int)]
    span_addr = (max(addrs) - min(addrs) + (1 << 30)) if addrs else 0
    with open(out, "w") as f:
        f.write('{"schemaVersion": %s, "traceEvents": [' % json.dumps(doc.get("schemaVersion", 1)))
        first = True
        for k in range(times):
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + k * span_ts
                if e2.get("name") == "[memory]" and isinstance(e2.get("args"), dict):
                    args = dict(e2["args"])
                    if isinstance(args.get("Addr"), int):
                        args["Addr"] += k * span_addr
                    e2["args"] = args
                f.write(("" if first else ",") + json.dumps(e2))
                first = False
        f.write("]}")
    return out


def python_floor(path: Path, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            json.load(f)
        best = min(best, time.perf_counter() - t0)
    return best


def vramscope(binary: Path, path: Path, repeat: int) -> tuple[float, float]:
    """(best wall seconds, peak RSS MiB of the last run) of a full report with its database."""
    best = float("inf")
    rss = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            t0 = time.perf_counter()
            child = subprocess.Popen([str(binary), "report", str(path), "-q", "-o",
                                      str(Path(tmp) / "r.sqlite"), "--force"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # wait4 gives this child's own peak RSS (RUSAGE_CHILDREN would be the largest of all).
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - t0
            err = child.stderr.read().decode(errors="replace")
            child.stderr.close()
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit(f"vramscope failed on {path}: {err.strip()}")
            best = min(best, wall)
            rss = usage.ru_maxrss / 1024
    return best, rss


def write_timeline(records: int, out: Path) -> None:
    """A raw memory timeline of `records` records: CREATE (2) a tensor of one of four sizes and
    categories 0-5, or DESTROY (4) a live one, half and half, 1 us apart."""
    rng = random.Random(1)
    live: list[tuple[int, int]] = []
    with open(out, "w") as f:
        f.write("[")
        for n in range(records):
            t = (n + 1) * 1000
            if live and rng.random() < 0.5:
                size, category = live.pop(rng.randrange(len(live)))
                record = (t, 4, -size, category)
            else:
                size, category = rng.choice([512, 4096, 1 << 20, 3 << 20]), rng.randrange(6)
                live.append((size, category))
                record = (t, 2, size, category)
            f.write(("" if n == 0 else ", ") + "[%d, %d, %d, %d]" % record)
        f.write("]")


def write_scaled(times: int, plain: Path) -> None:
    """The --scaled trace, plain and gzipped beside it."""
    scaled_trace(FIXTURES / DDP_FIXTURE, times, plain)
    with open(plain, "rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=6) as dst:
        while chunk := src.read(1 << 24):
            dst.write(chunk)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--write-scaled":  # the child main() runs
        write_scaled(int(sys.argv[2]), Path(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--vramscope", type=Path, default=REPO / "build" / "vramscope")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scaled", type=int, default=0, metavar="N",
                    help="also measure the DDP fixture's events repeated N times, plain JSON")
    ap.add_argument("--scaled-only", action="store_true",
                    help="measure only the --scaled trace (and --timeline)")
    ap.add_argument("--timeline", type=int, default=0, metavar="N",
                    help="also measure a synthetic raw memory timeline of N records")
    args = ap.parse_args()
    if not args.vramscope.is_file():
        print(f"no vramscope binary at {args.vramscope}; build it or pass --vramscope",
              file=sys.stderr)
        return 2
    traces = [] if args.scaled_only else (args.traces or sorted(FIXTURES.glob("kineto_*.json.gz")))
    scratch = tempfile.TemporaryDirectory()
    if args.scaled > 0:
        if not (FIXTURES / DDP_FIXTURE).is_file():
            print(f"--scaled needs {FIXTURES / DDP_FIXTURE}", file=sys.stderr)
            return 2
        # Written by a child Python: the fixture's document must not be in this process's heap,
        # which every vramscope forked from here would count in its peak RSS until it execs.
        plain = Path(scratch.name) / f"ddp_x{args.scaled}.json"
        gzipped = plain.with_name(plain.name + ".gz")
        subprocess.run([sys.executable, __file__, "--write-scaled", str(args.scaled), str(plain)],
                       check=True)
        traces += [plain, gzipped]
    if args.timeline > 0:
        timeline = Path(scratch.name) / f"timeline_{args.timeline}.raw.json"
        write_timeline(args.timeline, timeline)
        traces.append(timeline)
    if not traces:
        print(f"no profiler traces given and none in {FIXTURES}", file=sys.stderr)
        return 2
    print(f"{'trace':<62} {'MiB':>6} {'json.load':>10} {'vramscope':>10} {'ratio':>6} {'RSS MiB':>8}")
    # vramscope first: a child forked after json.load would count the parent's big heap in its
    # peak RSS until it execs.
    measured = [vramscope(args.vramscope, path, args.repeat) for path in traces]
    for path, (wall, rss) in zip(traces, measured):
        floor = python_floor(path, args.repeat)
        size = path.stat().st_size / 2**20
        print(f"{path.name:<62} {size:>6.2f} {floor:>9.3f}s {wall:>9.3f}s {floor / wall:>5.1f}x "
              f"{rss:>8.1f}")
    print("json.load = gzip + json.load of the file (best of --repeat); vramscope = the whole "
          "report with its SQLite database, process start to exit (best of --repeat); ratio = "
          "json.load / vramscope")
    return 0


if __name__ == "__main__":
    sys.exit(main())
