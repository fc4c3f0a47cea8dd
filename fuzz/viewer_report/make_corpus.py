#!/usr/bin/env python3
"""Writes the seeds of viewer_report_fuzzer: small real report databases.

    python3 fuzz/viewer_report/make_corpus.py --vramscope build-rel/vramscope

Each seed is what `vramscope report` (or `predict`) writes for a tiny input, then VACUUMed with
512-byte pages so that the whole database is a few tens of KB (a report has over thirty tables,
and each takes at least a page). Inputs: a small training snapshot (one device), the same on two
devices with an out-of-memory entry, a torch.compile-style snapshot whose frame has no line, the pickle corpus' regions seed (compile
context, annotation ranges, an annotate entry, FX frames),
a profiler trace and a memory timeline from the other sources' fuzz corpora, and a prediction.
Only the standard library is used; snapshots are written with pickle from plain dicts.
"""

from __future__ import annotations

import argparse
import pickle
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "corpus"
MODULE_PY = "/usr/lib/python3/site-packages/torch/nn/modules/module.py"
AUTOGRAD_PY = "/usr/lib/python3/site-packages/torch/autograd/__init__.py"


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def snapshot(devices=(0,), oom=False, compiled=False) -> dict:
    segments, traces = [], []
    for device in devices:
        base = 0x7F00_0000_0000 + device * 0x1_0000_0000
        t = 1_700_000_000_000_000
        user = "/proj/train.py"
        fwd = [frame(MODULE_PY, 1527, "_call_impl"), frame(user, 20, "main")]
        if compiled:
            fwd = [frame("/proj/model.py", 2**64 - 1, "forward")] + fwd
        entries = [{"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0,
                    "time_us": t, "frames": []}]
        blocks, addr = [], base
        for k, size in enumerate((4096, 65536, 131072, 8192)):
            t += 5
            stack = [frame(MODULE_PY, 1143, "_apply"), frame(user, 12, "main")] if k == 0 else fwd
            entries.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                            "time_us": t, "frames": stack})
            if k in (1, 2):
                bw = [frame(AUTOGRAD_PY, 266, "backward"), frame(user, 21, "main")]
                for action in ("free_requested", "free_completed"):
                    t += 3
                    entries.append({"action": action, "addr": addr, "size": size, "stream": 0,
                                    "time_us": t, "frames": bw})
                blocks.append({"address": addr, "size": size, "requested_size": 0,
                               "state": "inactive", "frames": []})
            else:
                blocks.append({"address": addr, "size": size, "requested_size": size,
                               "state": "active_allocated", "frames": stack})
            addr += size
        if oom:
            entries.append({"action": "oom", "device_free": 1024, "size": 1 << 30, "stream": 0,
                            "time_us": t + 9, "frames": fwd})
        blocks.append({"address": addr, "size": base + (2 << 20) - addr, "requested_size": 0,
                       "state": "inactive", "frames": []})
        live = sum(b["size"] for b in blocks if b["state"] != "inactive")
        segments.append({"device": device, "address": base, "total_size": 2 << 20,
                         "allocated_size": live, "active_size": live, "requested_size": live,
                         "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                         "is_expandable": False, "frames": [], "blocks": blocks})
        while len(traces) < device:
            traces.append([])
        traces.append(entries)
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False}}


def vacuum(src: Path, dest: Path) -> None:
    db = sqlite3.connect(src)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA page_size=512")
    db.execute("VACUUM")
    db.close()
    dest.write_bytes(src.read_bytes())


# Damaged reports that the reader must refuse with one line instead of allocating by the ids they
# hold (each once made `vramscope view` take gigabytes): regression inputs for the fuzzer.
DAMAGE = {
    "damaged_event_range": ["UPDATE vramscope_events SET id = 2000000000 "
                            "WHERE id = (SELECT max(id) FROM vramscope_events)"],
    "damaged_frame_id": ["UPDATE vramscope_frames SET id = 49999999 "
                         "WHERE id = (SELECT max(id) FROM vramscope_frames)"],
    "damaged_stack_id": ["UPDATE vramscope_stacks SET id = 99999999 "
                         "WHERE id = (SELECT max(id) FROM vramscope_stacks)"],
    "damaged_owner_id": ["UPDATE vramscope_owners SET id = 99999999 "
                         "WHERE id = (SELECT max(id) FROM vramscope_owners)"],
    # More distinct phase names than the page's one-byte phase column holds.
    "damaged_phase_names": [
        "CREATE TEMP TABLE t AS SELECT * FROM vramscope_allocations",
        "UPDATE t SET alloc_event = NULL, free_requested_event = NULL, "
        "free_completed_event = NULL",
        *[sql for _ in range(65) for sql in (
            "UPDATE t SET id = id + 1000, phase = 'p' || (id + 1000)",
            "INSERT INTO vramscope_allocations SELECT * FROM t")],
    ],
}


def damage(seed: Path, statements: list[str], dest: Path) -> None:
    work = dest.with_suffix(".work")
    work.write_bytes(seed.read_bytes())
    db = sqlite3.connect(work)
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()
    vacuum(work, dest)
    work.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vramscope", required=True)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        jobs = {}
        for name, snap in (("snapshot_one_device", snapshot()),
                           ("snapshot_two_devices_oom", snapshot((0, 1), oom=True)),
                           ("snapshot_compiled_frame_no_line", snapshot(compiled=True))):
            path = tmp / f"{name}.pickle"
            path.write_bytes(pickle.dumps(snap, protocol=4))
            jobs[name] = ["report", path]
        # Regions (vramscope_regions, vramscope_region_ranges: the viewer's bands).
        jobs["snapshot_regions"] = ["report",
                                    REPO / "fuzz/pickle_reader/corpus/regions_p4.pickle"]
        jobs["kineto_trace"] = ["report", REPO / "fuzz/kineto_source/corpus/modern.json"]
        jobs["memory_timeline"] = ["report",
                                   REPO / "fuzz/memory_timeline_source/corpus/all_actions.json"]
        jobs["predicted_mlp"] = ["predict", "--model", REPO / "examples/predict/mlp.json",
                                 "--batch", "2", "--steps", "1"]
        for name, cmd in jobs.items():
            db = tmp / f"{name}.sqlite"
            proc = subprocess.run([args.vramscope, *map(str, cmd), "-o", str(db), "-q"], cwd=tmp,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"{name}: {proc.stderr.strip()}", file=sys.stderr)
                return 1
            vacuum(db, OUT / f"{name}.sqlite")
            print(f"{name}.sqlite: {(OUT / f'{name}.sqlite').stat().st_size} B")
        for name, statements in DAMAGE.items():
            damage(OUT / "snapshot_one_device.sqlite", statements, OUT / f"{name}.sqlite")
            print(f"{name}.sqlite: {(OUT / f'{name}.sqlite').stat().st_size} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
