"""Private pools (CUDA graphs, torch.cuda.MemPool) through `vramscope simulate`, on snapshots
written in the exact shape PyTorch writes them (segment_pool_id on segments, no pool on trace
entries). No real recording with private pools exists yet (a GPU session records them:
scripts/gpu_session.sh); until then these hand-worked traces pin the replay and the what-ifs.
Every figure is worked out by hand from the allocator's rules (docs/design/allocator-model.md,
"Private pools")."""

from __future__ import annotations

import json

from conftest import write_pickle

MiB = 1 << 20
BASE = 0x7F00_0000_0000
POOL_A = BASE + 64 * MiB
POOL_B = BASE + 128 * MiB
CAPTURE = 0x5A5A_0000  # the side stream graphs are captured on (a cudaStream_t value)


def entry(action, addr, size, stream, t):
    return {"action": action, "addr": addr, "size": size, "stream": stream,
            "time_us": 1_750_000_000_000_000 + t, "compile_context": "N/A",
            "user_metadata": "", "frames": [{"filename": "graphs.py", "line": 10 + t,
                                             "name": "capture"}]}


def segment(addr, total, stream, pool_id, blocks):
    """blocks: (address, size, allocated)"""
    allocated = sum(s for _, s, a in blocks if a)
    return {"device": 0, "address": addr, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": allocated, "stream": stream,
            "segment_type": "large", "segment_pool_id": pool_id, "is_expandable": False,
            "frames": [],
            "blocks": [{"address": a, "size": s, "requested_size": s if live else 0,
                        "state": "active_allocated" if live else "inactive", "frames": []}
                       for a, s, live in blocks]}


def snapshot(trace, segments):
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1,
                                   "garbage_collection_threshold": 0.0,
                                   "expandable_segments": False,
                                   "roundup_power2_divisions": {}},
            "external_annotations": []}


def two_graphs_with_their_own_pools():
    """Graph 1 (its own pool (1, 0)) uses 6 MiB as scratch and frees it; graph 2 (pool (2, 0))
    cannot take that block: a second 20 MiB segment."""
    t = [entry("segment_alloc", POOL_A, 20 * MiB, CAPTURE, 0),
         entry("alloc", POOL_A, 6 * MiB, CAPTURE, 1),
         entry("free_requested", POOL_A, 6 * MiB, CAPTURE, 2),
         entry("free_completed", POOL_A, 6 * MiB, CAPTURE, 3),
         entry("segment_alloc", POOL_B, 20 * MiB, CAPTURE, 4),
         entry("alloc", POOL_B, 6 * MiB, CAPTURE, 5)]
    segs = [segment(POOL_A, 20 * MiB, CAPTURE, (1, 0), [(POOL_A, 20 * MiB, False)]),
            segment(POOL_B, 20 * MiB, CAPTURE, (2, 0),
                    [(POOL_B, 6 * MiB, True), (POOL_B + 6 * MiB, 14 * MiB, False)])]
    return snapshot(t, segs)


def simulate_json(run, path, *flags):
    rc, out, err = run("simulate", str(path), "--json", *flags)
    assert rc == 0, err
    return json.loads(out)


def test_graphs_with_their_own_pools_replay_exactly(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    doc = simulate_json(run, path)
    dev = doc["devices"][0]
    replay = dev["replay"]
    cmp = replay["comparison"]
    assert cmp["allocs"] == 2 and cmp["allocs_at_recorded_address"] == 2
    assert cmp["segment_allocs_matched"] == 2 and cmp["model_segment_allocs"] == 2
    assert cmp["reserved_equal_points"] == cmp["reserved_compared_points"] == 4
    assert cmp["final_blocks_matched"] == cmp["final_blocks_recorded"] == 3
    assert cmp["divergence_count"] == 0
    pools = replay["private_pools"]
    assert pools["mapping"] == "recorded"
    assert pools["peak_reserved_bytes"] == 40 * MiB
    assert [p["pool_id"] for p in pools["pools"]] == [[1, 0], [2, 0]]
    assert [p["peak_reserved_bytes"] for p in pools["pools"]] == [20 * MiB, 20 * MiB]
    assert pools["pools"][1]["allocated_at_end_bytes"] == 6 * MiB
    assert pools["pools"][0]["cached_at_end_bytes"] == 20 * MiB


def test_sharing_one_pool_saves_the_second_segment(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    shared = simulate_json(run, path, "--graph-pools", "shared")["devices"][0]["what_if"][0]
    assert shared["private_pools"]["mapping"] == "shared"
    assert shared["peak_reserved_bytes"] == 20 * MiB
    assert len(shared["private_pools"]["pools"]) == 1
    assert shared["private_pools"]["pools"][0]["requests"] == 2
    none = simulate_json(run, path, "--graph-pools", "none")["devices"][0]["what_if"][0]
    assert none["private_pools"]["pools"] == []
    assert none["private_pools"]["peak_reserved_bytes"] == 0
    assert none["peak_reserved_bytes"] == 20 * MiB


def test_text_names_the_pools_and_the_what_if(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    rc, out, err = run("simulate", str(path), "--graph-pools", "shared")
    assert rc == 0, err
    assert "pool (1, 0) a CUDA graph's own pool: 1 requests, peak reserved 20.00 MiB" in out
    assert "private pools: 2 (segment_pool_id of the segments at the dump)" in out
    assert "pools shared" in out
    assert "peak reserved, private pools" in out


def test_bad_graph_pools_value_is_one_line(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    rc, out, err = run("simulate", str(path), "--graph-pools", "some")
    assert rc == 2
    assert err.strip().count("\n") == 0
    assert "--graph-pools some: expected recorded, shared" in err


def test_report_database_names_each_segments_pool(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    db_path = tmp_path / "graphs.sqlite"
    rc, out, err = run("report", str(path), "-o", str(db_path), "-q")
    assert rc == 0, err
    import sqlite3
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT address, pool_id_0, pool_id_1 FROM vramscope_segment_timeline "
                          "ORDER BY address").fetchall()
    assert rows == [(POOL_A, 1, 0), (POOL_B, 2, 0)]


def test_report_counts_the_private_pools_at_the_dump(run, tmp_path):
    path = write_pickle(tmp_path / "graphs.pickle", two_graphs_with_their_own_pools())
    rc, out, err = run("report", str(path), "--json")
    assert rc == 0, err
    dev = json.loads(out)["devices"][0]
    pools = dev["at_dump"]["private_pools"]
    # Two pools of one 20 MiB segment each; free: pool (1, 0)'s 20 MiB and (2, 0)'s 14 MiB.
    assert pools == {"pools": 2, "segments": 2, "reserved_bytes": 40 * MiB,
                     "cached_free_bytes": 34 * MiB}
    rc, out, err = run("report", str(path), "--summary-only")
    assert rc == 0, err
    assert "private pools (CUDA graphs, MemPools): 2 pool(s), 2 segments, 40.00 MiB reserved, " \
           "34.00 MiB of it cached free" in out
