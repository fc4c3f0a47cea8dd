"""End-to-end tests of the `vramscope report` command line: bad input, output rules, usage errors,
the built-in example, --json / --timings, --project-root and interrupt safety."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from conftest import (AUTOGRAD_PY, BIN, BUILT_IN_ALLOCATED_AT_DUMP, BUILT_IN_ALLOCS,
                      BUILT_IN_CASE, BUILT_IN_EVENTS, BUILT_IN_METADATA, BUILT_IN_NAME,
                      BUILT_IN_PATH, BUILT_IN_PEAK_ALLOCATED, BUILT_IN_PEAK_RESERVED,
                      BUILT_IN_RESERVED_AT_DUMP, BUILT_IN_SIDECAR, CATEGORIES, ERROR_PREFIX,
                      MODULE_PY, REAL_FIXTURES, SnapshotBuilder, assert_one_error_line, frame,
                      list_dir, open_db,
                      real_snapshot_params, small_training_snapshot, write_pickle)

# --------------------------------------------------------------------------------------------
# 1. Bad input never hurts
# --------------------------------------------------------------------------------------------


def _valid_pickle(protocol: int = 4) -> bytes:
    return pickle.dumps(small_training_snapshot(), protocol=protocol)


def _mutated(mutate) -> bytes:
    snapshot = small_training_snapshot()
    mutate(snapshot)
    return pickle.dumps(snapshot, protocol=4)


def _del_key(d: dict, key: str) -> None:
    del d[key]


# Hand-built payloads that would run code if a loader resolved globals. They are only ever written
# to disk for vramscope to refuse; the tests never unpickle them. "touch PWNED" would leave a file
# in the working folder (the output folder), which the tests list.
P0_GLOBAL_REDUCE = b"cos\nsystem\n(S'touch PWNED'\ntR."
P2_GLOBAL_REDUCE = (b"\x80\x02cposix\nsystem\nq\x00X\x0b\x00\x00\x00touch PWNED"
                    b"q\x01\x85q\x02Rq\x03.")
P4_STACK_GLOBAL = (b"\x80\x04\x95\x26\x00\x00\x00\x00\x00\x00\x00"
                   b"\x8c\x05posix\x94\x8c\x06system\x94"
                   b"\x93\x94\x8c\x0btouch PWNED\x94\x85\x94R\x94.")
P2_REDUCE_ONLY = b"\x80\x02N)R."
P0_INST = b"(S'touch PWNED'\nios\nsystem\n."

# name -> (file bytes or None for "do not create", phrases the error line must contain).
# The file's path is always required in the line too.
BAD_INPUTS = {
    "missing-file": (None, ["no such file"]),
    "empty-file": (b"", ["empty"]),
    "json-file": (b'{"traceEvents": []}\n',
                  ["JSON", "no GPU [memory] events", "profile_memory=True"]),
    "json-list": (b'[{"ph": "X"}]', ["JSON"]),
    "gzip-file": (gzip.compress(b"hello, this is not a snapshot\n", mtime=0),
                  ["gzip", "not a memory snapshot"]),
    "gzip-truncated": (gzip.compress(_valid_pickle(), mtime=0)[:40], ["gzip", "truncated"]),
    "text-file": (b"hello, this is not a snapshot\n", ["not a memory snapshot"]),
    "sqlite-file": (b"SQLite format 3\x00" + bytes(100), ["SQLite", "not a memory snapshot"]),
    "zip-file": (None, ["zip", "not a memory snapshot"]),  # written by the test (torch.save-like)
    "p2-global-reduce": (P2_GLOBAL_REDUCE, ["GLOBAL", "byte 2", "refusing"]),
    "p4-stack-global": (P4_STACK_GLOBAL, ["STACK_GLOBAL", "byte 28", "refusing"]),
    "p2-reduce": (P2_REDUCE_ONLY, ["REDUCE", "byte 4", "refusing"]),
    "p0-inst": (P0_INST, ["INST", "byte 16", "refusing"]),
    "root-int": (pickle.dumps(12345, protocol=4), ["not a PyTorch memory snapshot", "int"]),
    "root-str": (pickle.dumps("segments", protocol=4), ["not a PyTorch memory snapshot", "str"]),
    "dict-without-segments": (pickle.dumps({"device_traces": [], "foo": 1}, protocol=4),
                              ["'segments'", "'device_traces'", "'foo'"]),
    "segments-not-a-list": (pickle.dumps({"segments": {"a": 1}}, protocol=4),
                            ["segments", "expected a list"]),
    "segment-without-total-size": (_mutated(lambda s: _del_key(s["segments"][0], "total_size")),
                                   ["segments[0]", "'total_size'"]),
    "block-with-str-size": (_mutated(lambda s: s["segments"][0]["blocks"][1].update(size="4096")),
                            ["segments[0].blocks[1]", "'size'", "str"]),
    "block-with-negative-size": (
        _mutated(lambda s: s["segments"][0]["blocks"][0].update(size=-1)),
        ["segments[0].blocks[0]: 'size' is -1", "expected a size in bytes: an integer from 0"]),
    "block-with-unknown-state": (
        _mutated(lambda s: s["segments"][0]["blocks"][0].update(state="haunted")),
        ["unknown block state", "haunted"]),
    "trace-entry-without-action": (
        _mutated(lambda s: _del_key(s["device_traces"][0][2], "action")),
        ["device_traces[0][2]", "'action'"]),
    "trace-entry-with-int-action": (
        _mutated(lambda s: s["device_traces"][0][1].update(action=7)),
        ["device_traces[0][1]", "'action'"]),
    "huge-length-claim": (b"\x80\x05\x8d" + (1 << 60).to_bytes(8, "little") + b"abc",
                          ["truncated"]),
    "undefined-memo": (b"\x80\x02h\x05.", ["memo", "corrupt"]),
    "unsupported-protocol": (b"\x80\x09}.", ["not a memory snapshot"]),
}


def _truncations() -> dict:
    """Cuts before any segment or trace entry was written: nothing to report. (Later cuts are
    read up to the cut: test_a_cut_off_snapshot_is_reported_up_to_the_cut.)"""
    out = {}
    for protocol in (0, 2, 4, 5):
        data = _valid_pickle(protocol)
        n = len(data)
        for cut in (2, 3, 11, 12):
            out[f"p{protocol}-truncated-at-{cut}-of-{n}"] = (data[:cut], ["truncated"])
    return out


BAD_INPUTS.update(_truncations())


def _write_bad_input(name: str, inputs_dir: Path) -> Path:
    data, _ = BAD_INPUTS[name]
    path = inputs_dir / f"{name}.pickle"
    if name == "zip-file":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", _valid_pickle(2))
    elif data is not None:
        path.write_bytes(data)
    return path


def _assert_clean_failure(rc, out, err, named: str, phrases, out_dir: Path, expected_rc=1):
    assert rc == expected_rc, f"exit code {rc}, stderr: {err!r}"
    assert out == "", f"stdout should be empty: {out!r}"
    line = assert_one_error_line(err)
    assert named in line, f"the error does not name {named!r}: {line!r}"
    for phrase in phrases:
        assert phrase in line, f"missing {phrase!r} in {line!r}"
    assert list_dir(out_dir) == [], f"files left behind in {out_dir}: {list_dir(out_dir)}"


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_fails_cleanly(name, run, inputs_dir, out_dir):
    path = _write_bad_input(name, inputs_dir)
    before = list_dir(inputs_dir)
    _, phrases = BAD_INPUTS[name]
    # Default output name (written into the working folder) ...
    rc, out, err = run("report", path, cwd=out_dir)
    _assert_clean_failure(rc, out, err, str(path), phrases, out_dir)
    # ... and an explicit output with --force: still nothing left behind.
    rc, out, err = run("report", path, "-o", "report.sqlite", "--force", cwd=out_dir)
    _assert_clean_failure(rc, out, err, str(path), phrases, out_dir)
    assert list_dir(inputs_dir) == before


def test_directory_as_input(run, tmp_path, out_dir):
    d = tmp_path / "snapshots.pickle"
    d.mkdir()
    rc, out, err = run("report", d, cwd=out_dir)
    # A folder is read as the captures of `vramscope run`; this one holds none.
    _assert_clean_failure(rc, out, err, str(d), ["holds no captures", "vramscope run"], out_dir)


def test_relative_input_path_is_named_as_given(run, tmp_path, inputs_dir):
    (inputs_dir / "x.pickle").write_bytes(b"")
    rc, out, err = run("report", "inputs/x.pickle", "--summary-only", cwd=tmp_path)
    assert rc == 1
    assert assert_one_error_line(err).startswith(ERROR_PREFIX + "inputs/x.pickle: ")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read a chmod 000 file")
def test_unreadable_file(run, inputs_dir, out_dir):
    path = write_pickle(inputs_dir / "secret.pickle", small_training_snapshot())
    path.chmod(0)
    try:
        rc, out, err = run("report", path, cwd=out_dir)
        _assert_clean_failure(rc, out, err, str(path), ["Permission denied"], out_dir)
    finally:
        path.chmod(0o644)


def _cut_points(data: bytes) -> list[int]:
    n = len(data)
    return sorted({n // 3, n // 2, 2 * n // 3, n - 2, n - 1})


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_cut_off_snapshot_is_reported_up_to_the_cut(protocol, run, inputs_dir, out_dir):
    """A snapshot cut off while written (a killed job, a full disk) is reported up to the cut:
    exit 0, one warning line on stderr naming the file and the byte, the JSON marked partial,
    and the trace's events the first ones of the whole file's."""
    data = _valid_pickle(protocol)
    whole = inputs_dir / "whole.pickle"
    whole.write_bytes(data)
    rc, out, err = run("report", whole, "--json", cwd=out_dir)
    assert rc == 0, err
    whole_events = json.loads(out)["source"]["events"]
    assert json.loads(out)["facts"]["partial"] is False
    before, read = 0, 0
    for cut in _cut_points(data):
        path = inputs_dir / f"cut{cut}.pickle"
        path.write_bytes(data[:cut])
        rc, out, err = run("report", path, "--json", cwd=out_dir)
        if rc == 1 and before == 0:  # cut inside the first segment: nothing whole to report
            assert "before any segment or trace entry" in assert_one_error_line(err)
            continue
        read += 1
        assert rc == 0, f"cut at {cut}: {err}"
        assert err == (f"vramscope: warning: {path} is cut off at byte {cut} (partial file): "
                       "reporting what it holds up to the cut; the notes say what is missing\n")
        doc = json.loads(out)
        assert doc["facts"]["partial"] is True and doc["facts"]["cut_at_byte"] == cut
        assert any(n.startswith(f"partial file: it ends at byte {cut}") for n in doc["notes"])
        assert before <= doc["source"]["events"] <= whole_events
        before = doc["source"]["events"]
        # The database says so too, and the summary is printed with the warning.
        rc, out, err = run("report", path, "-o", f"cut{cut}.sqlite", cwd=out_dir)
        assert rc == 0 and "partial file" in out and "warning" in err
        with open_db(out_dir / f"cut{cut}.sqlite") as db:
            meta = dict(db.execute("SELECT key, value FROM vramscope_metadata"))
        assert meta["partial"] == "1" and meta["cut_at_byte"] == str(cut)
    assert read >= 3
    assert before == whole_events, "cut just before STOP: every event"


@pytest.mark.parametrize("fixture", real_snapshot_params())
def test_a_gzipped_snapshot_cut_mid_stream_is_read_up_to_the_cut(fixture, run, inputs_dir,
                                                                  out_dir):
    """A truncated deflate stream (the gzip file itself cut off): what was inflated before the
    cut is read as a plain cut file is, and the note says where the gzip data ends."""
    compressed = gzip.compress(Path(fixture).read_bytes(), mtime=0)
    path = inputs_dir / "cut.pickle.gz"
    cut = len(compressed) * 3 // 4
    path.write_bytes(compressed[:cut])
    rc, out, err = run("report", path, "--json", cwd=out_dir)
    assert rc == 0, err
    assert f"{path} is cut off at byte" in err
    doc = json.loads(out)
    assert doc["facts"]["partial"] is True
    assert any(n.startswith(f"the gzip stream is cut off after {cut} of its bytes")
               for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize("skipped", ["free_requested", "free_completed"])
def test_a_trace_recorded_with_skip_actions_is_read_and_said(skipped, run, inputs_dir, out_dir):
    """_record_memory_history(skip_actions=[...]) leaves kinds of entries out of the trace: the
    report says which, and the peak is the whole trace's (the built-in example's real H200
    snapshot with those entries removed, as the recording would have written it)."""
    example = gzip.decompress(BUILT_IN_PATH.read_bytes())
    full = pickle.loads(example)
    whole = inputs_dir / "whole.pickle"
    whole.write_bytes(example)
    thinned = dict(full, device_traces=[[e for e in t if e["action"] != skipped]
                                        for t in full["device_traces"]])
    path = write_pickle(inputs_dir / f"skip_{skipped}.pickle", thinned)
    rc, out, err = run("report", whole, "--json", cwd=out_dir)
    assert rc == 0, err
    want = json.loads(out)
    rc, out, err = run("report", path, "--json", cwd=out_dir)
    assert rc == 0 and err == "", err
    doc = json.loads(out)
    assert want["facts"]["skipped_actions"] == []
    assert doc["facts"]["skipped_actions"] == [skipped]
    assert any(f'skip_actions=["{skipped}"]' in n for n in doc["notes"]), doc["notes"]
    assert not any("lost free event" in n for n in doc["notes"]), doc["notes"]
    got_peak = doc["devices"][0]["peak_allocated"]["bytes"]
    assert got_peak == want["devices"][0]["peak_allocated"]["bytes"]
    # The allocator replay still puts every allocation where the GPU did.
    rc, out, err = run("report", path, "--summary-only", cwd=out_dir)
    assert rc == 0 and "the replay puts 72 of 72 allocations at their recorded address" in out


def test_segments_freed_and_never_made_are_said_as_likely_skipped(run, inputs_dir, out_dir):
    """A real trace (torch 2.6, H100-class GPU) that frees 742 segments and makes 178, with its
    segment_alloc entries removed: the report says they were likely skipped."""
    fixture = REAL_FIXTURES / "snapshot_torch2.6_cs336_2.7b_forward.pickle"
    if not fixture.exists():
        pytest.skip(f"{fixture} is absent")
    full = pickle.loads(fixture.read_bytes())  # a real fixture of the shared folder
    thinned = dict(full, device_traces=[[e for e in t if e["action"] != "segment_alloc"]
                                        for t in full["device_traces"]])
    path = write_pickle(inputs_dir / "no_segment_alloc.pickle", thinned)
    rc, out, err = run("report", path, "--json", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["facts"]["skipped_actions"] == ["segment_alloc"]
    assert any("frees 742 segment(s) and makes none: it was likely recorded with" in n
               for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize("payload", [P0_GLOBAL_REDUCE, b"cposix\nsystem\np0\n."],
                         ids=["p0-global-reduce", "p0-global-only"])
def test_protocol0_global_payload_is_refused_and_never_run(payload, run, inputs_dir, out_dir):
    """Safety part: whatever the message, the payload must not run and nothing is written."""
    path = inputs_dir / "evil.pickle"
    path.write_bytes(payload)
    rc, out, err = run("report", path, cwd=out_dir)
    _assert_clean_failure(rc, out, err, str(path), [], out_dir)
    assert not (out_dir / "PWNED").exists()


def test_protocol0_global_payload_message_names_global_at_byte_0(run, inputs_dir, out_dir):
    path = inputs_dir / "evil.pickle"
    path.write_bytes(P0_GLOBAL_REDUCE)
    rc, out, err = run("report", path, cwd=out_dir)
    _assert_clean_failure(rc, out, err, str(path), ["GLOBAL", "byte 0"], out_dir)


# --------------------------------------------------------------------------------------------
# 2. Output rules
# --------------------------------------------------------------------------------------------

PRECIOUS = b"not a report: must survive\n"


def _is_report(path: Path) -> bool:
    with open_db(path) as db:
        return db.execute("PRAGMA user_version").fetchone()[0] == 1 and db.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'misc_sizes'").fetchone()[0] == 1


def test_existing_output_without_force_is_untouched(run, small_snapshot, out_dir):
    target = out_dir / "report.sqlite"
    target.write_bytes(PRECIOUS)
    rc, out, err = run("report", small_snapshot, "-o", target, cwd=out_dir)
    assert rc == 1
    assert out == ""
    line = assert_one_error_line(err)
    assert "--force" in line and str(target) in line and "already exists" in line
    assert target.read_bytes() == PRECIOUS
    assert list_dir(out_dir) == ["report.sqlite"]


def test_existing_default_output_without_force(run, small_snapshot, out_dir):
    target = out_dir / "small.sqlite"  # the default name for small.pickle
    target.write_bytes(PRECIOUS)
    rc, out, err = run("report", small_snapshot, cwd=out_dir)
    assert rc == 1
    assert "--force" in assert_one_error_line(err)
    assert target.read_bytes() == PRECIOUS
    assert list_dir(out_dir) == ["small.sqlite"]


def test_existing_output_with_force_is_replaced(run, small_snapshot, out_dir):
    target = out_dir / "report.sqlite"
    target.write_bytes(PRECIOUS)
    rc, out, err = run("report", small_snapshot, "-o", target, "--force", "-q", cwd=out_dir)
    assert rc == 0, err
    assert out == "" and err == ""
    assert target.read_bytes() != PRECIOUS
    assert _is_report(target)
    assert list_dir(out_dir) == ["report.sqlite"]


def test_force_with_bad_input_keeps_the_existing_output(run, inputs_dir, out_dir):
    bad = inputs_dir / "bad.pickle"
    bad.write_bytes(_valid_pickle()[:12])
    target = out_dir / "report.sqlite"
    target.write_bytes(PRECIOUS)
    rc, out, err = run("report", bad, "-o", target, "--force", cwd=out_dir)
    assert rc == 1
    assert "truncated" in assert_one_error_line(err)
    assert target.read_bytes() == PRECIOUS
    assert list_dir(out_dir) == ["report.sqlite"]


def test_default_output_name_is_input_stem_in_cwd(run, small_snapshot, out_dir):
    rc, out, err = run("report", small_snapshot, cwd=out_dir)
    assert rc == 0, err
    assert list_dir(out_dir) == ["small.sqlite"]
    assert _is_report(out_dir / "small.sqlite")
    assert "report written to small.sqlite" in out


def test_output_into_missing_folder(run, small_snapshot, out_dir):
    target = out_dir / "no" / "such" / "dir" / "report.sqlite"
    rc, out, err = run("report", small_snapshot, "-o", target, cwd=out_dir)
    assert rc == 1
    assert out == ""
    line = assert_one_error_line(err)
    assert str(target) in line and "does not exist" in line
    assert list_dir(out_dir) == []


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_output_is_a_directory(run, small_snapshot, out_dir, force):
    target = out_dir / "reports"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    args = ["report", small_snapshot, "-o", target] + (["--force"] if force else [])
    rc, out, err = run(*args, cwd=out_dir)
    assert rc == 1
    assert out == ""
    assert "is a directory" in assert_one_error_line(err)
    assert list_dir(out_dir) == ["reports"]
    assert list_dir(target) == ["keep.txt"]


def test_summary_only_writes_nothing(run, small_snapshot, out_dir):
    rc, out, err = run("report", small_snapshot, "--summary-only", cwd=out_dir)
    assert rc == 0, err
    assert "peak allocated" in out
    assert "report written" not in out
    assert list_dir(out_dir) == []


def test_quiet_prints_nothing(run, small_snapshot, out_dir):
    rc, out, err = run("report", small_snapshot, "-q", cwd=out_dir)
    assert rc == 0, err
    assert out == "" and err == ""
    assert list_dir(out_dir) == ["small.sqlite"]


# --------------------------------------------------------------------------------------------
# Usage errors, --help, --version
# --------------------------------------------------------------------------------------------

USAGE_ERRORS = {
    "unknown-flag": (["report", "--bogus"], "--bogus"),
    "negative-top": (["report", "--top", "-1"], "--top"),
    "non-integer-top": (["report", "--top", "many"], "--top"),
    "device-not-a-number": (["report", "--device", "abc"], "--device"),
    "unknown-subcommand": (["frobnicate"], "frobnicate"),
    "two-inputs": (["report", "a.pickle", "b.pickle"], "b.pickle"),
    "missing-option-value": (["report", "-o"], "-o"),
    "missing-project-root": (["report", "--project-root", "/no/such/folder/anywhere"],
                             "--project-root"),
    "device-not-in-snapshot": (["report", "--device", "7"], "--device 7"),
}


@pytest.mark.parametrize("name", list(USAGE_ERRORS))
def test_usage_errors_exit_2(name, run, out_dir):
    args, mention = USAGE_ERRORS[name]
    rc, out, err = run(*args, cwd=out_dir)
    assert rc == 2, f"exit code {rc}: {err!r}"
    assert out == ""
    line = assert_one_error_line(err)
    assert mention in line, line
    assert list_dir(out_dir) == [], "a usage error must not write a report"


def test_no_subcommand_exits_2_with_help(run, out_dir):
    rc, out, err = run(cwd=out_dir)
    assert rc == 2
    assert out == ""
    assert "report" in err
    assert err.rstrip("\n").splitlines()[-1].startswith(ERROR_PREFIX)
    assert list_dir(out_dir) == []


def test_version(run, out_dir, tool_version):
    rc, out, err = run("--version", cwd=out_dir)
    assert rc == 0 and err == ""
    assert out == f"vramscope {tool_version}\n"
    assert tool_version[0].isdigit()


def test_help(run, out_dir):
    rc, out, err = run("--help", cwd=out_dir)
    assert rc == 0 and err == ""
    assert "report" in out
    assert list_dir(out_dir) == []


def test_report_help(run, out_dir):
    rc, out, err = run("report", "--help", cwd=out_dir)
    assert rc == 0 and err == ""
    for flag in ("--project-root", "--force", "--json", "--output", "--summary-only", "--top",
                 "--device", "--timings", "--quiet"):
        assert flag in out, flag
    assert list_dir(out_dir) == []


# --------------------------------------------------------------------------------------------
# 3. The built-in example
# --------------------------------------------------------------------------------------------


def test_built_in_example(run, out_dir):
    rc, out, err = run("report", cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    assert out.startswith("vramscope report: built-in example (recorded on an NVIDIA H200: a "
                          "2-layer MLP trained with Adam for 3 steps, torch 2.11; see "
                          "examples/README.md)\n"), out
    assert "synthetic" not in out
    assert "peak allocated  226.10 MiB (237,080,576 B)" in out
    assert "peak reserved   230.00 MiB (241,172,480 B)" in out
    assert "report written to vramscope-example.sqlite" in out
    assert list_dir(out_dir) == ["vramscope-example.sqlite"]
    assert _is_report(out_dir / "vramscope-example.sqlite")

    # The second time, the default-named report replaces the first (it is vramscope's own), and
    # says so; the same input gives the same database.
    rc, out, err = run("report", cwd=out_dir)
    assert rc == 0, err
    assert err == ""
    assert "report written to vramscope-example.sqlite (6 Skyline tables" in out
    assert out.rstrip().endswith("rows), replacing the earlier one"), out
    assert list_dir(out_dir) == ["vramscope-example.sqlite"]
    assert _is_report(out_dir / "vramscope-example.sqlite")

    rc, out, err = run("report", "--force", cwd=out_dir)
    assert rc == 0, err
    assert list_dir(out_dir) == ["vramscope-example.sqlite"]


def test_built_in_example_agrees_with_pytorch(run, out_dir):
    """The built-in example is a real capture: its peaks, its state at the dump and its counts are
    PyTorch's own (torch.cuda.max_memory_allocated/reserved and memory_stats in the sidecar)."""
    rc, out, err = run("report", "--json", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    sidecar = json.loads(BUILT_IN_SIDECAR.read_text())
    case = json.loads(BUILT_IN_METADATA.read_text())["cases"][BUILT_IN_CASE]
    stats = sidecar["snapshot"]["memory_before_dump"]["stats"]
    assert case["snapshot"] == BUILT_IN_PATH.name
    assert doc["source"]["bytes"] == BUILT_IN_PATH.stat().st_size == sidecar["snapshot"]["gz_bytes"]
    assert doc["source"]["events"] == BUILT_IN_EVENTS == sidecar["snapshot"]["summary"][
        "trace_events"]
    assert doc["source"]["allocations"] == BUILT_IN_ALLOCS == stats["allocation.all.allocated"]
    (device,) = doc["devices"]
    assert device["peak_allocated"]["bytes"] == BUILT_IN_PEAK_ALLOCATED == \
        case["max_memory_allocated"] == sidecar["peak"]["max_allocated"]
    assert device["peak_reserved"]["bytes"] == BUILT_IN_PEAK_RESERVED == \
        case["max_memory_reserved"] == sidecar["peak"]["max_reserved"]
    dump = device["at_dump"]
    assert dump["allocated_bytes"] == BUILT_IN_ALLOCATED_AT_DUMP == \
        stats["allocated_bytes.all.current"]
    assert dump["reserved_bytes"] == BUILT_IN_RESERVED_AT_DUMP == \
        stats["reserved_bytes.all.current"]
    assert dump["requested_bytes"] == stats["requested_bytes.all.current"]
    assert dump["segments"] == stats["segment.all.current"] == 15
    assert dump["active_blocks"] == stats["allocation.all.current"] == 19
    # Every step's peak is the one PyTorch measured over that step's phases, in the same phase.
    torch_steps: dict[int, tuple[int, str]] = {}
    for phase in sidecar["phases"]:
        peak = phase["memory"]["max_allocated"]
        if phase["step"] >= 1 and peak > torch_steps.get(phase["step"], (0, ""))[0]:
            torch_steps[phase["step"]] = (peak, phase["phase"])
    assert {it["step"]: (it["peak_allocated_bytes"], it["peak_phase"])
            for it in device["iterations"]} == torch_steps == {
                step: (BUILT_IN_PEAK_ALLOCATED, "optimizer") for step in (1, 2, 3)}


def test_built_in_example_is_the_golden(run, out_dir):
    """The embedded bytes are goldens/h200/mlp_adam_fp32.pickle.gz: reading the file gives the same
    report, apart from the name."""
    rc, built_in, err = run("report", "--json", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    rc, golden, err = run("report", BUILT_IN_PATH, "--json", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    built_in, golden = json.loads(built_in), json.loads(golden)
    assert built_in["source"].pop("built_in_example") is True
    assert golden["source"].pop("built_in_example") is False
    assert built_in["source"].pop("path") == BUILT_IN_NAME
    assert golden["source"].pop("path") == str(BUILT_IN_PATH)
    for key in ("source", "facts", "devices", "peak_usage_bytes"):
        assert built_in[key] == golden[key], key


def test_built_in_example_is_deterministic(run, out_dir):
    rc1, out1, _ = run("report", "--json", "--summary-only", cwd=out_dir)
    rc2, out2, _ = run("report", "--json", "--summary-only", cwd=out_dir)
    assert rc1 == rc2 == 0
    assert json.loads(out1) == json.loads(out2)


# --------------------------------------------------------------------------------------------
# 4. --json and --timings
# --------------------------------------------------------------------------------------------


# conftest.small_training_snapshot: 4 MiB + 4 KiB of weights and two 1 MiB activations live
# together, in one 8 MiB segment (its bump allocator's 2 MiB rounding of 6 MiB + 4 KiB).
SMALL_PEAKS = ((4 << 20) + 4096 + 2 * (1 << 20), 8 << 20)


def check_json_summary(doc: dict, report_path: str | None, peaks: tuple[int, int] | None) -> None:
    """`peaks`: the input's (peak allocated, peak reserved) in bytes, for a one-device input whose
    figures are known; None for the real snapshots, which record no peak of their own (their
    peaks are checked against what was live at the dump)."""
    for key in ("tool", "source", "facts", "devices", "report", "peak_usage_bytes"):
        assert key in doc, key
    assert doc["tool"]["name"] == "vramscope"
    assert doc["devices"], "no devices"
    if peaks is not None:
        (d,) = doc["devices"]
        assert (d["peak_allocated"]["bytes"], d["peak_reserved"]["bytes"]) == peaks
    for d in doc["devices"]:
        assert isinstance(d["device"], int)
        assert d["at_dump"]["allocated_bytes"] <= d["at_dump"]["reserved_bytes"]
        assert d["peak_allocated"]["bytes"] >= d["at_dump"]["allocated_bytes"]
        assert d["peak_reserved"]["bytes"] >= d["at_dump"]["reserved_bytes"]
        live = d["live_at_peak"]
        cats = [c["category"] for c in live["by_category"]]
        assert sorted(cats) == sorted(CATEGORIES), cats
        assert sum(c["bytes"] for c in live["by_category"]) == live["bytes"]
        assert sum(c["count"] for c in live["by_category"]) == live["count"]
        assert live["bytes"] == d["peak_allocated"]["bytes"]
    assert doc["peak_usage_bytes"] == max(d["peak_allocated"]["bytes"] for d in doc["devices"])
    if report_path is None:
        assert doc["report"] is None
    else:
        assert doc["report"]["path"] == report_path
        assert doc["report"]["skyline_tables"] == 6


def test_json_built_in_example(run, out_dir):
    # Only JSON was asked for: nothing is written.
    rc, out, err = run("report", "--json", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    check_json_summary(doc, None, (BUILT_IN_PEAK_ALLOCATED, BUILT_IN_PEAK_RESERVED))
    assert doc["source"]["built_in_example"] is True
    assert doc["source"]["path"] == BUILT_IN_NAME
    assert "timings_s" not in doc
    assert list_dir(out_dir) == []


def test_json_quiet_still_prints_json(run, small_snapshot, out_dir):
    rc, out, err = run("report", small_snapshot, "--json", "-q", "-o", "r.sqlite", cwd=out_dir)
    assert rc == 0, err
    check_json_summary(json.loads(out), "r.sqlite", SMALL_PEAKS)


def test_json_summary_only_has_null_report(run, small_snapshot, out_dir):
    rc, out, err = run("report", small_snapshot, "--json", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    check_json_summary(doc, None, SMALL_PEAKS)
    assert doc["source"]["built_in_example"] is False
    assert list_dir(out_dir) == []


def test_json_top_limits_sites(run, out_dir):
    rc, out, _ = run("report", "--json", "--summary-only", "--top", "1", cwd=out_dir)
    assert rc == 0
    for d in json.loads(out)["devices"]:
        assert len(d["live_at_peak"]["by_site"]) <= 1
    rc, out, _ = run("report", "--json", "--summary-only", "--top", "0", cwd=out_dir)
    assert rc == 0
    for d in json.loads(out)["devices"]:
        assert d["live_at_peak"]["by_site"] == []


def test_json_timings(run, out_dir):
    rc, out, err = run("report", "--json", "--timings", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    t = doc["timings_s"]
    stages = ("read", "parse", "build_model", "replay", "analyze", "write_report")
    assert set(t) == set(stages) | {"total", "peak_rss_bytes"}
    for k, v in t.items():
        assert isinstance(v, (int, float)) and v >= 0, (k, v)
    assert sum(t[s] for s in stages) <= t["total"] + 1e-3
    assert t["peak_rss_bytes"] > 1 << 20  # this process's VmHWM, in bytes


def test_text_timings(run, out_dir):
    rc, out, err = run("report", "--timings", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    assert "timings:" in out and "total" in out


@pytest.mark.parametrize("snapshot", real_snapshot_params())
def test_json_real_snapshots(snapshot, run, out_dir):
    rc, out, err = run("report", snapshot, "--json", "--summary-only", cwd=out_dir)
    assert rc == 0, err
    doc = json.loads(out)
    check_json_summary(doc, None, None)
    assert doc["source"]["path"] == str(snapshot)


# --------------------------------------------------------------------------------------------
# 6. --project-root
# --------------------------------------------------------------------------------------------


TORCH_FUNCTIONAL = "/usr/lib/python3/site-packages/torch/nn/functional.py"


def _project_snapshot(proj: Path, outside: Path) -> dict:
    """Weights allocated under Module._apply and activations under _call_impl, freed in backward,
    with user frames in proj/model.py (lines 10 and 20) and proj/train.py (line 40)."""
    model_py = str(proj / "model.py")
    train_py = str(proj / "train.py")
    b = SnapshotBuilder()
    weight_stack = [
        frame(MODULE_PY, 1143, "_apply"),
        frame(MODULE_PY, 1174, "to"),
        frame(model_py, 10, "build"),
        frame(train_py, 40, "main"),
    ]
    activation_stack = [
        frame(TORCH_FUNCTIONAL, 2573, "linear"),
        frame(MODULE_PY, 1527, "_call_impl"),
        frame(model_py, 20, "forward"),
        frame(str(outside / "helper.py"), 5, "helper"),  # a sibling folder ("proj-extra")
        frame(MODULE_PY, 1527, "_call_impl"),
        frame(train_py, 41, "main"),
    ]
    backward_stack = [frame(AUTOGRAD_PY, 266, "backward"), frame(train_py, 42, "main")]
    b.alloc(8 << 20, weight_stack)
    b.alloc(8 << 10, weight_stack)
    acts = [b.alloc(2 << 20, activation_stack) for _ in range(3)]
    for a in acts:
        b.free(a, backward_stack)
    return b.build()


@pytest.fixture
def project(tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    outside = tmp_path / "proj-extra"
    outside.mkdir()
    snapshot = write_pickle(tmp_path / "proj_snapshot.pickle",
                            _project_snapshot(proj.resolve(), outside.resolve()))
    return proj, snapshot


def _frames_by_entry(db_path: Path) -> dict:
    """{(entry_type, entry_name): [(ordering, file_path, line), ...]}"""
    with open_db(db_path) as db:
        rows = db.execute("""
            SELECT c.entry_type,
                   COALESCE(w.name, a.operation_name), f.ordering, f.file_path, f.line_number
            FROM stack_correlation c
            JOIN stack_frames f ON f.correlation_id = c.correlation_id
            LEFT JOIN weight_entries w ON c.entry_type = 1 AND w.id = c.entry_id
            LEFT JOIN activation_entries a ON c.entry_type = 2 AND a.id = c.entry_id
            ORDER BY c.correlation_id, f.ordering""").fetchall()
    out: dict = {}
    for entry_type, name, ordering, path, line in rows:
        out.setdefault((entry_type, name), []).append((ordering, path, line))
    return out


def test_project_root_relative_frames(run, project, tmp_path):
    proj, snapshot = project
    report = tmp_path / "proj.sqlite"
    rc, out, err = run("report", snapshot, "--project-root", proj, "-o", report, "-q",
                       cwd=tmp_path)
    assert rc == 0, err
    with open_db(report) as db:
        weights = db.execute("SELECT count(*) FROM weight_entries").fetchone()[0]
        activations = db.execute("SELECT count(*) FROM activation_entries").fetchone()[0]
        frames = db.execute("SELECT correlation_id, ordering, file_path, line_number "
                            "FROM stack_frames").fetchall()
        root = db.execute("SELECT value FROM vramscope_metadata WHERE key = 'project_root'"
                          ).fetchone()[0]
        categories = dict(db.execute("SELECT category, bytes FROM vramscope_categories_at_peak"))
    assert root == str(proj.resolve())
    assert weights == 2, "two weights are live at the peak"
    assert activations == 3, "three activations are live at the peak"
    assert categories["weight"] == (8 << 20) + (8 << 10)
    assert categories["activation"] == 3 * (2 << 20)
    assert frames, "stack_frames is empty"
    for _, _, path, line in frames:
        assert path in ("model.py", "train.py"), path  # only project files, relative
        assert line >= 1
    by_entry = _frames_by_entry(report)
    weight_stacks = [v for (t, _), v in by_entry.items() if t == 1]
    activation_stacks = [v for (t, _), v in by_entry.items() if t == 2]
    # by_entry merges entries with the same name; compare the frame lists themselves.
    for stack in weight_stacks:
        assert stack[:2] == [(0, "model.py", 10), (1, "train.py", 40)], stack
    for stack in activation_stacks:
        assert stack[:2] == [(0, "model.py", 20), (1, "train.py", 41)], stack
    with open_db(report) as db:
        per_correlation = db.execute(
            "SELECT c.entry_type, group_concat(f.file_path || ':' || f.line_number, ' ') "
            "FROM stack_correlation c JOIN stack_frames f USING (correlation_id) "
            "GROUP BY c.correlation_id ORDER BY c.correlation_id").fetchall()
    assert len(per_correlation) == 5
    for entry_type, frames_text in per_correlation:
        expected = "model.py:10 train.py:40" if entry_type == 1 else "model.py:20 train.py:41"
        assert frames_text == expected


def test_project_root_relative_argument(run, project, tmp_path):
    """--project-root given relative to the working folder means the same folder."""
    proj, snapshot = project
    rc, out, err = run("report", snapshot, "--project-root", "proj", "-o", "rel.sqlite", "-q",
                       cwd=tmp_path)
    assert rc == 0, err
    with open_db(tmp_path / "rel.sqlite") as db:
        paths = {r[0] for r in db.execute("SELECT file_path FROM stack_frames")}
    assert paths == {"model.py", "train.py"}


def test_project_root_defaults_to_cwd(run, project, tmp_path):
    proj, snapshot = project
    rc, out, err = run("report", snapshot, "-o", "cwd.sqlite", "-q", cwd=proj)
    assert rc == 0, err
    with open_db(proj / "cwd.sqlite") as db:
        paths = {r[0] for r in db.execute("SELECT file_path FROM stack_frames")}
    assert paths == {"model.py", "train.py"}


def test_no_absolute_paths_without_project_root(run, project, tmp_path):
    _, snapshot = project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rc, out, err = run("report", snapshot, "-o", "e.sqlite", "-q", cwd=elsewhere)
    assert rc == 0, err
    with open_db(elsewhere / "e.sqlite") as db:
        paths = [r[0] for r in db.execute("SELECT file_path FROM stack_frames")]
    for p in paths:
        assert not p.startswith("/") and not (len(p) > 1 and p[1] == ":"), p


def test_project_root_is_not_a_prefix_match(run, project, tmp_path):
    """proj-extra/helper.py is not inside proj even though the strings share a prefix."""
    proj, snapshot = project
    rc, _, err = run("report", snapshot, "--project-root", proj, "-o", "p.sqlite", "-q",
                     cwd=tmp_path)
    assert rc == 0, err
    with open_db(tmp_path / "p.sqlite") as db:
        paths = {r[0] for r in db.execute("SELECT file_path FROM stack_frames")}
    assert not any("helper" in p for p in paths), paths


def test_project_root_parent_includes_sibling(run, project, tmp_path):
    """With the parent as the root, both folders are the project, as relative paths."""
    _, snapshot = project
    rc, _, err = run("report", snapshot, "--project-root", tmp_path, "-o", "t.sqlite", "-q",
                     cwd=tmp_path)
    assert rc == 0, err
    with open_db(tmp_path / "t.sqlite") as db:
        paths = {r[0] for r in db.execute("SELECT file_path FROM stack_frames")}
    assert paths == {"proj/model.py", "proj/train.py", "proj-extra/helper.py"}


# --------------------------------------------------------------------------------------------
# 7. Interrupt safety
# --------------------------------------------------------------------------------------------

BIG_ENTRIES = 100_000  # allocations; ~300k trace entries in all


@pytest.fixture(scope="module")
def big_snapshot(tmp_path_factory) -> Path:
    """~300k trace entries over 64 recycled 1 MiB slots (about 12 MB of pickle)."""
    path = tmp_path_factory.mktemp("big") / "big.pickle"
    base, slots = 0x7F00_0000_0000, 64
    stacks = [[frame(MODULE_PY, 1527, "_call_impl"),
               frame(f"/home/u/proj/m{k}.py", k + 1, "forward")] for k in range(16)]
    free_stack = [frame(AUTOGRAD_PY, 266, "backward")]
    entries = [{"action": "segment_alloc", "addr": base, "size": slots << 20, "stream": 0,
                "time_us": 0, "frames": []}]
    t = 1
    for i in range(BIG_ENTRIES):
        addr = base + ((i % slots) << 20)
        if i >= slots:
            for action in ("free_requested", "free_completed"):
                entries.append({"action": action, "addr": addr, "size": 1 << 20, "stream": 0,
                                "time_us": t, "frames": free_stack})
                t += 1
        entries.append({"action": "alloc", "addr": addr, "size": 1 << 20, "stream": 0,
                        "time_us": t, "frames": stacks[i % 16]})
        t += 1
    blocks = [{"address": base + (s << 20), "size": 1 << 20, "requested_size": 1 << 20,
               "state": "active_allocated", "frames": stacks[s % 16]} for s in range(slots)]
    seg = {"device": 0, "address": base, "total_size": slots << 20,
           "allocated_size": slots << 20, "active_size": slots << 20,
           "requested_size": slots << 20, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}
    return write_pickle(path, {"segments": [seg], "device_traces": [entries]})


def _start(args, cwd) -> subprocess.Popen:
    return subprocess.Popen([str(BIN), *[str(a) for a in args]], cwd=str(cwd),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def test_big_snapshot_completes(vramscope_bin, big_snapshot, out_dir):
    """The uninterrupted run works (so the interrupt tests below test something real)."""
    proc = _start(["report", big_snapshot, "-o", "out.sqlite", "-q"], out_dir)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert list_dir(out_dir) == ["out.sqlite"]
    with open_db(out_dir / "out.sqlite") as db:
        # Alloc/free events are the ends of allocation lifetimes; the rest are events.
        assert db.execute(
            "SELECT (SELECT count(alloc_event) + count(free_requested_event) + "
            "count(free_completed_event) FROM vramscope_allocations) + "
            "(SELECT count(*) FROM vramscope_events)").fetchone()[0] == \
            3 * BIG_ENTRIES - 2 * 64 + 1


def test_sigint_after_200ms_leaves_nothing(vramscope_bin, big_snapshot, out_dir):
    proc = _start(["report", big_snapshot, "-o", "out.sqlite", "-q"], out_dir)
    time.sleep(0.2)
    if proc.poll() is not None:
        proc.communicate()
        pytest.skip("vramscope finished before the signal")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("vramscope finished before the signal arrived")
    assert proc.returncode != 0
    assert list_dir(out_dir) == [], list_dir(out_dir)


def _interrupt_while_writing(big_snapshot, out_dir, sig, extra=()):
    """Starts a report, waits until its hidden temporary file exists, then sends `sig`."""
    proc = _start(["report", big_snapshot, "-o", "out.sqlite", "-q", *extra], out_dir)
    deadline = time.monotonic() + 30
    seen = None
    while time.monotonic() < deadline and proc.poll() is None:
        temps = [n for n in os.listdir(out_dir) if n.startswith(".out.sqlite")]
        if temps:
            seen = temps[0]
            proc.send_signal(sig)
            break
        time.sleep(0.0005)
    proc.communicate(timeout=60)
    if seen is None:
        pytest.skip("vramscope finished before its temporary file was seen")
    if proc.returncode == 0:
        pytest.skip("vramscope finished before the signal arrived")
    return proc.returncode, seen


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_writing_removes_temp_file(vramscope_bin, big_snapshot, out_dir, sig):
    rc, temp = _interrupt_while_writing(big_snapshot, out_dir, sig)
    assert rc == 130, rc
    assert temp.startswith(".out.sqlite.tmp-"), temp
    assert list_dir(out_dir) == [], list_dir(out_dir)


def test_sigint_while_writing_keeps_existing_output(vramscope_bin, big_snapshot, out_dir):
    (out_dir / "out.sqlite").write_bytes(PRECIOUS)
    rc, _ = _interrupt_while_writing(big_snapshot, out_dir, signal.SIGINT, extra=("--force",))
    assert rc == 130
    assert list_dir(out_dir) == ["out.sqlite"]
    assert (out_dir / "out.sqlite").read_bytes() == PRECIOUS
