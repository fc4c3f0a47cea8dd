"""Memory by region (issue 16) on every real recording: the committed H200 goldens (50 external
annotations each, user_metadata on their entries, compile_context "N/A") and the shared real
snapshots (a torch 2.6 torch.compile run with 1,802 dynamo_timed annotations, a torch 2.11 run with
compile_context on 5,163 entries).

The regions are worked out here again, from the pickle, by a separate reading of the rules
(src/analysis/regions.h): which region each allocation falls in (its alloc entry's
compile_context / user_metadata, the innermost external_annotations range open at its time), each
region's allocations and bytes, what of it was live at the device's peak, and its own peak.
Lifetimes and block sizes are the report's vramscope_allocations (the replay's exact sizes,
checked against PyTorch's own counters by test_goldens.py); the peak event is vramscope_devices'.
A few regions are pinned to exact bytes, so a drift in either reading fails.

The pickles are read with an unpickler that refuses every global (a snapshot holds only dicts,
lists, str, int, float, bool and None), so no file can run code here.
"""

from __future__ import annotations

import gzip
import json
import pickle
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REAL_FIXTURES, REPO, open_db, run_binary

GOLDENS = sorted((REPO / "goldens" / "h200").glob("*.pickle.gz")) + sorted(
    (REPO / "goldens" / "h200" / "hf").glob("*.pickle.gz"))
REAL = sorted(REAL_FIXTURES.glob("*.pickle")) if REAL_FIXTURES.is_dir() else []

NONE = "(none)"
BEFORE = "(before the trace)"


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a snapshot holds no globals ({module}.{name})")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("a snapshot holds no persistent ids")


def load_snapshot(path: Path):
    with (gzip.open(path) if path.suffix == ".gz" else open(path, "rb")) as f:
        return _NoGlobals(f).load()


def text(entry: dict, key: str):
    v = entry.get(key)
    return None if v is None or v == "" else str(v)


def ranges_of(annotations: list, device: int, trace_start: int, trace_end: int) -> list:
    """(name, start, end, depth) of one device's START/END pairs: an END closes the latest open
    START of its name; an END alone runs from the trace's start, a START alone to its end."""
    marks = [(a["time_us"], i, a["name"], a["stage"]) for i, a in enumerate(annotations)
             if a.get("device", 0) == device and "name" in a and a.get("stage") in ("START", "END")
             and a.get("time_us") is not None]
    marks.sort(key=lambda m: (m[0], m[1]))
    out, open_ = [], []
    for time, _, name, stage in marks:
        if stage == "START":
            open_.append((name, time, len(open_)))
            continue
        for k in range(len(open_) - 1, -1, -1):
            if open_[k][0] == name:
                out.append((name, open_[k][1], time, open_[k][2]))
                del open_[k]
                break
        else:
            out.append((name, min(trace_start, time), time, 0))
    for name, start, depth in open_:
        out.append((name, start, max(trace_end, start), depth))
    return out


def expected(snap: dict, db) -> dict:
    """{(device, kind): {region name: (allocations, allocated_bytes, live_at_peak_bytes,
    live_at_peak_count, peak_bytes)}} as the rules give them for this snapshot."""
    traces = snap.get("device_traces") or []
    # Events are numbered across devices in device order, as the report numbers them.
    entries, device_of = [], []
    for device, trace in enumerate(traces):
        entries += trace
        device_of += [device] * len(trace)
    peaks = dict(db.execute("SELECT device, peak_allocated_event FROM vramscope_devices"))
    allocs = db.execute(
        "SELECT device, alloc_event, coalesce(free_requested_event, free_completed_event), "
        "size_bytes FROM vramscope_allocations").fetchall()
    out = {}
    for device in peaks:
        mine = [(e, r, s) for d, e, r, s in allocs if d == device]
        events = [i for i, d in enumerate(device_of) if d == device]
        times = [entries[i]["time_us"] for i in events if entries[i].get("time_us") is not None]
        peak = peaks[device]

        def regions(region_of, names):
            # Every value the device's entries carry (or range name) is a region, even one
            # without allocations.
            rows = {name: [0, 0, 0, 0, 0] for name in names}
            rows = defaultdict(lambda: [0, 0, 0, 0, 0], rows)
            changes = defaultdict(list)
            running = defaultdict(int)
            for alloc, release, size in mine:
                name = region_of(alloc)
                row = rows[name]
                row[0] += 1
                row[1] += size
                born = alloc is None or (peak is not None and alloc <= peak)
                released = release is not None and peak is not None and release <= peak
                if born and not released:
                    row[2] += size
                    row[3] += 1
                if alloc is None:
                    running[name] += size
                else:
                    changes[alloc].append((name, size))
                if release is not None:
                    changes[release].append((name, -size))
            for name in rows:
                rows[name][4] = running[name]
            for event in sorted(changes):
                for name, delta in changes[event]:
                    running[name] += delta
                for name, _ in changes[event]:
                    rows[name][4] = max(rows[name][4], running[name])
            return {name: tuple(row) for name, row in rows.items()}

        def by_field(key):
            if not any(text(entries[i], key) for i in events if entries[i]["action"] != "annotate"):
                return None
            values = {text(entries[i], key) for i in events if entries[i]["action"] != "annotate"}
            return regions(lambda e: BEFORE if e is None else text(entries[e], key) or NONE,
                           values - {None})

        for kind, key in (("compile_context", "compile_context"), ("user_metadata", "user_metadata")):
            r = by_field(key)
            if r is not None:
                out[(device, kind)] = r
        spans = ranges_of(snap.get("external_annotations") or [], device,
                          min(times) if times else 0, max(times) if times else 0)
        if spans:
            # The order of the report's ranges: by start, then depth, stably.
            spans.sort(key=lambda r: (r[1], r[3]))

            def innermost(e):
                if e is None:
                    return BEFORE
                t = entries[e].get("time_us")
                if t is None:
                    return NONE
                inside = [(s, d, k) for k, (n, s, end, d) in enumerate(spans) if s <= t <= end]
                return spans[max(inside)[2]][0] if inside else NONE
            out[(device, "annotation_range")] = regions(innermost, {r[0] for r in spans})
    return out


# Exact figures of a few regions, worked from the files: (allocations, allocated bytes, live at
# the peak, allocations live at the peak, the region's own peak).
PINNED = {
    # 3 optimizer steps; step 1 creates Adam's state, which is live at the peak.
    ("mlp_adam_fp32.pickle.gz", "annotation_range", "Optimizer.step#Adam.step"):
        (20, 167_874_560, 100_724_736, 12, 100_724_736),
    ("mlp_adam_fp32.pickle.gz", "user_metadata", "vramscope step=1 phase=forward"):
        (7, 37_486_592, 35_127_296, 4, 37_486_592),
    # Every entry says "N/A" (nothing was being compiled); the rest was allocated before the trace.
    ("snapshot_torch2.11_windows_cs336_compilectx.pickle", "compile_context", "N/A"):
        (1_721, 58_928_074_752, 12_877_758_464, 276, 12_877_758_464),
    # Inductor's autotuning allocates 1.25 GiB over the compile; 256 MiB of it is still live.
    ("snapshot_torch2.6_cs336_2.7b_forward.pickle", "annotation_range",
     "CachingAutotuner.benchmark_all_configs (dynamo_timed)"):
        (1_763, 1_345_777_664, 268_437_504, 2, 268_437_504),
    # AOTAutograd's joint-graph passes: 610 blocks of 512 B, never more than two at once.
    ("snapshot_torch2.6_cs336_2.7b_forward.pickle", "annotation_range",
     "_recursive_joint_graph_passes (dynamo_timed)"): (610, 312_320, 0, 0, 1_024),
    # 867 ranges of about 100 us each, none of which allocates.
    ("snapshot_torch2.6_cs336_2.7b_forward.pickle", "annotation_range",
     "pad_mm_benchmark (dynamo_timed)"): (0, 0, 0, 0, 0),
}


@pytest.mark.parametrize("path", GOLDENS + REAL, ids=lambda p: p.name)
def test_regions_are_the_rules_worked_from_the_pickle(tmp_path, path):
    db_path = tmp_path / "report.sqlite"
    rc, out, err = run_binary("report", path, "-o", db_path, "--json", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    summary = json.loads(out)
    snap = load_snapshot(path)
    if isinstance(snap, list):  # a bare list of segments: no trace, no regions
        snap = {"segments": snap}
    with open_db(db_path) as db:
        want = expected(snap, db)
        got = defaultdict(dict)
        for device, kind, name, n, allocated, live, count, peak in db.execute(
                "SELECT device, kind, name, allocations, allocated_bytes, live_at_peak_bytes, "
                "live_at_peak_count, peak_bytes FROM vramscope_regions"):
            got[(device, kind)][name] = (n, allocated, live, count, peak)
        live_at_peak = dict(db.execute(
            "SELECT device, sum(bytes) FROM vramscope_categories_at_peak GROUP BY device"))
    assert dict(got) == want
    # Each kind is a partition: its regions add up to the live bytes at the device's peak.
    for (device, kind), rows in want.items():
        assert sum(r[2] for r in rows.values()) == live_at_peak[device], (device, kind)
    # The JSON summary carries the same regions.
    for d in summary["devices"]:
        for kind, rows in d["regions"].items():
            assert {r["name"]: (r["allocations"], r["allocated_bytes"], r["live_at_peak_bytes"],
                                r["live_at_peak_count"], r["peak_bytes"]) for r in rows} == \
                want[(d["device"], kind)]
    for (file, kind, name), pinned in PINNED.items():
        if file == path.name:
            assert want[(0, kind)][name] == pinned, name


KINETO = sorted(REAL_FIXTURES.glob("kineto_*.json.gz")) if REAL_FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_profiler_steps_are_ranges_and_their_regions_add_up(tmp_path, path):
    """A profiler trace's ProfilerStep#N spans become annotation ranges (the Kineto source turns
    them into START/END annotations): one range per step in the JSON, and the regions are the
    rules applied to the report's own allocations and ranges."""
    db_path = tmp_path / "report.sqlite"
    rc, _, err = run_binary("report", path, "-o", db_path, "-q", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    with gzip.open(path) as f:
        events = json.load(f)
    events = events.get("traceEvents", []) if isinstance(events, dict) else events
    steps = sorted({e["name"] for e in events
                    if isinstance(e, dict) and str(e.get("name", "")).startswith("ProfilerStep#")
                    and e.get("ph") == "X"})
    with open_db(db_path) as db:
        ranges = db.execute("SELECT device, name, start_time_us, end_time_us, depth FROM "
                            "vramscope_region_ranges ORDER BY id").fetchall()
        devices = [d for (d,) in db.execute("SELECT device FROM vramscope_devices")]
        peaks = dict(db.execute("SELECT device, peak_allocated_event FROM vramscope_devices"))
        allocs = db.execute(
            "SELECT device, alloc_event, alloc_time_us, "
            "coalesce(free_requested_event, free_completed_event), size_bytes "
            "FROM vramscope_allocations").fetchall()
        got = defaultdict(dict)
        for device, name, live, allocated in db.execute(
                "SELECT device, name, live_at_peak_bytes, allocated_bytes FROM vramscope_regions "
                "WHERE kind = 'annotation_range'"):
            got[device][name] = (live, allocated)
        live_at_peak = dict(db.execute(
            "SELECT device, sum(bytes) FROM vramscope_categories_at_peak GROUP BY device"))
    for device in devices:
        mine = [r for r in ranges if r[0] == device]
        assert sorted({r[1] for r in mine}) == steps
        if not mine:
            continue
        want = defaultdict(lambda: [0, 0])
        for name in {r[1] for r in mine}:
            want[name]
        peak = peaks[device]
        for d, alloc, t, release, size in allocs:
            if d != device:
                continue
            if alloc is None:
                name = BEFORE
            elif t is None:
                name = NONE
            else:
                inside = [(r[2], r[4], k) for k, r in enumerate(mine) if r[2] <= t <= r[3]]
                name = mine[max(inside)[2]][1] if inside else NONE
            born = alloc is None or (peak is not None and alloc <= peak)
            released = release is not None and peak is not None and release <= peak
            if born and not released:
                want[name][0] += size
            want[name][1] += size
        assert got[device] == {n: tuple(v) for n, v in want.items()}
        assert sum(v[0] for v in got[device].values()) == live_at_peak[device]


def test_fx_frames_name_the_model_line_and_reach_the_database(tmp_path):
    """A snapshot taken with _snapshot(augment_with_fx_traces=True), in the shape PyTorch's
    _augment_frames writes (torch/cuda/memory.py): the Inductor line's allocation is attributed
    to the model line of its FX node, with the node's name, and the FX keys are kept."""
    base = 0x7F00_0000_0000
    proj = tmp_path / "proj"  # the user's project root
    proj.mkdir()
    trace_text = (f'  File "{proj}/train.py", line 30, in step\n    out = model(x)\n'
                  f'  File "{proj}/model.py", line 20, in forward\n    a = self.net1(x)\n')
    fx = [{"filename": "/tmp/torchinductor_me/ab/cabcdef.py", "line": 41, "name": "call",
           "fx_node_op": "call_function", "fx_node_name": "addmm",
           "fx_node_target": "aten.addmm.default", "fx_original_trace": trace_text},
          {"filename": "/usr/lib/python3/site-packages/torch/_inductor/output_code.py",
           "line": 460, "name": "__call__"}]
    entries = [{"action": "alloc", "addr": base, "size": 6 << 20, "stream": 0,
                "time_us": 1_700_000_000_000_000, "compile_context": "Torch-Compiled Region: 0/0",
                "user_metadata": "", "frames": fx}]
    snap = {"segments": [{"device": 0, "address": base, "total_size": 20 << 20,
                          "allocated_size": 6 << 20, "active_size": 6 << 20,
                          "requested_size": 6 << 20, "stream": 0, "segment_type": "large",
                          "segment_pool_id": (0, 0), "is_expandable": False, "frames": fx,
                          "blocks": [{"address": base, "size": 6 << 20, "requested_size": 6 << 20,
                                      "state": "active_allocated", "frames": fx},
                                     {"address": base + (6 << 20), "size": 14 << 20,
                                      "requested_size": 0, "state": "inactive", "frames": []}]}],
            "device_traces": [entries]}
    path = tmp_path / "fx.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    rc, out, err = run_binary("report", path, "-o", tmp_path / "fx.sqlite", "--json",
                              "--project-root", proj, cwd=tmp_path)
    assert rc == 0, err
    device = json.loads(out)["devices"][0]
    assert [s["site"] for s in device["live_at_peak"]["by_site"]] == [
        "model.py:20 forward (FX addmm)"]
    assert device["regions"]["compile_context"][0]["name"] == "Torch-Compiled Region: 0/0"
    assert device["regions"]["compile_context"][0]["live_at_peak_bytes"] == 6 << 20
    with open_db(tmp_path / "fx.sqlite") as db:
        rows = db.execute(
            "SELECT f.file_path, f.line_number, x.node_op, x.node_name, x.node_target, "
            "x.original_file, x.original_line, x.original_function, x.original_trace "
            "FROM vramscope_fx_frames x JOIN vramscope_frames f ON f.id = x.frame_id").fetchall()
    assert rows == [("/tmp/torchinductor_me/ab/cabcdef.py", 41, "call_function", "addmm",
                     "aten.addmm.default", f"{proj}/model.py", 20, "forward", trace_text)]
