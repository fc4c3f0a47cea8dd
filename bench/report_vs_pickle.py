#!/usr/bin/env python3
"""Benchmark: ``vramscope report`` against Python's own ``pickle.load`` on a big snapshot.

Standard library only.  Steps:

1. Build a large, realistic snapshot (default >= 1,000,000 trace entries).  The
   pattern is a real trace: the one of
   ``<shared>/fixtures/real/snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle``
   when that file exists (read with an unpickler that refuses every global), else
   the one of ``examples/synthetic_mlp_adam_step.pickle`` (made by
   ``examples/make_example_snapshot.py``).  The trace is repeated with addresses
   shifted per repetition (and ``time_us`` shifted when present); every repetition
   reuses the same frame-list objects, so the pickle keeps the stacks shared (memo
   references) the way real snapshots do.  The segments are repeated with the same
   shift, so every repetition's trace stays consistent with its own segments.
   Written with pickle protocol 4 to a temporary folder (or ``--out``).
2. Time ``pickle.load`` of that file (best of ``--repeat``).  Plain ``pickle.load``
   on purpose: it is what Python tools (torch.cuda._memory_viz, notebooks) pay, and
   the file is one this script has just written itself.
3. Run ``<vramscope> report BIG.pickle -o OUT.sqlite --force --quiet --json --timings``,
   read ``timings_s`` from its JSON on stdout, and measure its wall time and peak RSS.
   Then run it in text mode (``report BIG.pickle -o OUT.sqlite --force``) and time the
   summary's first byte on stdout: the summary is printed before the database is written.
4. Print a table with the goals: vramscope parse >= 10x faster than pickle.load, the summary
   printed >= 5x faster than pickle.load,
   vramscope end to end (wall) faster than pickle.load alone, peak RSS at most the file's
   size plus 64 MiB (issue 41), for the whole report and for the summary alone
   (``--json --summary-only``, no database).

Usage:
    python3 bench/report_vs_pickle.py [--vramscope build/vramscope] [--entries N]
        [--repeat K] [--out PATH] [--keep] [--skip-vramscope] [--json] [--strict]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_CANDIDATES = [os.environ.get("VRAMSCOPE_SHARED_DIR", ""), os.path.join(REPO, "..", "shared"),
                     os.path.join(REPO, "shared")]
REAL_SOURCE = "fixtures/real/snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle"
EXAMPLE_SOURCE = os.path.join(REPO, "examples", "synthetic_mlp_adam_step.pickle")
EXAMPLE_MAKER = os.path.join(REPO, "examples", "make_example_snapshot.py")

GIB = 1 << 30
TIMING_KEYS = ("read", "parse", "build_model", "replay", "analyze", "write_report", "total")


class NoGlobalsUnpickler(pickle.Unpickler):
    """Loads plain data only; any class or function reference is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in a snapshot")


def load_restricted(path: str):
    with open(path, "rb") as f:
        return NoGlobalsUnpickler(f).load()


def find_source(explicit: str | None) -> str:
    if explicit:
        return explicit
    for base in SHARED_CANDIDATES:
        if base:
            p = os.path.normpath(os.path.join(base, REAL_SOURCE))
            if os.path.isfile(p):
                return p
    if not os.path.isfile(EXAMPLE_SOURCE) and os.path.isfile(EXAMPLE_MAKER):
        subprocess.run([sys.executable, EXAMPLE_MAKER], check=True, stdout=subprocess.DEVNULL)
    if not os.path.isfile(EXAMPLE_SOURCE):
        sys.exit(f"error: no source trace: neither {REAL_SOURCE} under the shared folder nor {EXAMPLE_SOURCE}")
    return EXAMPLE_SOURCE


# --------------------------------------------------------------------------- building the big snapshot

def _shift_segment(seg: dict, delta: int) -> dict:
    s = dict(seg)  # shallow copy: frames lists stay the same objects
    s["address"] = seg["address"] - delta
    blocks = []
    for b in seg.get("blocks", ()):
        nb = dict(b)
        if "address" in nb:
            nb["address"] = b["address"] - delta
        blocks.append(nb)
    s["blocks"] = blocks
    return s


def build_big(src: dict, entries: int, copy_segments: bool,
              own_frames: bool = False) -> tuple[dict, int, int]:
    """Repeat the source trace until it has >= ``entries`` entries.

    With ``own_frames`` every entry gets a frames list of its own (the same frame dicts), as
    PyTorch writes them: the file is about six times bigger and its lists are never read back.

    Repetition k moves every address down by k * shift (shift > the source's address
    span, so repetitions never overlap; moving down keeps addresses in the user-space
    range that real pointers have) and time_us up by k * (duration + 1 s)."""
    if isinstance(src, list):  # very old snapshots are a bare list of segments
        sys.exit("error: the source has no device_traces")
    traces = src.get("device_traces") or []
    dev = max(range(len(traces)), key=lambda i: len(traces[i]), default=None)
    if dev is None or not traces[dev]:
        sys.exit("error: the source snapshot has an empty trace")
    trace = traces[dev]
    segments = [s for s in src.get("segments", []) if s.get("device", dev) == dev]

    lo = min([e["addr"] for e in trace if "addr" in e] + [s["address"] for s in segments])
    hi = max([e["addr"] + max(e.get("size", 0), 0) for e in trace if "addr" in e] +
             [s["address"] + s["total_size"] for s in segments])
    shift = (math.ceil((hi - lo) / GIB) + 1) * GIB
    times = [e["time_us"] for e in trace if "time_us" in e]
    t_shift = (max(times) - min(times) + 1_000_000) if times else 0

    reps = max(1, math.ceil(entries / len(trace)))
    if lo - (reps - 1) * shift <= 0:
        sys.exit(f"error: {reps} repetitions of a {shift / GIB:.0f} GiB address span do not fit below {lo:#x}")

    big_trace: list[dict] = []
    append = big_trace.append
    for k in range(reps):
        delta = k * shift
        dt = k * t_shift
        for e in trace:
            ne = dict(e)  # same key order; 'frames' stays the very same list object
            if own_frames and isinstance(ne.get("frames"), list):
                ne["frames"] = list(ne["frames"])
            if "addr" in ne:
                ne["addr"] = e["addr"] - delta
            if dt and "time_us" in ne:
                ne["time_us"] = e["time_us"] + dt
            append(ne)

    big_segments = []
    for k in range(reps if copy_segments else 1):
        big_segments.extend(_shift_segment(s, k * shift) for s in segments)
    big_segments.sort(key=lambda s: s["address"])

    big = dict(src)  # keeps allocator_settings / external_annotations etc. when present
    big["segments"] = big_segments
    new_traces = [[] for _ in traces]
    new_traces[dev] = big_trace
    big["device_traces"] = new_traces
    return big, reps, len(big_segments)


# --------------------------------------------------------------------------- measuring

def time_pickle_load(path: str, repeat: int) -> tuple[float, int]:
    best = math.inf
    n = 0
    for _ in range(repeat):
        gc.collect()
        with open(path, "rb") as f:
            t0 = time.perf_counter()
            obj = pickle.load(f)
            dt = time.perf_counter() - t0
        best = min(best, dt)
        traces = obj.get("device_traces") if isinstance(obj, dict) else None
        n = sum(len(t) for t in traces) if traces else 0
        del obj
        gc.collect()
    return best, n


def pickle_load_peak_rss(path: str):
    """pickle.load in a fresh Python process: its time and its peak memory (VmHWM)."""
    code = (
        "import pickle, sys, time\n"
        "t = time.perf_counter()\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    data = pickle.load(f)\n"
        "t = time.perf_counter() - t\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
        "print(t, int(hwm[0].split()[1]) * 1024 if hwm else 0)\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                             timeout=600, check=True).stdout.split()
        return {"load_s": float(out[0]), "peak_rss_bytes": int(out[1])}
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def run_vramscope(cmd: list[str], timeout: float) -> dict:
    """Run the child, return rc, stdout, stderr, wall seconds and peak RSS (KiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    first_stdout: list[float] = []

    def read_stdout():
        first = proc.stdout.read(1)
        first_stdout.append(time.perf_counter() - t0)
        out_chunks.append(first + proc.stdout.read())

    readers = [threading.Thread(target=read_stdout),
               threading.Thread(target=lambda s=proc.stderr, o=err_chunks: o.append(s.read()))]
    for r in readers:
        r.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        # wait4 reaps this very child and returns its own rusage (peak RSS of the child alone)
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    for r in readers:
        r.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # RUSAGE_CHILDREN is a max over all reaped children: it names this child only if it grew
    children_peak = after if after > before else None
    return {
        "rc": proc.returncode,
        "stdout": b"".join(out_chunks).decode("utf-8", "replace"),
        "stderr": b"".join(err_chunks).decode("utf-8", "replace"),
        "wall_s": wall,
        "first_stdout_s": first_stdout[0] if first_stdout else None,
        "peak_rss_kib": usage.ru_maxrss,
        "children_maxrss_before_kib": before,
        "children_maxrss_after_kib": after,
        "children_peak_kib": children_peak,
        "timed_out": proc.returncode == -9,
    }


def parse_json_stdout(text: str) -> dict | None:
    text = text.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
        return obj if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):  # tolerate a stray line before the JSON
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                if isinstance(obj, dict):
                    return obj
            except json.JSONDecodeError:
                continue
    start = text.find("{")
    if start >= 0:
        try:
            obj = json.loads(text[start:])
            return obj if isinstance(obj, dict) else None
        except json.JSONDecodeError:
            return None
    return None


def find_timings(obj: dict | None) -> dict:
    if not obj:
        return {}
    if isinstance(obj.get("timings_s"), dict):
        return obj["timings_s"]
    for v in obj.values():  # tolerate nesting, e.g. {"report": {..., "timings_s": {...}}}
        if isinstance(v, dict) and isinstance(v.get("timings_s"), dict):
            return v["timings_s"]
    return {}


# --------------------------------------------------------------------------- output

def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_s(x) -> str:
    return f"{x:.3f} s" if isinstance(x, (int, float)) else "n/a"


def ratio(a, b):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return a / b
    return None


def verdict(value, goal_ok) -> str:
    if value is None:
        return "n/a"
    return "PASS" if goal_ok(value) else "FAIL"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark vramscope report against pickle.load on a big snapshot.")
    ap.add_argument("--vramscope", default=os.path.join(REPO, "build", "vramscope"),
                    help="path of the vramscope binary (default: %(default)s)")
    ap.add_argument("--entries", type=int, default=1_000_000, help="minimum number of trace entries (default: 1000000)")
    ap.add_argument("--repeat", type=int, default=1, help="pickle.load runs, the best one counts (default: 1)")
    ap.add_argument("--out", help="write the big snapshot here (kept) instead of a temporary folder; it holds the source fixture's data, so keep it outside the repository")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (big pickle, report)")
    ap.add_argument("--source", help="snapshot whose trace is repeated (default: the DeepSeek fixture, else the example)")
    ap.add_argument("--no-segment-copies", action="store_true",
                    help="keep only the source's segments instead of one shifted copy per repetition")
    ap.add_argument("--own-frames", action="store_true",
                    help="give every entry a frames list of its own, as PyTorch writes them "
                         "(by default repetitions share the source's lists)")
    ap.add_argument("--skip-vramscope", action="store_true", help="only build the file and time pickle.load")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before the vramscope run is killed")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON object")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a goal is not met")
    args = ap.parse_args(argv)
    if args.entries < 1 or args.repeat < 1:
        ap.error("--entries and --repeat must be >= 1")

    binary = os.path.abspath(args.vramscope)
    if not args.skip_vramscope and not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print(f"error: vramscope binary not found or not executable: {binary}\n"
              f"       build it first (cmake -B build && cmake --build build), pass --vramscope PATH,\n"
              f"       or use --skip-vramscope to only build the file and time pickle.load.", file=sys.stderr)
        return 2

    source = find_source(args.source)
    workdir = tempfile.mkdtemp(prefix="vramscope-bench-")
    big_path = os.path.abspath(args.out) if args.out else os.path.join(workdir, "big_snapshot.pickle")
    report_path = os.path.join(workdir, "report.sqlite")
    results: dict = {"source": source, "pickle_path": big_path}
    try:
        # 1. build
        t0 = time.perf_counter()
        src = load_restricted(source)
        big, reps, n_segments = build_big(src, args.entries, not args.no_segment_copies,
                                            args.own_frames)
        n_entries = sum(len(t) for t in big["device_traces"])
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        os.makedirs(os.path.dirname(big_path) or ".", exist_ok=True)
        with open(big_path, "wb") as f:
            pickle.dump(big, f, protocol=4)
        t_dump = time.perf_counter() - t0
        del big, src
        gc.collect()
        size = os.path.getsize(big_path)
        with open(big_path, "rb") as f:  # warm the page cache for both readers
            while f.read(1 << 24):
                pass
        results.update(entries=n_entries, repetitions=reps, segments=n_segments, file_bytes=size,
                       build_s=t_build, dump_s=t_dump)
        print(f"source: {source}")
        print(f"built {n_entries:,} trace entries ({reps} repetitions), {n_segments:,} segments "
              f"in {t_build:.2f} s; pickle.dump (protocol 4) {t_dump:.2f} s -> {big_path} ({fmt_bytes(size)})",
              flush=True)

        # 2. pickle.load
        t_load, n_loaded = time_pickle_load(big_path, args.repeat)
        if n_loaded != n_entries:
            print(f"warning: pickle.load returned {n_loaded} entries, expected {n_entries}", file=sys.stderr)
        results["pickle_load_s"] = t_load
        print(f"pickle.load: {t_load:.3f} s (best of {args.repeat})", flush=True)

        # 3. vramscope
        timings: dict = {}
        run = None
        if not args.skip_vramscope:
            cmd = [binary, "report", big_path, "-o", report_path, "--force", "--quiet", "--json", "--timings"]
            print("running: " + " ".join(cmd) + f"  (best of {args.repeat}, like pickle.load)",
                  flush=True)
            run = None
            for _ in range(max(1, args.repeat)):
                attempt = run_vramscope(cmd, args.timeout)
                if run is None or attempt["rc"] != 0 or attempt["wall_s"] < run["wall_s"]:
                    run = attempt
                if attempt["rc"] != 0:
                    break
            timings = find_timings(parse_json_stdout(run["stdout"]))
            results["vramscope"] = {k: run[k] for k in ("rc", "wall_s", "peak_rss_kib", "children_maxrss_before_kib",
                                                         "children_maxrss_after_kib", "timed_out")}
            results["vramscope"]["timings_s"] = timings
            if run["rc"] != 0:
                print(f"error: vramscope exited with {run['rc']}" + (" (killed: timeout)" if run["timed_out"] else ""),
                      file=sys.stderr)
                tail = run["stderr"].strip().splitlines()[-20:]
                if tail:
                    print("stderr (last lines):\n  " + "\n  ".join(tail), file=sys.stderr)
            elif not timings:
                print("warning: no \"timings_s\" object in vramscope's JSON output; stdout began with: "
                      + repr(run["stdout"][:300]), file=sys.stderr)

            # The terminal summary is printed before the database is written: the time a user
            # waits for the answer.
            text_cmd = [binary, "report", big_path, "-o", report_path, "--force"]
            print("running: " + " ".join(text_cmd) + f"  (best of {args.repeat})", flush=True)
            text_run = None
            for _ in range(max(1, args.repeat)):
                attempt = run_vramscope(text_cmd, args.timeout)
                if attempt["rc"] != 0:
                    break
                if text_run is None or attempt["first_stdout_s"] < text_run["first_stdout_s"]:
                    text_run = attempt
            if text_run is not None:
                results["vramscope"]["summary_printed_s"] = text_run["first_stdout_s"]
                results["vramscope"]["summary_run_wall_s"] = text_run["wall_s"]
            # The summary alone (no database): its own VmHWM, as for the whole report.
            only_cmd = [binary, "report", big_path, "--json", "--summary-only", "--timings"]
            print("running: " + " ".join(only_cmd), flush=True)
            only = run_vramscope(only_cmd, args.timeout)
            if only["rc"] == 0:
                only_timings = find_timings(parse_json_stdout(only["stdout"]))
                results["vramscope"]["summary_only_peak_rss_bytes"] = only_timings.get(
                    "peak_rss_bytes")

        # 4. table
        # vramscope's "parse" stage already converts the trace entries into events while it reads
        # them; parse + build_model is the time from bytes to the complete event model, the fair
        # counterpart of pickle.load (bytes to Python objects).
        parse_s = (timings["parse"] + timings.get("build_model", 0.0)) if "parse" in timings else None
        wall_s = run["wall_s"] if run else None
        # The program's own VmHWM: ru_maxrss of a child forked from this (large) Python process
        # also counts the pages it shared with us before exec.
        rss_bytes = timings.get("peak_rss_bytes") or (
            run["peak_rss_kib"] * 1024 if run and run["peak_rss_kib"] else None)
        load_rss = pickle_load_peak_rss(big_path)
        results["pickle_load_fresh_process"] = load_rss
        r_parse = ratio(t_load, parse_s)
        r_total = ratio(t_load, wall_s)
        r_rss = ratio(rss_bytes, size)
        summary_rss = results.get("vramscope", {}).get("summary_only_peak_rss_bytes")
        rss_allowance = size + 64 * 2**20  # issue 41: at most the file's size plus 64 MiB
        summary_s = results.get("vramscope", {}).get("summary_printed_s")
        r_summary = ratio(t_load, summary_s)
        rows = [
            ("file size", fmt_bytes(size), ""),
            ("trace entries", f"{n_entries:,}", ""),
            ("pickle.load (Python)", fmt_s(t_load), f"best of {args.repeat}"),
        ]
        for k in TIMING_KEYS:
            rows.append((f"vramscope {k} (its own timing)", fmt_s(timings.get(k)), ""))
        rows.append(("vramscope parse + build_model", fmt_s(parse_s), "bytes -> complete event model"))
        rows += [
            ("vramscope total wall (measured)", fmt_s(wall_s), "process start to exit"),
            ("vramscope summary printed (text mode)", fmt_s(summary_s),
             "process start to the summary's first byte; the database is written after it"),
            ("vramscope peak RSS", fmt_bytes(rss_bytes) if rss_bytes else "n/a", "its own VmHWM"),
            ("pickle.load peak RSS", fmt_bytes(load_rss["peak_rss_bytes"]) if load_rss else "n/a",
             f"fresh process, load {load_rss['load_s']:.3f} s" if load_rss else ""),
            ("pickle.load / vramscope parse+model", f"{r_parse:.1f}x" if r_parse else "n/a",
             f"goal >= 10x   {verdict(r_parse, lambda v: v >= 10)}"),
            ("pickle.load / vramscope total wall", f"{r_total:.2f}x" if r_total else "n/a",
             f"goal > 1x     {verdict(r_total, lambda v: v > 1)}"),
            ("vramscope peak RSS, summary only", fmt_bytes(summary_rss) if summary_rss else "n/a",
             "its own VmHWM, --json --summary-only (no database)"),
            ("peak RSS / file size", f"{r_rss:.2f}x" if r_rss else "n/a", ""),
            ("peak RSS - file size", fmt_bytes(rss_bytes - size) if rss_bytes else "n/a",
             f"goal <= 64 MiB {verdict(rss_bytes, lambda v: v <= rss_allowance)}"),
            ("the same, summary only",
             fmt_bytes(summary_rss - size) if summary_rss else "n/a",
             f"goal <= 64 MiB {verdict(summary_rss, lambda v: v <= rss_allowance)}"),
            ("pickle.load / vramscope summary printed", f"{r_summary:.2f}x" if r_summary else "n/a",
             f"goal >= 5x    {verdict(r_summary, lambda v: v >= 5)}"),
        ]
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        print()
        for name, value, note in rows:
            print(f"  {name:<{w0}}  {value:>{w1}}  {note}".rstrip())
        results.update(ratio_pickle_over_parse=r_parse, ratio_pickle_over_total_wall=r_total,
                       ratio_rss_over_file=r_rss, ratio_pickle_over_summary=r_summary)
        if args.json:
            print(json.dumps(results, indent=None, sort_keys=True))

        if run and run["rc"] != 0:
            return 1
        if args.strict and run:
            ok = (all(v is not None for v in (r_parse, r_total, rss_bytes)) and r_parse >= 10
                  and r_total > 1 and rss_bytes <= rss_allowance)
            return 0 if ok else 1
        return 0
    finally:
        if args.keep:
            print(f"kept: {workdir}" + (f" and {big_path}" if args.out else ""))
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
