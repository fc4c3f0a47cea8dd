#!/usr/bin/env python3
"""Benchmark: the C++ allocator replay against a plain-Python model of the same rules.

Standard library only; builds nothing.  Steps, for one ``--live`` value (or for each
value of ``--sweep``):

1. Run ``replay_bench --events N --live K --dump FILE --json``: it builds the synthetic
   training trace in memory, writes its request stream to FILE, and times
   ``allocator::Replay`` (what-if mode, no curves; best of ``--repeat``).
2. Run ``bench/allocator_model_reference.py FILE --json`` in a fresh Python process: the
   plain-Python model replays the very same requests (best of ``--py-repeat``).
3. Print both rates, the ratio, and check that both models reach the same peak reserved
   and peak allocated bytes, the same number of segments and the same number of free
   blocks at the end.

Goal (the issue): the C++ replay at >= 20M events/s on this machine.

Usage:
    python3 bench/replay_vs_python.py [--bin build-release/bench/replay_bench]
        [--events N] [--live K] [--repeat R] [--py-repeat R]
        [--sweep [--sweep-live 100,1000,10000,100000] [--sweep-events N]]
        [--keep DIR] [--json] [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(REPO, "bench", "allocator_model_reference.py")
GOAL_EVENTS_PER_S = 20e6


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and not proc.stdout.strip():
        sys.exit(f"error: {' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def compare(binary: str, events: int, live: int, repeat: int, py_repeat: int, dump: str, show: bool) -> dict:
    cmd = [binary, "--events", str(events), "--live", str(live), "--repeat", str(repeat), "--dump", dump, "--json"]
    if show:
        print("running: " + " ".join(cmd), flush=True)
    out = run(cmd)
    cpp = last_json(out)
    if show:
        print("\n".join(line for line in out.splitlines() if not line.startswith("{")), flush=True)
    pcmd = [sys.executable, REFERENCE, dump, "--json", "--repeat", str(py_repeat)]
    if show:
        print("running: " + " ".join(pcmd), flush=True)
    py = last_json(run(pcmd))
    checks = {k: cpp[c] == py[p] for k, c, p in (("peak reserved", "peak_reserved", "peak_reserved"),
                                                   ("peak allocated", "peak_allocated", "peak_allocated"),
                                                   ("segments", "segments", "segments"),
                                                   ("free blocks at the end", "end_free_blocks", "end_free_blocks"))}
    return {"live": live, "cpp": cpp, "python": py, "ratio": cpp["events_per_s"] / py["events_per_s"],
            "checks": checks, "agree": all(checks.values()) and cpp["events"] == py["events"]}


def print_one(r: dict, repeat: int, py_repeat: int) -> None:
    cpp, py = r["cpp"], r["python"]
    rows = [
        ("events", f"{cpp['events']:,}", f"--live {r['live']}: {cpp['long_lived']:,} long-lived tensors"),
        ("C++ allocator::Replay", f"{cpp['events_per_s'] / 1e6:.2f} M events/s",
         f"{cpp['ns_per_event']:.1f} ns/event, best of {repeat}"),
        ("  CachingAllocator alone", f"{1e3 / cpp['core_ns_per_event']:.2f} M events/s",
         f"{cpp['core_ns_per_event']:.1f} ns/event, same requests"),
        ("Python model", f"{py['events_per_s'] / 1e6:.2f} M events/s",
         f"{py['ns_per_event']:.0f} ns/event, best of {py_repeat}"),
        ("C++ / Python", f"{r['ratio']:.1f}x", ""),
        ("C++ goal >= 20 M events/s", "PASS" if cpp["events_per_s"] >= GOAL_EVENTS_PER_S else "FAIL", ""),
    ]
    for name in r["checks"]:
        key = {"peak reserved": "peak_reserved", "peak allocated": "peak_allocated", "segments": "segments",
               "free blocks at the end": "end_free_blocks"}[name]
        rows.append((f"{name}: C++ / Python", f"{cpp[key]} / {py[key]}",
                     "equal" if r["checks"][name] else "DIFFERENT"))
    w0 = max(len(x[0]) for x in rows)
    w1 = max(len(x[1]) for x in rows)
    print()
    for name, value, note in rows:
        print(f"  {name:<{w0}}  {value:>{w1}}  {note}".rstrip())


def print_sweep(results: list[dict]) -> None:
    print()
    print("| --live K | long-lived | events | allocated blocks (peak / mean) | free blocks (peak / mean) "
          "| C++ ns/event | C++ M events/s | Python ns/event | C++ / Python | peaks equal |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
    for r in results:
        c, p = r["cpp"], r["python"]
        print(f"| {r['live']:,} | {c['long_lived']:,} | {c['events']:,} | {c['peak_live_blocks']:,} / "
              f"{c['mean_live_blocks']:,.0f} | {c['peak_free_blocks']:,} / {c['mean_free_blocks']:,.0f} | "
              f"{c['ns_per_event']:.1f} | {c['events_per_s'] / 1e6:.1f} | {p['ns_per_event']:.0f} | "
              f"{r['ratio']:.1f}x | {'yes' if r['agree'] else 'NO'} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="C++ allocator replay against a plain-Python model, same input.")
    ap.add_argument("--bin", default=os.path.join(REPO, "build-release", "bench", "replay_bench"),
                    help="the replay_bench binary (default: %(default)s)")
    ap.add_argument("--events", type=int, default=10_000_000, help="trace events (default 10,000,000)")
    ap.add_argument("--live", type=int, default=1000, help="long-lived tensors, about (default 1000)")
    ap.add_argument("--repeat", type=int, default=3, help="C++ timed runs, best counts (default 3)")
    ap.add_argument("--py-repeat", type=int, default=1, help="Python timed runs, best counts (default 1)")
    ap.add_argument("--sweep", action="store_true", help="compare at each --sweep-live value")
    ap.add_argument("--sweep-live", default="100,1000,10000,100000", help="comma-separated --live values")
    ap.add_argument("--sweep-events", type=int, default=2_000_000,
                    help="events per --sweep point (default 2,000,000: the Python model is slow at large K)")
    ap.add_argument("--keep", metavar="DIR", help="write the dumps into DIR and keep them")
    ap.add_argument("--json", action="store_true", help="also print all results as one JSON line")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the 20M events/s goal is missed")
    args = ap.parse_args(argv)

    binary = os.path.abspath(args.bin)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print(f"error: replay_bench not found or not executable: {binary}\n"
              f"       build it first: cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release && "
              f"cmake --build build-release --target replay_bench\n"
              f"       or pass --bin PATH", file=sys.stderr)
        return 2
    workdir = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="vramscope-replay-bench-")
    os.makedirs(workdir, exist_ok=True)
    try:
        if args.sweep:
            results = []
            for k in (int(x) for x in args.sweep_live.split(",") if x.strip()):
                r = compare(binary, args.sweep_events, k, args.repeat, args.py_repeat,
                            os.path.join(workdir, f"replay_live{k}.bin"), show=False)
                print(f"--live {k}: C++ {r['cpp']['ns_per_event']:.1f} ns/event, Python "
                      f"{r['python']['ns_per_event']:.0f} ns/event, ratio {r['ratio']:.1f}x, "
                      f"{'agree' if r['agree'] else 'DISAGREE'}", flush=True)
                results.append(r)
            print_sweep(results)
        else:
            results = [compare(binary, args.events, args.live, args.repeat, args.py_repeat,
                               os.path.join(workdir, "replay.bin"), show=True)]
            print_one(results[0], args.repeat, args.py_repeat)
        if args.json:
            print(json.dumps(results))
        if not all(r["agree"] for r in results):
            print("error: the C++ and Python models disagree", file=sys.stderr)
            return 1
        if args.strict and not all(r["cpp"]["events_per_s"] >= GOAL_EVENTS_PER_S for r in results):
            return 1
        return 0
    finally:
        if args.keep:
            print(f"kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
