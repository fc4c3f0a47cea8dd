"""The HTML viewer in a real browser: Debian's Chromium, driven by Playwright (PyPI) with the
browser's path given. Pages are written by the binary under test from real inputs; the test
moves the real mouse over the real canvas.

Environment: VRAMSCOPE_CHROMIUM (default: chromium on PATH). Without Playwright or Chromium the
tests skip, unless VRAMSCOPE_REQUIRE_BROWSER=1 (as scripts/test.sh sets), when they fail."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import BUILT_IN_PATH, BUILT_IN_PEAK_ALLOCATED, REAL_FIXTURES, run_binary, watch_page

CHROMIUM = os.environ.get("VRAMSCOPE_CHROMIUM") or shutil.which("chromium") or ""
REQUIRED = os.environ.get("VRAMSCOPE_REQUIRE_BROWSER") == "1"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

if sync_playwright is None or not CHROMIUM or not os.access(CHROMIUM, os.X_OK):
    reason = "playwright (pip) and Debian's chromium are needed for the browser tests"
    if REQUIRED:
        raise RuntimeError(reason + "; scripts/test.sh installs them")
    pytestmark = pytest.mark.skip(reason=reason)

EOR = REAL_FIXTURES / "snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle"
KINETO = REAL_FIXTURES / "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz"


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, path: Path):
    """Opens a viewer page from disk; returns the page and the list of console errors."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = watch_page(page)  # nothing may be fetched from the network
    page.goto(path.as_uri())
    page.wait_for_function("window.vramscopeApp && (window.vramscopeApp.ready || "
                           "window.vramscopeApp.error)", timeout=60_000)
    assert page.evaluate("window.vramscopeApp.error || null") is None
    return page, errors


def painted_pixels(page, selector: str) -> int:
    """Pixels of a canvas that differ from its top-left corner (its background)."""
    return page.evaluate("""(sel) => {
        const c = document.querySelector(sel);
        const ctx = c.getContext('2d');
        const d = ctx.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < d.length; i += 4) {
          if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2] || d[i + 3] !== d[3]) n++;
        }
        return n;
    }""", selector)


def find_allocation_point(page):
    """Page coordinates over the timeline where the real mouse finds an allocation with a stack."""
    box = page.locator("#timeline-canvas").bounding_box()
    for fy in (0.85, 0.75, 0.65, 0.55, 0.45, 0.35):
        for fx in (0.5, 0.3, 0.7, 0.2, 0.8, 0.6, 0.4):
            x, y = box["x"] + box["width"] * fx, box["y"] + box["height"] * fy
            hit = page.evaluate("([x, y]) => window.vramscopeApp.hoverAt(x, y)", [x, y])
            if hit and hit.get("allocation") and hit["allocation"].get("frames"):
                return x, y, hit
    return None


def page_for(tmp_path, *inputs) -> Path:
    args = ["view", "-q", str(inputs[0]), "-o", "page.html"]
    if len(inputs) > 1:
        args += ["--compare", str(inputs[1])]
    code, _, err = run_binary(*args, cwd=tmp_path, timeout=300)
    assert code == 0, err
    return tmp_path / "page.html"


def real(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def test_real_snapshot_timeline_hover_and_allocator_state(browser, tmp_path):
    page, errors = open_page(browser, page_for(tmp_path, real(EOR)))
    # The timeline is drawn.
    assert painted_pixels(page, "#timeline-canvas") > 10_000
    # Hovering with the real mouse shows an allocation's size, category, owner and stack.
    found = find_allocation_point(page)
    assert found, "no allocation under the cursor anywhere on the timeline"
    x, y, hit = found
    page.mouse.move(x, y)
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible", timeout=5_000)
    text = tooltip.inner_text()
    alloc = hit["allocation"]
    assert alloc["category"] in text
    assert any(f and (f.get("function") or f.get("file")) for f in alloc["frames"])
    # The stack's innermost frame is in the tooltip.
    first = next(f for f in alloc["frames"] if f and (f.get("function") or f.get("file")))
    assert (first.get("function") or first.get("file"))[:20] in text
    # Clicking a moment shows the segments live then, with their blocks.
    page.mouse.click(x, y)
    page.wait_for_timeout(200)
    segments = page.locator("#allocator-view .segment")
    assert segments.count() >= 1
    assert page.locator("#allocator-view .blk").count() >= 1
    when = page.locator("#alloc-when").inner_text()
    assert str(hit["event"]) in when.replace(",", "")
    # At the peak: the breakdown, the owners and a non-blank icicle graph.
    assert page.locator("#category-table tr").count() >= 2
    assert page.locator("#owner-table tr").count() >= 2
    assert painted_pixels(page, "#icicle-canvas") > 1_000
    # Zooming with the wheel narrows the visible events.
    before = page.evaluate("window.vramscopeApp.timeline.eventRange()")
    page.mouse.move(x, y)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(200)
    after = page.evaluate("window.vramscopeApp.timeline.eventRange()")
    assert after[1] - after[0] < before[1] - before[0]
    assert errors == []


def test_built_in_example_peak_is_shown(browser, tmp_path):
    code, _, err = run_binary("view", "-q", "-o", "example.html", cwd=tmp_path)
    assert code == 0, err
    page, errors = open_page(browser, tmp_path / "example.html")
    summary = page.locator("#summary-line").inner_text()
    peak_mib = f"{BUILT_IN_PEAK_ALLOCATED / 2**20:.2f}"
    assert peak_mib in summary
    assert painted_pixels(page, "#timeline-canvas") > 10_000
    assert errors == []


def test_profiler_trace_page_without_segments(browser, tmp_path):
    page, errors = open_page(browser, page_for(tmp_path, real(KINETO)))
    assert painted_pixels(page, "#timeline-canvas") > 10_000
    box = page.locator("#timeline-canvas").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_timeout(200)
    # A profiler trace records no segments: the view says so and lists the live blocks.
    assert "segment" in page.locator("#allocator-view").inner_text().lower()
    assert errors == []


def test_compare_view_shows_two_reports(browser, tmp_path):
    code, _, err = run_binary("report", "-q", "-o", "a.sqlite", cwd=tmp_path)
    assert code == 0, err
    other = real(EOR)
    page, errors = open_page(browser, page_for(tmp_path, tmp_path / "a.sqlite", other))
    view = page.locator("#compare-view")
    assert view.is_visible()
    heads = view.locator(".compare-head")
    assert heads.count() == 2
    assert "built-in example" in heads.nth(0).inner_text()
    assert other.name in heads.nth(1).inner_text()
    table = page.locator("#compare-table").inner_text()
    for category in ("weight", "gradient", "activation"):
        assert category in table
    assert painted_pixels(page, "#compare-canvas-a") > 1_000
    assert painted_pixels(page, "#compare-canvas-b") > 1_000
    assert errors == []


def test_damaged_page_shows_one_clear_error(browser, tmp_path):
    code, _, err = run_binary("view", "-q", "-o", "page.html", cwd=tmp_path)
    assert code == 0, err
    html = (tmp_path / "page.html").read_text()
    start = html.index('id="vramscope-data">') + len('id="vramscope-data">')
    end = html.index("</script>", start)
    cut = html[:start] + html[start:start + (end - start) // 2] + html[end:]
    (tmp_path / "cut.html").write_text(cut)
    page = browser.new_page()
    page.goto((tmp_path / "cut.html").as_uri())
    page.wait_for_function("window.vramscopeApp && window.vramscopeApp.error", timeout=30_000)
    message = page.locator("#error")
    assert message.is_visible()
    assert len(message.inner_text().strip()) > 10


def test_region_bands_under_the_axis_name_their_bytes_on_hover(browser, tmp_path):
    # The built-in example's recording carries 50 external annotations (vramscope::forward#1,
    # Optimizer.step#Adam.step, ...): they are drawn as bands under the time axis.
    page, errors = open_page(browser, page_for(tmp_path, BUILT_IN_PATH))
    rows = page.evaluate("window.vramscopeApp.timeline.model.regionRows")
    assert rows >= 2  # the vramscope:: phases and the optimizer's ranges inside them
    box = page.locator("#timeline-canvas").bounding_box()
    plot = page.evaluate("(() => { const t = window.vramscopeApp.timeline; const p = t.plot(); "
                         "return [p.x, p.w, t.regionBandsTop(p)]; })()")
    found = None
    for step in range(1, 200):
        x = box["x"] + plot[0] + plot[1] * step / 200
        y = box["y"] + plot[2] + 3  # inside the first row's bar
        hit = page.evaluate("([x, y]) => window.vramscopeApp.hoverAt(x, y)", [x, y])
        if hit and hit.get("kind") == "region":
            found = (x, y, hit["region"])
            break
    assert found, "no region band under the axis"
    x, y, region = found
    page.mouse.move(x, y)
    tooltip = page.locator("#tooltip")
    tooltip.wait_for(state="visible", timeout=5_000)
    text = tooltip.inner_text()
    assert region["name"] in text
    assert "live at peak" in text and "over the trace" in text
    assert errors == []


def test_ranks_side_by_side(browser, tmp_path):
    """A capture folder of three ranks (real H200 goldens laid out as `vramscope run` writes
    them): the page shows every rank with its peaks, each step's peak, and why the bounding rank
    bounds the job, with the same figures as `report FOLDER --json`."""
    from test_run_cli import make_capture

    runs = tmp_path / "runs"
    runs.mkdir()
    make_capture(runs, "mlp_sgd_fp32", "rank0", 0, 3)
    make_capture(runs, "mlp_adam_fp32", "rank1", 1, 3)
    make_capture(runs, "mlp_sgd_fp32", "rank2", 2, 3)
    code, out, err = run_binary("report", "runs", "--json", cwd=tmp_path)
    assert code == 0, err
    summary = json.loads(out)
    page, errors = open_page(browser, page_for(tmp_path, runs))
    view = page.locator("#ranks-view")
    assert view.is_visible() and page.locator("#nav-ranks").is_visible()
    # The page holds what --json gives, and draws it.
    ranks = page.evaluate("window.vramscopeApp.data.reports[0].ranks")
    assert ranks["table"] == summary["ranks"]
    assert ranks["compared"] == summary["ranks_compared"]
    rows = view.locator("table.ranks tbody tr")
    assert rows.count() == 3
    assert [rows.nth(i).get_attribute("data-label") for i in range(3)] == ["rank0", "rank1",
                                                                          "rank2"]
    bounding = view.locator("tr.bounding")
    assert bounding.get_attribute("data-label") == "rank1"
    assert "226.10 MiB" in bounding.inner_text() and "230.00 MiB" in bounding.inner_text()
    # Three steps each; rank1 holds every step's highest peak.
    assert view.locator("tr[data-label=rank0] .cell").count() == 3
    assert view.locator("tr[data-label=rank1] .cell.top").count() == 3
    why = view.locator(".why").inner_text()
    assert "Why rank1 bounds the job" in why
    assert "95.06 MiB above the median of the 2 other rank(s) (131.04 MiB)" in why
    assert "optimizer_state +64.04 MiB, temporary +31.52 MiB" in why
    assert "fc1.weight.exp_avg_sq" in why
    assert errors == []


def test_traced_ranks_side_by_side(browser, tmp_path):
    """`predict --all-ranks` of a pipeline of your own (pp_gpt.py, two stages traced): its report
    database carries every rank's row as a capture folder's does, so the page shows the stages
    side by side, the last one bounding the job by its head."""
    python = os.environ.get("VRAMSCOPE_TORCH_PYTHON")
    if not python:
        pytest.skip("no Python with torch for the tracer (VRAMSCOPE_TORCH_PYTHON)")
    model = Path(__file__).resolve().parents[2] / "examples" / "distributed" / "pp_gpt.py"
    code, _, err = run_binary("predict", "--model", f"{model}:build", "--world-size", "2",
                              "--all-ranks", "--batch", "8", "--seq", "256", "--python", python,
                              "-q", "-o", "ranks.sqlite", cwd=tmp_path, timeout=900)
    assert code == 0, err
    page, errors = open_page(browser, page_for(tmp_path, tmp_path / "ranks.sqlite"))
    view = page.locator("#ranks-view")
    assert view.is_visible()
    rows = view.locator("table.ranks tbody tr")
    assert [rows.nth(i).get_attribute("data-label") for i in range(rows.count())] == ["rank0",
                                                                                    "rank1"]
    assert view.locator("tr.bounding").get_attribute("data-label") == "rank1"
    why = view.locator(".why").inner_text()
    assert "Why rank1 bounds the job" in why and "lm_head" in why, why
    assert errors == []


def test_a_single_report_has_no_ranks_view(browser, tmp_path):
    code, _, err = run_binary("view", "-q", "-o", "example.html", cwd=tmp_path)
    assert code == 0, err
    page, errors = open_page(browser, tmp_path / "example.html")
    assert page.locator("#ranks-view").is_hidden()
    assert page.locator("#nav-ranks").is_hidden()
    assert page.evaluate("window.vramscopeApp.data.reports[0].ranks") is None
    assert errors == []
