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
import sys
import time
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("VRAMSCOPE_SOURCE_DIR") or Path(__file__).resolve().parents[2])
REQUIRE = os.environ.get("VRAMSCOPE_REQUIRE_INSTALL") == "1"
BACKEND = "scikit-build-core>=1.0"  # as in pyproject.toml's build-system.requires
INSTALL_TIMEOUT_S = 3600

# Folders of a checkout that must never reach the build: local build trees (GBs), environments.
NOT_COPIED = re.compile(r"^(build[^/]*|\.venv|\.git|fuzz-[^/]*|crash-[^/]*)(/|$)")


def clean_env(**extra):
    """The environment without this test run's own settings: the installed program must stand on
    its own (no PYTHONPATH into the checkout, no VRAMSCOPE_BIN, no ASan options for a Release
    binary)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("VRAMSCOPE_", "ASAN_", "UBSAN_", "PYTHON"))
           and k not in ("PIP_REQUIRE_VIRTUALENV", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def copy_sources(dest: Path) -> int:
    """Copies what git would see (tracked files and new, not ignored ones) into dest; without git,
    the tree less the build folders. Returns the number of files."""
    files = None
    if shutil.which("git") and (SOURCE / ".git").exists():
        out = subprocess.run(["git", "-C", str(SOURCE), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        files = sorted({f for f in out.decode().split("\0") if f})
    else:
        files = sorted(str(p.relative_to(SOURCE)) for p in SOURCE.rglob("*")
                       if p.is_file() and not p.is_symlink())
    count = 0
    for rel in files:
        src = SOURCE / rel
        if NOT_COPIED.match(rel) or "__pycache__" in rel or not src.is_file():
            continue  # a deleted-but-tracked file is absent; a build folder is never wanted
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        count += 1
    return count


def project_version() -> str:
    text = (SOURCE / "CMakeLists.txt").read_text()
    return re.search(r"project\(vramscope VERSION ([0-9.]+)", text).group(1)


def compiler_cache(root: Path) -> dict:
    """The environment that puts scripts/test.sh's compiler cache (ccache, CCACHE_DIR) under the
    pip build, when that script set one up: the build is still a full `pip install .` from a copy
    of the checkout (configure, compile, link, install), but a compile this machine already did for
    the same source is not done again; minutes of CI on 2 cores. A fresh machine compiles it all.
    VRAMSCOPE_CCACHE=0 (as for scripts/test.sh) or no CCACHE_DIR: no cache."""
    if (os.environ.get("VRAMSCOPE_CCACHE", "1") == "0" or not os.environ.get("CCACHE_DIR")
            or not shutil.which("ccache")):
        return {}
    return {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CCACHE_BASEDIR": str(root), "CCACHE_NOHASHDIR": "1"}


class Installed:
    def __init__(self, root: Path):
        self.root = root
        self.venv = root / "venv"
        self.bin = self.venv / "bin"
        self.python = self.bin / "python"
        self.vramscope = self.bin / "vramscope"
        self.log = ""
        self.site_packages = Path(subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True, text=True, check=True, env=clean_env()).stdout.strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("pip-install")
    src = root / "src"
    n = copy_sources(src)
    assert (src / "pyproject.toml").is_file(), f"{SOURCE} has no pyproject.toml"
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True,
                   env=clean_env())
    inst = Installed(root)
    pip = [str(inst.python), "-m", "pip", "--disable-pip-version-check"]

    # Can pip reach an index with the build backend? If not, this is no test of ours.
    probe = subprocess.run(pip + ["download", "--no-deps", "-q", "-d", str(root / "probe"),
                                  BACKEND], capture_output=True, text=True, timeout=300,
                           env=clean_env())
    if probe.returncode != 0:
        why = (f"pip cannot fetch the build backend {BACKEND} (no network or index?): "
               f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''}")
        if REQUIRE:
            pytest.fail(why + " (VRAMSCOPE_REQUIRE_INSTALL=1)")
        pytest.skip(why)

    env = clean_env(CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get(
        "CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2)))
    install = pip + ["install", "-v"]
    cached = compiler_cache(root)
    if cached:
        env.update(cached)
        # A build folder at a fixed place under root (scikit-build-core's default is a new temp
        # folder), so that every path the compiler sees is the same, relative to CCACHE_BASEDIR,
        # from one run to the next.
        install += ["-C", f"build-dir={root / 'build'}"]
    start = time.monotonic()
    proc = subprocess.run(install + [str(src)], capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S, env=env)
    seconds = time.monotonic() - start
    (root / "pip-install.log").write_text(proc.stdout + proc.stderr)
    inst.log = proc.stdout + proc.stderr
    print(f"\npip install of {n} files took {seconds:.0f} s "
          f"(CMAKE_BUILD_PARALLEL_LEVEL={env['CMAKE_BUILD_PARALLEL_LEVEL']}, "
          f"compiler cache: {'ccache' if cached else 'none'}); "
          f"log: {root / 'pip-install.log'}")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
        pytest.fail(f"pip install {src} failed (exit {proc.returncode}):\n{tail}")
    return inst


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


def torch_python():
    path = Path(os.environ.get("VRAMSCOPE_TORCH_PYTHON") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "vramscope" / "torch-venv" / "bin" / "python")
    return path


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
