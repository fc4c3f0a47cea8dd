"""Small pieces every golden-capture script uses: stage lines, JSON and gzip writing, the
repository's commit, versions and the GPU's metadata, case selection. Stdlib only."""

from __future__ import annotations

import datetime as _dt
import fnmatch
import functools
import gzip
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRAINING_DIR = REPO / "examples" / "training"
STAGE_TAG = "@@stage "  # a child prints "@@stage <name>" as it goes; the driver reports the last one
MARK_PREFIX = "vramscope::"
DEFAULT_MAX_ENTRIES = 1_000_000
# Environment variables each suite's metadata.json records (those that change the allocator).
ENV_KEYS = ("PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES",
            "CUDA_MODULE_LOADING")


def now_us() -> int:
    """Microseconds since the Unix epoch: the clock of the snapshot's ``time_us`` (PyTorch converts
    its TSC timestamps to Unix time with ApproximateClockToUnixTimeConverter, then divides by 1000)."""
    return time.time_ns() // 1000


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(when: _dt.datetime | None = None) -> str:
    return (when or utc_now()).isoformat(timespec="seconds")


def stage(name: str) -> None:
    print(f"{STAGE_TAG}{name}", flush=True)


def stages_of(output: str) -> list[str]:
    """The stages a child printed, in order."""
    return [ln[len(STAGE_TAG):].strip() for ln in output.splitlines() if ln.startswith(STAGE_TAG)]


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def dumps_json(obj, indent: int = 0, width: int = 200) -> str:
    """JSON with one line per small object or list (a tensor, a phase's counters) and nesting
    indented one space: readable, diffable, and about half the size of ``indent=1``."""
    flat = json.dumps(obj, separators=(", ", ": "), ensure_ascii=False)
    if len(flat) + indent <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: "
                 f"{dumps_json(v, indent + 1, width).lstrip()}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps_json(v, indent + 1, width).lstrip() for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_json(path: Path, obj, *, indent: int | None = None) -> None:
    """`obj` into `path` atomically: compact (dumps_json) by default, json.dumps(indent=indent)
    when given (the run and JAX suites' layout)."""
    text = dumps_json(obj) if indent is None else json.dumps(obj, indent=indent)
    write_atomic(Path(path), (text + "\n").encode())


def jsonable(value):
    """Hyperparameters and the like as JSON (tuples become lists, anything odd its repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    try:
        import torch
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return value.item()
    except Exception:  # noqa: BLE001 - best effort only
        pass
    return repr(value)


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def gzip_file(src: Path, dst: Path, *, name: str | None = None) -> int:
    """`src` gzipped (level 9, mtime 0: the same bytes in every run) into `dst`; the gzip header
    names `name`, by default dst's name without ".gz". Returns dst's size."""
    dst = Path(dst)
    with open(src, "rb") as f, open(dst, "wb") as raw:
        with gzip.GzipFile(filename=name or dst.name.removesuffix(".gz"), mode="wb",
                           compresslevel=9, fileobj=raw, mtime=0) as g:
            shutil.copyfileobj(f, g, 1 << 20)
    return dst.stat().st_size


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def repo_commit(paths=()) -> str | None:
    """HEAD, with "+local-changes" when any of `paths` (the code that made the goldens) differs
    from it; None outside a git checkout. Asked once per run (metadata.json is rewritten after
    every case)."""
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        if r.returncode != 0:
            return None
        dirty = paths and subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", *paths],
            capture_output=True, text=True, timeout=10).stdout.strip()
        return r.stdout.strip() + ("+local-changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_info(started: _dt.datetime, dry: bool, *, commit_paths=None, quote_command: bool = True,
             commit=None) -> dict:
    """The head of a metadata.json after "format" and "version": date, command, repo_commit
    (omitted when commit_paths is None and no commit is given), dry_run_cpu, python, platform."""
    command = (" ".join(shlex.quote(a) for a in [Path(sys.executable).name] + sys.argv)
               if quote_command else " ".join(sys.argv))
    info = {"date": iso(started), "command": command}
    if commit is not None or commit_paths is not None:
        info["repo_commit"] = commit if commit is not None else repo_commit(commit_paths)
    info.update(dry_run_cpu=dry, python=platform.python_version(), platform=platform.platform())
    return info


def driver_version(index: int | None = None) -> tuple[str | None, str | None]:
    """The NVIDIA driver's version and where it was read (nvidia-smi, else /proc), or Nones."""
    cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
    try:
        r = subprocess.run(cmd + ([] if index is None else ["-i", str(index)]),
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0].strip(), "nvidia-smi"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0].strip(), \
            "/proc/driver/nvidia/version"
    except (OSError, IndexError):
        return None, None


def gpu_metadata(dry: bool) -> dict:
    """torch's versions and numerics settings, and the GPU (None in a dry run or without one,
    with "error" saying why)."""
    info: dict = {}
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return {"error": f"cannot import torch: {e}"}
    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    info["torch_git"] = getattr(torch.version, "git_version", None)
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        info["cudnn"] = None
    info["float32_matmul_precision"] = torch.get_float32_matmul_precision()
    info["cuda_matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    info["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
    info["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    if dry:
        info["gpu"] = None
        return info
    if not torch.cuda.is_available():
        info["gpu"] = None
        info["error"] = "torch.cuda.is_available() is False"
        return info
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    gpu = {
        "index": idx,
        "count": torch.cuda.device_count(),
        "name": props.name,
        "total_memory": props.total_memory,
        "compute_capability": f"{props.major}.{props.minor}",
        "multi_processor_count": getattr(props, "multi_processor_count", None),
        "uuid": str(getattr(props, "uuid", "")) or None,
    }
    driver, source = driver_version(idx)
    if source:
        gpu["driver_source"] = source
    gpu["driver_version"] = driver
    info["gpu"] = gpu
    return info


def gpu_facts(python: str) -> dict:
    """The GPU and torch as another Python (`python`, with torch and CUDA) sees them, and the
    driver: what a suite records when its cases run in that Python rather than this one."""
    probe = ("import json, torch; p = torch.cuda.get_device_properties(0); print(json.dumps({"
             "'name': p.name, 'total_memory': p.total_memory, 'compute_capability': "
             "f'{p.major}.{p.minor}', 'torch': torch.__version__, 'torch_cuda': torch.version.cuda,"
             " 'cudnn': torch.backends.cudnn.version()}))")
    facts = json.loads(subprocess.run([python, "-c", probe], check=True, capture_output=True,
                                      text=True).stdout)
    facts["driver_version"] = driver_version()[0]
    return facts


def select_cases(cases: list, spec, tool: str, *, name=lambda c: c.name) -> list:
    """The cases whose names match `spec`: comma-separated names or shell patterns (all when
    empty), in the suite's order of the first pattern that matched; an unmatched pattern exits
    with the list of names."""
    if not spec:
        return list(cases)
    chosen: list = []
    for pattern in (p.strip() for p in spec.split(",")):
        if not pattern:
            continue
        matched = [c for c in cases if fnmatch.fnmatchcase(name(c), pattern)]
        if not matched:
            raise SystemExit(f"{tool}: error: no case matches {pattern!r}; "
                             f"the cases are: {', '.join(name(c) for c in cases)}")
        chosen.extend(c for c in matched if c not in chosen)
    return chosen
