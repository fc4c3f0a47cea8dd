"""End-to-end tests of windows (`report/view/simulate --from/--to/--step-range`): the report of a
part of a recording. A window keeps the events between two points and the allocator's state at
its end (the snapshot's own, or the allocator model's replay of the recording up to there), so
its allocated and reserved memory after every event equal the whole recording's at the same
events; a window by iterations keeps exactly those iterations; what was left out is said; and
every malformed flag or unsuitable input gets one line and a non-zero exit.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from conftest import (BUILT_IN_EVENTS, REAL_FIXTURES, REPO, assert_failure, real_snapshot_params,
                      report_curves, run_binary)

H100_GPT = REPO / "goldens" / "h100" / "gpt_adamw_bf16.pickle.gz"  # with its sidecar


def notes(cwd: Path, *args) -> list[str]:
    out = cwd / "n.sqlite"
    rc, _, err = run_binary("report", *args, "-o", out, "-q", "--force", cwd=cwd, timeout=300)
    assert rc == 0, err
    db = sqlite3.connect(out)
    rows = [r[0] for r in db.execute("SELECT text FROM vramscope_notes")]
    db.close()
    return rows


def check_windows(tmp_path: Path, snapshot: list[str]) -> int:
    """Windows at the start, in the middle, at the end and of two events: each one's curves
    equal the whole recording's over the same events. Returns the events compared."""
    whole = report_curves(tmp_path, *snapshot)
    device = min(whole)
    n = len(whole[device])
    compared = 0
    for first, last in ((1, n // 2), (n // 4, n // 2), (n // 3, n), (n // 2, n // 2 + 1)):
        part = report_curves(tmp_path, *snapshot, "--from", str(first), "--to", str(last))
        assert part[device] == whole[device][first - 1:last], (snapshot, first, last)
        compared += last - first + 1
    return compared


def test_windows_of_the_built_in_example_replay_as_the_whole_does(vramscope_bin, tmp_path):
    assert check_windows(tmp_path, []) > BUILT_IN_EVENTS


def test_windows_of_a_capture_with_its_sidecar(vramscope_bin, tmp_path):
    assert check_windows(tmp_path, [str(H100_GPT)]) > 3000


@pytest.mark.parametrize("snapshot", real_snapshot_params())
def test_windows_of_real_snapshots_replay_as_the_whole_does(vramscope_bin, tmp_path, snapshot):
    whole = report_curves(tmp_path, str(snapshot))
    if sum(len(v) for v in whole.values()) < 8:
        pytest.skip(f"{snapshot.name} holds too few trace events for a window")
    check_windows(tmp_path, [str(snapshot)])


def test_a_step_range_keeps_those_iterations(vramscope_bin, tmp_path):
    """The H100 GPT capture has 3 iterations; --step-range 2:3 keeps the last two, whose peaks
    equal theirs in the whole report, and says which they were."""
    def iterations(*args):
        out = tmp_path / "i.sqlite"
        rc, _, err = run_binary("report", str(H100_GPT), *args, "-o", out, "-q", "--force",
                                cwd=tmp_path, timeout=300)
        assert rc == 0, err
        db = sqlite3.connect(out)
        rows = db.execute("SELECT step, peak_allocated_bytes FROM vramscope_iterations "
                          "ORDER BY step").fetchall()
        db.close()
        return rows

    whole = iterations()
    assert [s for s, _ in whole] == [1, 2, 3]
    part = iterations("--step-range", "2:3")
    assert [p for _, p in part] == [p for _, p in whole[1:]]
    said = notes(tmp_path, str(H100_GPT), "--step-range", "2:3")
    assert any("iterations 2 to 3 of the trace's 3" in n for n in said), said
    assert any("before and 0 after are left out" in n for n in said), said


def test_a_window_by_time_starts_at_that_time(vramscope_bin, tmp_path):
    """--from 4.13s on the built-in example (its iterations run 3.88 to 4.15 s into the trace)
    keeps the events from the first one recorded 4.13 s or more after the trace's first."""
    said = notes(tmp_path, "--from", "4.13s")
    line = next(n for n in said if n.startswith("window (--from 4.13s)"))
    assert "events 64 to 193 of 193" in line, line


def test_view_and_simulate_take_a_window(vramscope_bin, tmp_path):
    page = tmp_path / "w.html"
    rc, _, err = run_binary("view", "--step-range", "2", "-o", page, "-q", cwd=tmp_path,
                            timeout=300)
    assert rc == 0, err
    assert page.stat().st_size > 10_000
    rc, out, err = run_binary("simulate", "--from", "50", "--to", "120", "--capacity", "200MiB",
                              cwd=tmp_path, timeout=300)
    assert rc == 0, err
    assert "window (--from 50 --to 120)" in out, out


@pytest.mark.parametrize("args, phrases", [
    (["--from", "0"], ["--from '0'", "start at 1"]),
    (["--from", "2x"], ["--from '2x'", "unit 'x'"]),
    (["--from", "-3"], ["--from '-3'"]),
    (["--from", "10", "--to", "5"], ["--to 5", "before --from 10"]),
    (["--step-range", "3:2"], ["--step-range '3:2'", "before the first"]),
    (["--step-range", "x"], ["--step-range 'x'", "5:7"]),
    (["--step-range", ":"], ["--step-range ':'", "at least one"]),
])
def test_malformed_window_flags_fail_in_one_line(vramscope_bin, tmp_path, args, phrases):
    rc, out, err = run_binary("report", *args, cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


@pytest.mark.parametrize("args, phrases", [
    (["--step-range", "9"], ["iteration 9", "iterations 1 to 3"]),
    (["--from", "100000"], ["holds no event", "events 1 to 193"]),
])
def test_windows_outside_the_trace_say_what_it_holds(vramscope_bin, tmp_path, args, phrases):
    rc, out, err = run_binary("report", *args, cwd=tmp_path)
    assert rc != 0
    assert_failure(rc, out, err, rc, phrases, tmp_path)


def test_a_window_needs_a_snapshot(vramscope_bin, tmp_path):
    kineto = REAL_FIXTURES / "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz"
    if not kineto.is_file():
        pytest.skip(f"{kineto} is absent")
    rc, out, err = run_binary("report", kineto, "--from", "5", cwd=tmp_path)
    assert rc != 0
    assert_failure(rc, out, err, rc, ["--from 5", "memory snapshot", "Kineto"], tmp_path)


def test_a_window_of_a_report_database_is_refused(vramscope_bin, tmp_path):
    db = tmp_path / "r.sqlite"
    rc, _, err = run_binary("report", "-o", db, "-q", cwd=tmp_path)
    assert rc == 0, err
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    rc, out, err = run_binary("view", db, "--from", "5", cwd=out_dir)
    assert_failure(rc, out, err, 2, ["report database", "snapshot it was made from"], out_dir)
