"""vramscope in a real Jupyter notebook (nbclient, an ipykernel of this Python): a report and a
prediction render inline as their summary and the self-contained viewer, which then loads in
Chromium with no network and no console error; a page over the inline limit becomes a link.
The %%vramscope capture magic runs in tests/capture/test_inprocess.py (it needs torch)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import BIN, REPO, watch_page

CHROMIUM = os.environ.get("VRAMSCOPE_CHROMIUM") or shutil.which("chromium") or ""
REQUIRED = os.environ.get("VRAMSCOPE_REQUIRE_BROWSER") == "1"

try:
    import nbformat
    from nbclient import NotebookClient
    from playwright.sync_api import sync_playwright
except ImportError as e:  # pragma: no cover - depends on the machine
    if REQUIRED:
        raise RuntimeError(f"{e}: scripts/test.sh installs nbclient, ipykernel and playwright")
    pytestmark = pytest.mark.skip(reason=f"{e}")

CELLS = [
    "import vramscope\nr = vramscope.report()\nr",
    "%load_ext vramscope",
    "%vramscope predict --model gpt2 --batch 2 --seq 128",
    "import vramscope._notebook as nb\nnb.MAX_INLINE_BYTES = 1000\nvramscope.report()",
]


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("PYTHONPATH", str(REPO / "python"))
    monkeypatch_module.setenv("VRAMSCOPE_BIN", str(BIN))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    work = tmp_path_factory.mktemp("notebook")
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(work)}}).execute()
    return nb, work


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def html_of(nb, index):
    [out] = [o for o in nb.cells[index].outputs if o.get("output_type") == "execute_result"]
    return out["data"]["text/html"]


def test_results_render_inline_with_the_viewer(notebook):
    nb, _ = notebook
    report, prediction = html_of(nb, 0), html_of(nb, 2)
    assert "peak allocated 226.10 MiB" in report and "<iframe" in report
    assert "predicted" in prediction and "<iframe" in prediction
    for page in (report, prediction):
        assert len(page.encode()) <= 5 << 20
        assert "http://" not in page and "https://" not in page  # nothing from any URL


def test_a_page_over_the_limit_is_a_link(notebook):
    nb, _ = notebook
    page = html_of(nb, 3)
    assert "<iframe" not in page
    assert "more than a notebook should carry" in page and "<a href='file://" in page


def test_the_inline_viewers_load_offline_in_chromium(notebook, tmp_path):
    if not CHROMIUM or not os.access(CHROMIUM, os.X_OK):
        if REQUIRED:
            pytest.fail("Debian's chromium is needed (scripts/install-deps.sh --test)")
        pytest.skip("no chromium")
    nb, _ = notebook
    page_file = tmp_path / "notebook.html"
    page_file.write_text("<!doctype html><html><body>" + html_of(nb, 0) + html_of(nb, 2) +
                         "</body></html>")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors = watch_page(page)
        page.goto(page_file.as_uri())
        frames = [f for f in page.frames if f != page.main_frame]
        states = []
        for frame in frames:
            frame.wait_for_function("window.vramscopeApp && (window.vramscopeApp.ready || "
                                    "window.vramscopeApp.error)", timeout=60_000)
            states.append(frame.evaluate("[window.vramscopeApp.ready === true, "
                                         "window.vramscopeApp.error || null]"))
        browser.close()
    assert len(frames) == 2 and states == [[True, None], [True, None]], json.dumps(states)
    assert errors == []
