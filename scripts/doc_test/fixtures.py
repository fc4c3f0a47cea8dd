"""The fixtures a directive names (with=...), each made from the repository's real data; the
vramscope binary under test, the shared folder and the Python with PyTorch."""

from __future__ import annotations

import ast
import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

from doc_test.common import REPO

COMMAND_TIMEOUT_S = 600


def binary() -> Path:
    env = os.environ.get("VRAMSCOPE_BIN")
    if env:
        return Path(env).resolve()
    for p in (REPO / "build-release" / "vramscope", REPO / "build" / "vramscope"):
        if p.is_file():
            return p
    raise SystemExit("doc_blocks: no vramscope binary (build it, or set VRAMSCOPE_BIN)")


def shared_dir() -> Path:
    return Path(os.environ.get("VRAMSCOPE_SHARED_DIR", REPO.parent / "shared")).resolve()


_TORCH_PYTHON: list = []


def torch_python() -> tuple[Path | None, str]:
    """(a Python with torch and transformers, or None with why; cached)."""
    if _TORCH_PYTHON:
        return _TORCH_PYTHON[0]
    named = os.environ.get("VRAMSCOPE_TORCH_PYTHON")
    if named:
        candidates = [Path(named)]
    else:
        venv = os.environ.get("VRAMSCOPE_TORCH_VENV") or Path(
            os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vramscope" / "torch-venv"
        candidates = [Path(venv) / "bin" / "python"]
    result: tuple[Path | None, str] = (None, f"no Python with PyTorch at {candidates[0]} "
                                             "(scripts/test.sh installs it; or set "
                                             "VRAMSCOPE_TORCH_PYTHON)")
    p = candidates[0]
    if p.exists():
        proc = subprocess.run([str(p), "-c", "import torch, transformers"], capture_output=True)
        if proc.returncode == 0:
            result = (p, "")
        else:
            result = (None, f"{p} cannot import torch and transformers")
    _TORCH_PYTHON.append(result)
    return result


def torch_required() -> bool:
    return bool(os.environ.get("VRAMSCOPE_TORCH_PYTHON")) or \
        os.environ.get("VRAMSCOPE_REQUIRE_TORCH") == "1"


def _load_defs(path: Path, names: tuple[str, ...], namespace: dict) -> dict:
    """The named top-level assignments and functions of a test file, executed alone (so a
    fixture is built exactly as the test builds it, without importing pytest)."""
    tree = ast.parse(path.read_text(), str(path))
    keep = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            keep.append(node)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in names for t in node.targets):
            keep.append(node)
    module = ast.Module(body=keep, type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 (the repository's own test)
    return namespace


def _vramscope(ctx, *args: str) -> None:
    proc = subprocess.run([str(ctx.bin_dir / "vramscope"), *args], cwd=ctx.work, env=ctx.env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"fixture: vramscope {' '.join(args)} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()}")


def _gunzip(src: Path, dst: Path) -> None:
    with gzip.open(src, "rb") as f:
        dst.write_bytes(f.read())


def fx_run_pickle(ctx):
    """The built-in example: goldens/h200/mlp_adam_fp32.pickle.gz, gunzipped."""
    _gunzip(REPO / "goldens/h200/mlp_adam_fp32.pickle.gz", ctx.work / "run.pickle")


def fx_report_sqlite(ctx):
    """vramscope report run.pickle -o report.sqlite."""
    ctx.need("run.pickle")
    _vramscope(ctx, "report", "run.pickle", "-o", "report.sqlite", "-q")


def fx_example_sqlite(ctx):
    """vramscope report (the built-in example) -o vramscope-example.sqlite."""
    _vramscope(ctx, "report", "-o", "vramscope-example.sqlite", "-q")


def fx_before_after(ctx):
    """before.sqlite / after.sqlite: the MLP golden with Adam in fp32, then in bf16 autocast."""
    for name, case in (("before", "mlp_adam_fp32"), ("after", "mlp_adam_bf16")):
        _vramscope(ctx, "report", str(REPO / f"goldens/h200/{case}.pickle.gz"), "-o",
                   f"{name}.sqlite", "-q")


def fx_oom_sqlite(ctx):
    """The real out-of-memory golden's report (a vramscope_oom row)."""
    _vramscope(ctx, "report", str(REPO / "goldens/h200/oom_gpt_fp32.pickle.gz"), "-o",
               "oom.sqlite", "-q")


def fx_predicted_sqlite(ctx):
    """A predicted report: the MLP layer list with Adam."""
    _vramscope(ctx, "predict", "--model", str(REPO / "examples/predict/mlp.json"), "--batch", "64",
               "--optimizer", "adam", "-o", "predicted.sqlite", "-q")


def fx_config_json(ctx):
    """A Hugging Face config from the repository: examples/predict/llama-8l.json."""
    shutil.copy(REPO / "examples/predict/llama-8l.json", ctx.work / "config.json")


def fx_hf_config(ctx):
    """path/to/config.json: the small GPT-2 config examples/predict/gpt-small.json."""
    (ctx.work / "path/to").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "examples/predict/gpt-small.json", ctx.work / "path/to/config.json")


def fx_hub_cache(ctx):
    """The Hugging Face cache (~/.cache/huggingface/hub, HF_HUB_OFFLINE=1: never the network)
    holding meta-llama/Llama-3.2-1B's config.json, examples/predict/llama3.2-1b.json, laid out as
    huggingface_hub writes it: refs/main naming the commit, the snapshot's file a link into
    blobs/."""
    repo = ctx.home / ".cache/huggingface/hub/models--meta-llama--Llama-3.2-1B"
    commit = "4e20de362430cd3b72f300e6b0f18e50e7166e08"
    (repo / "blobs").mkdir(parents=True)
    shutil.copy(REPO / "examples/predict/llama3.2-1b.json", repo / "blobs/config")
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").symlink_to("../../blobs/config")
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text(commit)
    for name in [k for k in ctx.env if k.startswith(("HF_", "HUGGINGFACE_"))]:
        del ctx.env[name]
    ctx.env.pop("XDG_CACHE_HOME", None)  # the cache is HOME's
    ctx.env["HF_HUB_OFFLINE"] = "1"


def fx_trace_json(ctx):
    """A profiler trace recorded without profile_memory=True: no [memory] event."""
    (ctx.work / "trace.json").write_text('{"traceEvents": []}')


def fx_evil_pickle(ctx):
    """A pickle that imports and calls a function (builtins.print): refused at byte 0."""
    (ctx.work / "evil.pickle").write_bytes(b"cbuiltins\nprint\n(S'hello'\ntR.")


def fx_graphs_pickle(ctx):
    """tests/e2e/test_private_pools_cli.py's two CUDA graphs with a pool each."""
    import pickle
    path = REPO / "tests/e2e/test_private_pools_cli.py"
    ns = _load_defs(path, ("MiB", "BASE", "POOL_A", "POOL_B", "CAPTURE", "entry", "segment",
                           "snapshot", "two_graphs_with_their_own_pools"), {})
    (ctx.work / "graphs.pickle").write_bytes(
        pickle.dumps(ns["two_graphs_with_their_own_pools"](), protocol=4))


def fx_runs(ctx):
    """runs/: a capture folder of two ranks, the H200 goldens mlp_sgd_fp32 (rank0) and
    mlp_adam_fp32 (rank1), laid out by tests/e2e/test_run_cli.py's own make_capture."""
    path = REPO / "tests/e2e/test_run_cli.py"
    ns = _load_defs(path, ("GOLDENS", "PHASES", "capture_sidecar", "make_capture"),
                    {"REPO": REPO, "json": json, "shutil": shutil, "Path": Path})
    runs = ctx.work / "runs"
    runs.mkdir()
    ns["make_capture"](runs, "mlp_sgd_fp32", "rank0", 0, 2)
    ns["make_capture"](runs, "mlp_adam_fp32", "rank1", 1, 2)


OOM_MESSAGES = REPO / "tests/data/oom_messages"


TRACEBACK = OOM_MESSAGES / "03-torch1-cached-traceback-pytorch-18853.txt"


def fx_train_log(ctx):
    """train.log: a real out-of-memory traceback (tests/data/oom_messages/03-...)."""
    shutil.copy(TRACEBACK, ctx.work / "train.log")


def fx_train_py(ctx):
    """train.py: a training script that dies of that out-of-memory (prints it, exits 1)."""
    (ctx.work / "train.py").write_text(
        "import sys\n"
        "print('epoch 1: step 1 loss 2.3026')\n"
        f"sys.stderr.write(open({str(TRACEBACK)!r}).read())\n"
        "sys.exit(1)\n")


def fx_mymodel_py(ctx):
    """mymodel.py: a small model of one's own (build() and vramscope_inputs(), as the tracer
    asks: docs/predict-models.md)."""
    (ctx.work / "mymodel.py").write_text(
        "import torch\n"
        "import torch.nn as nn\n\n\n"
        "def build():\n"
        "    return nn.Sequential(nn.Embedding(1000, 256), nn.Linear(256, 1024), nn.GELU(),\n"
        "                         nn.Linear(1024, 1000))\n\n\n"
        "def vramscope_inputs(batch_size, seq_len, image_size):\n"
        "    return torch.randint(0, 1000, (batch_size, seq_len))\n")


def fx_shared(ctx):
    """../shared/fixtures/real: the shared folder's real recordings (skipped when absent)."""
    if not (shared_dir() / "fixtures" / "real").is_dir():
        raise Skip(f"needs the shared folder's real recordings: {shared_dir()}/fixtures/real is "
                   "absent")


def fx_torch(ctx):
    """python3, python and ~/venv/bin/python: a Python with PyTorch and transformers."""
    python, why = torch_python()
    if python is None:
        if torch_required():
            raise RuntimeError(f"needs a Python with PyTorch: {why}")
        raise Skip(f"needs a Python with PyTorch: {why}")
    for p in (ctx.bin_dir / "python3", ctx.bin_dir / "python", ctx.home / "venv/bin/python"):
        _wrapper(p, python)


FIXTURES = {
    "run.pickle": fx_run_pickle,
    "report.sqlite": fx_report_sqlite,
    "vramscope-example.sqlite": fx_example_sqlite,
    "before.sqlite": fx_before_after,
    "after.sqlite": fx_before_after,
    "oom.sqlite": fx_oom_sqlite,
    "predicted.sqlite": fx_predicted_sqlite,
    "config.json": fx_config_json,
    "path/to/config.json": fx_hf_config,
    "trace.json": fx_trace_json,
    "hub-cache": fx_hub_cache,
    "evil.pickle": fx_evil_pickle,
    "graphs.pickle": fx_graphs_pickle,
    "runs": fx_runs,
    "train.log": fx_train_log,
    "train.py": fx_train_py,
    "mymodel.py": fx_mymodel_py,
    "shared": fx_shared,
    "torch": fx_torch,
}


class Skip(Exception):
    """The block cannot be checked here (a fixture's prerequisite is absent)."""


def _wrapper(path: Path, python: Path) -> None:
    """An executable that runs `python` (a venv's python must be started by its own path)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{python}" "$@"\n')
    path.chmod(0o755)
