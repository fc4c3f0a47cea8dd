"""scripts/capture_modern_goldens.py without a GPU: its --dry-run-cpu runs every case's code but
the CUDA calls (torch.compile really compiles), a torch that lacks a feature skips with one line,
and the per-pool bookkeeping that only a GPU feeds is checked on hand-made segments.

Environment: VRAMSCOPE_TORCH_PYTHON (a Python with torch), as CTest sets it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "capture_modern_goldens.py"
from conftest import TORCH_PYTHON as PYTHON, need_torch_python  # noqa: E402
CASES = ["compile_default", "compile_reduce_overhead", "graphs_shared_pool",
         "graphs_separate_pools", "mempool"]

sys.path.insert(0, str(REPO / "scripts"))
import capture_modern_goldens as M  # noqa: E402  (no torch needed at import)


def _need_python():
    need_torch_python()


def run(*args, env=None, timeout=900):
    p = subprocess.run([PYTHON, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


# ------------------------------------------------------------------------ the command line


def test_list_names_every_case_and_bad_input_is_one_line():
    _need_python()
    rc, out = run("--list")
    assert rc == 0, out
    assert [ln.split()[0] for ln in out.splitlines()] == CASES
    rc, out = run("--out", "/nonexistent/never", "--cases", "warp_drive")
    assert rc == 2 and out.strip().splitlines() == [
        "capture_modern_goldens: error: no case matches 'warp_drive'; the cases are: "
        + ", ".join(CASES)], out
    assert not Path("/nonexistent/never").exists()
    rc, out = run("--cases", "mempool")
    assert rc == 2 and "--out is required" in out
    rc, out = run("--out", "/tmp/x", "--child", "warp_drive")
    assert rc == 2 and "unknown case 'warp_drive'" in out


def test_a_real_run_without_a_gpu_refuses_in_one_line(tmp_path):
    _need_python()
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    rc, out = run("--out", tmp_path / "o", "--cases", "mempool", env=env)
    assert rc == 3, out
    assert "no CUDA GPU" in out and "--dry-run-cpu" in out
    assert not (tmp_path / "o" / "metadata.json").exists()


# --------------------------------------------------------------------------- the dry run


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    _need_python()
    out = tmp_path_factory.mktemp("modern") / "dry"
    rc, log = run("--out", out, "--dry-run-cpu", "--compile-model", "mlp", "--jobs", "2")
    return out, rc, log


def sidecar(out: Path, case: str) -> dict:
    return json.loads((out / f"{case}.sidecar.json").read_text())


def test_dry_run_writes_a_sidecar_per_case_and_metadata(dry):
    out, rc, log = dry
    assert rc == 0, log
    assert "5/5 ok, 0 skipped, 0 failed" in log, log
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{c}.sidecar.json" for c in CASES] + ["metadata.json"])  # no snapshot without CUDA
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["format"] == "vramscope-modern-goldens-metadata" and meta["dry_run_cpu"] is True
    assert meta["compile_model"] == "mlp" and meta["torch"]
    assert list(meta["cases"]) == CASES
    assert all(c["status"] == "ok" for c in meta["cases"].values()), meta["cases"]
    for case in CASES:
        sc = sidecar(out, case)
        assert sc["format"] == "vramscope-modern-golden" and sc["case"] == case
        assert sc["dry_run_cpu"] is True and sc["device"] == "cpu"
        assert sc["snapshot"] is None and sc["recording"] is None and sc["peak"] is None
        assert set(sc["features"]) >= {"compile", "mempool", "mempool_use_on_oom",
                                       "graph_pool_handle", "dump_augment_fx",
                                       "record_compile_context"}
        for p in sc["phases"]:  # the clock of every phase, and no GPU counters claimed
            assert p["begin_us"] <= p["end_us"] <= p["synced_us"], p
            assert p["memory"] is None


def test_compiled_cases_train_three_steps_through_the_compiled_module(dry):
    out, rc, log = dry
    assert rc == 0, log
    for case, mode in (("compile_default", "default"),
                       ("compile_reduce_overhead", "reduce-overhead")):
        sc = sidecar(out, case)
        assert sc["config"]["torch_compile"] == {"mode": mode}
        assert sc["config"]["model"] == "mlp"
        phases = [(p["step"], p["phase"]) for p in sc["phases"]]
        assert phases == [(0, "setup")] + [
            (s, ph) for s in (1, 2, 3)
            for ph in ("zero_grad", "inputs", "forward", "backward", "optimizer", "step_end")]
        assert len(sc["losses"]) == 3 and all(math.isfinite(x) for x in sc["losses"])
        # Dynamo really captured the model (not a silent eager fallback).
        assert sc["config"]["dynamo_counters"]["stats"]["unique_graphs"] >= 1, sc["config"]
        inv = sc["tensors"]["after_first_step"]["totals"]
        assert inv["parameter_tensors"] == 4 and inv["optimizer_state_tensors"] == 8, inv
    ro = sidecar(out, "compile_reduce_overhead")
    assert "cudagraph_mark_step_begin" in ro["used"]
    assert any("no CUDA graph" in n for n in ro["notes"]), ro["notes"]
    assert "cudagraph_mark_step_begin" not in sidecar(out, "compile_default")["used"]


def test_graph_cases_run_the_same_stages_with_either_pool_layout(dry):
    out, rc, log = dry
    assert rc == 0, log
    shared, separate = sidecar(out, "graphs_shared_pool"), sidecar(out, "graphs_separate_pools")
    for sc in (shared, separate):
        assert [(p["step"], p["phase"]) for p in sc["phases"]] == [
            (0, "setup"), (0, "warmup"), (0, "capture_1"), (0, "capture_2")] + [
            (s, ph) for s in (1, 2, 3) for ph in ("inputs", "replay", "step_end")]
        assert any("CUDA graphs need a GPU" in n for n in sc["notes"]), sc["notes"]
        assert len(sc["losses"]) == 3
        capture = {p["phase"]: p for p in sc["phases"] if p["phase"].startswith("capture")}
        assert capture["capture_1"]["tensors"]["y1"]["shape"] == [64, 1024]
        assert capture["capture_2"]["tensors"]["y2"]["shape"] == [64, 1024]
    # The pool layout changes memory, never the numbers: same seed, same outputs.
    assert shared["losses"] == separate["losses"]
    assert len(set(shared["losses"])) == 3  # each replay saw its own input
    assert "one graph_pool_handle() shared" in shared["config"]["pool"]
    assert "per graph" in separate["config"]["pool"]


def test_mempool_case_runs_every_phase_its_torch_supports(dry):
    out, rc, log = dry
    assert rc == 0, log
    sc = sidecar(out, "mempool")
    phases = [p["phase"] for p in sc["phases"]]
    expected = ["setup", "pool_alloc", "pool_free_some", "default_alloc", "pool_realloc"]
    if sc["features"]["mempool_use_on_oom"]:
        expected += ["oom_pool_alloc", "capped_default_alloc"]
        assert sc["used"]["use_on_oom"] == {"outcome": "not run (no GPU)"}
    if sc["features"]["mempool_no_split"]:
        expected += ["no_split_pool_alloc", "no_split_pool_release"]
    assert phases == expected + ["release"]
    alloc = next(p for p in sc["phases"] if p["phase"] == "pool_alloc")
    assert {k: v["nbytes"] for k, v in alloc["tensors"].items()} == sc["config"]["sizes"]
    assert any("MemPool needs a GPU" in n for n in sc["notes"]), sc["notes"]


# ------------------------------------------------------------- a torch without the feature

# Run before torch is used by the script's child: hides what an older torch lacks.
HIDE_MEMPOOL = "import torch\ndel torch.cuda.MemPool\n"
OLD_MEMPOOL = """import torch
_Pool = torch.cuda.MemPool
class MemPool(_Pool):  # the MemPool of torch 2.6: an allocator, nothing else
    def __init__(self, allocator=None):
        super().__init__(allocator)
torch.cuda.MemPool = MemPool
"""


def _with_sitecustomize(tmp_path: Path, code: str) -> dict:
    d = tmp_path / "site"
    d.mkdir()
    (d / "sitecustomize.py").write_text(code)
    return dict(os.environ, PYTHONPATH=str(d) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def test_a_torch_without_mempool_skips_the_case_in_one_line(tmp_path):
    _need_python()
    out = tmp_path / "o"
    rc, log = run("--out", out, "--dry-run-cpu", "--cases", "mempool",
                  env=_with_sitecustomize(tmp_path, HIDE_MEMPOOL))
    assert rc == 0, log  # a skip is not a failure
    line = [ln for ln in log.splitlines() if ln.startswith("[1/1] mempool")]
    assert len(line) == 1 and "skipped" in line[0], log
    assert "torch.cuda.MemPool / use_mem_pool do not exist in this torch" in line[0]
    assert "0/1 ok, 1 skipped: mempool, 0 failed" in log
    assert not (out / "mempool.sidecar.json").exists()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["cases"]["mempool"]["status"] == "skipped"
    assert "MemPool" in meta["cases"]["mempool"]["why"]


def test_a_mempool_without_use_on_oom_skips_only_those_phases(tmp_path):
    _need_python()
    out = tmp_path / "o"
    rc, log = run("--out", out, "--dry-run-cpu", "--cases", "mempool",
                  env=_with_sitecustomize(tmp_path, OLD_MEMPOOL))
    assert rc == 0, log
    assert "note: MemPool(use_on_oom=...) does not exist in this torch" in log
    sc = sidecar(out, "mempool")
    assert sc["features"]["mempool"] and not sc["features"]["mempool_use_on_oom"]
    assert not sc["features"]["mempool_no_split"]
    assert [p["phase"] for p in sc["phases"]] == [
        "setup", "pool_alloc", "pool_free_some", "default_alloc", "pool_realloc", "release"]
    assert any("use_on_oom" in n and "skipped" in n for n in sc["notes"]), sc["notes"]


# ------------------------------------------------------ what only a GPU feeds, by hand


def test_segments_are_summed_per_pool_with_private_ones_listed():
    segs = [
        {"device": 0, "address": 0x1000, "total_size": 2 << 20, "allocated_size": 512,
         "active_size": 512, "segment_type": "small", "segment_pool_id": (0, 0)},
        {"device": 0, "address": 0x9000, "total_size": 20 << 20, "allocated_size": 8 << 20,
         "active_size": 8 << 20, "segment_type": "large", "segment_pool_id": (0, 0)},
        {"device": 0, "address": 0x40000, "total_size": 24 << 20, "allocated_size": 24 << 20,
         "active_size": 24 << 20, "segment_type": "large", "segment_pool_id": (1, 3),
         "is_expandable": False},
        {"device": 0, "address": 0x80000, "total_size": 2 << 20, "allocated_size": 0,
         "active_size": 0, "segment_type": "small", "segment_pool_id": [1, 3]},
        {"device": 1, "address": 0x1000, "total_size": 2 << 20, "allocated_size": 0,
         "active_size": 0, "segment_type": "small", "segment_pool_id": (0, 0)},
        {"device": 0, "address": 0xA0000, "total_size": 64 << 20, "allocated_size": 0,
         "active_size": 0, "segment_type": "large", "segment_pool_id": (0, 7),
         "is_expandable": True},
    ]
    pools = M.pools_from_segments(segs, 0)
    assert list(pools) == ["0_0", "0_7", "1_3"]
    assert pools["0_0"] == {"segments": 2, "total_size": 22 << 20,
                            "allocated_size": (8 << 20) + 512, "active_size": (8 << 20) + 512,
                            "expandable_segments": 0, "segment_types": {"small": 1, "large": 1}}
    assert "listed" not in pools["0_0"]  # the default pool's segments are not listed
    assert pools["1_3"]["segments"] == 2 and pools["1_3"]["total_size"] == 26 << 20
    assert pools["1_3"]["listed"] == [[0x40000, 24 << 20, 24 << 20], [0x80000, 2 << 20, 0]]
    assert pools["0_7"]["expandable_segments"] == 1
    many = [{"device": 0, "address": i, "total_size": 1, "segment_pool_id": (2, 2)}
            for i in range(M.PRIVATE_SEGMENTS_LISTED + 5)]
    p = M.pools_from_segments(many, 0)["2_2"]
    assert p["segments"] == M.PRIVATE_SEGMENTS_LISTED + 5
    assert len(p["listed"]) == M.PRIVATE_SEGMENTS_LISTED


def test_snapshot_extras_count_pools_compile_context_and_fx_frames():
    snap = {
        "segments": [{"segment_pool_id": (0, 0)}, {"segment_pool_id": (1, 2)},
                     {"segment_pool_id": (1, 2)}, {"segment_pool_id": (0, 4)}],
        "device_traces": [[
            {"action": "alloc", "compile_context": "0/0", "frames": [
                {"filename": "x.py", "line": 1, "name": "f", "fx_node_name": "addmm"},
                {"filename": "y.py", "line": 2, "name": "g"}]},
            {"action": "segment_free", "compile_context": ""},
            {"action": "segment_free"},
        ]],
        "external_annotations": [{"name": "vramscope::forward#1"},
                                 {"name": "Optimizer.zero_grad#AdamW.zero_grad"},
                                 {"name": "Optimizer.zero_grad#AdamW.zero_grad"}],
    }
    e = M.snapshot_extras(snap)
    assert e["private_pool_segments_at_dump"] == 3
    assert e["private_pools_at_dump"] == ["0_4", "1_2"]
    assert e["segment_free_events"] == 2
    assert e["events_with_compile_context"] == 1
    assert e["frames_with_fx_node"] == 1
    assert e["other_external_annotations"] == {"Optimizer.zero_grad#AdamW.zero_grad": 2}
    assert M.snapshot_extras([]) == {}


def test_feature_detection_reads_signatures_and_docstrings():
    def new(allocator=None, use_on_oom=False):
        pass

    class Builtin:  # a pybind11 function: no signature, the arguments in its docstring
        __doc__ = "__init__(self: MemPool, allocator: object = None, no_split: bool = False)"

        def __call__(self):
            pass

        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no sig")))

    assert M._takes(new, "use_on_oom") and not M._takes(new, "no_split")
    assert not M._takes(None, "use_on_oom")
    assert M._takes(Builtin(), "no_split") and not M._takes(Builtin(), "use_on_oom")
