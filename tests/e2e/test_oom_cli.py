"""`vramscope report` explains a CUDA out-of-memory (src/analysis/oom.h): the failing request, the
levels and free blocks at that moment, the verdict (fragmentation or used up, under the device or
a process cap), what was live then and one hint. Checked against PyTorch's own error message and
memory_stats for the real OOM golden captured on an H200, on a synthetic fragmented snapshot, and
on the real fixtures (none records an `oom` entry: nothing may be invented for them)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from conftest import (REPO, SnapshotBuilder, frame, open_db, real_snapshot_params, run_binary,
                      write_pickle)

OOM = REPO / "goldens" / "h200" / "oom_gpt_fp32.pickle.gz"
SIDECAR = REPO / "goldens" / "h200" / "oom_gpt_fp32.json"
MIB = 1 << 20
GIB = 1 << 30


def _golden():
    if not OOM.is_file() or not SIDECAR.is_file():
        pytest.skip("no OOM golden")
    return json.loads(SIDECAR.read_text())


def _message_figures(message: str) -> dict:
    """The figures of PyTorch's OOM message, as it printed them (two decimals)."""
    patterns = {
        "tried_mib": r"Tried to allocate ([\d.]+) MiB",
        "free_gib": r"of which ([\d.]+) GiB is free",
        "allowed_gib": r"([\d.]+) GiB allowed",
        "allocated_gib": r"([\d.]+) GiB is allocated by PyTorch",
        "unallocated_mib": r"([\d.]+) MiB is reserved by PyTorch but unallocated",
    }
    out = {}
    for key, pattern in patterns.items():
        m = re.search(pattern, message)
        assert m, f"{key}: {pattern!r} not in {message!r}"
        out[key] = m.group(1)
    return out


def _json_report(path, tmp_path) -> dict:
    code, out, err = run_binary("report", "--json", "--summary-only", path, cwd=tmp_path)
    assert code == 0, err
    return json.loads(out)


def test_golden_oom_is_explained_as_pytorch_reported_it(tmp_path):
    sidecar = _golden()
    fig = _message_figures(sidecar["failure"]["message"])
    (device,) = _json_report(OOM, tmp_path)["devices"]
    oom = device["oom"]
    assert oom is not None and device["ooms"] == [oom]

    # The failing request: PyTorch's "Tried to allocate" is the segment it asked CUDA for.
    req = oom["request"]
    assert req["requested_bytes"] == 256 * MIB
    assert f"{req['segment_bytes'] / MIB:.2f}" == fig["tried_mib"]
    assert req["block_bytes"] == req["segment_bytes"] == 256 * MIB
    assert req["pool"] == "large" and req["stream"] == 0
    assert req["site"] and "models.py" in req["site"]
    assert req["operation"] and req["operation"].startswith("aten::")

    # The levels at the OOM are exactly PyTorch's: allocated and reserved were at their peaks.
    assert oom["allocated_bytes"] == sidecar["max_memory_allocated"] == 3_015_499_776
    assert oom["reserved_bytes"] == sidecar["max_memory_reserved"] == 3_030_384_640
    assert oom["reserved_free_bytes"] == 3_030_384_640 - 3_015_499_776 == 14_884_864
    assert f"{oom['allocated_bytes'] / GIB:.2f}" == fig["allocated_gib"]
    assert f"{oom['reserved_free_bytes'] / MIB:.2f}" == fig["unallocated_mib"]
    assert f"{oom['device_free_bytes'] / GIB:.2f}" == fig["free_gib"]

    # The free blocks rebuilt at the event: all of the reserved-but-free bytes, none big enough.
    blocks = oom["free_blocks"]
    assert blocks is not None, oom["free_blocks_note"]
    assert blocks["total_bytes"] == oom["reserved_free_bytes"]
    assert blocks["largest_usable_bytes"] < req["block_bytes"]
    assert blocks["usable_bytes"] <= blocks["total_bytes"]

    # Not fragmentation: the memory was used up, under the process's cap (3.00 GiB allowed), not
    # the device's (136 GiB free).
    assert oom["fragmentation"] is False
    assert oom["limit"] == "allocator_cap"
    cap = sidecar["cap_bytes"]
    assert f"{cap / GIB:.2f}" == fig["allowed_gib"]
    assert oom["cap_bytes"]["at_least"] <= cap < oom["cap_bytes"]["below"]
    assert oom["cap_bytes"]["below"] == oom["reserved_bytes"] + req["segment_bytes"]
    assert "set_per_process_memory_fraction" in oom["hint"]
    assert "expandable_segments" not in oom["hint"]

    # Where: the step and phase the capture script says it failed in.
    assert oom["step"] == sidecar["failure"]["step"]
    assert oom["phase"] == sidecar["failure"]["phase"]

    # Live at the OOM, not at the dump (the dump was taken after the exception unwound).
    live = oom["live"]
    assert live["bytes"] == oom["allocated_bytes"]
    assert sum(c["bytes"] for c in live["by_category"].values()) == live["bytes"]
    assert sum(c["count"] for c in live["by_category"].values()) == live["count"]
    assert device["at_dump"]["allocated_bytes"] == \
        sidecar["memory_stats_after"]["allocated_bytes.all.current"]
    assert device["at_dump"]["allocated_bytes"] < live["bytes"]
    assert live["largest_owners"] and live["by_site"]
    assert live["largest_owners"][0]["bytes"] >= live["largest_owners"][-1]["bytes"]


def test_golden_oom_block_opens_the_device_section(tmp_path):
    _golden()
    code, out, err = run_binary("report", "--summary-only", OOM, cwd=tmp_path)
    assert code == 0, err
    section = out[out.index("cuda:0"):]
    block = section[:section.index("peak allocated")]
    assert "OUT OF MEMORY at event 152 of 230 (step 1, forward)" in block
    assert "tried to allocate 256.00 MiB (268,435,456 B)" in block
    assert "2.81 GiB allocated, 2.82 GiB reserved (14.20 MiB reserved but free" in block
    assert "largest free block" in block
    assert "device had 136.31 GiB free" in block
    assert "live then: 2.81 GiB in" in block
    assert len([ln for ln in block.splitlines() if ln.strip().startswith("hint: ")]) == 1


def test_golden_oom_tables(tmp_path):
    _golden()
    code, out, err = run_binary("report", "--json", OOM, "-o", "oom.sqlite", cwd=tmp_path)
    assert code == 0, err
    oom = json.loads(out)["devices"][0]["oom"]
    con = open_db(tmp_path / "oom.sqlite")
    con.row_factory = sqlite3.Row
    (row,) = con.execute("SELECT * FROM vramscope_oom").fetchall()
    assert row["event"] == oom["event"]
    assert (row["requested_bytes"], row["block_bytes"], row["segment_bytes"]) == (
        256 * MIB, 256 * MIB, 256 * MIB)
    assert row["allocated_bytes"] == 3_015_499_776
    assert row["reserved_bytes"] == 3_030_384_640
    assert row["reserved_free_bytes"] == 14_884_864
    assert row["device_free_bytes"] == oom["device_free_bytes"]
    assert row["largest_free_block_bytes"] == oom["free_blocks"]["largest_usable_bytes"]
    assert row["fragmentation"] == 0 and row["limited_by"] == "allocator_cap"
    assert row["free_blocks_note"] is None
    assert (row["step"], row["phase"]) == (1, "forward")
    categories = ("weight", "gradient", "optimizer_state", "activation", "input", "workspace",
                  "temporary", "unknown")
    assert sum(row[c] for c in categories) == row["live_bytes"] == 3_015_499_776
    assert row["verdict"] == oom["verdict"] and row["hint"] == oom["hint"]
    # The oom event is the same one vramscope_events lists; its stack is in vramscope_stacks.
    assert [tuple(r) for r in con.execute(
        "SELECT id FROM vramscope_events WHERE action = 'oom'")] == [(row["event"],)]
    assert con.execute("SELECT count(*) FROM vramscope_stacks WHERE id = ?",
                       (row["stack_id"],)).fetchone()[0] == 1
    owners = con.execute("SELECT sum(bytes), sum(count) FROM vramscope_owners_at_oom "
                         "WHERE device = 0 AND event = ?", (row["event"],)).fetchone()
    assert tuple(owners) == (row["live_bytes"], row["live_count"])


def _fragmented_snapshot() -> dict:
    """One 32 MiB segment holding four 8 MiB tensors; the 2nd and 4th are freed, then a 12 MiB
    request fails with 1 MiB free on the device: 16 MiB reserved but free, in two 8 MiB blocks.
    The unwinding frees the rest before the dump."""
    b = SnapshotBuilder()
    user = "/home/user/proj/train.py"
    stack = [frame(user, 30, "forward"), frame(user, 50, "main")]
    addrs = [b.alloc(8 * MIB, stack) for _ in range(4)]
    b.free(addrs[1])
    b.free(addrs[3])
    b.entries.append({"action": "oom", "size": 12 * MIB, "stream": 0, "device_free": 1 * MIB,
                      "time_us": b._tick(), "frames": stack})
    b.free(addrs[0])
    b.free(addrs[2])
    return b.build()


def test_fragmentation_is_diagnosed_with_the_expandable_segments_hint(tmp_path):
    snap = write_pickle(tmp_path / "frag.pickle", _fragmented_snapshot())
    (device,) = _json_report(snap, tmp_path)["devices"]
    oom = device["oom"]
    assert device["at_dump"]["allocated_bytes"] == 0
    assert oom["request"]["segment_bytes"] == 12 * MIB
    assert oom["allocated_bytes"] == 16 * MIB
    assert oom["reserved_bytes"] == 32 * MIB
    assert oom["reserved_free_bytes"] == 16 * MIB
    assert oom["device_free_bytes"] == 1 * MIB
    assert oom["free_blocks"]["largest_usable_bytes"] == 8 * MIB
    assert oom["free_blocks"]["usable_blocks"] == 2
    assert oom["fragmentation"] is True
    assert oom["limit"] == "device"
    assert oom["cap_bytes"] is None
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in oom["hint"]
    assert oom["live"]["bytes"] == 16 * MIB and oom["live"]["count"] == 2
    assert oom["request"]["site"].endswith("train.py:30 forward")

    code, out, err = run_binary("report", "--summary-only", snap, cwd=tmp_path)
    assert code == 0, err
    assert "why: fragmentation" in out
    assert "expandable_segments:True" in out


def test_a_snapshot_without_an_oom_has_no_explanation(tmp_path, small_snapshot):
    (device,) = _json_report(small_snapshot, tmp_path)["devices"]
    assert device["oom"] is None and device["ooms"] == []
    code, out, err = run_binary("report", "--summary-only", small_snapshot, cwd=tmp_path)
    assert code == 0, err
    assert "OUT OF MEMORY" not in out


@pytest.mark.parametrize("path", real_snapshot_params())
def test_real_fixtures_explain_exactly_the_ooms_they_record(tmp_path, path):
    """An explanation for every recorded `oom` entry, and none invented: the flexgen snapshot was
    dumped at an OOM, but without the trace entry there is no failing request to explain."""
    code, out, err = run_binary("report", "--json", path, "-o", "r.sqlite", cwd=tmp_path,
                                timeout=120)
    assert code == 0, err
    summary = json.loads(out)
    con = open_db(tmp_path / "r.sqlite")
    recorded = con.execute("SELECT device, id FROM vramscope_events WHERE action = 'oom' "
                           "ORDER BY device, id").fetchall()
    explained = [(d["device"], o["event"]) for d in summary["devices"] for o in d["ooms"]]
    assert explained == [tuple(r) for r in recorded]
    assert con.execute("SELECT count(*) FROM vramscope_oom").fetchone()[0] == len(recorded)
    for d in summary["devices"]:
        assert (d["oom"] is None) == (not d["ooms"])
        for o in d["ooms"]:
            assert 0 <= o["allocated_bytes"] <= o["reserved_bytes"]
            assert o["live"]["bytes"] == sum(c["bytes"] for c in o["live"]["by_category"].values())
            assert o["verdict"] and o["hint"]
