"""End-to-end tests of `vramscope simulate`: the replay of a snapshot's trace through the model of
PyTorch's caching allocator (the built-in example and every real snapshot with a trace must be
reproduced exactly), what-if runs (--capacity, --alloc-conf, --compare), the report database it
writes with -o, bad input and usage errors, and the vramscope_sim_runs rows `vramscope report`
now writes too.

The real snapshots come from VRAMSCOPE_SHARED_DIR/fixtures/real; their cases are skipped when the
folder (or the one file a test needs) is absent.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from conftest import (BUILT_IN_ALLOCS, BUILT_IN_EVENTS, BUILT_IN_PEAK_RESERVED,
                      BUILT_IN_SEGMENT_ALLOCS, ERROR_PREFIX, REAL_FIXTURES, SKYLINE_TABLES,
                      SnapshotBuilder, assert_failure, assert_one_error_line, list_dir, open_db,
                      real_snapshot_files, small_training_snapshot, write_pickle)

GiB = 1 << 30
MiB = 1 << 20

DEEPSEEK = "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle"
CS336_FORWARD = "snapshot_torch2.6_cs336_2.7b_forward.pickle"
FLEXGEN = "snapshot_torch2.0_flexgen_opt_oom.pickle"
DIFFUSERS = "snapshot_feb2024_diffusers_cuda1_nohistory.pickle"
# Real snapshots without an alloc/free trace to replay: `simulate` must refuse them.
NO_TRACE = (FLEXGEN, DIFFUSERS)
# Real snapshots with a trace that the suite expects (for the "none is missing" check).
EXPECTED_TRACED = (
    "snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle",
    DEEPSEEK,
    "snapshot_torch2.11_windows_cs336_compilectx.pickle",
    CS336_FORWARD,
)

# The built-in example's figures (goldens/h200/mlp_adam_fp32.pickle.gz, a real H200 capture; they
# are PyTorch's own counts, see conftest.py).
EXAMPLE_EVENTS = BUILT_IN_EVENTS
EXAMPLE_ALLOCS = BUILT_IN_ALLOCS
EXAMPLE_SEGMENT_ALLOCS = BUILT_IN_SEGMENT_ALLOCS

MATCH_LINE = re.compile(
    r"allocations at the recorded address\s+([\d,]+) of ([\d,]+)\s+100\.00%")

PRECIOUS = b"not a report: must survive\n"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def real_fixture(name: str) -> Path:
    path = REAL_FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def traced_real_params() -> list:
    files = [f for f in real_snapshot_files() if f.name not in NO_TRACE]
    if not files:
        return [pytest.param(None, id="no-real-fixtures",
                             marks=pytest.mark.skip(reason=f"{REAL_FIXTURES} is absent"))]
    return [pytest.param(f, id=f.name) for f in files]


def simulate_json(run, *args, cwd=None) -> dict:
    rc, out, err = run("simulate", *args, "--json", cwd=cwd)
    assert rc == 0, f"exit code {rc}: {err!r}"
    assert err == "", err
    return json.loads(out)


def only_device(doc: dict) -> dict:
    assert len(doc["devices"]) == 1, [d["device"] for d in doc["devices"]]
    return doc["devices"][0]


def check_exact_replay(dev: dict) -> None:
    """The replay made every decision the recorded allocator made."""
    replay = dev["replay"]
    assert replay["kind"] == "replay"
    assert replay["oom"] is None
    assert replay["events_replayed"] == dev["events"]
    c = replay["comparison"]
    assert c["address_match_rate"] == 1.0
    assert c["allocs_at_recorded_address"] == c["allocs"]
    assert c["segment_allocs_matched"] == c["recorded_segment_allocs"]
    assert c["model_segment_allocs"] == c["recorded_segment_allocs"]
    assert c["segment_frees_matched"] == c["recorded_segment_frees"]
    assert c["reserved_equal_points"] == c["reserved_compared_points"]
    assert c["reserved_compared_points"] > 0
    assert c["max_reserved_difference_bytes"] == 0
    assert c["final_segments_matched"] == c["final_segments_recorded"]
    assert c["final_blocks_matched"] == c["final_blocks_recorded"]
    assert c["divergence_count"] == 0
    assert c["divergences"] == []
    # The model's peak also counts the state rebuilt before the first event, which the recorded
    # peak leaves out (the torch 2.6 forward pass starts with a segment_free): hence >=.
    assert replay["peak_reserved_bytes"] >= dev["recorded_peak_reserved_bytes"]
    assert replay["peak_allocated_bytes"] <= replay["peak_reserved_bytes"]
    assert 0.0 <= replay["fragmentation_at_peak"] < 1.0


def sim_runs(db_path: Path) -> list[dict]:
    with open_db(db_path) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM vramscope_sim_runs ORDER BY id")]


def scalar(db_path: Path, sql: str, *args):
    with open_db(db_path) as db:
        rows = db.execute(sql, args).fetchall()
    assert len(rows) == 1, rows
    return rows[0][0]


def two_device_snapshot() -> dict:
    """A small snapshot with a trace on cuda:0 and on cuda:1."""

    def one(device: int, base: int) -> dict:
        b = SnapshotBuilder(device=device, base=base)
        b.alloc(4 << 20)
        b.free(b.alloc(1 << 20))
        return b.build()

    s0, s1 = one(0, 0x7F00_0000_0000), one(1, 0x7E00_0000_0000)
    return {"segments": s0["segments"] + s1["segments"],
            "device_traces": [s0["device_traces"][0], s1["device_traces"][1]],
            "allocator_settings": s0["allocator_settings"]}


# --------------------------------------------------------------------------------------------
# The built-in example
# --------------------------------------------------------------------------------------------


def test_simulate_help(run, out_dir):
    rc, out, err = run("simulate", "--help", cwd=out_dir)
    assert rc == 0 and err == ""
    for flag in ("--capacity", "--memory-fraction", "--alloc-conf", "--compare", "--recorded-conf",
                 "--output", "--force", "--json", "--quiet", "--project-root", "--device",
                 "--top"):
        assert flag in out, flag
    assert list_dir(out_dir) == []


def test_built_in_example_text(run, out_dir):
    rc, out, err = run("simulate", cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    assert out.startswith("vramscope simulate: built-in example (recorded on an NVIDIA H200: a "
                          "2-layer MLP trained with Adam for 3 steps)\n"), out
    m = MATCH_LINE.search(out)
    assert m, out
    assert m.group(1) == m.group(2) == str(EXAMPLE_ALLOCS)
    assert "no divergence" in out
    assert list_dir(out_dir) == [], "simulate without -o must not write anything"


def test_built_in_example_json(run, out_dir):
    doc = simulate_json(run, cwd=out_dir)
    assert doc["tool"] == "vramscope"
    assert doc["input"] == "built-in example"
    assert doc["report"] is None
    dev = only_device(doc)
    assert dev["device"] == 0
    assert dev["events"] == EXAMPLE_EVENTS
    assert dev["what_if"] == []
    c = dev["replay"]["comparison"]
    assert c["address_match_rate"] == 1.0
    assert c["allocs"] == c["allocs_at_recorded_address"] == EXAMPLE_ALLOCS
    assert c["segment_alloc_match_rate"] == 1.0
    assert c["recorded_segment_allocs"] == c["segment_allocs_matched"] == EXAMPLE_SEGMENT_ALLOCS
    check_exact_replay(dev)
    # The example records its allocator settings: torch's defaults.
    assert dev["recorded_settings"]["alloc_conf"] == ""
    assert dev["recorded_settings"]["expandable_segments"] is False
    assert dev["replay"]["settings"]["capacity"] is None
    # PyTorch's torch.cuda.max_memory_reserved() for the run, recorded and replayed.
    assert dev["replay"]["peak_reserved_bytes"] == dev["recorded_peak_reserved_bytes"] == \
        BUILT_IN_PEAK_RESERVED
    assert list_dir(out_dir) == []


def test_built_in_example_is_deterministic(run, out_dir):
    a = simulate_json(run, "--compare", "", "expandable_segments:True", cwd=out_dir)
    b = simulate_json(run, "--compare", "", "expandable_segments:True", cwd=out_dir)
    assert a == b


def test_quiet_prints_nothing(run, out_dir):
    rc, out, err = run("simulate", "-q", cwd=out_dir)
    assert rc == 0
    assert out == "" and err == ""
    rc, out, err = run("simulate", "-q", "--json", cwd=out_dir)
    assert rc == 0 and err == ""
    assert json.loads(out)["devices"][0]["replay"]["comparison"]["address_match_rate"] == 1.0


# --------------------------------------------------------------------------------------------
# The real snapshots: every recorded decision reproduced
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", traced_real_params())
def test_real_snapshot_replay_is_exact(path, run, out_dir):
    doc = simulate_json(run, path, cwd=out_dir)
    assert doc["input"] == str(path)
    assert doc["devices"], "no device simulated"
    for dev in doc["devices"]:
        check_exact_replay(dev)
        assert dev["what_if"] == []

    rc, out, err = run("simulate", path, cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    matches = MATCH_LINE.findall(out)
    assert len(matches) == len(doc["devices"]), out
    for (matched, total), dev in zip(matches, doc["devices"]):
        c = dev["replay"]["comparison"]
        assert int(matched.replace(",", "")) == c["allocs_at_recorded_address"]
        assert int(total.replace(",", "")) == c["allocs"]
    assert "no divergence" in out
    assert list_dir(out_dir) == []


def test_every_expected_traced_snapshot_is_there():
    if not REAL_FIXTURES.is_dir():
        pytest.skip(f"{REAL_FIXTURES} is absent")
    names = {f.name for f in real_snapshot_files()}
    missing = [n for n in EXPECTED_TRACED if n not in names]
    assert not missing, f"real snapshots missing from {REAL_FIXTURES}: {missing}"


def test_real_snapshot_with_segment_frees(run, out_dir):
    """The torch 2.6 forward pass starts with an empty_cache() burst of 742 segment_free events;
    the model releases exactly those segments, in that order."""
    doc = simulate_json(run, real_fixture(CS336_FORWARD), cwd=out_dir)
    c = only_device(doc)["replay"]["comparison"]
    assert c["recorded_segment_frees"] == c["segment_frees_matched"] == 742
    assert len(c["release_bursts"]) == 1
    burst = c["release_bursts"][0]
    assert burst["cause"] == "empty_cache"
    assert burst["segments"] == 742
    assert burst["matches_rule"] is True and burst["same_order"] is True


# --------------------------------------------------------------------------------------------
# What-if runs
# --------------------------------------------------------------------------------------------


def test_capacity_too_small_runs_out_of_memory(run, out_dir):
    path = real_fixture(DEEPSEEK)
    doc = simulate_json(run, path, "--capacity", "4GiB", cwd=out_dir)
    dev = only_device(doc)
    check_exact_replay(dev)  # the replay against the recording is unaffected by --capacity
    assert len(dev["what_if"]) == 1
    w = dev["what_if"][0]
    assert w["kind"] == "what-if"
    assert w["settings"]["capacity"] == 4 * GiB
    assert w["settings"]["alloc_conf"] == ""
    assert w["peak_reserved_bytes"] <= 4 * GiB
    assert w["peak_allocated_bytes"] <= 4 * GiB

    oom = w["oom"]
    assert oom is not None
    assert isinstance(oom["event"], int) and 0 <= oom["event"] < dev["events"]
    assert w["events_replayed"] <= oom["event"]
    assert oom["requested_bytes"] > 0
    assert oom["rounded_bytes"] >= oom["requested_bytes"]
    assert oom["allowed_bytes"] == 4 * GiB
    assert oom["reserved_bytes"] <= oom["allowed_bytes"]
    # It ran out because a new segment for the request does not fit under the limit.
    assert oom["reserved_bytes"] + oom["rounded_bytes"] > oom["allowed_bytes"]
    assert oom["allocated_bytes"] <= oom["reserved_bytes"]
    assert 0 < oom["live_bytes"] <= oom["allocated_bytes"]

    sites = oom["live_by_site"]
    assert sites, "no allocation site listed at the out-of-memory point"
    assert len(sites) <= 10  # --top defaults to 10
    for s in sites:
        assert isinstance(s["site"], str) and s["site"]
        assert s["bytes"] > 0 and s["allocations"] > 0
    sizes = [s["bytes"] for s in sites]
    assert sizes == sorted(sizes, reverse=True)
    assert sum(sizes) <= oom["live_bytes"]

    rc, out, err = run("simulate", path, "--capacity", "4GiB", cwd=out_dir)
    assert rc == 0, err
    assert f"OOM at event {oom['event']:,}" in out
    assert "out of memory" in out


def test_top_limits_the_sites_at_the_oom(run, out_dir):
    path = real_fixture(DEEPSEEK)
    full = simulate_json(run, path, "--capacity", "4GiB", "--top", "1000", cwd=out_dir)
    full_oom = only_device(full)["what_if"][0]["oom"]
    assert sum(s["bytes"] for s in full_oom["live_by_site"]) == full_oom["live_bytes"]
    two = simulate_json(run, path, "--capacity", "4GiB", "--top", "2", cwd=out_dir)
    two_oom = only_device(two)["what_if"][0]["oom"]
    assert two_oom["live_by_site"] == full_oom["live_by_site"][:2]
    none = simulate_json(run, path, "--capacity", "4GiB", "--top", "0", cwd=out_dir)
    assert only_device(none)["what_if"][0]["oom"]["live_by_site"] == []


def test_large_capacity_fits(run, out_dir):
    doc = simulate_json(run, real_fixture(DEEPSEEK), "--capacity", "80GiB", cwd=out_dir)
    dev = only_device(doc)
    assert len(dev["what_if"]) == 1
    w = dev["what_if"][0]
    assert w["oom"] is None
    assert w["settings"]["capacity"] == 80 * GiB
    assert w["events_replayed"] == dev["events"]
    # The snapshot ran with torch's defaults, so a defaults what-if with room to spare makes the
    # same decisions as the replay.
    replay = dev["replay"]
    assert w["peak_reserved_bytes"] == replay["peak_reserved_bytes"]
    assert w["peak_allocated_bytes"] == replay["peak_allocated_bytes"]
    assert w["cuda_mallocs"] == replay["cuda_mallocs"]


def test_memory_fraction_with_capacity(run, out_dir):
    doc = simulate_json(run, "--capacity", "8GiB", "--memory-fraction", "0.5", cwd=out_dir)
    (w,) = only_device(doc)["what_if"]
    assert w["settings"]["capacity"] == 8 * GiB
    assert w["settings"]["memory_fraction"] == 0.5
    assert w["oom"] is None
    assert w["peak_reserved_bytes"] <= 4 * GiB


def test_example_small_capacity_oom(run, out_dir):
    doc = simulate_json(run, "--capacity", "100MiB", cwd=out_dir)
    (w,) = only_device(doc)["what_if"]
    oom = w["oom"]
    assert oom is not None
    assert w["peak_reserved_bytes"] <= 100 * MiB
    assert oom["allowed_bytes"] == 100 * MiB
    assert oom["reserved_bytes"] + oom["rounded_bytes"] > 100 * MiB
    assert oom["live_by_site"]
    assert sum(s["bytes"] for s in oom["live_by_site"]) <= oom["live_bytes"]


def test_alloc_conf_single_what_if(run, out_dir):
    doc = simulate_json(run, "--alloc-conf", "expandable_segments:True", cwd=out_dir)
    dev = only_device(doc)
    (w,) = dev["what_if"]
    assert w["settings"]["alloc_conf"] == "expandable_segments:True"
    assert w["settings"]["expandable_segments"] is True
    assert w["settings"]["capacity"] is None
    assert w["oom"] is None
    assert w["events_replayed"] == dev["events"]
    # The replay itself still follows the recorded settings.
    assert dev["replay"]["settings"]["expandable_segments"] is False
    check_exact_replay(dev)


def test_compare_two_configurations(run, out_dir):
    path = real_fixture(DEEPSEEK)
    args = [path, "--compare", "", "expandable_segments:True", "--capacity", "80GiB"]
    doc = simulate_json(run, *args, cwd=out_dir)
    dev = only_device(doc)
    check_exact_replay(dev)
    runs = dev["what_if"]
    assert [w["kind"] for w in runs] == ["what-if", "what-if"]
    assert [w["settings"]["alloc_conf"] for w in runs] == ["", "expandable_segments:True"]
    assert [w["settings"]["expandable_segments"] for w in runs] == [False, True]
    for w in runs:
        assert w["settings"]["capacity"] == 80 * GiB
        assert w["oom"] is None
        assert w["events_replayed"] == dev["events"]
        assert w["peak_allocated_bytes"] <= w["peak_reserved_bytes"] <= 80 * GiB
    assert runs[0]["peak_reserved_bytes"] == dev["replay"]["peak_reserved_bytes"]

    rc, out, err = run("simulate", *args, cwd=out_dir)
    assert rc == 0, err
    assert "what if" in out
    header = next((line for line in out.splitlines() if line.strip().startswith("settings")),
                  None)
    assert header is not None, out
    assert header.split()[1:] == ["recorded", "defaults", "expandable_segments:True"], header
    capacity = next(line for line in out.splitlines() if "device memory for PyTorch" in line)
    assert capacity.count("80.00 GiB") == 2, capacity
    result = next(line for line in out.splitlines() if line.strip().startswith("result"))
    assert result.split()[1:] == ["ran", "fits", "fits"], result


# --------------------------------------------------------------------------------------------
# The report database (-o)
# --------------------------------------------------------------------------------------------


def test_output_database(run, out_dir):
    rc, out, err = run("simulate", "--compare", "", "expandable_segments:True", "-o",
                       "out.sqlite", "--json", cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    doc = json.loads(out)
    assert doc["report"]["path"] == "out.sqlite"
    assert doc["report"]["rows"] > 0
    assert list_dir(out_dir) == ["out.sqlite"]
    db = out_dir / "out.sqlite"

    assert scalar(db, "PRAGMA user_version") == 1
    with open_db(db) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t in SKYLINE_TABLES + ("vramscope_sim_runs", "vramscope_sim_timeline",
                                "vramscope_sim_segment_events", "vramscope_sim_final_blocks",
                                "vramscope_sim_notes"):
        assert t in tables, t
    assert scalar(db, "SELECT count(*) FROM entry_types") > 0
    assert scalar(db, "SELECT count(*) FROM misc_sizes") > 0

    runs = sim_runs(db)
    assert [(r["device"], r["kind"], r["alloc_conf"]) for r in runs] == [
        (0, "replay", ""), (0, "what-if", ""), (0, "what-if", "expandable_segments:True")]
    dev = only_device(doc)
    replay = runs[0]
    c = dev["replay"]["comparison"]
    assert replay["allocs_compared"] == replay["allocs_at_recorded_address"] == EXAMPLE_ALLOCS
    assert replay["segment_allocs_recorded"] == replay["segment_allocs_matched"] == c[
        "recorded_segment_allocs"]
    assert replay["reserved_points_equal"] == replay["reserved_points_compared"] == c[
        "reserved_compared_points"]
    assert replay["final_segments_matched"] == replay["final_segments_recorded"]
    assert replay["final_blocks_matched"] == replay["final_blocks_recorded"]
    assert replay["divergences"] == 0
    for row, result in zip(runs, [dev["replay"]] + dev["what_if"]):
        assert row["events_replayed"] == result["events_replayed"] == EXAMPLE_EVENTS
        assert row["peak_reserved_bytes"] == result["peak_reserved_bytes"]
        assert row["peak_allocated_bytes"] == result["peak_allocated_bytes"]
        assert row["cuda_mallocs"] == result["cuda_mallocs"]
        assert row["oom_event"] is None and row["capacity_bytes"] is None
    for row in runs[1:]:  # what-if runs are not compared with the recording
        assert row["allocs_compared"] is None and row["divergences"] is None

    with open_db(db) as con:
        timeline = dict(con.execute(
            "SELECT run, count(*) FROM vramscope_sim_timeline GROUP BY run").fetchall())
        peaks = dict(con.execute(
            "SELECT run, max(reserved_bytes) FROM vramscope_sim_timeline GROUP BY run").fetchall())
        segment_allocs = dict(con.execute(
            "SELECT run, count(*) FROM vramscope_sim_segment_events "
            "WHERE action IN ('segment_alloc', 'segment_map') GROUP BY run").fetchall())
    for row in runs:
        assert timeline[row["id"]] == EXAMPLE_EVENTS
        assert peaks[row["id"]] == row["peak_reserved_bytes"]
        assert segment_allocs[row["id"]] == row["cuda_mallocs"]  # expandable: segment_map
    assert segment_allocs[replay["id"]] == EXAMPLE_SEGMENT_ALLOCS


def test_output_database_real_what_if_oom(run, out_dir):
    path = real_fixture(DEEPSEEK)
    rc, out, err = run("simulate", path, "--capacity", "4GiB", "-o", "ds.sqlite", "-q",
                       cwd=out_dir)
    assert rc == 0, err
    assert out == "" and err == ""
    db = out_dir / "ds.sqlite"
    runs = sim_runs(db)
    assert [r["kind"] for r in runs] == ["replay", "what-if"]
    replay, what_if = runs
    assert replay["allocs_compared"] == replay["allocs_at_recorded_address"] > 0
    assert replay["divergences"] == 0 and replay["oom_event"] is None
    assert what_if["capacity_bytes"] == 4 * GiB
    assert what_if["oom_event"] is not None and what_if["oom_requested_bytes"] > 0
    assert what_if["peak_reserved_bytes"] <= 4 * GiB
    n = scalar(db, "SELECT count(*) FROM vramscope_sim_timeline WHERE run = ?", what_if["id"])
    assert 0 < n <= what_if["oom_event"] + 1
    assert scalar(db, "SELECT max(reserved_bytes) FROM vramscope_sim_timeline WHERE run = ?",
                  what_if["id"]) <= 4 * GiB


def test_existing_output_needs_force(run, out_dir):
    target = out_dir / "out.sqlite"
    target.write_bytes(PRECIOUS)
    rc, out, err = run("simulate", "-o", "out.sqlite", cwd=out_dir)
    assert rc != 0
    assert out == ""
    line = assert_one_error_line(err)
    assert "out.sqlite" in line and "already exists" in line and "--force" in line
    assert target.read_bytes() == PRECIOUS
    assert list_dir(out_dir) == ["out.sqlite"]

    rc, out, err = run("simulate", "-o", "out.sqlite", "--force", "-q", cwd=out_dir)
    assert rc == 0, err
    assert out == "" and err == ""
    assert target.read_bytes() != PRECIOUS
    assert [r["kind"] for r in sim_runs(target)] == ["replay"]
    assert list_dir(out_dir) == ["out.sqlite"]


# --------------------------------------------------------------------------------------------
# Bad input and usage errors
# --------------------------------------------------------------------------------------------

# name -> (arguments after "simulate", exit code, phrases the one error line must contain)
USAGE_ERRORS = {
    "max-split-size-too-small": (["--alloc-conf", "max_split_size_mb:5"], 2,
                                 ["max_split_size_mb"]),
    "unknown-alloc-conf-key": (["--alloc-conf", "foo:1"], 2, ["unknown", "'foo'"]),
    "unknown-compare-key": (["--compare", "", "foo:1"], 2, ["unknown", "'foo'"]),
    "bad-recorded-conf": (["--recorded-conf", "foo:1"], 2, ["unknown", "'foo'"]),
    "negative-capacity": (["--capacity", "-5GiB"], 2, ["--capacity", "-5GiB"]),
    "capacity-not-a-size": (["--capacity", "abc"], 2, ["--capacity", "abc"]),
    "memory-fraction-above-one": (["--memory-fraction", "2", "--capacity", "8GiB"], 2,
                                  ["--memory-fraction"]),
    "memory-fraction-without-capacity": (["--memory-fraction", "0.5"], 2,
                                         ["--memory-fraction", "--capacity"]),
    "alloc-conf-and-compare": (["--alloc-conf", "x", "--compare", "y"], 2,
                               ["--alloc-conf", "--compare"]),
    "device-not-in-snapshot": (["--device", "7"], 2, ["--device 7"]),
    "unknown-flag": (["--bogus"], 2, ["--bogus"]),
    "negative-top": (["--top", "-1"], 2, ["--top"]),
}


@pytest.mark.parametrize("name", list(USAGE_ERRORS))
def test_usage_errors(name, run, out_dir):
    args, expected_rc, phrases = USAGE_ERRORS[name]
    rc, out, err = run("simulate", *args, cwd=out_dir)
    assert_failure(rc, out, err, expected_rc, phrases, out_dir)
    rc, out, err = run("simulate", *args, "--json", "-o", "out.sqlite", "--force", cwd=out_dir)
    assert_failure(rc, out, err, expected_rc, phrases, out_dir)


def _no_trace_snapshot(inputs_dir: Path) -> Path:
    s = small_training_snapshot()
    s["device_traces"] = [[]]
    return write_pickle(inputs_dir / "notrace.pickle", s)


def _no_trace_key_snapshot(inputs_dir: Path) -> Path:
    s = small_training_snapshot()
    del s["device_traces"]
    return write_pickle(inputs_dir / "notracekey.pickle", s)


def _truncated_real(inputs_dir: Path) -> Path:
    data = real_fixture(DEEPSEEK).read_bytes()
    path = inputs_dir / "truncated.pickle"
    path.write_bytes(data[: len(data) // 2])
    return path


def _truncated_synthetic(inputs_dir: Path) -> Path:
    """Cut before any segment was written whole: nothing to simulate. (A later cut is read up
    to the cut: test_a_cut_off_snapshot_is_simulated_up_to_the_cut.)"""
    path = write_pickle(inputs_dir / "cut.pickle", small_training_snapshot())
    path.write_bytes(path.read_bytes()[:12])
    return path


def _not_a_pickle(inputs_dir: Path) -> Path:
    path = inputs_dir / "notes.pickle"
    path.write_bytes(b"hello, this is not a snapshot\n")
    return path


# name -> (writes the input and returns its path, phrases; True = the path must be named too)
BAD_INPUTS = {
    "empty-trace": (_no_trace_snapshot, ["no alloc/free trace"], False),
    "no-trace-key": (_no_trace_key_snapshot, ["no alloc/free trace"], False),
    "flexgen-no-trace": (lambda d: real_fixture(FLEXGEN), ["no alloc/free trace"], False),
    "missing-file": (lambda d: d / "missing.pickle", ["no such file"], True),
    "truncated-before-any-segment": (_truncated_synthetic, ["truncated"], True),
    "not-a-pickle": (_not_a_pickle, ["not a memory snapshot"], True),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_exits_1(name, run, inputs_dir, out_dir):
    make, phrases, names_path = BAD_INPUTS[name]
    path = make(inputs_dir)
    if names_path:
        phrases = phrases + [str(path)]
    rc, out, err = run("simulate", path, cwd=out_dir)
    assert_failure(rc, out, err, 1, phrases, out_dir)
    rc, out, err = run("simulate", path, "--json", "-o", "out.sqlite", "--force", cwd=out_dir)
    assert_failure(rc, out, err, 1, phrases, out_dir)


def test_diffusers_snapshot_without_history_is_refused(run, out_dir):
    path = real_fixture(DIFFUSERS)
    rc, out, err = run("simulate", path, cwd=out_dir)
    assert_failure(rc, out, err, 1, ["trace"], out_dir)


def test_a_cut_off_snapshot_is_simulated_up_to_the_cut(run, inputs_dir, out_dir):
    """A real snapshot cut in the middle of its trace (a killed job): simulate replays what was
    written before the cut, exit 0, with the same warning line as report."""
    path = _truncated_real(inputs_dir)
    rc, out, err = run("simulate", path, "--json", cwd=out_dir)
    assert rc == 0, err
    assert err.startswith(f"vramscope: warning: {path} is cut off at byte "), err
    [device] = json.loads(out)["devices"]
    whole = real_fixture(DEEPSEEK)
    rc, out, err = run("simulate", whole, "--json", cwd=out_dir)
    assert rc == 0 and err == "", err
    [whole_device] = json.loads(out)["devices"]
    assert 0 < device["events"] < whole_device["events"]
    assert device["replay"] is not None


def test_bad_input_keeps_an_existing_output(run, inputs_dir, out_dir):
    bad = _truncated_synthetic(inputs_dir)
    target = out_dir / "out.sqlite"
    target.write_bytes(PRECIOUS)
    rc, out, err = run("simulate", bad, "-o", "out.sqlite", "--force", cwd=out_dir)
    assert rc == 1
    assert "truncated" in assert_one_error_line(err)
    assert target.read_bytes() == PRECIOUS
    assert list_dir(out_dir) == ["out.sqlite"]


def test_error_lines_start_with_prefix_on_json(run, out_dir):
    """--json does not turn an error into JSON: stdout stays empty."""
    rc, out, err = run("simulate", "--capacity", "abc", "--json", cwd=out_dir)
    assert rc == 2 and out == ""
    assert err.startswith(ERROR_PREFIX)


# --------------------------------------------------------------------------------------------
# Several devices, and `vramscope report`
# --------------------------------------------------------------------------------------------


def test_device_option_selects_one_device(run, inputs_dir, out_dir):
    path = write_pickle(inputs_dir / "two.pickle", two_device_snapshot())
    doc = simulate_json(run, path, cwd=out_dir)
    assert [d["device"] for d in doc["devices"]] == [0, 1]
    doc = simulate_json(run, path, "--device", "1", cwd=out_dir)
    assert [d["device"] for d in doc["devices"]] == [1]
    rc, out, err = run("simulate", path, "--device", "2", cwd=out_dir)
    assert rc == 2 and out == ""
    assert "--device 2" in assert_one_error_line(err)


def test_report_fills_sim_runs_for_the_example(run, out_dir):
    rc, out, err = run("report", "-q", cwd=out_dir)
    assert rc == 0, err
    db = out_dir / "vramscope-example.sqlite"
    runs = sim_runs(db)
    assert len(runs) == 1
    (r,) = runs
    assert r["device"] == 0 and r["kind"] == "replay" and r["alloc_conf"] == ""
    assert r["events_replayed"] == EXAMPLE_EVENTS
    assert r["allocs_compared"] == r["allocs_at_recorded_address"] == EXAMPLE_ALLOCS
    assert r["segment_allocs_recorded"] == r["segment_allocs_matched"] == EXAMPLE_SEGMENT_ALLOCS
    assert r["divergences"] == 0
    assert r["capacity_bytes"] is None and r["oom_event"] is None
    assert scalar(db, "SELECT count(*) FROM vramscope_sim_timeline WHERE run = ?",
                  r["id"]) == EXAMPLE_EVENTS
    # The same figures as `vramscope simulate` on the example.
    dev = only_device(simulate_json(run, cwd=out_dir))
    assert r["peak_reserved_bytes"] == dev["replay"]["peak_reserved_bytes"]
    assert r["peak_allocated_bytes"] == dev["replay"]["peak_allocated_bytes"]


def test_report_fills_one_replay_row_per_device(run, inputs_dir, out_dir):
    path = write_pickle(inputs_dir / "two.pickle", two_device_snapshot())
    rc, out, err = run("report", path, "-o", "two.sqlite", "-q", cwd=out_dir)
    assert rc == 0, err
    runs = sim_runs(out_dir / "two.sqlite")
    assert [(r["device"], r["kind"]) for r in runs] == [(0, "replay"), (1, "replay")]
    for r in runs:
        assert r["allocs_compared"] == 2


def test_report_on_a_snapshot_without_trace_has_no_sim_runs(run, out_dir):
    rc, out, err = run("report", real_fixture(FLEXGEN), "-o", "f.sqlite", "-q", cwd=out_dir)
    assert rc == 0, err
    assert sim_runs(out_dir / "f.sqlite") == []


# --------------------------------------------------------------------------------------------
# Known problem: a replay that diverges reports a peak its own curve never reaches
# --------------------------------------------------------------------------------------------


def test_diverging_replay_peak_matches_its_timeline(run, small_snapshot, out_dir):
    rc, out, err = run("simulate", small_snapshot, "-o", "s.sqlite", "-q", cwd=out_dir)
    assert rc == 0, err
    db = out_dir / "s.sqlite"
    (replay,) = sim_runs(db)
    assert replay["divergences"] > 0
    assert scalar(db, "SELECT max(reserved_bytes) FROM vramscope_sim_timeline WHERE run = ?",
                  replay["id"]) == replay["peak_reserved_bytes"]


def test_gpu_capacity_is_its_memory_less_what_lies_outside_the_allocator(run, out_dir):
    """--gpu rtx3090: 23.69 GiB (as PyTorch's OOM message reports it) less the non-PyTorch memory
    model's 256 MiB CUDA context (measured on an RTX 3090) and 76 MiB of libraries' kernels
    (measured on an H100, assumed here); --cuda-context overrides the context."""
    rc, out, err = run("simulate", "--gpu", "rtx3090", "--json", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    g = doc["capacity_from_gpu"]
    total = 2369 * (1 << 30) // 100
    assert g["gpu"] == "rtx3090" and g["total_memory"] == total
    assert [(f["item"], f["bytes"], f["evidence"]) for f in g["outside_allocator"]] == [
        ("CUDA context", 256 << 20, "measured"), ("libraries' kernels", 76 << 20, "assumed")]
    assert g["capacity"] == total - (332 << 20)
    assert doc["devices"][0]["what_if"][0]["settings"]["capacity"] == g["capacity"]
    rc, out, err = run("simulate", "--gpu", "rtx3090", "--cuda-context", "1000", "--json",
                       cwd=out_dir)
    assert json.loads(out)["capacity_from_gpu"]["capacity"] == total - (1076 << 20)
    rc, out, err = run("simulate", "--gpu", "rtx3090", "--capacity", "3GiB", cwd=out_dir)
    assert rc == 2 and "give one of them" in err
    assert list_dir(out_dir) == []
