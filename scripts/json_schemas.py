#!/usr/bin/env python3
"""Writes the JSON Schemas of every verb's ``--json`` (schemas/<verb>.schema.json) from real
outputs: each verb run over the goldens, the real fixtures, the built-in presets and the corpus of
out-of-memory messages, and the schema inferred from all of them (genson: a key every sample has
is required, a value seen as null is nullable, an integer seen only as an integer stays one).

    python3 scripts/json_schemas.py --write      # after a change to a --json document
    python3 scripts/json_schemas.py --check      # every sample validates against the committed ones

    # with every document the end-to-end tests make as samples too (what --write should use):
    VRAMSCOPE_RECORD_JSON=/tmp/json-samples python3 -m pytest tests/e2e
    python3 scripts/json_schemas.py --write --samples /tmp/json-samples

The committed schemas are the contract (docs/guide/README.md, "JSON documents"): the tests
validate every --json output they make against them (tests/e2e/conftest.py), so a change to a
document that its schema does not allow fails there until the schema is written again here, and
reviewed, with the document's schema_version raised. Needs genson and jsonschema (PyPI).
Environment: VRAMSCOPE_BIN (default build-dev/vramscope), VRAMSCOPE_SHARED_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = os.environ.get("VRAMSCOPE_BIN") or str(REPO / "build-dev" / "vramscope")
SHARED = Path(os.environ.get("VRAMSCOPE_SHARED_DIR") or REPO.parent / "shared")
SCHEMAS = REPO / "schemas"
sys.path.insert(0, str(REPO / "tests" / "support"))
from json_documents import document_name  # noqa: E402

# The documents the verbs print with --json: predict and run print report's, predict a parallel
# layout's instead for --tp/--pp/--cp/--ep/--dp.
DOCUMENTS = {
    "report": "the summary of a report (report, predict and run print it)",
    "predict-layout": "a parallel layout's memory per rank role (predict with --tp, --pp, --cp, "
                      "--ep or --dp)",
    "predict-fit": "predict --fit when not even size 1 fits: what it would need",
    "predict-plan": "predict --plan: the set-ups that fit a budget, cheapest first",
    "simulate": "the allocator model's replay and what-if runs",
    "explain": "the out-of-memory messages found in a text, explained",
    "diff": "two reports compared, with the --fail-if gates",
}
PRESET_RUNS = [
    ["--model", "gpt2", "--batch", "2", "--seq", "128"],
    ["--model", "llama3-8b", "--batch", "1", "--seq", "512", "--dtype", "bf16", "--lora", "8"],
    ["--model", "llama3-70b", "--tp", "8", "--pp", "4", "--batch", "1", "--seq", "4096",
     "--dtype", "bf16", "--world-size", "64", "--zero", "1"],
    ["--model", "mixtral-8x7b", "--ep", "8", "--world-size", "8", "--dtype", "bf16"],
    ["--model", "resnet50", "--batch", "32", "--gpu", "t4"],
    ["--model", "gpt2-medium", "--fit", "a10g", "--seq", "1024"],
    ["--model", "bert-base", "--zero", "3", "--world-size", "8", "--checkpointing"],
    ["--model", "qwen2-0.5b", "--batch", "4", "--seq", "256", "--dtype", "bf16-amp",
     "--optimizer", "sgd", "--grad-accum", "2"],
]


def vramscope(*args: str, ok=(0, 1)) -> dict | None:
    proc = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    if proc.returncode not in ok or not proc.stdout.strip():
        return None
    return json.loads(proc.stdout)


def inputs() -> list[str]:
    found = sorted(str(p) for p in (REPO / "goldens").rglob("*")
                   if p.name.endswith((".pickle.gz", ".json.gz", ".vstrace")))
    fixtures = SHARED / "fixtures" / "real"
    if fixtures.is_dir():
        found += sorted(str(p) for p in fixtures.iterdir()
                        if p.name.endswith((".pickle", ".json.gz")))
    return found


def samples(work: Path) -> dict[str, list[dict]]:
    from captures import unpack_two_rank_capture

    out: dict[str, list[dict]] = {verb: [] for verb in DOCUMENTS}
    paths = inputs()
    runs, _ = unpack_two_rank_capture(work)
    db = str(work / "out.sqlite")
    for n, path in enumerate(["", *paths, str(runs)]):
        args = [path] if path else []
        # Every other input with -o, so that both forms of "report" (a database or none) occur.
        written = ["-o", db, "--force"] if n % 2 else []
        for doc in (vramscope("report", *args, "--json", "-q", *written),
                    vramscope("simulate", *args, "--json", "-q", "--capacity", "200MiB",
                              "--compare", "", "expandable_segments:True", *written),
                    vramscope("simulate", *args, "--json", "-q", "--gpu", "t4",
                              "--alloc-conf", "max_split_size_mb:64")):
            if doc is not None:
                out["report" if "peak_usage_bytes" in doc else "simulate"].append(doc)
    out["predict-fit"].append(vramscope("predict", "--model", "llama3-70b", "--fit", "t4",
                                        "--json", "-q"))
    # and one whose plan at batch 1 has options
    out["predict-fit"].append(vramscope("predict", "--model", "llama3-8b", "--steps", "1",
                                        "--dtype", "bf16-amp", "--checkpointing", "--fit",
                                        "h100-80gb", "--json", "-q"))
    for plan in (["--model", "gpt2", "--batch", "32", "--seq", "1024", "--plan", "24GiB"],
                 ["--model", "llama2-7b", "--seq", "2048", "--dtype", "bf16", "--plan",
                  "rtx4090"],
                 ["--model", "llama2-70b", "--dtype", "bf16", "--plan", "rtx4090"],
                 ["--model", "gpt2", "--plan", "h100-80gb"]):
        out["predict-plan"].append(vramscope("predict", *plan, "--json", "-q"))
    for n, preset in enumerate(PRESET_RUNS):
        written = ["-o", db, "--force"] if n % 2 else []
        doc = vramscope("predict", *preset, "--json", "-q", *written)
        if doc is not None:
            out[document_name("predict", doc)].append(doc)
    corpus = REPO / "tests" / "data" / "oom_messages"
    frameworks = REPO / "tests" / "data" / "oom_frameworks"
    for n, text in enumerate(sorted(corpus.glob("*.txt")) + sorted(frameworks.glob("*.txt"))):
        # Every fourth with a model to fit, every fourth with the allocator settings.
        extra = (["--model", "gpt2", "--seq", "512"] if n % 4 == 1 else
                 ["--alloc-conf", "expandable_segments:True"] if n % 4 == 3 else [])
        doc = vramscope("explain", str(text), "--json", *extra)
        if doc is not None:
            out["explain"].append(doc)
    pairs = [(paths[i], paths[i + 1]) for i in range(0, min(len(paths), 40) - 1, 2)]
    for a, b in pairs:
        doc = vramscope("diff", a, b, "--json", "-q", "--fail-if", "peak_allocated > +5%",
                        "--fail-if", "growth_per_step > 0")
        if doc is not None:
            out["diff"].append(doc)
    return out


def infer(verb: str, docs: list[dict]) -> dict:
    from genson import SchemaBuilder

    builder = SchemaBuilder(schema_uri="https://json-schema.org/draft/2020-12/schema")
    for doc in docs:
        builder.add_object(doc)
    schema = builder.to_schema()
    versions = {doc.get("schema_version") for doc in docs}
    assert len(versions) == 1, f"{verb}: samples of several schema versions {versions}"
    schema["$id"] = f"https://vramscope.dev/schemas/{verb}.schema.json"
    schema["title"] = f"vramscope {verb} --json"
    schema["description"] = (f"{DOCUMENTS[verb]}, schema_version {versions.pop()}; written by "
                             "scripts/json_schemas.py from real outputs, reviewed")
    schema["properties"]["schema_version"] = {"const": docs[0]["schema_version"]}
    return schema


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    ap.add_argument("--samples", type=Path,
                    help="a folder of <document>.<n>.json samples (VRAMSCOPE_RECORD_JSON)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        collected = samples(Path(tmp))
    if a.samples:
        for path in sorted(a.samples.glob("*.json")):
            doc = json.loads(path.read_text())
            # Named by the rule of today (a sample may have been recorded under an older one).
            name = path.name.split(".")[0]
            collected[document_name("report", doc) if name.startswith(("report", "predict"))
                      else name].append(doc)
    if a.write:
        SCHEMAS.mkdir(exist_ok=True)
        for verb, docs in collected.items():
            assert docs, f"no sample of {verb}"
            path = SCHEMAS / f"{verb}.schema.json"
            path.write_text(json.dumps(infer(verb, docs), indent=1, sort_keys=True) + "\n")
            print(f"{path.relative_to(REPO)}: {len(docs)} samples")
        return 0
    import jsonschema

    failed = 0
    for verb, docs in collected.items():
        schema = json.loads((SCHEMAS / f"{verb}.schema.json").read_text())
        for doc in docs:
            try:
                jsonschema.validate(doc, schema)
            except jsonschema.ValidationError as error:
                failed += 1
                print(f"{verb}: {error.message} at {list(error.absolute_path)}")
        print(f"{verb}: {len(docs)} samples checked")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
