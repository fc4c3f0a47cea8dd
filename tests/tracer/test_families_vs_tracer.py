"""The built-in families of `vramscope predict` against the Python tracer on the same small
models. The comparison is families_vs_tracer.py, beside this file; the cases and every open
class of difference, with its cause and the exact number of entries it accounts for in each
case, are data (families_vs_tracer_data.py).

    VRAMSCOPE_BIN=build/vramscope PYTHONPATH=python ~/.cache/vramscope/torch-venv/bin/python \\
        -m pytest tests/tracer/test_families_vs_tracer.py -q -p no:cacheprovider

For each case (GPT-2, LLaMA with grouped-query attention, Qwen2, BERT, ViT; fp32, bf16 autocast,
pure bf16, LoRA, checkpointing):

- weights, gradients and optimizer state must match exactly by (name, bytes);
- the activations saved in forward must match block by block, by sizes and order;
- the temporaries must match phase by phase, by sizes and order;

where they do not, every differing entry must belong to a known class, and each class must
account for exactly the number of entries the data gives for that case: a class that grows,
shrinks or disappears fails the test. A class whose difference is fixed is removed from the
data and the harness (its history is in docs/accuracy.md, "Differences fixed since"); should the
difference come back, its entries are unexplained and the test fails. A family bug that is not
fixed is stated, with its measured effect on the goldens, in the data and in docs/accuracy.md.

Needs torch and transformers (peft for the LoRA case) and the vramscope binary (VRAMSCOPE_BIN,
default build/vramscope); skipped otherwise. The tracer runs in this process: torch and
transformers are imported once for all cases.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import families_vs_tracer as fvt
import families_vs_tracer_data as data

REPO = Path(__file__).resolve().parents[2]
BIN = str(Path(os.environ.get("VRAMSCOPE_BIN", str(REPO / "build" / "vramscope"))).resolve())
CASES = fvt.all_cases()
NAMES = ("weight", "input", "gradient", "optimizer_state")


def _needs_torch_and_binary():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not Path(BIN).is_file() or not os.access(BIN, os.X_OK):
        pytest.skip(f"no vramscope binary at {BIN} (set VRAMSCOPE_BIN)")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case traced and predicted once (about 2 s each after the first import)."""
    _needs_torch_and_binary()
    workdir = tmp_path_factory.mktemp("families-vs-tracer")
    return {}, str(workdir)


def _result(results, case):
    cache, workdir = results
    if case.name not in cache:
        traced, predicted = fvt.run_case(case, BIN, workdir)
        cache[case.name] = fvt.compare(case, traced, predicted)
    return cache[case.name]


def _check(r, categories):
    problems = fvt.problems(r, categories)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_weights_gradients_optimizer_state(results, case):
    """(name, bytes) multisets, exactly; a difference only as a known class with its exact
    count."""
    r = _result(results, case)
    for cat in NAMES:
        sec = r.sections[cat]
        assert sec.matched > 0 or cat == "input", f"nothing compared for {cat}"
    _check(r, NAMES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_activations_per_block(results, case):
    """The activations saved in forward: per block, the same sizes in the same order, once the
    known classes are taken out (each with its exact count)."""
    r = _result(results, case)
    if r.ctx.ckpt:  # compared with the temporaries: see checkpoint-tracer-labels
        assert r.sections["activation"].matched == 0
        assert not r.sections["activation"].diffs
        return
    assert r.sections["activation"].matched > 0
    _check(r, ("activation",))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_temporaries_and_lifetimes(results, case):
    """Temporaries per (step, phase): every difference belongs to a known class, each with its
    exact count; and the lifetime-only classes show exactly where the data says."""
    r = _result(results, case)
    assert r.sections["temporary"].matched > 0
    _check(r, ("temporary",))


def test_known_classes_are_documented():
    """Every class has a cause, a verdict and a title, and lists the cases it applies to; every
    class is open: it accounts for entries in some case, or has no recogniser (it only says how a
    case is compared: checkpoint-tracer-labels). A fixed class leaves the data (its history goes
    to docs/accuracy.md). A family bug states its measured effect on the goldens, and
    docs/accuracy.md carries that statement."""
    keys = [k["key"] for k in data.KNOWN]
    assert len(keys) == len(set(keys))
    case_names = {f"{m}-{v}" for m, v in data.CASES}
    accuracy = (REPO / "docs" / "accuracy.md").read_text()
    flat = " ".join(accuracy.split())
    for k in data.KNOWN:
        assert k["verdict"] in (data.FAMILY_BUG, data.TRACER, data.NOT_MODELLED), k["key"]
        assert len(k["why"]) > 100 and k["title"], k["key"]
        assert k["counts"] and set(k["counts"]) <= case_names, k["key"]
        for counts in k["counts"].values():
            for what, n in counts.items():
                assert re.fullmatch(r"(weight|input|gradient|optimizer_state|activation|"
                                    r"temporary)/(tracer|family)|lifetime", what), (k["key"], what)
                assert isinstance(n, int) and n > 0, (k["key"], what)
        assert "fixed" not in k, f"{k['key']} is fixed: move its history to docs/accuracy.md"
        rule = fvt.RULES.get(k["key"])
        recognises = rule is not None and any(
            (rule.match, rule.names, rule.residual, rule.reorder, rule.pick, rule.detect))
        assert any(k["counts"].values()) or not recognises, \
            f"{k['key']} accounts for nothing in any case: fixed? (move it to docs/accuracy.md)"
        if k["verdict"] == data.FAMILY_BUG:
            assert len(k.get("effect", "")) > 40, f"{k['key']}: a family bug left needs its effect"
            assert " ".join(k["effect"].split()) in flat, \
                f"{k['key']}: docs/accuracy.md does not state its effect (regenerate it)"


def test_every_rule_has_a_class_and_every_case_a_config():
    assert set(fvt.RULES) <= {k["key"] for k in data.KNOWN}
    for model, variant in data.CASES:
        assert model in data.CONFIGS and variant in data.VARIANTS


def test_write_section_keeps_other_sections(tmp_path):
    """--write replaces only its own section; another section (scripts/accuracy.py's) stays."""
    other = ("<!-- accuracy table: generated by scripts/accuracy.py; do not edit by hand -->\n"
             "table\n<!-- end of accuracy table -->\n")
    path = tmp_path / "accuracy.md"
    path.write_text("# Accuracy\n\n" + other)
    fvt.write_section(path, f"{fvt.BEGIN}\nfirst\n{fvt.END}\n")
    fvt.write_section(path, f"{fvt.BEGIN}\nsecond\n{fvt.END}\n")
    text = path.read_text()
    assert other in text and "second" in text and "first" not in text
    assert text.count(fvt.BEGIN) == 1 and text.count(fvt.END) == 1
    fresh = tmp_path / "new.md"
    fvt.write_section(fresh, f"{fvt.BEGIN}\nonly\n{fvt.END}\n")
    assert fresh.read_text() == f"{fvt.BEGIN}\nonly\n{fvt.END}\n"


def test_fixed_classes_are_history_outside_the_generated_section():
    """The classes fixed since are documented by hand in docs/accuracy.md after the generated
    section (--write replaces only that one), and none of them is in the data again."""
    text = (REPO / "docs" / "accuracy.md").read_text()
    history = text.index("### Differences fixed since")
    assert text.index(fvt.END) < history
    section = text[history:].split("\n## ", 1)[0]
    fixed = re.findall(r"^#### `([a-z0-9-]+)` \(fixed; was: ", section, re.M)
    assert fixed and len(fixed) == len(set(fixed))
    assert not set(fixed) & {k["key"] for k in data.KNOWN}, "a class both open and fixed"
