"""End-to-end tests of `vramscope view` and `vramscope report --html`: the page is one
self-contained file, its embedded blob has the documented layout (docs/design/viewer.md) and
agrees with the report it came from, and every bad input gets one clear line and a non-zero exit.
The page's behaviour in a real browser is tested in test_viewer_browser.py."""

from __future__ import annotations

import array
import base64
import gzip
import json
import re
import sqlite3
import struct
import sys
from pathlib import Path

import pytest

from conftest import (BUILT_IN_ALLOCS, BUILT_IN_EVENTS, BUILT_IN_PEAK_ALLOCATED, ERROR_PREFIX,
                      REAL_FIXTURES, run_binary)

TYPES = {"f64": "d", "i32": "i", "u32": "I", "u8": "B", "i8": "b"}


def decode_page(path: Path) -> tuple[dict, list]:
    """The header and the columns of the blob embedded in a viewer page."""
    html = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/octet-stream" id="vramscope-data">([A-Za-z0-9+/=]*)'
                      r'</script>', html)
    assert match, "the page embeds no data"
    raw = gzip.decompress(base64.b64decode(match.group(1)))
    assert raw[:4] == b"VSV1"
    (length,) = struct.unpack("<I", raw[4:8])
    header = json.loads(raw[8:8 + length])
    binary = (8 + length + 7) // 8 * 8
    columns = []
    for c in header["columns"]:
        assert c["offset"] % 8 == 0
        values = array.array(TYPES[c["type"]])
        start = binary + c["offset"]
        values.frombytes(raw[start:start + values.itemsize * c["length"]])
        if sys.byteorder != "little":
            values.byteswap()
        assert len(values) == c["length"]
        columns.append(values)
    return header, columns


def col(columns, ref):
    return columns[ref["col"]]


def assert_self_contained(path: Path):
    html = path.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>")
    # Nothing is fetched: no external scripts, stylesheets, images or fonts.
    assert not re.search(r'<script[^>]*\ssrc=', html, re.I)
    assert not re.search(r'<link[^>]*\shref=', html, re.I)
    assert not re.search(r'(src|href)=["\']?https?:', html, re.I)
    assert not re.search(r'@import|url\(\s*["\']?https?:', html, re.I)


def test_built_in_example_page(tmp_path):
    code, out, err = run_binary("view", "-o", "example.html", cwd=tmp_path)
    assert code == 0, err
    assert "viewer written to example.html" in out
    page = tmp_path / "example.html"
    assert_self_contained(page)
    header, columns = decode_page(page)
    assert header["format"] == 1
    assert [r["title"] for r in header["reports"]] == ["built-in example"]
    report = header["reports"][0]
    assert report["categories"] == ["weight", "gradient", "optimizer_state", "activation", "input",
                                    "workspace", "temporary", "unknown"]
    (device,) = report["devices"]
    allocs = device["allocations"]
    assert allocs["count"] == BUILT_IN_ALLOCS
    assert device["events"] == BUILT_IN_EVENTS
    assert device["summary"]["peak_allocated"] == BUILT_IN_PEAK_ALLOCATED
    # The finest level of the built-in example is exact: its highest bucket is the peak.
    fine = device["lod"]["levels"][0]
    assert fine["bucket"] == 1
    assert max(col(columns, fine["allocated"])) == BUILT_IN_PEAK_ALLOCATED
    # Allocations are sorted by the event that makes them live, and every one sits in a segment.
    starts = col(columns, allocs["start"])
    assert list(starts) == sorted(starts)
    assert device["segments"]["source"] == "recorded"
    assert min(col(columns, allocs["segment"])) >= 0
    # Stacks hang from node 0 and parents come first.
    parents = col(columns, report["stacks"]["parent"])
    assert parents[0] == 0 and all(p < i for i, p in enumerate(parents) if i > 0)


def test_view_of_a_report_database_equals_view_of_its_input(tmp_path):
    assert run_binary("report", "-q", "-o", "r.sqlite", cwd=tmp_path)[0] == 0
    assert run_binary("view", "-q", "r.sqlite", "-o", "a.html", cwd=tmp_path)[0] == 0
    assert run_binary("view", "-q", "-o", "b.html", cwd=tmp_path)[0] == 0
    a, a_cols = decode_page(tmp_path / "a.html")
    b, b_cols = decode_page(tmp_path / "b.html")
    assert a == b
    assert a_cols == b_cols


def test_report_html_writes_both(tmp_path):
    code, out, err = run_binary("report", "-o", "r.sqlite", "--html", "r.html", cwd=tmp_path)
    assert code == 0, err
    assert "viewer written to r.html" in out
    assert (tmp_path / "r.sqlite").is_file()
    header, _ = decode_page(tmp_path / "r.html")
    summary = header["reports"][0]["devices"][0]["summary"]
    assert summary["peak_allocated"] == BUILT_IN_PEAK_ALLOCATED
    # With --summary-only, the page is still written and no database is left behind.
    code, _, err = run_binary("report", "--summary-only", "-q", "--html", "s.html", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "s.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.sqlite", "s.html"]


def test_compare_embeds_two_reports(tmp_path):
    assert run_binary("report", "-q", "-o", "r.sqlite", cwd=tmp_path)[0] == 0
    code, _, err = run_binary("view", "-q", "r.sqlite", "--compare", "r.sqlite", "-o", "c.html",
                              "--title", "before <vs> after", cwd=tmp_path)
    assert code == 0, err
    header, _ = decode_page(tmp_path / "c.html")
    assert len(header["reports"]) == 2
    html = (tmp_path / "c.html").read_text()
    # The title is the user's text: escaped, never markup.
    assert "before &lt;vs&gt; after" in html and "before <vs> after" not in html


def bad(tmp_path, *args) -> str:
    code, out, err = run_binary(*args, cwd=tmp_path)
    assert code != 0, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), err
    return lines[0]


def test_bad_inputs_get_one_clear_line(tmp_path):
    assert "no-such.sqlite" in bad(tmp_path, "view", "no-such.sqlite", "-o", "x.html")
    # A SQLite file that is not a report.
    con = sqlite3.connect(tmp_path / "other.sqlite")
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    line = bad(tmp_path, "view", "other.sqlite", "-o", "x.html")
    assert "not a vramscope report" in line and "vramscope report" in line
    # A damaged report: the header of a real one with the rest cut off.
    assert run_binary("report", "-q", "-o", "r.sqlite", cwd=tmp_path)[0] == 0
    data = (tmp_path / "r.sqlite").read_bytes()
    (tmp_path / "cut.sqlite").write_bytes(data[: len(data) // 3])
    assert "cut.sqlite" in bad(tmp_path, "view", "cut.sqlite", "-o", "x.html")
    # An output that exists is kept unless --force.
    (tmp_path / "exists.html").write_text("mine")
    assert "exists.html" in bad(tmp_path, "view", "r.sqlite", "-o", "exists.html")
    assert (tmp_path / "exists.html").read_text() == "mine"
    # A folder as output; a second input that is bad.
    bad(tmp_path, "view", "r.sqlite", "-o", str(tmp_path))
    assert "nope.pickle" in bad(tmp_path, "view", "r.sqlite", "--compare", "nope.pickle",
                                "-o", "y.html")
    # Nothing half-written was left.
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "y.html").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def real_inputs():
    if not REAL_FIXTURES.is_dir():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{REAL_FIXTURES} is absent"))]
    files = sorted(p for p in REAL_FIXTURES.iterdir()
                   if p.suffix in (".pickle", ".gz") and not p.name.startswith("."))
    return [pytest.param(p, id=p.name) for p in files]


@pytest.mark.parametrize("fixture", real_inputs())
def test_real_fixture_pages_agree_with_their_report(tmp_path, fixture):
    code, _, err = run_binary("report", "-q", str(fixture), "-o", "r.sqlite", "--html", "r.html",
                              cwd=tmp_path, timeout=300)
    assert code == 0, err
    assert_self_contained(tmp_path / "r.html")
    header, columns = decode_page(tmp_path / "r.html")
    con = sqlite3.connect(tmp_path / "r.sqlite")
    devices = dict(con.execute("SELECT device, peak_allocated_bytes FROM vramscope_devices"))
    report = header["reports"][0]
    assert report["title"] == fixture.name
    assert {d["device"]: d["summary"]["peak_allocated"] for d in report["devices"]} == devices
    for device in report["devices"]:
        allocs = device["allocations"]
        (count,) = con.execute("SELECT COUNT(*) FROM vramscope_allocations WHERE device = ?",
                               (device["device"],)).fetchone()
        assert allocs["count"] == count
        # The page's timeline reaches the report's peak (stack-less dumps: the level at the dump).
        top = max(col(columns, device["lod"]["levels"][-1]["allocated"]))
        if device["events"] > 1:
            assert top == device["summary"]["peak_allocated"]
        # Categories at each coarse bucket add up to the allocated total.
        coarse = device["lod"]["levels"][-1]
        cats = col(columns, coarse["category"])
        alloc = col(columns, coarse["allocated"])
        for b in range(coarse["count"]):
            assert sum(cats[b * 8:(b + 1) * 8]) == alloc[b]
