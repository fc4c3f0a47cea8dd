#!/usr/bin/env python3
"""Screenshots of each view of the HTML viewer, for docs/viewer/ (what a reader of the README sees).

    python3 scripts/viewer_screenshots.py [--vramscope build/vramscope] [--out docs/viewer]

Pages come from the built-in example (a real H200 capture) and, when ../shared/fixtures/real is
present, the DeepSeek fine-tuning snapshot (for the timeline, the allocator state and the peak) and
a comparison of the two. Needs playwright (pip) and Debian's chromium."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VRAMSCOPE_SHARED_DIR", REPO.parent / "shared"))
DEEPSEEK = SHARED / "fixtures/real/snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", default=str(REPO / "build" / "vramscope"))
    ap.add_argument("--out", default=str(REPO / "docs" / "viewer"))
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vramscope-shots-"))
    real = DEEPSEEK if DEEPSEEK.is_file() else None
    subject = str(real) if real else ""
    run = lambda *a: subprocess.run([args.vramscope, *a], cwd=work, check=True,
                                    capture_output=True)
    run("view", "-q", *([subject] if subject else []), "-o", "main.html")
    run("report", "-q", "-o", "example.sqlite")
    if real:
        run("view", "-q", "example.sqlite", "--compare", subject, "-o", "compare.html")

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, headless=True,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        page.goto((work / "main.html").as_uri())
        page.wait_for_function("window.vramscopeApp && window.vramscopeApp.ready")
        # Timeline, hovering an allocation near the peak.
        box = page.locator("#timeline-canvas").bounding_box()
        peak = page.evaluate("window.vramscopeApp.device.summary.peak_event")
        events = page.evaluate("window.vramscopeApp.device.events")
        page.evaluate("([a, b]) => window.vramscopeApp.zoomTo(a, b)",
                      [max(0, peak - events // 6), min(events, peak + events // 6)])
        for fy in (0.8, 0.7, 0.6, 0.5):
            x, y = box["x"] + box["width"] * 0.5, box["y"] + box["height"] * fy
            hit = page.evaluate("([x, y]) => window.vramscopeApp.hoverAt(x, y)", [x, y])
            if hit and hit.get("allocation"):
                break
        page.mouse.move(x, y)
        page.wait_for_timeout(300)
        page.screenshot(path=str(out / "timeline.png"),
                        clip={"x": 0, "y": 0, "width": 1400, "height": 900})
        # The allocator's state at the peak.
        page.mouse.move(0, 0)
        page.evaluate("(e) => window.vramscopeApp.selectEvent(e)", peak)
        page.wait_for_timeout(200)
        page.locator("#allocator-view").screenshot(path=str(out / "allocator.png"))
        page.locator("#peak-view").screenshot(path=str(out / "peak.png"))
        if real:
            page.goto((work / "compare.html").as_uri())
            page.wait_for_function("window.vramscopeApp && window.vramscopeApp.ready")
            page.locator("#compare-view").screenshot(path=str(out / "compare.png"))
        browser.close()
    for png in sorted(out.glob("*.png")):
        print(f"{png} ({png.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
