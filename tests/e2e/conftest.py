"""Shared fixtures for the end-to-end tests of `vramscope report`.

Environment:
  VRAMSCOPE_BIN         the binary to test (default: <repo>/build/vramscope)
  VRAMSCOPE_SHARED_DIR  the shared folder with spec/ and fixtures/real/ (default: <repo>/../shared)

Only pytest and the standard library are used. Snapshots are written with Python's own pickle
module from plain dicts and lists, in the layout of torch.cuda.memory._dump_snapshot(); no test
unpickles a file it did not build itself except through an unpickler that refuses every global
(test_regions.py reads the real recordings that way), so no file can run code.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

sys.path.insert(0, str(REPO / "tests" / "support"))
from captures import unpack_two_rank_capture  # noqa: E402,F401 (for the tests' imports)
from json_documents import VERBS, document_name  # noqa: E402
BIN = Path(os.environ.get("VRAMSCOPE_BIN", REPO / "build" / "vramscope"))
SHARED = Path(os.environ.get("VRAMSCOPE_SHARED_DIR", REPO.parent / "shared"))
SPEC_SCHEMA = SHARED / "spec" / "report-schema.md"
REAL_FIXTURES = SHARED / "fixtures" / "real"

ERROR_PREFIX = "vramscope: error: "
# The built-in example (what `report`, `simulate` and `view` use with no input): the real capture
# goldens/h200/mlp_adam_fp32.pickle.gz, embedded in the binary. A 2-layer MLP trained with Adam
# for 3 steps on an NVIDIA H200 (torch 2.11, stacks="all"); PyTorch's own counters for the run are
# in its sidecar and in goldens/h200/metadata.json, and the figures below agree with them
# (test_report_cli.py::test_built_in_example_agrees_with_pytorch checks it).
BUILT_IN_NAME = "goldens/h200/mlp_adam_fp32.pickle.gz"
BUILT_IN_PATH = REPO / BUILT_IN_NAME
BUILT_IN_SIDECAR = REPO / "goldens" / "h200" / "mlp_adam_fp32.sidecar.json"
BUILT_IN_METADATA = REPO / "goldens" / "h200" / "metadata.json"
BUILT_IN_CASE = "mlp_adam_fp32"
BUILT_IN_EVENTS = 193               # trace events (the sidecar's snapshot summary)
BUILT_IN_ALLOCS = 72                # allocation.all.allocated
BUILT_IN_SEGMENT_ALLOCS = 15        # num_device_alloc (and segment.all.current at the dump)
BUILT_IN_PEAK_ALLOCATED = 237_080_576  # torch.cuda.max_memory_allocated()
BUILT_IN_PEAK_RESERVED = 241_172_480   # torch.cuda.max_memory_reserved()
BUILT_IN_ALLOCATED_AT_DUMP = 202_457_088  # torch.cuda.memory_allocated() before the dump
BUILT_IN_RESERVED_AT_DUMP = 241_172_480   # torch.cuda.memory_reserved() before the dump
CATEGORIES = ("weight", "gradient", "optimizer_state", "activation", "input", "workspace",
              "temporary", "unknown")
SKYLINE_TABLES = ("weight_entries", "activation_entries", "entry_types", "stack_correlation",
                  "stack_frames", "misc_sizes")


def real_snapshot_files() -> list[Path]:
    """The real snapshot pickles in the shared folder (empty when it is absent)."""
    if not REAL_FIXTURES.is_dir():
        return []
    return sorted(REAL_FIXTURES.glob("*.pickle"))


def real_snapshot_params() -> list:
    """pytest parameters over the real snapshots, or one skipped parameter when there are none."""
    files = real_snapshot_files()
    if not files:
        return [pytest.param(None, id="no-real-fixtures",
                             marks=pytest.mark.skip(reason=f"{REAL_FIXTURES} is absent"))]
    return [pytest.param(f, id=f.name) for f in files]


def run_binary(*args, cwd, timeout: float = 60, env=None) -> tuple[int, str, str]:
    """Runs vramscope with `args` in `cwd`; returns (exit code, stdout, stderr). A JSON document
    it prints (--json) is validated against its schema (schemas/, check_json_schema)."""
    args = [str(a) for a in args]
    proc = subprocess.run([str(BIN), *args], cwd=str(cwd), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    out = proc.stdout.decode("utf-8", "replace")
    if "--json" in args and out.lstrip().startswith("{"):
        check_json_schema(args, out)
    return (proc.returncode, out, proc.stderr.decode("utf-8", "replace"))


SCHEMAS = REPO / "schemas"
_validators: dict[str, object] = {}


def check_json_schema(args: list[str], out: str) -> None:
    """Every --json document a test makes is one its schema allows (schemas/<document>.schema.json,
    written by scripts/json_schemas.py): the field contract of docs/guide/README.md. jsonschema
    comes with scripts/test.sh's environment; without it (a bare local run) documents are not
    checked unless VRAMSCOPE_REQUIRE_SCHEMAS=1. With VRAMSCOPE_RECORD_JSON=DIR, documents are
    saved there instead, for scripts/json_schemas.py --samples DIR."""
    try:
        import jsonschema
    except ImportError:
        if os.environ.get("VRAMSCOPE_REQUIRE_SCHEMAS") == "1":
            raise
        return
    verb = next((a for a in args if a in VERBS), None)
    if verb is None:
        return
    try:
        document = json.loads(out)
    except json.JSONDecodeError:
        return  # not one document (a test of a failure): the test itself judges it
    name = document_name(verb, document)
    record = os.environ.get("VRAMSCOPE_RECORD_JSON")
    if record:
        # scripts/json_schemas.py --samples: what the tests make, to write the schemas from.
        folder = Path(record)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.{len(list(folder.glob(name + '.*')))}.json").write_text(out)
        return
    if name not in _validators:
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        _validators[name] = jsonschema.Draft202012Validator(schema)
    errors = sorted(_validators[name].iter_errors(document), key=lambda e: list(e.path))
    assert not errors, (f"vramscope {' '.join(args)}: its JSON breaks schemas/{name}.schema.json: "
                        f"{errors[0].message} at {list(errors[0].absolute_path)}")


def list_dir(path: Path) -> list[str]:
    """Every entry of `path`, hidden ones included, sorted."""
    return sorted(os.listdir(path))


def assert_one_error_line(stderr: str) -> str:
    """stderr is exactly one line "vramscope: error: ..."; returns the line."""
    assert stderr.startswith(ERROR_PREFIX), f"stderr lacks {ERROR_PREFIX!r}: {stderr!r}"
    assert stderr.endswith("\n"), f"stderr is not newline-terminated: {stderr!r}"
    assert stderr.count("\n") == 1, f"stderr is not exactly one line: {stderr!r}"
    return stderr.rstrip("\n")


def assert_failure(rc, out, err, expected_rc, phrases, out_dir) -> str:
    """A command failed as a bad input should: the exit code, nothing on stdout, one error line
    holding every phrase, and nothing written to out_dir. Returns the line."""
    assert rc == expected_rc, f"exit code {rc} (expected {expected_rc}): {err!r}"
    assert out == "", f"stdout should be empty: {out!r}"
    line = assert_one_error_line(err)
    for phrase in phrases:
        assert phrase in line, f"missing {phrase!r} in {line!r}"
    assert list_dir(out_dir) == [], f"files left behind: {list_dir(out_dir)}"
    return line


def report_curves(cwd: Path, *args) -> dict[int, list[tuple[int, int]]]:
    """`vramscope report ARGS`'s allocated and reserved bytes after each event, by device, read
    from its database (written to a scratch file in `cwd` and removed)."""
    out = cwd / "curves.sqlite"
    rc, _, err = run_binary("report", *args, "-o", out, "-q", "--force", cwd=cwd, timeout=300)
    assert rc == 0, err
    db = sqlite3.connect(out)
    rows = db.execute("SELECT device, allocated_bytes, reserved_bytes FROM vramscope_timeline "
                      "ORDER BY device, event").fetchall()
    db.close()
    out.unlink()
    by_device: dict[int, list[tuple[int, int]]] = {}
    for device, allocated, reserved in rows:
        by_device.setdefault(device, []).append((allocated, reserved))
    return by_device


def open_db(path: Path) -> sqlite3.Connection:
    """Opens a report read-only (so a test can never modify what it checks)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


# --------------------------------------------------------------------------------------------
# Synthetic snapshots
# --------------------------------------------------------------------------------------------

TORCH = "/usr/lib/python3/site-packages/torch/"
MODULE_PY = TORCH + "nn/modules/module.py"
AUTOGRAD_PY = TORCH + "autograd/__init__.py"


def frame(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


def _round512(n: int) -> int:
    return max(512, (n + 511) // 512 * 512)


class SnapshotBuilder:
    """Builds a plausible single-device snapshot dict (torch 2.2+ layout).

    One large segment that a bump allocator carves up (addresses are never reused), a trace with
    segment_alloc / alloc / free_requested / free_completed entries, and at the dump the segment's
    blocks: active_allocated for what is still live, inactive for freed ranges and the tail.
    """

    def __init__(self, device: int = 0, base: int = 0x7F00_0000_0000,
                 time_us: int = 1_700_000_000_000_000):
        self.device = device
        self.base = base
        self.next = base
        self.time = time_us
        self.entries: list[dict] = []
        self.allocs: dict[int, dict] = {}  # addr -> {size, requested, frames, live}
        self._segment_entry = {"action": "segment_alloc", "addr": base, "size": 0, "stream": 0,
                               "time_us": self.time, "frames": []}
        self.entries.append(self._segment_entry)

    def _tick(self) -> int:
        self.time += 7
        return self.time

    def alloc(self, size: int, frames: list | None = None) -> int:
        addr = self.next
        rounded = _round512(size)
        self.next += rounded
        self.allocs[addr] = {"size": rounded, "requested": size, "frames": frames or [],
                             "live": True}
        self.entries.append({"action": "alloc", "addr": addr, "size": rounded, "stream": 0,
                             "time_us": self._tick(), "frames": frames or []})
        return addr

    def free(self, addr: int, frames: list | None = None) -> None:
        a = self.allocs[addr]
        a["live"] = False
        for action in ("free_requested", "free_completed"):
            self.entries.append({"action": action, "addr": addr, "size": a["size"], "stream": 0,
                                 "time_us": self._tick(), "frames": frames or []})

    def build(self) -> dict:
        used = self.next - self.base
        total = max(2 << 20, (used + (2 << 20) - 1) // (2 << 20) * (2 << 20))
        self._segment_entry["size"] = total
        blocks = []
        for addr in sorted(self.allocs):
            a = self.allocs[addr]
            if a["live"]:
                blocks.append({"address": addr, "size": a["size"], "requested_size": a["requested"],
                               "state": "active_allocated", "frames": a["frames"]})
            else:
                blocks.append({"address": addr, "size": a["size"], "requested_size": a["requested"],
                               "state": "inactive", "frames": []})
        if used < total:
            blocks.append({"address": self.next, "size": total - used, "requested_size": 0,
                           "state": "inactive", "frames": []})
        allocated = sum(a["size"] for a in self.allocs.values() if a["live"])
        requested = sum(a["requested"] for a in self.allocs.values() if a["live"])
        segment = {"device": self.device, "address": self.base, "total_size": total,
                   "allocated_size": allocated, "active_size": allocated,
                   "requested_size": requested, "stream": 0, "segment_type": "large",
                   "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                   "blocks": blocks}
        traces = [[] for _ in range(self.device)] + [self.entries]
        return {"segments": [segment], "device_traces": traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                       "garbage_collection_threshold": 0.0,
                                       "expandable_segments": False}}


def small_training_snapshot() -> dict:
    """A tiny, valid snapshot: two weights, two activations freed in backward, one gradient."""
    b = SnapshotBuilder()
    user = "/home/user/proj/train.py"
    w_stack = [frame(MODULE_PY, 1143, "_apply"), frame(user, 12, "main")]
    f_stack = [frame(MODULE_PY, 1527, "_call_impl"), frame(user, 20, "main")]
    bw_stack = [frame(AUTOGRAD_PY, 266, "backward"), frame(user, 21, "main")]
    b.alloc(4 << 20, w_stack)
    b.alloc(4096, w_stack)
    a1 = b.alloc(1 << 20, f_stack)
    a2 = b.alloc(1 << 20, f_stack)
    b.free(a1, bw_stack)
    b.free(a2, bw_stack)
    return b.build()


def write_pickle(path: Path, obj, protocol: int = 4) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=protocol))
    return path


@pytest.fixture(scope="session")
def vramscope_bin() -> Path:
    if not BIN.is_file() or not os.access(BIN, os.X_OK):
        pytest.skip(f"vramscope binary not found at {BIN} (build it, or set VRAMSCOPE_BIN)")
    return BIN


@pytest.fixture(scope="session")
def tool_version(vramscope_bin) -> str:
    rc, out, _ = run_binary("--version", cwd=REPO)
    assert rc == 0
    m = re.fullmatch(r"vramscope (\S+)\n", out)
    assert m, out
    return m.group(1)


@pytest.fixture
def run(vramscope_bin, tmp_path):
    """run(*args, cwd=tmp_path, timeout=60) -> (rc, stdout, stderr)."""

    def _run(*args, cwd: Path | None = None, timeout: float = 60):
        return run_binary(*args, cwd=cwd or tmp_path, timeout=timeout)

    return _run


@pytest.fixture
def inputs_dir(tmp_path) -> Path:
    """Where a test writes its input files (kept apart from the output folder)."""
    d = tmp_path / "inputs"
    d.mkdir()
    return d


@pytest.fixture
def out_dir(tmp_path) -> Path:
    """An empty folder to run in and write reports to."""
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture
def small_snapshot(inputs_dir) -> Path:
    return write_pickle(inputs_dir / "small.pickle", small_training_snapshot())

def predict_json(run, *args, cwd=None) -> dict:
    """`vramscope predict ARGS --json` through the `run` fixture: its document (status 0, quiet)."""
    rc, out, err = run("predict", *args, "--json", cwd=cwd)
    assert rc == 0, err
    assert err == "", err
    return json.loads(out)


def watch_page(page) -> list[str]:
    """The errors a browser page (Playwright) meets from now on, its frames' included: console
    errors, uncaught exceptions, and any request to the network, which is refused (a vramscope page
    is self-contained)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**", lambda route: (errors.append("network: " + route.request.url),
                                            route.abort()))
    return errors
