#!/usr/bin/env python3
"""Every verb's output on every golden and fixture, recorded by one vramscope binary, so that two
builds can be compared byte for byte (a refactoring must change nothing a user sees).

    scripts/compare_verbs.py record --bin OLD/vramscope --out /tmp/verbs-old [--python TORCH_PY]
    scripts/compare_verbs.py record --bin build/vramscope --out /tmp/verbs-new [--python TORCH_PY]
    scripts/compare_verbs.py diff /tmp/verbs-old /tmp/verbs-new

`record` runs, for each input (goldens/**/*.pickle.gz, the .vstrace goldens and
../shared/fixtures/real/* when present): `report --json --summary-only`, `report -o` (its
terminal text and a hash of `sqlite3 .dump` of the database), `simulate --json`, `simulate
--capacity 1GiB` (text) and `view` (a hash of the page); then a fixed list of `predict` and
`explain` commands (the tracer's only with --python). Per case it keeps the exit status, stdout
and stderr. JSON documents are compared without their `schema_version` and `timings_s` keys (the
first is new with issue 36; the second is a measurement). `diff` lists the cases that differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "real"
OOM_DATA = REPO / "tests" / "data" / "oom_messages"

PREDICT = [
    ["--model", "gpt2", "--batch", "8", "--seq", "512"],
    ["--model", "gpt2", "--batch", "8", "--seq", "512", "--json"],
    ["--model", "llama3-8b", "--batch", "2", "--seq", "4096", "--dtype", "bf16", "--lora", "16",
     "--checkpointing", "--gpu", "h100-80gb"],
    ["--model", "llama2-7b", "--batch", "1", "--seq", "2048", "--dtype", "bf16-amp", "--zero", "3",
     "--world-size", "8", "--json"],
    ["--model", "gpt2-medium", "--fit", "h100-80gb", "--seq", "1024"],
    ["--model", "gpt2-medium", "--fit", "h100-80gb", "--seq", "1024", "--json"],
    ["--model", "gpt2", "--fit", "24GiB", "--fit-dim", "seq", "--batch", "4"],
    ["--model", "llama3-70b", "--fit", "h100-80gb", "--dtype", "bf16", "--seq", "4096"],
    ["--model", "resnet50", "--batch", "64", "--dtype", "bf16-amp", "--optimizer", "momentum"],
    ["--model", "vit-b16", "--batch", "32", "--optimizer", "adam", "--json"],
    ["--model", "bert-base", "--batch", "16", "--seq", "512", "--zero-grad", "zero"],
    ["--model", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2", "--dtype", "bf16",
     "--master-weights", "--zero", "1", "--micro-batches", "8", "--seq", "4096", "--gpu",
     "h100-80gb"],
    ["--model", "llama3-70b", "--tp", "8", "--pp", "4", "--dp", "2", "--dtype", "bf16",
     "--master-weights", "--zero", "1", "--micro-batches", "8", "--seq", "4096", "--json"],
    ["--model", "llama3-8b", "--fit", "h100-80gb", "--fit-dim", "layout", "--dtype", "bf16",
     "--seq", "8192", "--world-size", "64"],
    ["--model", "mixtral-8x7b", "--ep", "8", "--tp", "2", "--dtype", "bf16", "--seq", "4096",
     "--world-size", "16"],
    ["--model", "deepseek-v3", "--ep", "64", "--pp", "16", "--dtype", "bf16", "--seq", "4096",
     "--world-size", "2048", "--micro-batches", "32"],
    ["--model", "gpt2", "--tp", "2", "--pp", "2", "--pp-impl", "torch", "--tp-impl", "torch",
     "--micro-batches", "4", "--seq", "256", "--batch", "2", "--role", "last stage", "-o",
     "role.sqlite"],
    ["--model", "gpt2", "--pp", "2", "--pp-impl", "torch", "--schedule", "gpipe",
     "--micro-batches", "4", "--seq", "256", "--batch", "2", "--json"],
    ["--model", "gpt2", "--batch", "4", "--seq", "256", "-o", "pred.sqlite", "--emit-stream",
     "pred.jsonl"],
    ["--model", "qwen2-0.5b", "--batch", "4", "--seq", "1024", "--dtype", "bf16", "--optimizer",
     "adamw", "--optimizer-impl", "fused", "--alloc-conf", "expandable_segments:True"],
    # errors: the lines users see
    ["--model", "gpt2", "--dtype", "fp8"],
    ["--model", "gpt2", "--zero", "2"],
    ["--model", "gpt2", "--tp", "3", "--world-size", "8"],
    ["--model", "no-such-model"],
    ["--model", "gpt2", "--fit", "1GiB", "--seq", "1024"],
    ["--model", "gpt2", "--fit", "1GiB", "--seq", "1024", "--json"],
    ["--model", "gpt2", "--schedule", "zbv", "--pp", "2"],
    ["--model", "gpt2", "--role", "first stage"],
]

# The tracer's (with --python PY): a traced model, one rank of a parallel job, all its ranks.
TRACED = [
    ["--model", "examples/training/models.py:MLP", "--batch", "64"],
    ["--model", "examples/distributed/pp_gpt.py:build", "--world-size", "2", "--rank", "1",
     "--batch", "8", "--seq", "256", "--json"],
    ["--model", "examples/distributed/pp_gpt.py:build", "--world-size", "2", "--all-ranks",
     "--batch", "8", "--seq", "256"],
]


def inputs() -> list[Path]:
    found = sorted(p for p in (REPO / "goldens").rglob("*")
                   if p.name.endswith((".pickle.gz", ".vstrace")))
    if FIXTURES.is_dir():
        found += sorted(p for p in FIXTURES.iterdir() if p.name not in ("README.md", "SHA256SUMS"))
    return found


def normalized_stdout(text: str) -> str:
    """A JSON document without its version and timing keys; anything else as it is."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if isinstance(doc, dict):
        doc.pop("schema_version", None)
        doc.pop("timings_s", None)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "(none)"


def dump_hash(db: Path) -> str:
    """`sqlite3 .dump` without the one row that differs between any two runs (created_utc)."""
    if not db.exists():
        return "(none)"
    out = subprocess.run(["sqlite3", str(db), ".dump"], capture_output=True, check=True).stdout
    lines = [ln for ln in out.splitlines() if b"'created_utc'" not in ln]
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


class Recorder:
    def __init__(self, binary: str, out: Path, work: Path):
        self.binary, self.out, self.work = binary, out, work
        self.cases: dict[str, dict] = {}

    def run(self, name: str, args: list[str], stdin: str | None = None,
            files: dict[str, str] | None = None) -> None:
        """Runs `vramscope ARGS` in a clean work folder; `files`: outputs to fingerprint, by
        name and kind ("dump" for a database, "sha" for anything else)."""
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        env = dict(os.environ, VRAMSCOPE_PROGRESS_DELAY_MS="100000000")
        p = subprocess.run([self.binary, *args], cwd=self.work, capture_output=True, text=True,
                           input=stdin, env=env, timeout=900)
        case = {"args": args, "exit": p.returncode, "stdout": normalized_stdout(p.stdout),
                "stderr": p.stderr}
        for f, kind in (files or {}).items():
            case[f] = dump_hash(self.work / f) if kind == "dump" else sha(self.work / f)
        self.cases[name] = case
        print(f"{name}: exit {p.returncode}", flush=True)


def record(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # One work folder for every recording: paths in the outputs (the project root) stay the same.
    rec = Recorder(str(Path(args.bin).resolve()), out, Path(tempfile.gettempdir()) / "vramscope-compare-work")
    for path in inputs():
        tag = str(path.relative_to(REPO if REPO in path.parents else FIXTURES.parent))
        p = str(path)
        rec.run(f"report-json {tag}", ["report", "--json", "--summary-only", p])
        rec.run(f"report {tag}", ["report", p, "-o", "r.sqlite"], files={"r.sqlite": "dump"})
        rec.run(f"simulate-json {tag}", ["simulate", "--json", p])
        rec.run(f"simulate-capacity {tag}", ["simulate", p, "--capacity", "1GiB", "--compare", "",
                                             "expandable_segments:True"])
        rec.run(f"view {tag}", ["view", p, "-o", "v.html"], files={"v.html": "sha"})
    rec.run("report-built-in", ["report"], files={"vramscope-example.sqlite": "dump"})
    rec.run("report-built-in-json", ["report", "--json"])
    for i, a in enumerate(PREDICT):
        rec.run(f"predict {i:02d} {' '.join(a)}", ["predict", *a],
                files={"role.sqlite": "dump", "pred.sqlite": "dump", "pred.jsonl": "sha"})
    if args.python:
        for i, a in enumerate(TRACED):
            a = [str(REPO / x) if x.startswith("examples/") else x for x in a]
            rec.run(f"predict-traced {i:02d}", ["predict", *a, "--python", args.python])
    for msg in sorted(OOM_DATA.glob("*.txt")):
        rec.run(f"explain {msg.name}", ["explain", str(msg)])
        rec.run(f"explain-json {msg.name}", ["explain", "--json", str(msg)])
    first = sorted(OOM_DATA.glob("*.txt"))[0]
    rec.run("explain-model", ["explain", str(first), "--model", "gpt2", "--batch", "16",
                              "--seq", "1024"])
    rec.run("explain-model-json", ["explain", "--json", str(first), "--model", "gpt2",
                                   "--batch", "16", "--seq", "1024"])
    rec.run("explain-stdin", ["explain", "-"], stdin=first.read_text())
    rec.run("explain-none", ["explain", "nothing to see here"])
    shutil.rmtree(rec.work, ignore_errors=True)
    (out / "cases.json").write_text(json.dumps(rec.cases, indent=1) + "\n")
    print(f"{len(rec.cases)} cases recorded in {out / 'cases.json'}")
    return 0


def diff(args: argparse.Namespace) -> int:
    old = json.loads((Path(args.old) / "cases.json").read_text())
    new = json.loads((Path(args.new) / "cases.json").read_text())
    differ = 0
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        differ += 1
        print(f"== {name}")
        if a is None or b is None:
            print("   only in", "new" if a is None else "old")
            continue
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                print(f"   {key}: differs")
                if key in ("stdout", "stderr") and args.verbose:
                    import difflib
                    sys.stdout.writelines(difflib.unified_diff(
                        str(a.get(key)).splitlines(True), str(b.get(key)).splitlines(True),
                        "old", "new", n=1))
    print(f"{len(old)} old cases, {len(new)} new; {differ} differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("record")
    r.add_argument("--bin", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--python", help="a Python with torch, for the tracer's predictions")
    d = sub.add_parser("diff")
    d.add_argument("old")
    d.add_argument("new")
    d.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    return record(args) if args.verb == "record" else diff(args)


if __name__ == "__main__":
    sys.exit(main())
