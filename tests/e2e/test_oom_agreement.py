"""`vramscope explain`'s verdict against the labels of the real messages of tests/data/oom_messages
(issue 38): the goals, and that docs/accuracy.md shows the last measurement
(scripts/oom_agreement.py)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import BIN, REPO, run_binary

spec = importlib.util.spec_from_file_location("oom_agreement",
                                              REPO / "scripts" / "oom_agreement.py")
oom_agreement = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oom_agreement)

DATA = REPO / "tests" / "data" / "oom_messages"
CASES = json.loads((DATA / "cases.json").read_text())["cases"]
HOLDERS = {"tensors", "fragmentation", "process_outside_pytorch", "other_processes", "cap",
           "wddm_spill", "unified_memory", "inconsistent_figures", "unaccounted", "no_figures"}


@pytest.fixture(scope="module")
def scored() -> dict:
    return oom_agreement.score(str(BIN))


def test_the_corpus_is_real_and_labelled():
    assert len(CASES) >= 100
    for case in CASES:
        assert (DATA / case["file"]).is_file(), case["file"]
        assert case["source"].startswith("https://"), case["file"]
        assert case["label"] in HOLDERS, case["file"]
        assert case["label_basis"] in ("thread", "arithmetic"), case["file"]
        assert case["label_quote"], case["file"]
    for name in oom_agreement.CLASSES:
        assert sum(name in c.get("classes", []) for c in CASES) >= 15, name


def test_the_verdict_agrees_with_the_labels(scored):
    results = scored["results"]
    agree = sum(r["label"] == r["got"] for r in results)
    assert agree >= 0.95 * len(results), [r for r in results if r["label"] != r["got"]]
    for name in oom_agreement.CLASSES:
        rs = [r for r in results if name in r["classes"]]
        # At least 13 of every 15.
        assert 15 * sum(r["label"] == r["got"] for r in rs) >= 13 * len(rs), name


def test_no_sentinel_is_shown_as_a_figure(scored):
    assert [r["file"] for r in scored["results"] if r["sentinel"]] == []


def test_the_accuracy_page_shows_the_last_measurement(scored):
    doc = oom_agreement.DOC.read_text()
    assert oom_agreement.page_with(doc, oom_agreement.table(scored)) == doc, \
        "docs/accuracy.md is stale: run scripts/oom_agreement.py --bin build/vramscope --write"


def test_the_verdict_comes_first_with_the_holders_ranked(tmp_path):
    # Other processes hold most of the card (a real multi-process message of the corpus).
    case = next(c for c in CASES if c["file"].startswith("llamafactory-zero3-five-procs"))
    code, out, err = run_binary("explain", "--json", DATA / case["file"], cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    assert report["schema_version"] == 3
    message = report["messages"][0]
    verdict = message["verdict"]
    assert verdict["holder"] in HOLDERS and verdict["sentence"]
    mids = [(h["bytes"]["lo"] + h["bytes"]["hi"]) / 2 for h in verdict["holders"]]
    assert mids == sorted(mids, reverse=True)
    assert verdict["holders"][0]["holder"] == verdict["holder"]
    for holder in verdict["holders"]:
        assert holder["arithmetic"] and holder["what"]
    assert message["proximate"]["cause"] == message["cause"]
    code, text, err = run_binary("explain", DATA / case["file"], cwd=tmp_path)
    assert code == 0, err
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Verdict ("))
    holders = lines.index("What held the GPU, largest first")
    proximate = next(i for i, line in enumerate(lines) if line.startswith("Why this request"))
    figures = lines.index("Figures read (and the bytes each can stand for)")
    assert first < holders < proximate < figures
