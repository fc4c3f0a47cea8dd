"""vramscope against ground truth recorded on a real GPU: the goldens in goldens/<gpu>/, written
by scripts/capture_goldens.py (snapshot + sidecar per case, PyTorch's own
max_memory_allocated/reserved after every phase). Skipped when no goldens are committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, run_binary

GOLDENS = REPO / "goldens"


def golden_cases():
    params = []
    for meta_path in sorted(GOLDENS.glob("*/metadata.json")):
        meta = json.loads(meta_path.read_text())
        for name, case in sorted(meta["cases"].items()):
            if case.get("status") == "ok":
                params.append(pytest.param(meta_path.parent, name, case,
                                           id=f"{meta_path.parent.name}-{name}"))
    if not params:
        return [pytest.param(None, None, None, marks=pytest.mark.skip(reason="no goldens"))]
    return params


def test_metadata_names_the_machine():
    metas = sorted(GOLDENS.glob("*/metadata.json"))
    if not metas:
        pytest.skip("no goldens")
    for meta_path in metas:
        meta = json.loads(meta_path.read_text())
        assert meta["gpu"]["name"] and meta["gpu"]["driver_version"]
        assert meta["torch"] and not meta["dry_run_cpu"]


@pytest.mark.parametrize("folder,name,case", golden_cases())
def test_peaks_match_pytorch(tmp_path, folder, name, case):
    code, out, err = run_binary("report", "--json", "--summary-only", folder / case["snapshot"],
                                cwd=tmp_path)
    assert code == 0, err
    (device,) = json.loads(out)["devices"]
    sidecar = json.loads((folder / case["sidecar"]).read_text())
    # The trace gives blocks freed during it only as requests; the report takes their sizes from
    # the allocator model's replay, which confirms every one on these runs: no size is estimated,
    # so every figure below is PyTorch's to the byte.
    assert device["estimated_block_sizes"] == 0
    # Reserved memory is exact: segment sizes are recorded.
    assert device["peak_reserved"]["bytes"] == case["max_memory_reserved"]
    assert device["peak_allocated"]["bytes"] == case["max_memory_allocated"]
    # Each iteration's peak against PyTorch's peak over that step's phases.
    torch_steps: dict[int, int] = {}
    for phase in sidecar["phases"]:
        if phase["step"] >= 1:
            torch_steps[phase["step"]] = max(torch_steps.get(phase["step"], 0),
                                             phase["memory"]["max_allocated"])
    ours_steps = {it["step"]: it["peak_allocated_bytes"] for it in device["iterations"]}
    assert set(torch_steps) <= set(ours_steps), (torch_steps, ours_steps)
    for step, peak in torch_steps.items():
        assert ours_steps[step] == peak, (step, peak, ours_steps[step])
    # Every byte live at the peak gets a category.
    assert device["breakdown_at_peak"]["unknown_bytes"] == 0
    # The peak falls in the phase where PyTorch saw it.
    peak_step = max(ours_steps, key=lambda s: ours_steps[s])
    phases = {it["step"]: it["peak_phase"] for it in device["iterations"]}
    assert phases[peak_step] == case["peak_at"]["phase"]


OOM = GOLDENS / "h200" / "oom_gpt_fp32.pickle.gz"


def test_real_oom_is_recorded_as_pytorch_reported_it(tmp_path):
    """A CUDA OOM captured on the H200 (scripts/capture_oom_golden.py): the report holds the
    failing request and the levels PyTorch's own error message gives."""
    if not OOM.is_file():
        pytest.skip("no OOM golden")
    import re
    import sqlite3

    sidecar = json.loads(OOM.with_name("oom_gpt_fp32.json").read_text())
    message = sidecar["failure"]["message"]
    tried = re.search(r"Tried to allocate ([\d.]+) MiB", message)
    unallocated = re.search(r"([\d.]+) MiB is reserved by PyTorch but unallocated", message)
    assert tried and unallocated, message
    code, _, err = run_binary("report", "-q", OOM, "-o", "oom.sqlite", cwd=tmp_path)
    assert code == 0, err
    con = sqlite3.connect(tmp_path / "oom.sqlite")
    rows = con.execute("SELECT size, allocated_bytes, reserved_bytes FROM vramscope_events "
                       "WHERE action = 'oom'").fetchall()
    assert len(rows) == 1
    size, allocated, reserved = rows[0]
    assert size == round(float(tried.group(1)) * 2**20)
    assert allocated == sidecar["max_memory_allocated"]
    assert reserved == sidecar["max_memory_reserved"]
    assert f"{(reserved - allocated) / 2**20:.2f}" == unallocated.group(1)
    # The cap it ran under: what was reserved plus the request would have passed it.
    assert reserved + size > sidecar["cap_bytes"]
    (peak,) = con.execute("SELECT peak_allocated_bytes FROM vramscope_devices").fetchone()
    assert peak == sidecar["max_memory_allocated"]


def hf_cases():
    meta_path = GOLDENS / "h200" / "hf" / "metadata.json"
    if not meta_path.is_file():
        return [pytest.param(None, None, marks=pytest.mark.skip(reason="no HF goldens"))]
    meta = json.loads(meta_path.read_text())
    return [pytest.param(meta_path.parent, case, id=name)
            for name, case in sorted(meta["cases"].items())
            if case.get("status") == "ok" and case.get("snapshot")]


@pytest.mark.parametrize("folder,case", hf_cases())
def test_hugging_face_models_peaks_match_pytorch(tmp_path, folder, case):
    """Real architectures from transformers (GPT-2, LLaMA- and Qwen2-style, BERT, ViT; fp32, bf16
    autocast, pure bf16, gradient checkpointing, LoRA), recorded with Python stacks on the H200
    by scripts/capture_hf_goldens.py: the report's peaks are PyTorch's to the byte."""
    code, out, err = run_binary("report", "--json", "--summary-only", folder / case["snapshot"],
                                cwd=tmp_path, timeout=120)
    assert code == 0, err
    (device,) = json.loads(out)["devices"]
    assert device["peak_allocated"]["bytes"] == case["max_memory_allocated"]
    assert device["peak_reserved"]["bytes"] == case["max_memory_reserved"]
    assert device["breakdown_at_peak"]["unknown_bytes"] == 0
    # Weights at the peak hold at least the parameters' bytes (buffers come on top).
    weights = {c["category"]: c["bytes"] for c in device["breakdown_at_peak"]["by_category"]}
    assert weights.get("weight", 0) >= case["parameter_bytes"]
