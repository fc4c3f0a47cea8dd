#!/usr/bin/env python3
"""Benchmark: the HTML viewer on a generated report of one million allocations, in headless
Chromium.

Steps:

1. Build a big snapshot of >= ``--allocations`` allocations by repeating a real trace (the
   DeepSeek fixture when ``../shared`` has it, else the built-in example), exactly as
   ``bench/report_vs_pickle.py`` does (same code, imported).
2. ``vramscope report BIG.pickle -o BIG.sqlite`` then ``vramscope view BIG.sqlite -o BIG.html``
   (both timed; the page's size is printed).
3. Open the page from disk in headless Chromium (Debian's ``chromium``, driven by Playwright from
   PyPI) and read what the page measures itself (``window.vramscopeApp``):
   - time to first render: from navigation start to the end of the first complete render
     (``firstRenderMs``), and the wall time until the page says it is ready;
   - frame time while zooming: 60 zoom steps from the whole trace down to a few hundred events
     around the peak, then 60 pan steps, each step one rendered frame (``frameTimes``).
4. Print a table against the goals (first render < 3 s, frames < 16 ms).

The peer the issue names, pytorch.org/memory_viz, cannot run here: its page imports MemoryViz.js
and d3 from CDNs, and this machine reaches neither (docs/benchmarks.md says more).

Usage:
    python3 bench/viewer_render.py [--vramscope build-release/vramscope] [--allocations N]
        [--chromium /usr/bin/chromium] [--keep DIR] [--json]
Needs: playwright (pip) and Debian's chromium.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import report_vs_pickle as big_maker  # noqa: E402  (the same generator as the report benchmark)

FIRST_RENDER_GOAL_MS = 3000.0
FRAME_GOAL_MS = 16.0


def build_snapshot(allocations: int, out: Path) -> int:
    source = big_maker.find_source(None)
    src = big_maker.load_restricted(source)
    traces = src.get("device_traces") or []
    trace = max(traces, key=len)
    allocs = sum(1 for e in trace if e.get("action") == "alloc")
    entries = math.ceil(allocations / max(1, allocs)) * len(trace)
    big, reps, _ = big_maker.build_big(src, entries, copy_segments=True)
    with open(out, "wb") as f:
        pickle.dump(big, f, protocol=4)
    return reps * allocs


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{proc.stderr}")
    return time.perf_counter() - t0


def measure_page(page_path: Path, chromium: str) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        t0 = time.perf_counter()
        page.goto(page_path.as_uri())
        page.wait_for_function("window.vramscopeApp && window.vramscopeApp.ready === true",
                               timeout=120_000)
        ready_wall_ms = (time.perf_counter() - t0) * 1000
        first_render_ms = page.evaluate("window.vramscopeApp.firstRenderMs")
        events = page.evaluate("window.vramscopeApp.device ? window.vramscopeApp.device.events : "
                               "window.vramscopeApp.events")
        peak = page.evaluate("(() => { const a = window.vramscopeApp; "
                             "const d = a.device || {}; return (d.summary && d.summary.peak_event)"
                             " || 0; })()")
        # Zoom from the whole trace to ~400 events around the peak, one rendered frame a step;
        # then pan across the trace at that zoom.
        frames = page.evaluate(
            """async ([events, peak]) => {
              const app = window.vramscopeApp;
              const frame = () => new Promise(r => requestAnimationFrame(() => r()));
              const zoom = [], pan = [];
              const steps = 60;
              for (let i = 0; i <= steps; i++) {
                const w = Math.max(400, events * Math.pow(400 / events, i / steps));
                const e0 = Math.max(0, Math.min(events - w, peak - w / 2));
                app.zoomTo(e0, e0 + w);
                await frame(); await frame();
                zoom.push(app.lastFrameMs);
              }
              const w = Math.max(400, events / 50);
              for (let i = 0; i <= steps; i++) {
                const e0 = (events - w) * i / steps;
                app.zoomTo(e0, e0 + w);
                await frame(); await frame();
                pan.push(app.lastFrameMs);
              }
              return {zoom, pan};
            }""", [events, peak])
        browser.close()
    zoom = [f for f in frames["zoom"] if f is not None]
    pan = [f for f in frames["pan"] if f is not None]
    every = zoom + pan

    def p95(xs):
        return sorted(xs)[max(0, math.ceil(0.95 * len(xs)) - 1)] if xs else float("nan")

    return {"ready_wall_ms": ready_wall_ms, "first_render_ms": first_render_ms,
            "events": events, "frames": len(every),
            "zoom_median_ms": statistics.median(zoom) if zoom else None,
            "zoom_p95_ms": p95(zoom), "zoom_max_ms": max(zoom) if zoom else None,
            "pan_median_ms": statistics.median(pan) if pan else None,
            "pan_p95_ms": p95(pan), "pan_max_ms": max(pan) if pan else None,
            "console_errors": errors}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build-release" / "vramscope"))
    ap.add_argument("--allocations", type=int, default=1_000_000)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--keep", help="write the snapshot, report and page into this folder")
    ap.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = ap.parse_args()
    if not os.access(args.vramscope, os.X_OK):
        sys.exit(f"error: {args.vramscope} is not an executable; build it first "
                 "(cmake --build build-release)")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="vramscope-viewer-"))
    work.mkdir(parents=True, exist_ok=True)
    snap, db, html = work / "big.pickle", work / "big.sqlite", work / "big.html"
    made = build_snapshot(args.allocations, snap)
    report_s = timed([args.vramscope, "report", "-q", "--force", str(snap), "-o", str(db)])
    view_s = timed([args.vramscope, "view", "-q", "--force", str(db), "-o", str(html)])
    result = measure_page(html, args.chromium)
    with sqlite3.connect(db) as con:
        (allocations,) = con.execute("SELECT COUNT(*) FROM vramscope_allocations").fetchone()
    result.update({"allocations": allocations, "page_bytes": html.stat().st_size,
                   "report_s": report_s, "view_s": view_s})

    def ok(value, goal):
        return "ok" if value is not None and value < goal else "MISSED"

    worst_frame = max(result["zoom_p95_ms"], result["pan_p95_ms"])
    print(f"viewer on {result['allocations']:,} allocations ({made:,} alloc entries repeated, "
          f"{result['events']:,} events), "
          f"page {result['page_bytes'] / 2**20:.1f} MiB")
    print(f"  vramscope report            {report_s:8.2f} s")
    print(f"  vramscope view              {view_s:8.2f} s")
    print(f"  first render                {result['first_render_ms']:8.0f} ms   goal < 3000 ms   "
          f"{ok(result['first_render_ms'], FIRST_RENDER_GOAL_MS)}")
    print(f"  page ready (wall)           {result['ready_wall_ms']:8.0f} ms")
    print(f"  zoom frame median/p95/max   {result['zoom_median_ms']:.2f} / "
          f"{result['zoom_p95_ms']:.2f} / {result['zoom_max_ms']:.2f} ms")
    print(f"  pan frame median/p95/max    {result['pan_median_ms']:.2f} / "
          f"{result['pan_p95_ms']:.2f} / {result['pan_max_ms']:.2f} ms")
    print(f"  frames p95 (worst of both)  {worst_frame:8.2f} ms   goal < 16 ms     "
          f"{ok(worst_frame, FRAME_GOAL_MS)}")
    print(f"  console errors              {len(result['console_errors'])}")
    print("  peer (pytorch.org/memory_viz): not runnable offline (CDN imports); no ratio")
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
