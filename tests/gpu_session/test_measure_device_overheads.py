"""scripts/measure_device_overheads.py without a GPU: its --dry-run-cpu runs every case's child on
the CPU (the wiring: fresh processes, checkpoints, the JSON), and the arithmetic of its figures is
checked on hand-made checkpoints (by pid, and from the device's used memory where NVML does not
list the process).

Environment: VRAMSCOPE_TORCH_PYTHON (a Python with torch), as CTest sets it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "measure_device_overheads.py"
from conftest import TORCH_PYTHON as PYTHON, need_torch_python  # noqa: E402
MiB = 1 << 20

sys.path.insert(0, str(REPO / "scripts"))
import measure_device_overheads as M  # noqa: E402  (no torch needed at import)


def _need_python():
    need_torch_python()


def run(*args, timeout=600):
    p = subprocess.run([PYTHON, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                       cwd=REPO, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_dry_run_runs_every_case_in_its_own_process(tmp_path):
    _need_python()
    out = tmp_path / "sub" / "device_overheads.json"
    rc, log = run("--out", out, "--dry-run-cpu", "--timeout", "120")
    assert rc == 0, log
    assert [ln.split(":")[0] for ln in log.splitlines()[:5]] == M.CASES
    assert "5/5 ok" in log
    doc = json.loads(out.read_text())
    assert doc["format"] == "vramscope-device-overheads" and doc["dry_run_cpu"] is True
    assert doc["torch"] and doc["python"]
    assert list(doc["cases"]) == M.CASES
    pids = {c["pid"] for c in doc["cases"].values()}
    assert len(pids) == len(M.CASES) and os.getpid() not in pids  # fresh processes
    labels = {name: [c["label"] for c in case["checkpoints"]] for name, case in doc["cases"].items()}
    assert labels == {"context_lazy": ["init"], "context_eager": ["init"],
                      "cublas": ["init", "matmul_fp32", "matmul_bf16"],
                      "cudnn": ["init", "conv"], "nccl": ["init", "all_reduce"]}
    assert doc["cases"]["context_eager"]["env"] == {"CUDA_MODULE_LOADING": "EAGER"}
    assert doc["cases"]["cublas"]["env"] == {"CUDA_MODULE_LOADING": "LAZY"}
    assert doc["cases"]["nccl"]["backend"] == "gloo"
    # Nothing measured on the CPU.
    assert set(doc["figures"]) == {"context_lazy", "context_eager", "cublas_fp32",
                                   "cublaslt_bf16", "cudnn", "nccl", "driver_reserved",
                                   "device_used_idle"}
    assert all(v is None for v in doc["figures"].values())


def test_bad_arguments_are_one_line():
    _need_python()
    rc, out = run("--dry-run-cpu")
    assert rc == 2 and out.strip() == "measure_device_overheads: error: --out is required"
    rc, out = run("--child", "warp_drive")
    assert rc == 2 and "unknown case 'warp_drive'" in out


def _cp(label, process, reserved, device=None):
    return {"label": label, "process_used": process, "device_used": device,
            "torch_reserved": reserved}


def test_figures_are_the_growth_outside_torchs_allocator():
    idle = {"device_used": 600 * MiB, "device_reserved": 450 * MiB}
    ok = {
        "context_lazy": {"status": "ok", "checkpoints": [_cp("init", 500 * MiB, 2 * MiB)]},
        "context_eager": {"status": "ok", "checkpoints": [_cp("init", 900 * MiB, 2 * MiB)]},
        "cublas": {"status": "ok", "checkpoints": [
            _cp("init", 500 * MiB, 2 * MiB), _cp("matmul_fp32", 530 * MiB, 12 * MiB),
            _cp("matmul_bf16", 545 * MiB, 12 * MiB)]},
        "cudnn": {"status": "ok", "checkpoints": [
            _cp("init", 500 * MiB, 2 * MiB), _cp("conv", 580 * MiB, 4 * MiB)]},
        "nccl": {"status": "failed", "error": "exit 1"},
    }
    f = M.figures(ok, idle)
    assert f == {"context_lazy": 498 * MiB, "context_eager": 898 * MiB,
                 "cublas_fp32": 20 * MiB, "cublaslt_bf16": 15 * MiB, "cudnn": 78 * MiB,
                 "nccl": None, "driver_reserved": 450 * MiB, "device_used_idle": 600 * MiB}
    # NVML lists no process of ours (a container): the device's used memory less the idle figure.
    container = {"context_lazy": {"status": "ok", "checkpoints": [
        _cp("init", None, 2 * MiB, device=1100 * MiB)]},
        "cudnn": {"status": "ok", "checkpoints": [
            _cp("init", None, 2 * MiB, device=1100 * MiB),
            _cp("conv", None, 4 * MiB, device=1180 * MiB)]}}
    f = M.figures(container, idle)
    assert (f["context_lazy"], f["cudnn"]) == (498 * MiB, 78 * MiB)
    assert M.figures(container, None)["cudnn"] is None  # no idle figure: nothing to stand in
