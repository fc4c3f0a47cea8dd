#!/usr/bin/env python3
"""Measures the two ways the Python API could reach the C++ core (docs/design/python-api.md):

- native: a nanobind extension module linking the pipeline (native_module.cc), built with
  -DVRAMSCOPE_BUILD_API_PROTOTYPE=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON (a Release build);
- json: the package ``vramscope`` driving the ``vramscope`` program through its versioned JSON
  and reading the bulk arrays back from the report database (python/vramscope/).

Figures, each in its own fresh Python so that one's memory does not count for the other:
call overhead (the smallest call), the built-in example's report, a 1M-entry snapshot's report
with its timeline and allocations in Python, and the peak memory of the calling process (plus the
program's, for the json route); the module's and the program's stripped sizes; their build time
from the build's .ninja_log (the sum of every compile and link each target needs: the serial
cost, which a 2-core machine halves at best).

Usage:
    python3 bench/api_prototype/measure.py --build BUILD [--big SNAPSHOT] [--json]
BUILD is the prototype's build folder (holding vramscope and bench/vramscope_native_proto*.so).
--big: the 1M-entry snapshot (default: made by bench/report_vs_pickle.py --skip-vramscope).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NATIVE_CHILD = r"""
import json, resource, sys, time, timeit
sys.path.insert(0, sys.argv[1])
import numpy  # imported by the module's first array anyway: not counted in the first call
import vramscope_native_proto as m
big = sys.argv[2]
out = {}
n = 20000
out["call_s"] = timeit.timeit(m.explain_nothing, number=n) / n
t = time.perf_counter(); r = m.report(""); out["example_s"] = time.perf_counter() - t
t = time.perf_counter(); r = m.report(big)
out["big_s"] = time.perf_counter() - t
out["big_points"] = int(r["allocated"].shape[0])
out["big_peak"] = int(r["peak_allocated"])
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

JSON_CHILD = r"""
import json, resource, sys, time, timeit
sys.path.insert(0, sys.argv[1])
import vramscope
from vramscope import _engine
big = sys.argv[2]
out = {}
n = 50
out["call_s"] = timeit.timeit(lambda: _engine.run_engine(["--version"]), number=n) / n
t = time.perf_counter(); r = vramscope.report(); out["example_s"] = time.perf_counter() - t
t = time.perf_counter(); vramscope.report(big, database=False)
out["big_summary_s"] = time.perf_counter() - t
t = time.perf_counter(); r = vramscope.report(big)
out["big_report_s"] = time.perf_counter() - t
t = time.perf_counter(); timeline = r.timeline(); allocations = r.allocations()
out["big_arrays_s"] = time.perf_counter() - t
out["big_s"] = out["big_report_s"] + out["big_arrays_s"]
out["big_points"] = len(timeline.allocated)
out["big_allocations"] = len(allocations)
out["big_peak"] = r.device().peak_allocated.bytes
out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["engine_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(out))
"""


def child(code: str, *args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"measure.py: a measuring process failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def stripped_size(path: str) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "x")
        shutil.copy(path, copy)
        subprocess.run(["strip", copy], check=True)
        return os.path.getsize(copy)


def build_seconds(build: str, target: str) -> float:
    """The sum of the durations .ninja_log records for `target` and every output it depends on
    (`ninja -t inputs` lists them all, recursively)."""
    deps = subprocess.run(["ninja", "-C", build, "-t", "inputs", target], capture_output=True,
                          text=True, check=True).stdout.split()
    wanted = {os.path.normpath(d) for d in deps} | {target}
    total_ms = 0
    last: dict[str, int] = {}
    with open(os.path.join(build, ".ninja_log")) as log:
        for line in log:
            if line.startswith("#"):
                continue
            start, end, _, output, _ = line.rstrip("\n").split("\t")
            last[os.path.normpath(output)] = int(end) - int(start)
    for output, ms in last.items():
        if output in wanted:
            total_ms += ms
    return total_ms / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--big")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    modules = glob.glob(os.path.join(a.build, "bench", "vramscope_native_proto*.so"))
    binary = os.path.join(a.build, "vramscope")
    if not modules or not os.access(binary, os.X_OK):
        sys.exit(f"measure.py: {a.build} lacks the prototype module or the program; build it as "
                 "this file's docstring says")
    big = a.big
    if not big:
        big = os.path.join(tempfile.mkdtemp(), "big.pickle")
        subprocess.run([sys.executable, os.path.join(REPO, "bench", "report_vs_pickle.py"),
                        "--skip-vramscope", "--out", big], check=True, capture_output=True)
    env = dict(os.environ, VRAMSCOPE_BIN=binary)
    native = child(NATIVE_CHILD, os.path.dirname(modules[0]), big, env=env)
    via_json = child(JSON_CHILD, os.path.join(REPO, "python"), big, env=env)
    sizes = {"module_stripped": stripped_size(modules[0]), "program_stripped":
             stripped_size(binary)}
    module_target = os.path.relpath(modules[0], a.build)
    builds = {"module_s": build_seconds(a.build, module_target),
              "program_s": build_seconds(a.build, "vramscope")}
    result = {"native": native, "json": via_json, "sizes": sizes, "build": builds}
    if a.json:
        print(json.dumps(result, indent=1))
        return
    mib = 1 << 20
    print(f"{'':34} {'native (nanobind)':>18} {'json (program)':>16} {'ratio':>8}")
    rows = [("call overhead (smallest call)", native["call_s"] * 1e6, via_json["call_s"] * 1e6,
             "us"),
            ("built-in example report", native["example_s"] * 1e3, via_json["example_s"] * 1e3,
             "ms"),
            ("1M-entry report + arrays", native["big_s"], via_json["big_s"], "s"),
            ("caller's peak RSS", native["rss_mib"], via_json["rss_mib"], "MiB")]
    for name, n, j, unit in rows:
        print(f"{name:34} {n:15.2f} {unit:>3}{j:13.2f} {unit:>3}{j / n:8.1f}x")
    print(f"json route: the program's own peak RSS {via_json['engine_rss_mib']:.0f} MiB; "
          f"report {via_json['big_report_s']:.2f} s + arrays {via_json['big_arrays_s']:.2f} s "
          f"({via_json['big_allocations']:,} allocations, {via_json['big_points']:,} timeline "
          f"points; native: {native['big_points']:,}); the summary alone (database=False) "
          f"{via_json['big_summary_s']:.2f} s")
    print(f"sizes (stripped): module {sizes['module_stripped'] / mib:.1f} MiB, program "
          f"{sizes['program_stripped'] / mib:.1f} MiB")
    print(f"build (serial seconds from .ninja_log): module {builds['module_s']:.0f} s, program "
          f"{builds['program_s']:.0f} s")
    if native["big_peak"] != via_json["big_peak"]:
        sys.exit("measure.py: the two routes disagree on the peak")


if __name__ == "__main__":
    main()
