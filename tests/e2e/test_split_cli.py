"""End-to-end tests of `vramscope split SNAPSHOT --slices N`: each piece is a PyTorch memory
snapshot of its part of the trace with the allocator's state at its end. Read back by
`vramscope report`, the pieces' allocated and reserved curves, one after the other, are the whole
recording's; PyTorch's own memory_viz opens each; and bad requests fail in one line, leaving
nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import (REAL_FIXTURES, REPO, assert_failure, list_dir, real_snapshot_params,
                      report_curves, run_binary)

H100_GPT = REPO / "goldens" / "h100" / "gpt_adamw_bf16.pickle.gz"


def split(tmp_path: Path, slices: int, *snapshot: str) -> list[Path]:
    folder = tmp_path / "pieces"
    folder.mkdir()
    rc, out, err = run_binary("split", *snapshot, "--slices", slices, "-o", folder, cwd=tmp_path,
                              timeout=300)
    assert rc == 0, err
    assert f"split into {slices} snapshots" in out, out
    pieces = sorted(folder.iterdir(), key=lambda p: int(p.name.rsplit(".part", 1)[1].split("of")[0]))
    assert len(pieces) == slices, pieces
    return pieces


def check_pieces(tmp_path: Path, slices: int, *snapshot: str) -> list[Path]:
    whole = report_curves(tmp_path, *snapshot)
    pieces = split(tmp_path, slices, *snapshot)
    joined: dict[int, list[tuple[int, int]]] = {}
    for piece in pieces:
        for device, points in report_curves(tmp_path, str(piece)).items():
            joined.setdefault(device, []).extend(points)
    assert joined == whole
    return pieces


def test_the_built_in_examples_pieces_replay_as_the_whole(vramscope_bin, tmp_path):
    pieces = check_pieces(tmp_path, 3)
    assert [p.name for p in pieces] == [f"vramscope-example.part{i}of3.pickle" for i in (1, 2, 3)]


def test_a_captures_pieces_replay_as_the_whole(vramscope_bin, tmp_path):
    check_pieces(tmp_path, 5, str(H100_GPT))


@pytest.mark.parametrize("snapshot", real_snapshot_params())
def test_real_snapshots_pieces_replay_as_the_whole(vramscope_bin, tmp_path, snapshot):
    whole = report_curves(tmp_path, str(snapshot))
    if min(len(v) for v in whole.values()) < 8:
        pytest.skip(f"{snapshot.name} holds too few trace events to split")
    check_pieces(tmp_path, 4, str(snapshot))


def torch_python() -> str:
    python = os.environ.get("VRAMSCOPE_TORCH_PYTHON")
    if not python:
        pytest.skip("no Python with torch for memory_viz (VRAMSCOPE_TORCH_PYTHON)")
    return python


def test_json_names_each_piece_and_its_events(vramscope_bin, tmp_path):
    rc, out, err = run_binary("split", "--slices", "3", "--json", "-q", cwd=tmp_path)
    assert rc == 0, err
    doc = json.loads(out)  # and run_binary checked it against schemas/split.schema.json
    assert doc["slices"] == 3 and len(doc["pieces"]) == 3
    last = 0
    for piece in doc["pieces"]:
        assert Path(piece["path"]).stat().st_size == piece["bytes"]
        (device,) = piece["devices"]
        assert device["first_event"] == last + 1
        last = device["last_event"]
    assert last == device["events_in_trace"] == 193


# PyTorch's memory_viz on each piece, in one Python (importing torch takes seconds): the
# functions behind `python -m torch.cuda._memory_viz stats|trace|trace_plot|segment_plot`.
MEMORY_VIZ = """
import pickle, sys
from torch.cuda import _memory_viz as viz
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        data = pickle.load(f)
    viz.segsum(data)
    viz.trace(data)
    assert len(viz.trace_plot(data)) > 5000
    assert len(viz.segment_plot(data)) > 5000
    print("ok", path)
"""


def test_pytorchs_memory_viz_opens_every_piece(vramscope_bin, tmp_path):
    python = torch_python()
    pieces = split(tmp_path, 3, str(H100_GPT))
    proc = subprocess.run([python, "-W", "ignore", "-c", MEMORY_VIZ, *map(str, pieces)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("ok ") == 3


@pytest.mark.parametrize("args, phrases", [
    (["--slices", "1"], ["--slices 1", "2 to 10000"]),
    (["--slices", "3", "-o", "nowhere"], ["-o nowhere", "not a folder"]),
    ([], ["--slices"]),
])
def test_bad_requests_fail_in_one_line(vramscope_bin, tmp_path, args, phrases):
    rc, out, err = run_binary("split", *args, cwd=tmp_path)
    assert_failure(rc, out, err, 2, phrases, tmp_path)


def test_existing_pieces_are_kept_and_nothing_is_written(vramscope_bin, tmp_path):
    (tmp_path / "vramscope-example.part2of3.pickle").write_text("mine")
    rc, out, err = run_binary("split", "--slices", "3", cwd=tmp_path)
    assert rc != 0
    assert "part2of3" in err and "--force" in err, err
    assert list_dir(tmp_path) == ["vramscope-example.part2of3.pickle"]
    assert (tmp_path / "vramscope-example.part2of3.pickle").read_text() == "mine"
    rc, _, err = run_binary("split", "--slices", "3", "--force", "-q", cwd=tmp_path)
    assert rc == 0, err
    assert len(list_dir(tmp_path)) == 3


def test_a_second_split_replaces_the_pieces_the_first_wrote(vramscope_bin, tmp_path):
    for _ in range(2):
        rc, out, err = run_binary("split", "--slices", "2", cwd=tmp_path)
        assert rc == 0, err
    assert "(replacing the pieces an earlier split wrote)" in out, out
    assert len(list_dir(tmp_path)) == 2


def test_only_a_snapshot_with_its_trace_splits(vramscope_bin, tmp_path):
    kineto = REAL_FIXTURES / "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz"
    if not kineto.is_file():
        pytest.skip(f"{kineto} is absent")
    rc, out, err = run_binary("split", kineto, "--slices", "2", cwd=tmp_path)
    assert rc != 0
    assert_failure(rc, out, err, rc, ["split needs a memory snapshot", "Kineto"], tmp_path)
