"""`vramscope report` on snapshots whose allocator state PyTorch cannot have written (issue 19).

PyTorch builds a snapshot by walking each segment's blocks, so the segments of a device are
disjoint, blocks tile their segment and the segment totals are the sums over the blocks. A file
that breaks one of these is damaged (or was not written by PyTorch): it is refused with one line
naming the first offending segment or block and what is wrong with its numbers, and nothing is
written. A consistent file still loads.
"""

from __future__ import annotations

from conftest import SnapshotBuilder, assert_failure, list_dir, write_pickle

MIB = 1 << 20
REMEDY = "dump it again with torch.cuda.memory._dump_snapshot()"


def _free_segment(address: int, total: int = 2 * MIB) -> dict:
    return {"device": 0, "address": address, "total_size": total, "allocated_size": 0,
            "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
            "blocks": [{"address": address, "size": total, "requested_size": 0,
                        "state": "inactive", "frames": []}]}


def test_a_thousand_segments_at_address_zero_are_refused(run, tmp_path, inputs_dir, out_dir):
    snap = {"segments": [_free_segment(0) for _ in range(1000)], "device_traces": [[]]}
    path = write_pickle(inputs_dir / "stacked.pickle", snap)
    rc, out, err = run("report", path, "-o", out_dir / "r.sqlite", cwd=out_dir)
    line = assert_failure(rc, out, err, 1, [
        "stacked.pickle: segments[1]: [0x0, 0x200000) overlaps segments[0] [0x0, 0x200000) on "
        "device 0: the segments of a device are disjoint",
        REMEDY,
    ], out_dir)
    assert "segments[2]" not in line  # one line, for the first offending segment only
    assert list_dir(tmp_path) == ["inputs", "out"]  # nothing written beside the input either


def test_totals_that_do_not_add_up_are_refused(run, inputs_dir, out_dir):
    snap = SnapshotBuilder()
    snap.alloc(4096)
    built = snap.build()
    built["segments"][0]["allocated_size"] += 512
    path = write_pickle(inputs_dir / "sums.pickle", built)
    rc, out, err = run("report", path, "-o", out_dir / "r.sqlite", cwd=out_dir)
    assert_failure(rc, out, err, 1, [
        "sums.pickle: segments[0]: 'allocated_size' is 4608, but its active_allocated blocks' "
        "sizes sum to 4096",
        REMEDY,
    ], out_dir)


def test_adjacent_segments_load(run, inputs_dir, out_dir):
    base = 0x7F00_0000_0000
    snap = {"segments": [_free_segment(base + 2 * MIB), _free_segment(base)],
            "device_traces": [[]]}
    path = write_pickle(inputs_dir / "adjacent.pickle", snap)
    rc, out, err = run("report", path, "-o", out_dir / "r.sqlite", "-q", cwd=out_dir)
    assert rc == 0, err
    assert list_dir(out_dir) == ["r.sqlite"]
