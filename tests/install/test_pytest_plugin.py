"""vramscope's pytest plugin from the installed package: found by its pytest11 entry point,
importing nothing heavy when loaded, and on this CPU-only machine failing a step over its
gpu_memory limit and passing one under it, from the tracer's prediction (plugin_project/). The
GPU path (the step measured) is a step of scripts/gpu_session.sh."""

import os
import shutil
import subprocess


from conftest import SOURCE, clean_env, skip_unless_required, torch_python

HERE = SOURCE / "tests" / "install"


def plugin_env(installed):
    """The torch environment (the installed one has no torch) with the installed package first
    on its path: pytest finds the plugin through the installed distribution's entry point."""
    return clean_env(PYTHONPATH=str(installed.site_packages),
                     PATH=f"{installed.bin}{os.pathsep}{os.environ.get('PATH', '')}")


def test_loading_the_plugin_imports_nothing_heavy(installed):
    proc = subprocess.run([str(installed.python), "-c",
                           "import sys, vramscope.pytest_plugin; "
                           "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'transformers') "
                           "if m in sys.modules))"],
                          capture_output=True, text=True, env=clean_env(), timeout=120)
    if "No module named 'pytest'" in proc.stderr:
        subprocess.run([str(installed.python), "-m", "pip", "install", "-q", "pytest"],
                       capture_output=True, env=clean_env(), timeout=600, check=True)
        return test_loading_the_plugin_imports_nothing_heavy(installed)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    meta = subprocess.run([str(installed.python), "-c",
                           "from importlib.metadata import entry_points; "
                           "print([e.value for e in entry_points(group='pytest11') "
                           "if e.name == 'vramscope'])"],
                          capture_output=True, text=True, env=clean_env(), timeout=120)
    assert meta.stdout.strip() == "['vramscope.pytest_plugin']", meta.stdout + meta.stderr


def test_a_step_over_its_limit_fails_and_one_under_passes(installed, tmp_path):
    python = torch_python()
    if not python.exists() or subprocess.run([str(python), "-c", "import torch, pytest"],
                                             capture_output=True).returncode:
        skip_unless_required(f"no Python with torch and pytest at {python}")
    shutil.copy(HERE / "plugin_project" / "step_limits.py", tmp_path / "test_step_limits.py")
    proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_step_limits.py"], capture_output=True, text=True,
                          env=plugin_env(installed), timeout=900, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "FAILED test_step_limits.py::test_over_the_limit" in out, out
    assert "gpu_memory: the step reserves 226.0 MiB (236,978,176 B), over the limit of 100.0 MiB " \
           "(predicted without a GPU" in out, out
    assert "step.sqlite" in out
