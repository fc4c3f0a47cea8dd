"""Tests of the capture bootstrap (python/vramscope/bootstrap/, docs/design/capture.md).

Each test runs a real script in a subprocess with PYTHONPATH laid out exactly as `vramscope run`
lays it out (<tmp>/sitecustomize.py, the whole package as <tmp>/vramscope/) and the contract's
environment variables; VRAMSCOPE_CAPTURE_CPU=1 lets the bootstrap's logic run on a machine without
a GPU (no snapshot, memory counters null).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "python" / "vramscope"

# CI (scripts/test.sh, through CTest) sets VRAMSCOPE_REQUIRE_TORCH=1: there these tests must run,
# not skip because torch or a training framework went missing.
if os.environ.get("VRAMSCOPE_REQUIRE_TORCH") == "1":
    import importlib

    for _module in ("torch", "transformers", "accelerate", "lightning"):
        importlib.import_module(_module)

# Variables of an outer launcher or capture that must not leak into the scripts under test.
_CLEARED = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "PYTHONPATH", "PYTHONSTARTUP")


@pytest.fixture
def inject_dir(tmp_path):
    """The folder `vramscope run` puts first on PYTHONPATH."""
    d = tmp_path / "inject"
    shutil.copytree(PACKAGE, d / "vramscope", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE / "inject" / "sitecustomize.py", d / "sitecustomize.py")
    return d


@pytest.fixture
def out_dir(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


class Run:
    def __init__(self, proc, out_dir):
        self.proc = proc
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.out_dir = Path(out_dir) if out_dir else None

    def files(self):
        return sorted(p.name for p in self.out_dir.iterdir()) if self.out_dir else []

    def sidecar(self, label=None):
        paths = sorted(self.out_dir.glob(f"{label or '*'}.sidecar.json"))
        assert len(paths) == 1, (self.files(), self.stderr)
        return json.loads(paths[0].read_text())

    def vramscope_lines(self):
        return [line for line in self.stderr.splitlines() if line.startswith("vramscope:")]


def phases_by_step(sidecar):
    """{step: [phase, ...]} in the order recorded."""
    steps = {}
    for p in sidecar["phases"]:
        steps.setdefault(p["step"], []).append(p["phase"])
    return steps


def tensors(sidecar, kind):
    return [t for t in sidecar["tensors"] if t["kind"] == kind]


@pytest.fixture
def helpers():
    import types

    return types.SimpleNamespace(phases_by_step=phases_by_step, tensors=tensors)


@pytest.fixture
def run_script(tmp_path, inject_dir, out_dir):
    """run_script(source, **env) -> Run: the script in a subprocess with the bootstrap injected."""

    def run(source, env=None, capture_dir=True, cpu=True, pythonpath_extra=(), timeout=300,
            args=()):
        script = tmp_path / "script.py"
        script.write_text(source)
        e = {k: v for k, v in os.environ.items() if k not in _CLEARED and
             not k.startswith("VRAMSCOPE_")}
        e["PYTHONPATH"] = os.pathsep.join([str(inject_dir), *map(str, pythonpath_extra)])
        e["PYTHONUNBUFFERED"] = "1"
        e["HF_HUB_OFFLINE"] = "1"
        e["TOKENIZERS_PARALLELISM"] = "false"
        e["CUDA_VISIBLE_DEVICES"] = ""
        if capture_dir is True:
            e["VRAMSCOPE_CAPTURE_DIR"] = str(out_dir)
        elif capture_dir:
            e["VRAMSCOPE_CAPTURE_DIR"] = str(capture_dir)
        if cpu:
            e["VRAMSCOPE_CAPTURE_CPU"] = "1"
        e.update(env or {})
        proc = subprocess.run([sys.executable, str(script), *args], env=e, cwd=tmp_path,
                              capture_output=True, text=True, timeout=timeout)
        return Run(proc, out_dir if capture_dir is True else None)

    return run

