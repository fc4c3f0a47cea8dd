"""End-to-end tests of `vramscope report` on PyTorch's raw memory timeline
(prof.export_memory_timeline("x.raw.json.gz")): a JSON list of [t_ns, action, bytes, category]
records, plain or gzipped. The real fixture's tests skip when ../shared is absent."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import (REAL_FIXTURES, SKYLINE_TABLES, assert_one_error_line, list_dir, open_db)

FIXTURE = REAL_FIXTURES / "memory_timeline_raw_oct2023.json.gz"
FORMAT = "PyTorch memory timeline (export_memory_timeline raw)"
DEVICE_NOTE = "device not recorded in the file; shown as device 0"

needs_fixture = pytest.mark.skipif(not FIXTURE.is_file(), reason=f"{FIXTURE} is absent")


def _round512(n: int) -> int:
    return max(512, (n + 511) // 512 * 512)


def _records(path: Path) -> list:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _expected_levels(records: list) -> tuple[int, int]:
    """(peak allocated, requested at the end) as vramscope counts them: each record moves the
    allocated level by its size rounded to 512 B; an INCREMENT_VERSION pair that keeps its
    category moves nothing."""
    level = peak = requested = 0
    i = 0
    while i < len(records):
        t, action, size, category = records[i]
        if (action == 3 and size < 0 and i + 1 < len(records)
                and records[i + 1] == [t, 3, -size, category]):
            i += 2
            continue
        if size != 0:
            level += _round512(abs(size)) if size > 0 else -_round512(-size)
            requested += size
        peak = max(peak, level)
        i += 1
    return peak, requested


# A small training step: two parameters from before profiling, an input, activations freed in
# backward, a gradient, an Adam state, an in-place parameter update, an activation whose next
# version PyTorch could not categorize.
SMALL = [
    [-1, 1, 4096, 0],
    [-1, 1, 1000, 0],
    [1_000_000, 2, 65536, 2],        # input
    [1_100_000, 2, 262144, 4],       # activation
    [1_200_000, 2, 131072, 4],       # activation
    [1_300_000, 3, -131072, 4],      # in-place op on it: the next version is uncategorized
    [1_300_000, 3, 131072, 7],
    [2_000_000, 2, 4096, 5],         # gradient
    [2_000_100, 2, 20000, 6],        # AUTOGRAD_DETAIL
    [2_100_000, 4, -262144, 4],
    [2_100_000, 4, -131072, 7],
    [2_200_000, 4, -20000, 6],
    [3_000_000, 2, 8192, 1],         # optimizer state
    [3_100_000, 3, -4096, 0],        # parameter update in place
    [3_100_000, 3, 4096, 0],
]


@pytest.fixture
def small_timeline(inputs_dir) -> Path:
    path = inputs_dir / "step.raw.json"
    path.write_text(json.dumps(SMALL))
    return path


def _summary(run, path: Path, cwd: Path) -> dict:
    rc, out, err = run("report", path, "--json", "--summary-only", cwd=cwd)
    assert rc == 0, err
    assert err == ""
    return json.loads(out)


# --------------------------------------------------------------------------------------------
# The real fixture
# --------------------------------------------------------------------------------------------


@needs_fixture
def test_fixture_text_report(run, out_dir):
    rc, out, err = run("report", FIXTURE, cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    assert f"vramscope report: {FIXTURE}" in out
    assert FORMAT in out
    assert "cuda:0" in out
    assert "peak allocated" in out
    assert DEVICE_NOTE in out
    assert "645 tensors existed before profiling began" in out
    written = [p for p in list_dir(out_dir) if p.endswith(".sqlite")]
    assert len(written) == 1, list_dir(out_dir)


@needs_fixture
def test_fixture_json_summary(run, out_dir):
    s = _summary(run, FIXTURE, out_dir)
    assert list_dir(out_dir) == []
    assert s["source"]["format"] == FORMAT
    assert s["source"]["generation"] == "torch 2.1+"
    assert "16,845 records" in s["source"]["generation_evidence"]
    assert s["source"]["events"] == 13305
    assert s["source"]["allocations"] == 4865
    assert DEVICE_NOTE in s["notes"]
    assert s["facts"]["has_times"] is True
    assert s["facts"]["frees_without_alloc"] == 0
    [dev] = s["devices"]
    assert dev["device"] == 0
    peak, requested = _expected_levels(_records(FIXTURE))
    # The README's end-of-file running sums add up to this.
    assert requested == 102440608 + 102228128 + 19395584 + 0 + 128000 + 107868160 + 0 + 424
    assert dev["at_dump"]["requested_bytes"] == requested
    assert dev["peak_allocated"]["bytes"] == peak
    assert dev["at_dump"]["reserved_bytes"] == 0
    live = dev["live_at_peak"]
    assert sum(c["bytes"] for c in live["by_category"]) == live["bytes"] == peak
    # ACTIVATION dominates the peak of this step; PyTorch's categories carry through.
    top = max(live["by_category"], key=lambda c: c["bytes"])
    assert top["category"] == "activation"


@needs_fixture
def test_fixture_sqlite_report(run, out_dir):
    rc, out, err = run("report", FIXTURE, "-o", "x.sqlite", cwd=out_dir)
    assert rc == 0, err
    assert list_dir(out_dir) == ["x.sqlite"]
    with open_db(out_dir / "x.sqlite") as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for t in SKYLINE_TABLES:
            assert t in tables
        (peak,) = db.execute(
            "SELECT size_bytes FROM misc_sizes WHERE key = 'peak_usage_bytes'").fetchone()
        assert peak == _expected_levels(_records(FIXTURE))[0]
    # An existing report is never replaced without --force.
    rc, out, err = run("report", FIXTURE, "-o", "x.sqlite", cwd=out_dir)
    assert rc != 0
    rc, out, err = run("report", FIXTURE, "-o", "x.sqlite", "--force", cwd=out_dir)
    assert rc == 0, err


# --------------------------------------------------------------------------------------------
# Synthetic timelines
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True], ids=["json", "gzip"])
def test_small_timeline(run, inputs_dir, out_dir, compressed):
    path = inputs_dir / ("step.raw.json.gz" if compressed else "step.raw.json")
    data = json.dumps(SMALL).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if compressed else data)
    s = _summary(run, path, out_dir)
    assert s["source"]["format"] == FORMAT
    [dev] = s["devices"]
    peak, requested = _expected_levels(SMALL)
    assert dev["peak_allocated"]["bytes"] == peak
    assert dev["at_dump"]["requested_bytes"] == requested == 4096 + 1000 + 65536 + 4096 + 8192
    # Times: nanoseconds to microseconds; the pre-existing tensors at the first timed record.
    assert dev["first_time_us"] == 1000
    assert dev["last_time_us"] == 3000
    by_category = {c["category"]: c for c in dev["live_at_peak"]["by_category"]}
    assert by_category["weight"]["count"] == 2
    assert by_category["input"]["bytes"] == 65536


def test_small_timeline_sqlite(run, small_timeline, out_dir):
    rc, out, err = run("report", small_timeline, "-o", "step.sqlite", cwd=out_dir)
    assert rc == 0, err
    assert "cuda:0" in out
    assert list_dir(out_dir) == ["step.sqlite"]


# --------------------------------------------------------------------------------------------
# Bad input: exit 1, one line on stderr naming the file, nothing written
# --------------------------------------------------------------------------------------------

BAD = {
    "invalid-json": (b"[[1000, 2, 512, 0], [2000, 2, 51x, 0]]", ["invalid JSON at byte 32"]),
    "truncated": (b"[[1000, 2, 512, 0], [2000, 2,", ["invalid JSON", "truncated"]),
    "three-elements": (b"[[1000, 2, 512]]", ["record 0 has 3 elements, not 4"]),
    "string-field": (b'[[1000, "CREATE", 512, 0]]', ["record 0: action is a string"]),
    "float-bytes": (b"[[1000, 2, 512.5, 0]]", ["record 0: bytes is 512.5, not an integer"]),
    "unknown-action": (b"[[1000, 2, 512, 0], [2000, 7, 512, 0]]", ["record 1: action is 7"]),
    "unknown-category": (b"[[1000, 2, 512, 9]]", ["record 0: category is 9"]),
    "time-backwards": (b"[[3000, 2, 512, 0], [2000, 4, -512, 0]]",
                       ["record 1: time 2000 ns is before the previous record's 3000 ns"]),
    "absurd-bytes": (b"[[1000, 2, 9007199254740992, 0]]", ["more than 1 PiB"]),
    "negative-create": (b"[[1000, 2, -512, 0]]", ["a CREATE record of -512 bytes"]),
    "empty-list": (b"[]", ["holds no records"]),
    "number-list": (b"[1, 2, 3]", ["record 0 is a number, not a list"]),
    "plotted-form": (b"[[1000, 2000], [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 6, 7, 8]]]",
                     ["plotted form", "raw.json.gz"]),
    "deep-nesting": (b"[" * 200000, ["record 0: t_ns is a list"]),
    "gzip-bad-record": (gzip.compress(b"[[1000, 2, 512, 0, 5]]", mtime=0),
                        ["record 0 has more than 4 elements"]),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_timeline_fails_cleanly(name, run, inputs_dir, out_dir):
    content, phrases = BAD[name]
    path = inputs_dir / (f"{name}.raw.json.gz" if content[:2] == b"\x1f\x8b" else f"{name}.json")
    path.write_bytes(content)
    for extra in ([], ["-o", "r.sqlite", "--force"], ["--json"]):
        rc, out, err = run("report", path, *extra, cwd=out_dir)
        assert rc == 1, f"exit code {rc}, stderr: {err!r}"
        assert out == ""
        line = assert_one_error_line(err)
        assert str(path) in line
        for phrase in phrases:
            assert phrase in line, f"missing {phrase!r} in {line!r}"
        assert list_dir(out_dir) == [], list_dir(out_dir)
