"""`vramscope report` on integers a snapshot's fields can carry out of their range (issue 15).

A real torch.compile snapshot (torch 2.6, Python 3.13) has frames whose `line` is 2^64-1:
PyTorch keeps line numbers unsigned and writes an unsigned -1 for generated code without one,
and pickle stores it as a 9-byte LONG1 that no int64 holds. Such a frame is read with an unknown
line, shown without a number. Sizes out of range are still refused, with one line naming the
field, the entry, the range and what to do.
"""

from __future__ import annotations

import json
import pickle

from conftest import (AUTOGRAD_PY, MODULE_PY, SnapshotBuilder, assert_failure, frame, open_db,
                      write_pickle)

UNSIGNED_MINUS_ONE = 2**64 - 1
DYNAMO_PY = "/usr/lib/python3.13/site-packages/torch/_dynamo/eval_frame.py"


def _compiled_snapshot(proj) -> dict:
    """Activations made inside a torch.compile'd forward: the compiled frame keeps the user's
    file and function but has no line (2^64-1), as torch 2.6 on Python 3.13 writes it."""
    model_py = str(proj / "model.py")
    train_py = str(proj / "train.py")
    b = SnapshotBuilder()
    compiled_stack = [
        frame(model_py, UNSIGNED_MINUS_ONE, "forward"),
        frame(DYNAMO_PY, 574, "_fn"),
        frame(MODULE_PY, 1527, "_call_impl"),
        frame(train_py, 30, "train_step"),
    ]
    weight_stack = [frame(MODULE_PY, 1143, "_apply"), frame(train_py, 12, "main")]
    backward_stack = [frame(AUTOGRAD_PY, 266, "backward"), frame(train_py, 31, "train_step")]
    b.alloc(4 << 20, weight_stack)
    live = b.alloc(3 << 20, compiled_stack)  # live at the peak and at the dump
    freed = b.alloc(1 << 20, compiled_stack)
    b.free(freed, backward_stack)
    assert live
    return b.build()


def test_torch_compile_frame_with_unsigned_minus_one_line(run, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    snapshot = write_pickle(tmp_path / "compiled.pickle", _compiled_snapshot(proj.resolve()))
    # The file has the real file's shape: LONG1, 9 bytes, ff x 8 then the sign byte.
    assert b"\x8a\x09" + b"\xff" * 8 + b"\x00" in snapshot.read_bytes()
    report = tmp_path / "compiled.sqlite"
    rc, out, err = run("report", snapshot, "--project-root", proj, "-o", report, cwd=tmp_path)
    assert rc == 0, err
    assert err == ""
    # The compiled frame names the allocation site, without a line number.
    assert "model.py forward" in out, out
    for bad in ("18446744073709551615", "model.py:0 ", "model.py:-1"):
        assert bad not in out, (bad, out)
    assert "train.py:12 main" in out  # frames with a line keep it
    with open_db(report) as db:
        lines = dict(db.execute(
            "SELECT function, line_number FROM vramscope_frames WHERE file_path LIKE '%model.py'"))
        project_frames = db.execute(
            "SELECT DISTINCT file_path, line_number FROM stack_frames ORDER BY 1, 2").fetchall()
    assert lines == {"forward": 0}, lines  # 0: unknown
    assert ("model.py", 0) in project_frames, project_frames
    assert ("train.py", 30) in project_frames, project_frames
    rc, out, err = run("report", snapshot, "--project-root", proj, "--json", "--summary-only",
                       cwd=tmp_path)
    assert rc == 0, err
    sites = json.dumps(json.loads(out)["devices"][0]["live_at_peak"]["by_site"])
    assert "model.py forward" in sites, sites
    assert "18446744073709551615" not in sites


def test_out_of_range_line_in_every_protocol(run, tmp_path):
    """The same through protocol 2 (what C++'s _memory_snapshot_pickled writes) and 5."""
    proj = tmp_path / "proj"
    proj.mkdir()
    snap = _compiled_snapshot(proj.resolve())
    for protocol in (2, 5):
        path = write_pickle(tmp_path / f"p{protocol}.pickle", snap, protocol=protocol)
        rc, out, err = run("report", path, "--project-root", proj, "--summary-only",
                           cwd=tmp_path)
        assert rc == 0, (protocol, err)
        assert "model.py forward" in out


def test_impossible_size_is_one_line_naming_field_entry_and_range(run, tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    snap = _compiled_snapshot(tmp_path)
    snap["device_traces"][0][2]["size"] = UNSIGNED_MINUS_ONE
    path = inputs / "bad_size.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    rc, out, err = run("report", path, "-o", out_dir / "r.sqlite", cwd=out_dir)
    assert_failure(rc, out, err, 1, [
        "bad_size.pickle: device_traces[0][2]: 'size' is 18446744073709551615",
        "expected a size in bytes: an integer from 0 to 2^50",
        "dump it again with torch.cuda.memory._dump_snapshot()",
    ], out_dir)
