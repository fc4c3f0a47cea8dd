"""The one `pip install .` every test of this folder shares (a full Release build of the C++ core:
minutes on 2 cores), in a fresh virtual environment, and the helpers to use it as a user would.

Skips when pip cannot fetch the build backend (no network, no index), unless
VRAMSCOPE_REQUIRE_INSTALL=1; a failing build is a failure, with pip's output. $VRAMSCOPE_SOURCE_DIR
picks the checkout to install (default: this one).
"""

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


@pytest.fixture(scope="session")
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




def torch_python():
    path = Path(os.environ.get("VRAMSCOPE_TORCH_PYTHON") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                / "vramscope" / "torch-venv" / "bin" / "python")
    return path


def skip_unless_required(why: str) -> None:
    """What a test of this folder cannot get here (a package from PyPI, a Python with torch):
    a skip on a machine without it, a failure where VRAMSCOPE_REQUIRE_INSTALL=1 (CI) says it
    must run."""
    if REQUIRE:
        pytest.fail(why + " (VRAMSCOPE_REQUIRE_INSTALL=1)")
    pytest.skip(why)
