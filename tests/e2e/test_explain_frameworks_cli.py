"""`vramscope explain` on XLA's (JAX's) and TensorFlow's out-of-memory messages
(tests/data/oom_frameworks: recorded here on the CPU, and verbatim from public threads; the
expected readings in its cases.json): the request's exact bytes, the device and allocator, the BFC
pool's and the compiled program's figures, one message for a failure the framework prints more
than once, a verdict, and each framework's own levers in the advice."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_binary

DATA = REPO / "tests" / "data" / "oom_frameworks"
CASES = json.loads((DATA / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["file"].removesuffix(".txt") for c in CASES])
def test_each_framework_message_is_read_and_explained(case, tmp_path):
    code, out, err = run_binary("explain", "--json", DATA / case["file"], cwd=tmp_path)
    assert code == 0, err
    messages = json.loads(out)["messages"]
    assert len(messages) == case["messages"]
    m = messages[0]
    assert m["kind"] == case["kind"]
    assert m["device"] == case["device"]
    assert m["allocator"] == case["allocator"]
    assert m["tensor"] == case.get("tensor")
    request = m["figures"]["tried_to_allocate"]
    assert [request["lo"], request["hi"]] == case["tried_to_allocate"]
    for name, text in case["figures"].items():
        assert m["figures"][name]["text"] == text, name
    for name in ("pool_limit", "pool_in_use", "program_total", "program_temp"):
        if name not in case["figures"]:
            assert m["figures"][name] is None, name
    assert m["verdict"]["holder"] == case["holder"], m["verdict"]
    assert m["verdict"]["sentence"]
    assert any(case["advice"] in a for a in m["advice"]) or any(
        case["advice"] in f["meaning"] + f["arithmetic"] for f in m["findings"]), m["advice"]
    for finding in m["findings"]:
        assert finding["arithmetic"] and finding["meaning"]


def test_the_bfc_pool_figures_add_up(tmp_path):
    """The pool's limit, what was in use and what that leaves, as the log states them: the
    request fitted the free bytes but no free block, which is fragmentation."""
    code, out, err = run_binary("explain", "--json", DATA / "xla-bfc-stats-elixir-nx-xla-32.txt",
                                cwd=tmp_path)
    assert code == 0, err
    m = json.loads(out)["messages"][0]
    shares = {s["what"].split(" (")[0]: s["bytes"] for s in m["what_the_gpu_held"]}
    assert shares["free in the pool"] == {"lo": 4928097484 - 4248542720,
                                          "hi": 4928097484 - 4248542720}
    assert m["cause"] == "fragmentation"


def test_text_names_the_tensor_device_and_allocator(tmp_path):
    code, text, err = run_binary("explain", DATA / "tf-two-root-errors-azure-mln-880.txt",
                                 cwd=tmp_path)
    assert code == 0, err
    assert "TensorFlow out of memory (TensorFlow runtime)" in text
    assert "a float tensor of shape [16,112,112,147] on GPU:0 (allocator GPU_0_bfc)" in text
    assert "118,013,952 B" in text
