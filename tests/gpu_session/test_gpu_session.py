"""scripts/gpu_session.sh without a GPU: `prepare` bundles a real build, and `run --dry-run-cpu`
runs every step's command with its CPU stand-in (or prints it), so the script cannot rot between
the rare sessions that are lent a GPU (DEVELOPERS.md).

Environment: VRAMSCOPE_BIN (a built vramscope, with libvramscope_inject.so beside it) and
VRAMSCOPE_TORCH_PYTHON (a Python with torch and transformers), as CTest sets them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_session.sh"
BIN = Path(os.environ.get("VRAMSCOPE_BIN", REPO / "build" / "vramscope"))
PYTHON = os.environ.get("VRAMSCOPE_TORCH_PYTHON", "")
STEPS = ["preflight", "device_overheads", "jax_goldens", "run_goldens", "native", "pytest_plugin",
         "techniques", "overhead", "modern_goldens", "goldens", "oom_golden", "hf_goldens"]
# The steps a dry run cannot stand in for on the CPU: printed, never run.
GPU_ONLY = {"native", "oom_golden"}


def _has_jax() -> bool:
    return subprocess.run([PYTHON, "-c", "import jax"], capture_output=True).returncode == 0


def _require():
    if not BIN.is_file():
        pytest.skip(f"{BIN} is not built")
    if not (BIN.parent / "libvramscope_inject.so").is_file():
        pytest.skip("no libvramscope_inject.so beside the binary (built without CUPTI)")
    if not PYTHON:
        pytest.skip("VRAMSCOPE_TORCH_PYTHON is not set")
    if shutil.which("patchelf") is None:
        pytest.skip("patchelf is not installed (scripts/install-deps.sh --test installs it)")


def sh(*args, timeout=900, env=None):
    proc = subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    _require()
    d = tmp_path_factory.mktemp("gpu") / "bundle"
    rc, out = sh("prepare", "--no-build", "--build-dir", BIN.parent, "--bundle", d)
    assert rc == 0, out
    return d


def test_prepare_bundles_the_binary_with_the_libraries_the_device_lacks(bundle):
    assert (bundle / "bin" / "vramscope").is_file()
    assert (bundle / "bin" / "libvramscope_inject.so").is_file()
    manifest = (bundle / "MANIFEST.txt").read_text()
    assert "commit: " in manifest and "version: vramscope " in manifest
    # The binary finds what is not glibc in the bundle, through its RUNPATH alone.
    runpath = subprocess.run(["patchelf", "--print-rpath", bundle / "bin" / "vramscope"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert runpath == "$ORIGIN/../lib"
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(["ldd", bundle / "bin" / "vramscope"], capture_output=True, text=True,
                         env=env, check=True).stdout
    assert "not found" not in ldd
    bundled = {p.name for p in (bundle / "lib").iterdir()}
    for line in ldd.splitlines():
        if "libfmt" in line or "libsqlite3" in line:
            path = Path(line.split("=>")[1].split("(")[0].strip())
            assert path.resolve().parent == (bundle / "lib").resolve(), line
            assert line.split()[0] in bundled
    version = subprocess.run([bundle / "bin" / "vramscope", "--version"], capture_output=True,
                             text=True, env=env, check=True).stdout
    assert version.startswith("vramscope ")
    # The native recorder's unwinder, loaded by soname through the library's own run path.
    if Path("/usr/lib/x86_64-linux-gnu/libunwind.so.8").exists():
        assert (bundle / "lib" / "libunwind.so.8").is_file()
        inject_runpath = subprocess.run(
            ["patchelf", "--print-rpath", bundle / "bin" / "libvramscope_inject.so"],
            capture_output=True, text=True, check=True).stdout.strip()
        assert inject_runpath == "$ORIGIN/../lib"


def test_dry_run_runs_every_step_with_its_cpu_stand_in(bundle, tmp_path):
    out = tmp_path / "out"
    rc, log = sh("run", "--dry-run-cpu", "--bundle", bundle, "--out", out, "--python", PYTHON,
                 "--budget", "900")
    assert rc == 0, log
    # What comes back from the device tool: a few flat files.
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu-session.tar.gz", "results.json", "results.md", "session.log"]
    results = json.loads((out / "results.json").read_text())
    assert results["format"] == "vramscope-gpu-session" and results["dry_run"] is True
    assert results["gpu"]["slug"] == "dry-run-cpu" and results["gpu"]["torch"]
    status = {s["step"]: s["status"] for s in results["steps"]}
    assert list(status) == STEPS
    for step, st in status.items():
        # A dry run never claims a GPU result.
        assert st != "ok", (step, st)
        # jax_goldens stands in on the CPU only where this Python has JAX.
        if step in GPU_ONLY or (step == "jax_goldens" and not _has_jax()):
            assert st == "dry-run: printed, not run (needs a GPU)", (step, st)
        else:
            assert st == "dry-run ok: the CPU stand-in ran", (step, st)
    md = (out / "results.md").read_text()
    assert "DRY RUN" in md and "| native | dry-run: printed, not run (needs a GPU) |" in md
    with tarfile.open(out / "gpu-session.tar.gz") as tar:
        names = set(tar.getnames())
    for name in ("goldens/dry-run-cpu/gpu_session.json", "goldens/dry-run-cpu/gpu_session.md",
                 "goldens/dry-run-cpu/run/metadata.json",
                 "goldens/dry-run-cpu/run/linear_sgd_fp32.sidecar.json",
                 "goldens/dry-run-cpu/linear_sgd_fp32.sidecar.json",
                 "goldens/dry-run-cpu/capture_overhead.txt", "logs/native.log",
                 "goldens/dry-run-cpu/pytest_plugin.txt",
                 "goldens/dry-run-cpu/techniques/metadata.json",
                 "goldens/dry-run-cpu/techniques/llama_b4s1024_bf16_ckptops.sidecar.json",
                 "goldens/dry-run-cpu/modern/metadata.json",
                 "goldens/dry-run-cpu/modern/compile_reduce_overhead.sidecar.json",
                 "goldens/dry-run-cpu/modern/graphs_shared_pool.sidecar.json",
                 "goldens/dry-run-cpu/modern/mempool.sidecar.json", "logs/modern_goldens.log",
                 "goldens/dry-run-cpu/device_overheads.json", "logs/device_overheads.log",
                 "results.json"):
        assert name in names, (name, sorted(names))
    # results.md quotes the modern cases' table (scripts/gpu_session_results.py).
    assert "| case | status | max allocated | max reserved | private pools at dump |" in md
    assert "| mempool | ok | - | - | - |" in md
    # ... and the device overheads' figures (none measured on the CPU).
    assert "| figure | bytes | MiB |" in md and "| context_lazy | - | - |" in md
    native_log = [s for s in results["steps"] if s["step"] == "native"][0]["log_tail"]
    assert "run --native" in native_log
    # Nothing a dry run wrote goes into goldens/.
    rc, text = sh("unpack", out)
    assert rc != 0 and "dry run" in text


def test_out_of_time_steps_are_skipped_and_said(bundle, tmp_path):
    out = tmp_path / "out"
    rc, log = sh("run", "--dry-run-cpu", "--bundle", bundle, "--out", out, "--python", PYTHON,
                 "--budget", "100", "--only", "oom_golden")
    results = json.loads((out / "results.json").read_text())
    status = {s["step"]: s["status"] for s in results["steps"]}
    assert rc == 2, log  # none failed, some skipped
    assert status["preflight"] == "dry-run ok: the CPU stand-in ran"
    assert status["run_goldens"] == "skipped: not selected (--only oom_golden)"
    assert status["oom_golden"] == "dry-run: printed, not run (needs a GPU)"
    # run_goldens needs 60 s at least: under a 70 s budget (25 s of it reserved), it cannot
    # start (a budget that lets some step start would make the test hang on that step's speed).
    rc, log = sh("run", "--dry-run-cpu", "--bundle", bundle, "--out", tmp_path / "out2",
                 "--python", PYTHON, "--budget", "70", "--only", "run_goldens")
    status = {s["step"]: s["status"]
              for s in json.loads((tmp_path / "out2" / "results.json").read_text())["steps"]}
    assert rc == 2, log
    assert status["run_goldens"].startswith("skipped: not enough time left"), status


def test_a_real_run_without_a_gpu_fails_its_preflight_and_claims_nothing(bundle, tmp_path):
    """The GPU path itself, on this machine: no nvidia-smi, so preflight fails, the rest is
    skipped, and unpack refuses to put anything into goldens/."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    out = tmp_path / "out"
    rc, log = sh("run", "--bundle", bundle, "--out", out, "--python", PYTHON)
    assert rc == 1, log
    results = json.loads((out / "results.json").read_text())
    assert results["dry_run"] is False
    status = {s["step"]: s["status"] for s in results["steps"]}
    assert status["preflight"].startswith("failed"), status
    assert all(st == "skipped: preflight failed" for step, st in status.items()
               if step != "preflight"), status
    assert "nvidia-smi" in results["steps"][0]["log_tail"]
    rc, text = sh("unpack", out)
    assert rc != 0 and "nothing goes into goldens" in text, text


def _fake_call(dest: Path, bundle_lines: list, statuses: dict, files: dict) -> Path:
    """What a GPU call brings back, made by hand: results and goldens/testgpu/..."""
    stage = dest / "stage"
    (stage / "goldens" / "testgpu").mkdir(parents=True)
    for name, text in files.items():
        path = stage / "goldens" / "testgpu" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    results = {"format": "vramscope-gpu-session", "version": 1, "dry_run": False,
               "date": "2026-11-25T00:00:00+00:00", "budget_s": 540, "elapsed_s": 500,
               "gpu": {"name": "NVIDIA TestGPU", "driver_version": "1.0", "slug": "testgpu",
                       "torch": "2.11.0"},
               "bundle": bundle_lines,
               "steps": [{"step": k, "status": v, "seconds": 1, "log_tail": ""}
                         for k, v in statuses.items()]}
    (stage / "results.json").write_text(json.dumps(results))
    (stage / "results.md").write_text("| step |\n")
    out = dest / "files_at"
    out.mkdir()
    with tarfile.open(out / "gpu-session.tar.gz", "w:gz") as tar:
        for name in ("goldens", "results.json", "results.md"):
            tar.add(stage / name, arcname=name)
    return out


def test_unpack_merges_a_second_call_into_the_first(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    bundle_lines = ["vramscope GPU-session bundle", "date: x", "commit: abc"]
    skipped = "skipped: not enough time left (needs at least 60s, 10s left)"
    first = _fake_call(tmp_path / "a", bundle_lines,
                       {"preflight": "ok", "run_goldens": "ok", "native": "ok",
                        "overhead": "ok", "goldens": skipped, "oom_golden": skipped,
                        "hf_goldens": skipped},
                       {"run/metadata.json": "{}", "capture_overhead.txt": "plain 1 s\n"})
    rc, text = sh("unpack", first, "--into", repo)
    assert rc == 0, text
    second = _fake_call(tmp_path / "b", bundle_lines,
                        {"preflight": "ok", "run_goldens": "skipped: not selected (--only x)",
                         "native": "skipped: not selected (--only x)",
                         "overhead": "skipped: not selected (--only x)", "goldens": "ok",
                         "oom_golden": "failed: exit 1", "hf_goldens": "ok"},
                        {"metadata.json": "{}", "hf/metadata.json": "{}"})
    rc, text = sh("unpack", second, "--into", repo)
    assert rc == 0, text
    gold = repo / "goldens" / "testgpu"
    for name in ("run/metadata.json", "capture_overhead.txt", "metadata.json", "hf/metadata.json",
                 "gpu_session.json", "gpu_session.md"):
        assert (gold / name).is_file(), name
    merged = json.loads((gold / "gpu_session.json").read_text())
    assert merged["calls"] == 2
    assert {s["step"]: s["status"] for s in merged["steps"]} == {
        "preflight": "ok", "run_goldens": "ok", "native": "ok", "overhead": "ok",
        "goldens": "ok", "oom_golden": "failed: exit 1", "hf_goldens": "ok"}
    md = (gold / "gpu_session.md").read_text()
    assert "| oom_golden | failed: exit 1 | 1 |" in md and "plain 1 s" in md


def test_missing_pieces_fail_loudly(bundle, tmp_path):
    rc, text = sh("run", "--dry-run-cpu", "--bundle", tmp_path / "nothing", "--out",
                  tmp_path / "o1", "--python", PYTHON)
    assert rc == 1 and "no bundle at" in text and "prepare" in text
    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    (broken / "bin" / "libvramscope_inject.so").unlink()
    rc, text = sh("run", "--dry-run-cpu", "--bundle", broken, "--out", tmp_path / "o2",
                  "--python", PYTHON)
    results = json.loads((tmp_path / "o2" / "results.json").read_text())
    status = {s["step"]: s["status"] for s in results["steps"]}
    assert rc == 1, text
    assert status["preflight"].startswith("failed"), status
    assert all(st == "skipped: preflight failed" for step, st in status.items()
               if step != "preflight"), status
    rc, text = sh("run", "--dry-run-cpu", "--bundle", bundle, "--out", tmp_path / "o3",
                  "--python", PYTHON, "--only", "warp_drive")
    assert rc == 1 and "unknown step 'warp_drive'" in text


def test_modern_goldens_alone_sizes_its_cases_inside_its_time_out(bundle, tmp_path):
    """--only modern_goldens (what a short second call runs for issue 16): the step runs, and
    each case's time-out leaves the script 20 s of the step's own to write its metadata."""
    out = tmp_path / "out"
    rc, log = sh("run", "--dry-run-cpu", "--bundle", bundle, "--out", out, "--python", PYTHON,
                 "--budget", "190", "--only", "modern_goldens")
    assert rc == 2, log  # ran; the other steps were not selected
    results = json.loads((out / "results.json").read_text())
    status = {s["step"]: s["status"] for s in results["steps"]}
    assert list(status) == STEPS
    assert status["modern_goldens"] == "dry-run ok: the CPU stand-in ran", status
    assert all(st.startswith("skipped: not selected") for step, st in status.items()
               if step not in ("preflight", "modern_goldens")), status
    session = (out / "session.log").read_text()
    limit = int(re.search(r"modern_goldens: running \(time-out (\d+)s\)", session).group(1))
    assert limit < 190 - 25
    step_log = [s for s in results["steps"] if s["step"] == "modern_goldens"][0]["log_tail"]
    assert f"timeout {min(limit - 20, 180)} s each" in step_log, step_log
    assert "3/3 ok, 0 skipped, 0 failed" in step_log, step_log
