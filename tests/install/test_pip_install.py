"""`pip install .` end to end: a fresh virtual environment, the package built from a copy of the
checkout through pyproject.toml (scikit-build-core driving CMake), then the installed command and
package are used as a user would.

Slow (a full Release build of the C++ core: minutes on 2 cores), so everything shares one install.
Skips when pip cannot fetch the build backend (no network, no index), unless
VRAMSCOPE_REQUIRE_INSTALL=1; a failing build is a failure, with pip's output. The `run` check needs
a Python with torch: $VRAMSCOPE_TORCH_PYTHON, default ~/.cache/vramscope/torch-venv/bin/python (what
scripts/test.sh makes). $VRAMSCOPE_SOURCE_DIR picks the checkout to install (default: this one).
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SOURCE, clean_env, project_version, torch_python


def test_command_on_path_and_version(installed):
    assert installed.vramscope.is_file() and os.access(installed.vramscope, os.X_OK)
    assert installed.vramscope.read_bytes()[:4] == b"\x7fELF", "expected the native binary itself"
    # Found on PATH by name, as a user runs it after activating the environment.
    env = clean_env(PATH=f"{installed.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(["vramscope", "--version"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"vramscope {project_version()}"
    # pip's metadata has the same version (from project() in CMakeLists.txt).
    show = subprocess.run([str(installed.python), "-m", "pip", "show", "vramscope"],
                          capture_output=True, text=True, env=clean_env(), timeout=60)
    assert f"Version: {project_version()}" in show.stdout, show.stdout + show.stderr


def test_report_built_in_example(installed, tmp_path):
    proc = subprocess.run([str(installed.vramscope), "report"], capture_output=True, text=True,
                          cwd=tmp_path, env=clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "built-in example" in proc.stdout
    assert "peak allocated  226.10 MiB (237,080,576 B)" in proc.stdout
    assert (tmp_path / "vramscope-example.sqlite").stat().st_size > 0


def test_python_package_importable(installed, tmp_path):
    proc = subprocess.run(
        [str(installed.python), "-c",
         "import vramscope, vramscope.tracer; print(vramscope.__file__); "
         "print(vramscope.STREAM_FORMAT)"],
        capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    where, fmt = proc.stdout.split()
    assert Path(where) == installed.site_packages / "vramscope" / "__init__.py"
    assert fmt == "vramscope-tensor-stream"


def test_layout(installed):
    """Every Python file of the package is installed; nothing but the package and its metadata
    goes into site-packages; the native library, when built, is beside bin/ where `vramscope run`
    looks (<bin>/../lib/vramscope)."""
    package = SOURCE / "python" / "vramscope"
    wanted = {p.relative_to(package) for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    got = {p.relative_to(installed.site_packages / "vramscope")
           for p in (installed.site_packages / "vramscope").rglob("*.py")}
    assert wanted <= got, f"missing from the installed package: {sorted(map(str, wanted - got))}"

    record = next(installed.site_packages.glob("vramscope-*.dist-info")) / "RECORD"
    bad = []
    for line in record.read_text().splitlines():
        path = line.split(",")[0]
        if path.startswith(("vramscope/", "vramscope-")):
            continue
        resolved = (installed.site_packages / path).resolve()
        if resolved == installed.vramscope.resolve():
            continue
        if resolved.parent == (installed.venv / "lib" / "vramscope").resolve():
            continue
        bad.append(path)
    assert not bad, f"installed outside the package, bin/vramscope and lib/vramscope: {bad}"

    inject = installed.venv / "lib" / "vramscope" / "libvramscope_inject.so"
    stray = list(installed.site_packages.rglob("libvramscope_inject.so"))
    assert not stray, f"the native library landed in site-packages: {stray}"
    if "Native capture (libvramscope_inject.so): building" in installed.log:
        assert inject.is_file(), f"built but not installed at {inject}"
    elif not inject.exists():
        print("libvramscope_inject.so not built (no CUPTI on this machine)")


def test_run_captures_with_installed_command(installed, tmp_path):
    probe = subprocess.run([str(installed.vramscope), "run", "--help"], capture_output=True,
                           text=True, env=clean_env(), timeout=60)
    # Without the subcommand, CLI11 answers `run --help` with the top-level help (exit 0).
    if probe.returncode != 0 or not re.search(r"^Usage: \S*vramscope run\b", probe.stdout, re.M):
        pytest.skip("the installed vramscope has no 'run' subcommand yet")
    python = torch_python()
    has_torch = python.exists() and subprocess.run(
        [str(python), "-c", "import torch"], capture_output=True, env=clean_env(),
        timeout=300).returncode == 0
    if not has_torch:
        pytest.skip(f"no Python with torch at {python} (scripts/test.sh makes it; or set "
                    "VRAMSCOPE_TORCH_PYTHON)")
    script = ("import torch\n"
              "model = torch.nn.Linear(4, 2)\n"
              "opt = torch.optim.Adam(model.parameters())\n"
              "for i in range(3):\n"
              "    model(torch.randn(3, 4)).sum().backward()\n"
              "    opt.step()\n"
              "    opt.zero_grad()\n"
              "print('finished')\n")
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(installed.vramscope), "run", "-o", str(out), "--", str(python), "-c", script],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env=clean_env(VRAMSCOPE_CAPTURE_CPU="1", CUDA_VISIBLE_DEVICES=""))
    # Without CUDA there is a sidecar but no snapshot, which `run` calls nothing captured (exit 1).
    assert proc.returncode == 0 or (proc.returncode == 1 and "no snapshot" in proc.stderr), \
        (proc.returncode, proc.stdout, proc.stderr)
    assert "finished" in proc.stdout, (proc.stdout, proc.stderr)
    sidecars = sorted(out.glob("*.sidecar.json"))
    assert len(sidecars) == 1, (sorted(p.name for p in out.iterdir()), proc.stderr)
    sidecar = json.loads(sidecars[0].read_text())
    assert sidecar["format"] == "vramscope-capture" and sidecar["version"] == 1
    assert sidecar["snapshot"] is None
    assert {t["name"] for t in sidecar["tensors"] if t["kind"] == "parameter"} == {"weight", "bias"}


def test_missing_system_library_is_named(tmp_path):
    """A missing library stops the configure with one line naming the Debian package (what a
    `pip install .` on a machine without it prints). fmt stands for any of them."""
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("no cmake")
    proc = subprocess.run([cmake, "-S", str(SOURCE), "-B", str(tmp_path / "build"),
                           "-DVRAMSCOPE_BUILD_TESTS=OFF", "-DVRAMSCOPE_BUILD_BENCH=OFF",
                           "-DCMAKE_DISABLE_FIND_PACKAGE_fmt=ON"],
                          capture_output=True, text=True, timeout=300, env=clean_env())
    assert proc.returncode != 0
    lines = [l.strip() for l in (proc.stdout + proc.stderr).splitlines()
             if "missing system libraries" in l]
    assert lines == ["vramscope: missing system libraries (fmt); install them with: "
                     "sudo apt install libfmt-dev (or run scripts/install-deps.sh)"], proc.stderr
