#!/usr/bin/env python3
"""Runs the command blocks of the user documentation and checks the output they show.

    python3 scripts/doc_blocks.py                  # check README.md and the pages below
    python3 scripts/doc_blocks.py docs/x.md        # check one page
    python3 scripts/doc_blocks.py --write          # regenerate the shown output from real runs
    python3 scripts/doc_blocks.py --list           # every block, its directive and line

Pages covered (PAGES): README.md, docs/guide/*.md and docs/*.md, found by glob: the pages a user
follows to install, run every verb, describe a model and query a report. Not covered:
docs/benchmarks.md (its commands are benchmarks that take minutes and print timings of the
machine they ran on), docs/accuracy.md (a report generated from the goldens by
scripts/accuracy.py and scripts/families_vs_tracer.py --write: regenerated, not followed; its
commands are the table's rows, one golden each), docs/design/* (design notes for developers:
their blocks are excerpts of formats and code, not commands to follow) and DEVELOPERS.md (GPU
sessions).

Every fenced block of a covered page carries a directive, an HTML comment on the line just before
its fence (GitHub does not show it); a block without one is an error, so no new block escapes:

    <!-- doc-test: run [with=FIXTURE,...] -->       each command of the block runs, and must exit 0
    <!-- doc-test: output [with=FIXTURE,...] -->    `$ command` lines, each followed by what it
                                                    prints (any exit status: error examples too)
    <!-- doc-test: sql with=DATABASE -->            SQL statements, run against that fixture
    <!-- doc-test: usage -->                        a `vramscope VERB [flags]` synopsis: every flag
                                                    it shows is one `vramscope VERB --help` lists
    <!-- doc-test: code -->                         an excerpt (Python, JSON, ...), not a command:
                                                    Python must parse, JSON must load
    <!-- doc-test: not-run: REASON -->              a command that cannot run here; REASON says
                                                    why and what checks it instead

Any kind may end with `: NOTE` (for not-run the reason is required). Write blocks fenced: an
indented code block is not seen.

Commands: one per line; a line ending in `\\` or inside an open quote continues on the next;
`# comments` outside quotes are dropped; each runs with bash, as a user would type it.

Where and how they run (check mode): each run/output block gets a fresh temporary folder TMP and
its commands run in TMP/work TWICE, the second time after the first in the same folder, so that
commands must also work when their earlier outputs are there. The first run is the one a page
shows (output blocks are compared with it); the second must end as the first did (run blocks:
status 0), its output not compared (a default-named output says ", replacing the earlier one"),
except that a second run refused with "vramscope: error: X: already exists; pass --force to
overwrite it", X an output the command names with -o/--output/--html, is what the README
promises for named outputs, and passes.

TMP/work holds symlinks to the repository's examples/, tests/, goldens/ and python/, a
`build/vramscope` symlink, and the fixtures the directive names; `../shared` is TMP/shared, a
symlink to the shared folder (VRAMSCOPE_SHARED_DIR, default <repo>/../shared). `vramscope` on PATH
is the binary under test (VRAMSCOPE_BIN, default build-release/vramscope, else build/vramscope);
HOME and TMPDIR are folders inside TMP. FIXTURES lists the fixtures, each made from the
repository's real data (`run.pickle` is the built-in example's golden, `runs/` two H200 goldens
laid out as ranks exactly as tests/e2e/test_run_cli.py does, ...). Two fixtures are not files:
`shared` (the block reads ../shared/fixtures: skipped when the folder is absent) and `torch`
(python3, python and ~/venv/bin/python are a Python with PyTorch and transformers, for the
tracer: VRAMSCOPE_TORCH_PYTHON, else the venv scripts/test.sh installs,
$VRAMSCOPE_TORCH_VENV or ~/.cache/vramscope/torch-venv; without one the block is skipped, unless
VRAMSCOPE_TORCH_PYTHON or VRAMSCOPE_REQUIRE_TORCH=1 says it must run, as in CI). Elsewhere python3
and python are the Python running this script.

Comparison: what a command prints is its stdout followed by its stderr. Outputs are
deterministic for a given binary and input; the only normalisation is that trailing whitespace
of every line is ignored (editors strip it from the page) and the temporary folder's path reads
TMP. Shown output may be shortened: a line that is only `...` (any indentation) stands for any
number of lines, and `...` inside a line for any text (so a line ending in `...` matches every
line that starts with the text before it). Shown lines are aligned to printed lines in order; a
mismatch is reported as `FILE:LINE: shown '...' but the command prints '...'`.

--write regenerates output blocks from one run: a block with no `...` is replaced by the output
whole; otherwise each shown line is matched to a printed line of the same shape (numbers masked,
runs of spaces as one) in order and replaced by it, keeping the `...`. Lines with no such match
are reported and left as they were (fix them by hand, then check again). Review the diff.

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The pages a user follows, found by glob so that no page (and no block) escapes: the README, the
# guides (one per command) and the reference pages beside them.
PAGE_GLOBS = ("README.md", "docs/guide/*.md", "docs/*.md")
# Not followed: generated reports and measurements (see above).
NOT_PAGES = ("docs/benchmarks.md", "docs/accuracy.md")


def pages() -> list[Path]:
    found = []
    for pattern in PAGE_GLOBS:
        for path in sorted(REPO.glob(pattern)):
            if str(path.relative_to(REPO)) not in NOT_PAGES and path not in found:
                found.append(path)
    return found


PAGES = tuple(str(p.relative_to(REPO)) for p in pages())
KINDS = ("run", "output", "sql", "usage", "code", "not-run")
RUN_KINDS = ("run", "output")
COMMAND_TIMEOUT_S = 600
REPO_FOLDERS = ("examples", "tests", "goldens", "python")
DIRECTIVE_RE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def regenerate_hint(page: Path) -> str:
    return f"regenerate: python3 scripts/doc_blocks.py --write {display(page)}"


def display(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------
# Pages and blocks
# --------------------------------------------------------------------------------------------


class DocError(Exception):
    """A page that breaks the rules (a block without a directive, a bad directive)."""


@dataclass
class Block:
    page: Path
    fence_line: int      # 1-based line of the opening fence
    indent: str          # the fence's indentation, removed from the content lines
    lang: str
    kind: str
    fixtures: list[str]
    note: str
    lines: list[str]     # content, indentation removed
    first_line: int      # 1-based line of lines[0]

    @property
    def name(self) -> str:
        return f"{display(self.page)}:{self.fence_line}"


def parse_directive(text: str, where: str) -> tuple[str, list[str], str]:
    """'KIND [with=A,B] [: NOTE]' -> (kind, fixtures, note)."""
    head, sep, note = text.partition(":")
    words = head.split()
    if not words or words[0] not in KINDS:
        raise DocError(f"{where}: unknown doc-test directive {text!r} (kinds: {', '.join(KINDS)})")
    kind = words[0]
    fixtures: list[str] = []
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if key != "with" or not eq or not value:
            raise DocError(f"{where}: unknown option {word!r} in doc-test directive (with=A,B)")
        fixtures += [v for v in value.split(",") if v]
    for f in fixtures:
        if f not in FIXTURES:
            raise DocError(f"{where}: unknown fixture {f!r} (known: {', '.join(sorted(FIXTURES))})")
    note = note.strip()
    if kind == "not-run" and not note:
        raise DocError(f"{where}: 'not-run' needs a reason: <!-- doc-test: not-run: WHY, and what "
                       "checks it instead -->")
    if kind == "sql" and len([f for f in fixtures if f.endswith(".sqlite")]) != 1:
        raise DocError(f"{where}: 'sql' needs one database: with=NAME.sqlite")
    return kind, fixtures, note


def parse_page(page: Path) -> list[Block]:
    """Every fenced block of the page with its directive; DocError for a block without one."""
    page = Path(page)
    text = page.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    pending: tuple[int, str] | None = None
    while i < len(text):
        line = text[i]
        d = DIRECTIVE_RE.match(line)
        if d:
            if pending:
                raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by "
                               "a fenced block")
            pending = (i + 1, d.group(1))
            i += 1
            continue
        m = FENCE_RE.match(line)
        if not m:
            if pending and line.strip():
                raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by "
                               "a fenced block (it must be on the line just before the fence)")
            pending = None if line.strip() else pending
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start = i
        i += 1
        body: list[str] = []
        while i < len(text):
            c = FENCE_RE.match(text[i])
            if c and c.group(2)[0] == fence[0] and len(c.group(2)) >= len(fence) \
                    and not c.group(3).strip():
                break
            body.append(text[i][len(indent):] if text[i].startswith(indent) else text[i].lstrip())
            i += 1
        else:
            raise DocError(f"{display(page)}:{start + 1}: fenced block never closed")
        i += 1
        where = f"{display(page)}:{start + 1}"
        if pending and pending[0] != start:
            raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not on the line "
                           f"just before the fence of line {start + 1}")
        if not pending:
            raise DocError(f"{where}: fenced block without a doc-test directive: put one on the "
                           "line before its fence, e.g. <!-- doc-test: run -->, <!-- doc-test: "
                           "output -->, <!-- doc-test: code --> or <!-- doc-test: not-run: WHY "
                           "-->; see scripts/doc_blocks.py")
        kind, fixtures, note = parse_directive(pending[1], where)
        pending = None
        blocks.append(Block(page, start + 1, indent, info.split()[0] if info else "", kind,
                            fixtures, note, body, start + 2))
    if pending:
        raise DocError(f"{display(page)}:{pending[0]}: doc-test directive not followed by a "
                       "fenced block")
    return blocks


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _scan(text: str) -> tuple[str | None, int | None]:
    """Shell quoting of `text`: (the quote still open at its end or None, the index where a
    `# comment` starts outside quotes or None)."""
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = None
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1] in " \t"):
            return None, i
        i += 1
    return quote, None


@dataclass
class Command:
    text: str
    line: int            # 1-based line on the page
    lines: int = 1       # how many page lines it takes


def _command_end(lines: list[str], i: int, first: str) -> tuple[str, int]:
    """The command that starts with `first` (lines[i] without its '$ '), continued while a quote
    is open or a line ends in a backslash: (its text without a trailing comment, lines taken)."""
    buf = [first]
    n = 1
    while True:
        joined = "\n".join(buf)
        quote, comment = _scan(joined)
        if comment is not None:
            joined = joined[:comment].rstrip()
        if quote is None and not joined.endswith("\\"):
            return joined.strip(), n
        if i + n >= len(lines):
            raise DocError(f"command not finished (an open quote or a final backslash): "
                           f"{joined.splitlines()[0]!r}")
        buf.append(lines[i + n])
        n += 1


def split_commands(lines: list[str], first_line: int) -> list[Command]:
    """The commands of a run block: one per line, with continuations, without comments."""
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        text, n = _command_end(lines, i, lines[i])
        commands.append(Command(text, first_line + i, n))
        i += n
    return commands


@dataclass
class Shown:
    """One `$ command` of an output block and the lines shown after it."""
    command: Command
    lines: list[str] = field(default_factory=list)
    line_numbers: list[int] = field(default_factory=list)   # 1-based page lines of `lines`


def split_output_block(block: Block) -> list[Shown]:
    shown: list[Shown] = []
    i = 0
    while i < len(block.lines):
        line = block.lines[i]
        lineno = block.first_line + i
        if line.startswith("$ "):
            text, n = _command_end(block.lines, i, line[2:])
            shown.append(Shown(Command(text, lineno, n)))
            i += n
            continue
        if not shown:
            raise DocError(f"{display(block.page)}:{lineno}: an output block starts with the "
                           "command that prints it: '$ vramscope ...'")
        shown[-1].lines.append(line)
        shown[-1].line_numbers.append(lineno)
        i += 1
    return shown


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


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


def _vramscope(ctx: "Context", *args: str) -> None:
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


class Context:
    """A fresh temporary folder for one block."""

    def __init__(self, block: Block):
        self.block = block
        self.root = Path(tempfile.mkdtemp(prefix="doc-test-"))
        self.work = self.root / "work"
        self.bin_dir = self.root / "bin"
        self.home = self.root / "home"
        for d in (self.work, self.bin_dir, self.home, self.root / "tmp"):
            d.mkdir()
        (self.bin_dir / "vramscope").symlink_to(binary())
        _wrapper(self.bin_dir / "python3", Path(sys.executable))
        _wrapper(self.bin_dir / "python", Path(sys.executable))
        (self.work / "build").mkdir()
        (self.work / "build" / "vramscope").symlink_to(binary())
        for name in REPO_FOLDERS:
            (self.work / name).symlink_to(REPO / name)
        if shared_dir().is_dir():
            (self.root / "shared").symlink_to(shared_dir())
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("VRAMSCOPE_", "PYTHON")) and k not in ("CDPATH",)}
        self.env.update(PATH=f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        HOME=str(self.home), TMPDIR=str(self.root / "tmp"), LC_ALL="C.UTF-8")
        self.made: set = set()

    def need(self, name: str) -> None:
        maker = FIXTURES[name]
        if maker in self.made:
            return
        maker(self)
        self.made.add(maker)

    def setup(self) -> None:
        for name in self.block.fixtures:
            self.need(name)

    def run(self, command: str) -> tuple[int, str]:
        """Runs one command as a user would type it; (exit status, stdout + stderr)."""
        try:
            proc = subprocess.run(["bash", "-c", command], cwd=self.work, env=self.env,
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return 124, f"(timed out after {COMMAND_TIMEOUT_S} s)\n"
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        return proc.returncode, text.replace(str(self.root), "TMP")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


OUTPUT_FLAGS = ("-o", "--output", "--html")


def named_outputs(command: str) -> set[str]:
    """The files a command names with -o/--output/--html."""
    import shlex
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return set()
    named = set()
    for k, w in enumerate(words):
        if w in OUTPUT_FLAGS and k + 1 < len(words):
            named.add(words[k + 1])
        elif w.startswith(tuple(f + "=" for f in OUTPUT_FLAGS if f.startswith("--"))):
            named.add(w.split("=", 1)[1])
    return named


def refused_named_output(command: str, code: int, out: str) -> bool:
    """The second run was refused because an output the command names exists: what the README
    promises for -o and --html ("never overwrite without --force"), so not a failure."""
    m = re.fullmatch(r"vramscope: error: (.+): already exists; pass --force to overwrite it\n?",
                     out)
    return code == 1 and m is not None and m.group(1) in named_outputs(command)


# --------------------------------------------------------------------------------------------
# Comparing shown output with printed output
# --------------------------------------------------------------------------------------------


def is_gap(line: str) -> bool:
    return line.strip() == "..."


def exact_pattern(line: str) -> re.Pattern:
    return re.compile(".*?".join(re.escape(p) for p in line.rstrip().split("...")))


NUMBER_RE = re.compile(r"\d[\d,]*(?:\.\d+)?")


def shape(text: str) -> str:
    """A regex for text of the same shape: numbers and runs of spaces masked."""
    out = []
    pos = 0
    for m in re.finditer(r"\d[\d,]*(?:\.\d+)?| +", text):
        out.append(re.escape(text[pos:m.start()]))
        out.append(r"\d[\d,]*(?:\.\d+)?" if m.group()[0].isdigit() else " +")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    return "".join(out)


def shape_pattern(line: str) -> re.Pattern:
    """Each literal part of the line a group of its shape; `...` any text."""
    return re.compile("(.*?)".join(f"({shape(p)})" for p in line.rstrip().split("...")))


def align(shown: list[str], printed: list[str], pattern) -> tuple[list | None, tuple]:
    """Aligns shown lines (gaps: `...` lines) to printed lines in order.
    Returns (for each shown line its printed index or None for a gap, when all of it aligns;
    else None) and the failure: (index of the shown line that cannot align, or len(shown) for
    output left over; the printed indices it could have taken)."""
    pats = [None if is_gap(s) else pattern(s) for s in shown]
    n = len(printed)
    reach = [{0}]           # reach[i]: printed positions after aligning shown[:i]
    back: list[dict] = []   # back[i][j_after] = j_before
    for i, p in enumerate(pats):
        cur = reach[-1]
        nxt: dict = {}
        if p is None:
            lo = min(cur)
            for k in range(lo, n + 1):
                nxt.setdefault(k, max(j for j in cur if j <= k))
        else:
            for j in sorted(cur):
                if j < n and p.fullmatch(printed[j].rstrip()):
                    nxt.setdefault(j + 1, j)
        if not nxt:
            return None, (i, sorted(cur))
        back.append(nxt)
        reach.append(set(nxt))
    if n not in reach[-1]:
        return None, (len(shown), sorted(reach[-1]))
    result: list = [None] * len(shown)
    j = n
    for i in range(len(shown) - 1, -1, -1):
        prev = back[i][j]
        result[i] = None if pats[i] is None else prev
        j = prev
    return result, ()


def compare(shown: Shown, printed: list[str]) -> tuple[int, str] | None:
    """None when the printed lines match the shown ones; else (page line, what differs)."""
    lines = shown.lines
    ok, failure = align(lines, printed, exact_pattern)
    if ok is not None:
        return None
    i, candidates = failure
    if i == len(lines):
        lineno = shown.line_numbers[-1] if lines else shown.command.line
        last = lines[-1].rstrip() if lines else "$ " + shown.command.text
        extra = printed[max(candidates)].rstrip()
        return lineno, (f"shown nothing after '{last}' but the command prints more: '{extra}' "
                        "(end the block with a '...' line if the rest is left out)")
    pat = shape_pattern(lines[i])
    pick = next((j for j in candidates if j < len(printed) and pat.fullmatch(printed[j].rstrip())),
                None)
    if pick is None:
        pick = min(candidates)
    if pick >= len(printed):
        return shown.line_numbers[i], (f"shown '{lines[i].rstrip()}' but the command prints "
                                       "nothing more")
    return shown.line_numbers[i], (f"shown '{lines[i].rstrip()}' but the command prints "
                                   f"'{printed[pick].rstrip()}'")


def regenerate(shown: Shown, printed: list[str]) -> tuple[list[str], list[int]]:
    """New shown lines from the printed ones, and the page lines that found no match."""
    lines = shown.lines
    ok, _ = align(lines, printed, exact_pattern)
    if ok is not None:
        return list(lines), []
    if not any("..." in s for s in lines):
        return [p.rstrip() for p in printed], []

    def rebuilt(s: str, p: str) -> str:
        if exact_pattern(s).fullmatch(p.rstrip()):
            return s
        m = shape_pattern(s).fullmatch(p.rstrip())
        return "...".join(m.group(k) for k in range(1, len(m.groups()) + 1, 2))

    ok, _ = align(lines, printed, shape_pattern)
    if ok is not None:
        return [s if j is None else rebuilt(s, printed[j]) for s, j in zip(lines, ok)], []
    # No alignment of the whole: each shown line to the next printed line of its shape, in
    # order. Printed lines it skips are new: kept where no `...` stood before it, as are the
    # printed lines after the last shown one when the block does not end in `...`.
    out, unmatched, j, after_gap = [], [], 0, False
    for s, lineno in zip(lines, shown.line_numbers):
        if is_gap(s):
            out.append(s)
            after_gap = True
            continue
        pat = shape_pattern(s)
        k = next((k for k in range(j, len(printed)) if pat.fullmatch(printed[k].rstrip())), None)
        if k is None:
            out.append(s)
            unmatched.append(lineno)
            continue
        if not after_gap:
            out += [p.rstrip() for p in printed[j:k]]
        out.append(rebuilt(s, printed[k]))
        j, after_gap = k + 1, False
    if not after_gap:
        out += [p.rstrip() for p in printed[j:]]
    return out, unmatched


# --------------------------------------------------------------------------------------------
# Checking blocks
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    block: Block
    errors: list[str] = field(default_factory=list)
    skipped: str = ""
    # --write: the block's new content lines and the page lines left for a person.
    new_lines: list[str] | None = None
    unmatched: list[int] = field(default_factory=list)


def _where(block: Block, line: int) -> str:
    return f"{display(block.page)}:{line}"


def check_code(block: Block, result: Result) -> None:
    text = "\n".join(block.lines)
    if block.lang == "python":
        try:
            ast.parse(text)
        except SyntaxError as e:
            result.errors.append(f"{_where(block, block.first_line + (e.lineno or 1) - 1)}: "
                                 f"the Python excerpt does not parse: {e.msg}")
    elif block.lang == "json":
        try:
            json.loads(text)
        except json.JSONDecodeError as e:
            result.errors.append(f"{_where(block, block.first_line + e.lineno - 1)}: "
                                 f"the JSON does not load: {e.msg}")


def check_usage(block: Block, result: Result) -> None:
    text = "\n".join(block.lines)
    words = text.split()
    if len(words) < 2 or words[0] != "vramscope":
        result.errors.append(f"{_where(block, block.first_line)}: a usage block starts with "
                             "'vramscope VERB'")
        return
    proc = subprocess.run([str(binary()), words[1], "--help"], capture_output=True, text=True,
                          timeout=60)
    listed = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))
    for n, line in enumerate(block.lines):
        for flag in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line):
            if flag not in listed:
                result.errors.append(f"{_where(block, block.first_line + n)}: shows {flag}, which "
                                     f"'vramscope {words[1]} --help' does not list")


def check_sql(block: Block, result: Result, ctx: Context) -> None:
    import sqlite3
    db = next(f for f in block.fixtures if f.endswith(".sqlite"))
    conn = sqlite3.connect(f"file:{ctx.work / db}?mode=ro", uri=True)
    statements, buf, start = [], "", 0
    for n, line in enumerate(block.lines):
        if not buf.strip():
            start = block.first_line + n
        buf += line + "\n"
        if sqlite3.complete_statement(buf):
            statements.append((start, buf.strip()))
            buf = ""
    if buf.strip():
        result.errors.append(f"{_where(block, start)}: SQL statement not finished (no ';')")
    for start, sql in statements:
        params = {name: None for name in re.findall(r":(\w+)", sql)}
        try:
            conn.execute(sql, params).fetchall()
        except sqlite3.Error as e:
            result.errors.append(f"{_where(block, start)}: the SQL fails on {db}: {e}")
    conn.close()


def check_block(block: Block, write: bool = False) -> Result:
    """Checks one block (or, with write, also regenerates an output block from one run)."""
    result = Result(block)
    if block.kind == "not-run":
        # Not run here, but its reason must name what does check it, and that must exist: a
        # reason naming a test or script that was renamed or removed fails.
        paths = re.findall(r"(?:tests|scripts|src|bench|goldens)/[\w./-]*", block.note)
        named = [p for p in paths if (REPO / p.rstrip(".")).exists()]
        missing = [p for p in paths if p not in named]
        if missing:
            result.errors.append(f"{_where(block, block.fence_line)}: the reason names "
                                 f"{', '.join(missing)}, which does not exist")
        elif not named:
            result.errors.append(f"{_where(block, block.fence_line)}: the reason names no test or "
                                 "script of this repository that checks the block instead")
        result.skipped = f"not run: {block.note}"
        return result
    if block.kind == "code":
        check_code(block, result)
        return result
    if block.kind == "usage":
        check_usage(block, result)
        return result
    try:  # the commands parse before anything runs
        if block.kind == "run":
            split_commands(block.lines, block.first_line)
        elif block.kind == "output":
            split_output_block(block)
    except DocError as e:
        result.errors.append(f"{block.name}: {e}")
        return result
    ctx = Context(block)
    try:
        try:
            ctx.setup()
        except Skip as e:
            result.skipped = str(e)
            return result
        except Exception as e:  # a fixture that cannot be made is a failure of the check
            result.errors.append(f"{block.name}: setting up {', '.join(block.fixtures)}: {e}")
            return result
        if block.kind == "sql":
            check_sql(block, result, ctx)
        elif block.kind == "run":
            commands = split_commands(block.lines, block.first_line)
            failed = set()
            for attempt in ("", " (the second time, in the same folder)"):
                for c in commands:
                    code, out = ctx.run(c.text)
                    if attempt and (c.line in failed or refused_named_output(c.text, code, out)):
                        continue
                    if code != 0:
                        failed.add(c.line)
                        tail = "\n    ".join(out.rstrip().splitlines()[-5:])
                        result.errors.append(f"{_where(block, c.line)}: `{c.text}` exited with "
                                             f"status {code}{attempt}:\n    {tail}")
        else:
            check_output(block, result, ctx, write)
    finally:
        ctx.close()
    return result


def check_output(block: Block, result: Result, ctx: Context, write: bool) -> None:
    """The first run (a fresh folder) must print what the page shows; the second, in the same
    folder, must end as the first did (its output may differ: "replacing the earlier one")."""
    items = split_output_block(block)
    new_lines: list[str] = []
    first_codes = []
    for item in items:
        code, out = ctx.run(item.command.text)
        first_codes.append(code)
        printed = out.split("\n")
        if printed and printed[-1] == "":
            printed.pop()
        if write:
            first = item.command.line - block.first_line
            new_lines += block.lines[first:first + item.command.lines]
            lines, unmatched = regenerate(item, printed)
            new_lines += lines
            result.unmatched += unmatched
            continue
        bad = compare(item, printed)
        if bad:
            lineno, message = bad
            result.errors.append(f"{_where(block, lineno)}: {message}\n    "
                                 f"($ {item.command.text.splitlines()[0]}; "
                                 f"{regenerate_hint(block.page)})")
    if write:
        result.new_lines = new_lines
        return
    for item, first in zip(items, first_codes):
        code, out = ctx.run(item.command.text)
        if code != first and not refused_named_output(item.command.text, code, out):
            tail = "\n    ".join(out.rstrip().splitlines()[-3:])
            result.errors.append(f"{_where(block, item.command.line)}: `{item.command.text}` "
                                 f"exited with status {code} the second time, in the same "
                                 f"folder (the first time: {first}):\n    {tail}")


def write_page(page: Path, results: list[Result]) -> None:
    text = page.read_text(encoding="utf-8").split("\n")
    for r in sorted(results, key=lambda r: -r.block.fence_line):
        if r.new_lines is None:
            continue
        b = r.block
        start = b.first_line - 1
        new = [(b.indent + s) if s else "" for s in r.new_lines]
        text[start:start + len(b.lines)] = new
    page.write_text("\n".join(text), encoding="utf-8")


def check_page(page: Path, write: bool = False, verbose: bool = False,
               out=sys.stdout) -> tuple[int, int, int]:
    """Checks (or regenerates) one page; returns (failed, checked, skipped) counts."""
    blocks = parse_page(page)
    results = []
    failed = checked = skipped = 0
    for b in blocks:
        started = time.monotonic()
        r = check_block(b, write=write and b.kind == "output")
        took = f", {time.monotonic() - started:.1f} s" if b.kind in RUN_KINDS + ("sql",) else ""
        results.append(r)
        if r.skipped:
            skipped += 1
            if verbose:
                print(f"{b.name}: {b.kind}: skipped ({r.skipped})", file=out)
        elif r.errors:
            failed += 1
            for e in r.errors:
                print(e, file=out)
        else:
            checked += 1
            if verbose:
                print(f"{b.name}: {b.kind}: ok{took}", file=out)
        for lineno in r.unmatched:
            print(f"{_where(b, lineno)}: no printed line of this shape; fix it by hand", file=out)
    if write:
        write_page(page, results)
    return failed, checked, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pages", nargs="*", type=Path,
                    help=f"pages to check (default: {', '.join(PAGES)})")
    ap.add_argument("--write", action="store_true",
                    help="regenerate the output blocks from real runs (then review the diff)")
    ap.add_argument("--list", action="store_true", help="list the blocks and their directives")
    ap.add_argument("-v", "--verbose", action="store_true", help="say what happened to each block")
    args = ap.parse_args(argv)
    pages = args.pages or [REPO / p for p in PAGES]
    total_failed = 0
    for page in pages:
        try:
            if args.list:
                for b in parse_page(page):
                    extra = (f" with={','.join(b.fixtures)}" if b.fixtures else "") + \
                        (f": {b.note}" if b.note else "")
                    print(f"{b.name}: {b.kind}{extra}")
                continue
            failed, checked, skipped = check_page(page, write=args.write, verbose=args.verbose)
        except DocError as e:
            print(e)
            total_failed += 1
            continue
        total_failed += failed
        print(f"{display(page)}: {checked} blocks {'regenerated or ' if args.write else ''}"
              f"checked, {skipped} not run, {failed} failed")
    return 1 if total_failed else 0


if __name__ == "__main__":
    sys.exit(main())
