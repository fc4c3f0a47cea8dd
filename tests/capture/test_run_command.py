"""`vramscope run` end to end with the bootstrap the binary carries, on the CPU test mode.

Uses $VRAMSCOPE_BIN (default build/vramscope); skips when that binary has no `run` subcommand.
Without a GPU nothing is a snapshot, so these check what reaches the program (the bootstrap laid
out on PYTHONPATH, the contract's variables from the options) through the sidecar it writes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters())
for i in range(5):
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
print("finished")
'''


@pytest.fixture
def vramscope_bin():
    path = os.environ.get("VRAMSCOPE_BIN") or str(REPO / "build" / "vramscope")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    try:
        probe = subprocess.run([path, "run", "--help"], capture_output=True, text=True, timeout=60)
    except OSError as e:  # being rebuilt
        pytest.skip(f"{path} cannot be run: {e}")
    if probe.returncode != 0 or "--keep-running" not in probe.stdout:
        pytest.skip(f"{path} has no 'run' subcommand")
    return path


def cpu_env():
    """This process's environment for a run on the bootstrap's CPU test mode, without the
    caller's own capture settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VRAMSCOPE_") and k not in ("PYTHONPATH", "RANK")}
    env["VRAMSCOPE_CAPTURE_CPU"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run_vramscope(vramscope_bin, tmp_path, options, separator=("--",)):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "captures"
    proc = subprocess.run([vramscope_bin, "run", "-o", str(out), "--no-report", *options, *separator,
                           sys.executable, str(script)],
                          env=cpu_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    sidecars = sorted(out.glob("*.sidecar.json"))
    assert len(sidecars) == 1, (proc.returncode, proc.stdout, proc.stderr)
    return proc, json.loads(sidecars[0].read_text())


def test_run_steps_stop(vramscope_bin, tmp_path):
    proc, s = run_vramscope(vramscope_bin, tmp_path, ["--steps", "2"])
    assert "finished" not in proc.stdout
    assert ("vramscope: captured 2 steps; stopping the program "
            "(vramscope run --keep-running to let it finish)") in proc.stderr
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
    assert s["recording"]["stacks"] == "python" and s["recording"]["max_entries"] == 1000000
    assert {t["name"] for t in s["tensors"] if t["kind"] == "parameter"} == {"weight", "bias"}


def test_run_keep_running(vramscope_bin, tmp_path):
    # The command may also follow the options without '--'.
    proc, s = run_vramscope(vramscope_bin, tmp_path,
                            ["--steps", "2", "--keep-running", "--stacks", "all"], separator=())
    assert "finished" in proc.stdout
    assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 2
    assert s["recording"]["stacks"] == "all"


DDP_SCRIPT = r'''
import torch, torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(4):
    opt.zero_grad()
    model(torch.randn(5, 8)).pow(2).mean().backward()
    opt.step()
dist.destroy_process_group()
print("rank", dist.get_rank() if dist.is_initialized() else "done")
'''


def test_run_under_torchrun_writes_one_capture_per_rank(vramscope_bin, tmp_path):
    """A real launcher: torchrun starts two ranks training a DDP model over gloo; the launcher
    itself (which never trains) writes nothing, each rank writes rank<N>."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    out = tmp_path / "captures"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VRAMSCOPE_") and k not in ("PYTHONPATH", "RANK", "WORLD_SIZE",
                                                          "LOCAL_RANK", "MASTER_ADDR",
                                                          "MASTER_PORT")}
    env["VRAMSCOPE_CAPTURE_CPU"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [vramscope_bin, "run", "--steps", "3", "-o", str(out), "--no-report", "--",
         sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--standalone", str(script)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["rank0.sidecar.json", "rank1.sidecar.json"], (names, proc.stderr[-3000:])
    for rank in (0, 1):
        s = json.loads((out / f"rank{rank}.sidecar.json").read_text())
        assert s["process"]["rank"] == rank and s["process"]["world_size"] == 2
        assert s["end"]["reason"] == "steps" and s["end"]["steps_completed"] == 3
        # DDP's "module." prefix is not part of the names.
        params = {t["name"] for t in s["tensors"] if t["kind"] == "parameter"}
        assert params == {"0.weight", "0.bias", "2.weight", "2.bias"}, params
        states = {t["name"] for t in s["tensors"] if t["kind"] == "optimizer_state"}
        assert "0.weight.momentum_buffer" in states, states
        steps = {}
        for p in s["phases"]:
            steps.setdefault(p["step"], []).append(p["phase"])
        for step in (1, 2, 3):
            assert steps[step][:3] == ["forward", "backward", "optimizer"], steps


OOM_SCRIPT = r'''
import sys
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters())
for i in range(4):
    if sys.argv[1:] == ["oom"] and i == 2:
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 1.50 GiB is free.")
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
print("finished")
'''


def run_on_oom(vramscope_bin, tmp_path, *args):
    script = tmp_path / "train.py"
    script.write_text(OOM_SCRIPT)
    out = tmp_path / "captures"
    proc = subprocess.run([vramscope_bin, "run", "-o", str(out), "--on-oom", "--",
                           sys.executable, str(script), *args],
                          env=cpu_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return proc, out


def test_on_oom_writes_nothing_when_memory_never_runs_out(vramscope_bin, tmp_path):
    proc, out = run_on_oom(vramscope_bin, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout  # recorded to the end: no --steps
    assert proc.stderr.strip().splitlines() == [
        f"vramscope: no out-of-memory error in '{sys.executable}': nothing was written "
        "(--on-oom writes only when the program runs out of GPU memory)"]
    assert not out.exists() or list(out.iterdir()) == []


def test_on_oom_writes_the_capture_of_an_out_of_memory_error(vramscope_bin, tmp_path):
    proc, out = run_on_oom(vramscope_bin, tmp_path, "oom")
    assert proc.returncode == 1 and "OutOfMemoryError" in proc.stderr
    [sidecar] = out.glob("*.sidecar.json")
    s = json.loads(sidecar.read_text())
    assert s["end"]["reason"] == "oom" and s["end"]["steps_completed"] == 2
    # The flight recorder's defaults: no tracebacks, a smaller ring buffer.
    assert s["recording"]["on_oom"] is True
    assert s["recording"]["stacks"] == "none" and s["recording"]["max_entries"] == 200000
    # Owners are named without stacks: parameters and, recorded at each step, gradients and
    # optimizer state.
    names = {(t["kind"], t["name"]) for t in s["tensors"]}
    assert names == {("parameter", "weight"), ("parameter", "bias"),
                     ("gradient", "weight"), ("gradient", "bias"),
                     *(("optimizer_state", f"{p}.{k}") for p in ("weight", "bias")
                       for k in ("exp_avg", "exp_avg_sq", "step"))}
